"""Step 6 of the array join (:mod:`settopk.kernels.join.arrays`): passing pairs of groups as member
pairs, ordered per query best first (:func:`expand_members`, :func:`order_pairs`, in ``xp`` memory);
and, for a self-join whose member pairs would not fit the device's free memory
(:func:`device_bytes_free`, :data:`DEVICE_BYTES_PER_PAIR`), the same pairs written on the host from
the pairs of groups by the ``cpu`` backend's lists and rows (:func:`host_rows`).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..sets import SetBatch
from ..threshold import ThresholdPairs
from .array_ops import segment_ids, stable_argsort, to_host
from .prepare import JoinSets

__all__ = ["DEVICE_BYTES_PER_PAIR", "device_bytes_free", "expand_members", "host_rows", "order_pairs"]

#: Device bytes a member pair of a self-join takes at most while the pairs are expanded and
#: ordered (:func:`expand_members`, :func:`order_pairs`; docs/benchmarks.md, "Baskets and query logs",
#: measures it): where the pairs before the self-join rule would take more than the device has free, they
#: are written on the host from the pairs of groups instead (:func:`host_rows`).
DEVICE_BYTES_PER_PAIR = 160
_KEY_BITS = 63  # bits of step 6's one-sort key (a non-negative int64)


def expand_members(xp, directed, q_groups, t_groups, include_self: bool):
    """Step 6a: directed group pairs ``(q group, t group, overlap, mode)`` as member pairs
    ``(query set, doc set, group pair)``, int64 arrays in ``xp``. Mode 0: every member pair;
    1: groups of one length, each unordered member pair once, under the lower set index; 2: inside a
    group, the pairs ``a < b`` (and ``a == b`` with ``include_self``). ``q_groups``, ``t_groups``:
    each side's groups in ``xp`` memory (their ``member_offsets`` and ``members``)."""
    dq, dt, _, mode = directed
    sq = (q_groups.member_offsets[dq + 1] - q_groups.member_offsets[dq])
    st = (t_groups.member_offsets[dt + 1] - t_groups.member_offsets[dt])
    seg, w = segment_ids(xp, sq * st)
    wide = st[seg]
    a = q_groups.members[q_groups.member_offsets[dq][seg] + w // wide]
    b = t_groups.members[t_groups.member_offsets[dt][seg] + w % wide]
    m = mode[seg]
    keep = (m != 2) | (a < b) | ((a == b) if include_self else False)
    q = xp.where(m == 1, xp.minimum(a, b), a)
    d = xp.where(m == 1, xp.maximum(a, b), b)
    return q[keep], d[keep], seg[keep]


def _score_value(xp, ov, ql, dl, score: str):
    """The score as float64 (cosine: its square), an exact order key (step 6)."""
    o = ov.astype(xp.float64)
    q, d = ql.astype(xp.float64), dl.astype(xp.float64)
    if score == "overlap":
        return o
    num, den = {"braun_blanquet": (o, xp.maximum(q, d)), "containment": (o, q), "dice": (o, q + d),
                "jaccard": (o, q + d - o), "cosine": (o * o, q * d)}[score]
    return num / xp.maximum(den, 1.0)  # den == 0 only where o == 0: the 0 of 0/0


def order_pairs(xp, n_queries: int, members, group_pairs, doc_ids: np.ndarray, score: str, k):
    """Step 6b: member pairs as :class:`ThresholdPairs` (host), each query's best first, ties by doc id.

    ``members``: ``(query set, doc set, group pair)`` of :func:`expand_members`; ``group_pairs``: per group
    pair, ``(overlap, query length, doc length)``. A pair's score is its group pair's, so the
    distinct scores are ranked over the group pairs (fewer than the member pairs where sets repeat),
    and where ``(query, score rank, doc)`` fits in 63 bits one sort of that key orders the pairs
    (keys are distinct: a member pair occurs once); else three stable sorts (doc, score, query)."""
    q, pos, seg = members
    ov, ql, dl = group_pairs
    value = _score_value(xp, ov, ql, dl, score)
    distinct = xp.unique(value)
    rank = len(distinct) - 1 - xp.searchsorted(distinct, value)  # 0: the best score
    bits_r, bits_p = max(len(distinct) - 1, 1).bit_length(), max(len(doc_ids) - 1, 1).bit_length()
    if max(n_queries - 1, 1).bit_length() + bits_r + bits_p <= _KEY_BITS:
        order = xp.argsort((q << (bits_r + bits_p)) | (rank[seg] << bits_p) | pos)
    else:
        order = stable_argsort(xp, pos)
        order = order[stable_argsort(xp, rank[seg][order])]
        order = order[stable_argsort(xp, q[order])]
    q, pos, seg = q[order], pos[order], seg[order]
    if k is not None:
        keep = xp.flatnonzero(xp.arange(len(q)) - xp.searchsorted(q, q, side="left") < k)
        q, pos, seg = q[keep], pos[keep], seg[keep]
    offsets = np.zeros(n_queries + 1, np.int64)
    if len(q):
        np.cumsum(to_host(xp, xp.bincount(q, minlength=n_queries)), out=offsets[1:])
    # Gathered and narrowed where the pairs are, so only the output's own bytes leave the device.
    return ThresholdPairs(offsets, to_host(xp, _ids_at(xp, doc_ids, pos)), to_host(xp, ov.astype(xp.int32)[seg]),
                          to_host(xp, dl.astype(xp.int32)[seg]))


def _ids_at(xp, doc_ids: np.ndarray, pos):
    """The ids of the docs at positions ``pos`` (``xp``, int64); ``pos`` itself where the ids are
    ``0 .. n_docs - 1`` (strictly increasing ids from 0 to ``n_docs - 1`` are exactly those)."""
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    if len(doc_ids) and doc_ids[0] == 0 and doc_ids[-1] == len(doc_ids) - 1:
        return pos
    return xp.asarray(doc_ids)[pos]


def device_bytes_free(xp) -> int:
    """Device memory this process may still take: the device's free bytes and those CuPy's pool holds unused."""
    free, _ = xp.cuda.runtime.memGetInfo()
    return int(free) + int(xp.get_default_memory_pool().free_bytes())


def host_rows(sets: SetBatch, doc_ids: np.ndarray, t: Fraction, score: str, max_len: int, js: JoinSets, plan,
              found, include_self: bool, k: int | None) -> ThresholdPairs:
    """A self-join's pairs of groups found by the array join, written out on the host: the ``cpu``
    backend's lists and rows (:class:`settopk.kernels.join.host_join.SelfJoin`), whose memory
    beyond the pairs themselves is a list entry per member of a target group of each query group.
    ``found``: the pairs of groups ``(x, y, overlap)``, int32 host arrays of shape (n_group_pairs,)."""
    from .host_join import SelfJoin

    join = SelfJoin(sets, doc_ids, t, score, max_len, include_self=include_self, k=k, prepared=js, found=(plan, found))
    try:
        return join.rows(0, join.n_queries)
    finally:
        join.close()
