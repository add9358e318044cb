"""The threshold join written once over an array module ``xp``: NumPy (backend ``numpy``) or CuPy
(backend ``cupy``), with the same results as the ``cpu`` backend's compiled join.

Sets are prepared on the host (:mod:`settopk.kernels.join.prepare`: tokens renumbered by a global
frequency order, rarest first; identical sets grouped, each group standing for its members through
its first one, GroupJoin: Bouros, Ge, Mamoulis, "Spatio-textual similarity joins", PVLDB 2012), then
the join runs as a handful of whole-array steps in ``xp``, with no Python loop over sets or tokens:

1. **Index entries.** The first ``index_prefix[|y|]`` tokens ``t`` of each index group ``y``
   (:func:`settopk.kernels.join.prefixes.length_plan`), sorted by the key ``t * n_index + y``:
   a posting list per token, ordered by group, hence by length.
2. **Sort-join.** Each probe group ``x`` probes the first ``probe_prefix[|x|]`` tokens of its set
   (prefix filter: Chaudhuri, Ganti, Kaushik, ICDE 2006; Bayardo, Ma, Srikant, "Scaling up all pairs
   similarity search", WWW 2007). For its token ``t`` two ``searchsorted`` calls find the entries of
   token ``t`` whose group lies in ``[first[x], end[x])``: the groups of the lengths ``x`` can reach
   (length filter), and in a self-join only groups before ``x`` (each unordered pair met once).
3. **Positional filter.** A candidate entry ``(x, i, y, j)`` (the token at position ``i`` of ``x`` and
   ``j`` of ``y``, 0-based) is kept only if ``min(|x| - i, |y| - j) >= need(|x|, |y|)``. The overlap
   counted before the first common token is 0, so the first common token of a passing pair always
   passes this bound, and it lies in both prefixes (PPJoin: Xiao, Wang, Lin, Yu, "Efficient
   similarity joins for near duplicate detection", WWW 2008, with the count before it set to 0,
   which a join without per-pair state can use).
   Then the bitmap filter: ``(|x| + |y| - popcount(b(x) ^ b(y))) / 2 >= need`` for the groups'
   parity bitmaps (:func:`settopk.kernels.join.prepare.parity_bitmaps`), a bound on the whole
   overlap, so it drops every entry of a pair alike.
4. **Unique pairs.** A stable sort by ``(x, y)`` keeps each pair's first entry, the smallest ``i``:
   for a passing pair that is its first common token ``(i0, j0)``.
5. **Verification.** No token before ``(i0, j0)`` is shared, so ``|x ∩ y| = |x[i0:] ∩ y[j0:]|``: the
   shorter of the two remainders is looked up token by token in the other side's set (a binary
   search confined to that set, all lookups at once); a pair passes iff the count reaches the need.

On the GPU (``cupy``) steps 3-5 are one kernel, one thread per candidate entry
(:mod:`settopk.kernels.cuda.join`): the positional filter, the bitmap filter of the groups' parity
bitmaps, then, in place of step 4's sort, a merge of the two sets' heads before ``(i, j)`` keeps
only the entry of each pair's first common token, which verifies from there. Steps 1 and 2 run
there too, as array steps.

6. **Expansion and order.** Group pairs become member pairs (the self-join rule of
   :func:`settopk.kernels.self_join_keep`), ordered per query best first by the exact score (a float64
   quotient of two integers below ``2**31``: distinct fractions give distinct doubles, equal ones equal
   doubles, so ties stay ties), then doc id (:mod:`settopk.kernels.join.array_emit`; on ``cupy``,
   where the member pairs would not fit the device's free memory, they are written on the host
   from the pairs of groups instead).

**Memory.** On the host (``numpy``), steps 2-5 run in slices of at most ``slice_entries`` candidate entries (and slices of
verification of at most ``slice_entries`` looked-up tokens), so a token held by many prefixes costs
time, not memory: a slice holds about 10 arrays of ``slice_entries`` 8-byte values. Held across
slices are the probe entries (one per prefix token) and the passing group pairs; step 6 holds the
passing member pairs (the output), twice for pairs inside a group of identical sets. On the GPU
the kernel holds 16 bytes per probe entry and 12 per passing pair of groups, no per-candidate array.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..keys import check_score, key_scale
from ..sets import SetBatch
from ..threshold import ThresholdPairs, self_join_pairs
from .array_ops import (
    array_module,
    first_above,
    popcount,
    run_starts,
    segment_ids,
    slice_cuts,
    stable_argsort,
    to_host,
)
from .array_emit import DEVICE_BYTES_PER_PAIR, device_bytes_free, expand_members, host_rows, order_pairs
from .array_verify import remainder_overlaps
from .prefixes import (JoinTooLarge, check_pairs, checked_floor, group_join_threshold, inside_groups, length_plan,
                       positive_threshold, probe_bounds)
from .prepare import JoinSets, extended_rank, frequency_order, prepare_sets

__all__ = ["SLICE_ENTRIES", "ArrayCorpus", "ArrayDocSide", "array_module", "group_pairs", "prepare_docs", "self_join",
           "self_join_with_groups"]

#: Candidate entries (and verified tokens) per slice of the join: bounds its working memory.
SLICE_ENTRIES = 1 << 21


class _Groups:
    """One side's groups of identical sets in ``xp`` memory: each group's set (its first member's),
    compacted in group order, and its members.

    Attributes: ``tokens`` int32 (n_group_tokens,), ``offsets`` int64 (n_groups + 1,), ``lengths``
    int32 (n_groups,), ``sig`` uint64 (n_groups,) (parity bitmaps), ``steps``: binary search steps
    that cover any set; ``member_offsets`` int64 (n_groups + 1,), ``members`` int64 (n_sets,);
    ``host_len`` and ``host_tokens``, ``host_offsets``: the same on the host.
    """

    def __init__(self, xp, js: JoinSets):
        glen = js.group_len
        tokens, offsets = js.group_tokens, js.group_token_offsets
        self.host_len, self.host_tokens, self.host_offsets = glen, tokens, offsets
        self.tokens = xp.asarray(tokens.astype(np.int32))
        self.offsets = xp.asarray(offsets)
        self.lengths = xp.asarray(self.host_len)
        self.sig = xp.asarray(js.group_sig)
        self.steps = int(glen.max()).bit_length() if len(glen) else 0  # binary search steps over a set
        self.member_offsets = xp.asarray(js.group_offsets)
        self.members = xp.asarray(js.group_members)

    @property
    def n_groups(self) -> int:
        return len(self.host_len)


class ArrayCorpus:
    """A corpus prepared for self-joins on an array backend: its :class:`JoinSets` (host) and their
    group sets in ``xp`` memory (made once: on ``cupy`` the copy to the device is kept).

    Parameters
    ----------
    sets : JoinSets
        :func:`settopk.kernels.join.prepare_corpus` of the corpus.
    backend : {"numpy", "cupy"}

    Notes
    -----
    Device memory (``cupy``): about 12 bytes per token of a distinct set and 28 per set.
    """

    def __init__(self, sets: JoinSets, backend: str):
        self.sets = sets
        self.backend = backend
        self.groups = _Groups(array_module(backend), sets)


def _index_entries(xp, groups: _Groups, index_prefix: np.ndarray):
    """Step 1: the index groups' prefix entries sorted by ``token * n_groups + group``.

    ``index_prefix``: the tokens indexed per length (host, :class:`LengthPlan`'s).
    Returns ``(key int64, group int32, position int32)``, each of shape (n_entries,), in ``xp``."""
    pre = xp.minimum(_per_group(xp, index_prefix, groups), groups.lengths)
    gid, pos = segment_ids(xp, pre)
    token = groups.tokens[groups.offsets[gid] + pos]
    order = stable_argsort(xp, token)  # stable: each token's entries stay in group order
    key = token[order].astype(xp.int64) * groups.n_groups + gid[order]
    return key, gid[order].astype(xp.int32), pos[order].astype(xp.int32)


def _per_group(xp, by_length: np.ndarray, groups: _Groups):
    """A per-length table (host, indexed by length) read at each group's length, int64 in ``xp``."""
    return xp.asarray(np.asarray(by_length, np.int64))[groups.lengths]


def _join(xp, probe: _Groups, prefix: np.ndarray, first: np.ndarray, end: np.ndarray, index: _Groups, entries,
          need: np.ndarray, cap: int, limit: int | None = None):
    """Steps 2-5: every (probe group, index group) pair whose overlap reaches the need.

    Parameters
    ----------
    probe, index : _Groups
    prefix : int64 (n_probe,), ``xp``
        Tokens each probe group probes (0: none).
    first, end : int64 (n_probe,), ``xp``
        Index groups each probe group may pair with: ``first[x] <= y < end[x]``.
    entries
        :func:`_index_entries` of ``index``.
    need : int32 (max probe length + 1, max index length + 1), host
        Least overlap per pair of lengths (above their minimum where unreachable).
    cap : int
        ``slice_entries``.
    limit : int, optional
        Refuse more pairs than this, as soon as they are found (a pair found in two slices may
        count twice: the refusal is never late); None: no bound.

    Returns
    -------
    x, y, overlap : int64 arrays of shape (n_found,) in ``xp``

    Raises
    ------
    JoinTooLarge
        Past ``limit``.
    """
    e_key, e_group, e_pos = entries
    n_index = index.n_groups
    pre = xp.where(first < end, xp.minimum(prefix, probe.lengths), 0).astype(xp.int64)
    px, pi = segment_ids(xp, pre)
    pt = probe.tokens[probe.offsets[px] + pi].astype(xp.int64)
    lo = xp.searchsorted(e_key, pt * n_index + first[px], side="left")
    cnt = xp.searchsorted(e_key, pt * n_index + end[px], side="left") - lo
    live = xp.flatnonzero(cnt > 0)
    px, pi, lo, cnt = px[live], pi[live], lo[live], cnt[live]
    empty = xp.zeros(0, xp.int64)
    if len(cnt) == 0:
        return empty, empty, empty
    ends = xp.cumsum(cnt)
    if xp is not np:  # steps 3-5 in one kernel, one thread per candidate entry, no sort
        from ..cuda.join import verified_pairs

        return verified_pairs((ends, px.astype(xp.int32), pi.astype(xp.int32), lo, e_group, e_pos), probe, index,
                              need, limit=limit)
    total = int(ends[-1])
    boundary = xp.flatnonzero(xp.concatenate([px[1:] != px[:-1], xp.ones(1, bool)]))
    cuts, inside = slice_cuts(xp, ends, boundary, total, cap)
    need_flat = xp.asarray(need.reshape(-1).astype(np.int32))
    n_col = need.shape[1]
    found, n_found = [], 0
    for s, e in zip(cuts[:-1], cuts[1:]):
        a = first_above(xp, ends, s)
        b = first_above(xp, ends, e - 1) + 1
        starts = ends[a:b] - cnt[a:b]
        begin = xp.maximum(starts, s)
        seg, within = segment_ids(xp, xp.minimum(ends[a:b], e) - begin)
        ent = a + seg
        idx = lo[ent] + (begin - starts)[seg] + within
        x, i = px[ent], pi[ent]
        y, j = e_group[idx].astype(xp.int64), e_pos[idx].astype(xp.int64)
        lx, ly = probe.lengths[x].astype(xp.int64), index.lengths[y].astype(xp.int64)
        nd = need_flat[lx * n_col + ly]
        keep = xp.flatnonzero(xp.minimum(lx - i, ly - j) >= nd)  # step 3
        x, y, i, j, lx, ly, nd = (v[keep] for v in (x, y, i, j, lx, ly, nd))
        keep = xp.flatnonzero((lx + ly - popcount(xp, probe.sig[x] ^ index.sig[y])) // 2 >= nd)  # step 3b
        if len(keep) == 0:
            continue
        x, y, i, j, lx, ly, nd = (v[keep] for v in (x, y, i, j, lx, ly, nd))
        pair = (x - x[0]) * n_index + y  # x ascends along the slice
        order = stable_argsort(xp, pair)  # step 4: for each pair, its smallest i first
        sel = order[run_starts(xp, pair[order])]
        x, y, i, j, lx, ly, nd = (v[sel] for v in (x, y, i, j, lx, ly, nd))
        ov = remainder_overlaps(xp, probe, index, (x, y, i, j, lx, ly), cap)  # step 5
        ok = xp.flatnonzero(ov >= nd)
        found.append((x[ok], y[ok], ov[ok]))
        n_found += len(ok)
        if limit is not None and n_found > limit:
            raise JoinTooLarge(f"the join has more than {limit} pairs of groups")
    if not found:
        return empty, empty, empty
    x, y, ov = (xp.concatenate([f[c] for f in found]) for c in range(3))
    if inside and len(x):  # a probe group cut between slices: keep each pair once, with its largest (exact) count
        order = stable_argsort(xp, -ov)
        order = order[stable_argsort(xp, (x * n_index + y)[order])]
        order = order[run_starts(xp, (x * n_index + y)[order])]
        x, y, ov = x[order], y[order], ov[order]
    return x, y, ov


def _check_k(k):
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1 (or None for every passing pair), found {k}")


class ArrayDocSide:
    """A corpus prepared for threshold joins at one threshold and score, in ``xp`` memory.

    Parameters
    ----------
    docs : SetBatch
        ``n_docs`` sets (host memory).
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing ids (position order is id order).
    threshold : value taken by :func:`settopk.kernels.parse_threshold`
        ``T > 0``.
    score : str
        One of :data:`settopk.kernels.SCORES`.
    max_len : int
        Bound on set sizes: the index prefixes serve queries of any length up to it.
    backend : {"numpy", "cupy"}
        Where the prepared arrays live (host, or the current CUDA device) and the join runs.
    slice_entries : int, optional
        Candidate entries per slice (:data:`SLICE_ENTRIES`): bounds the join's working memory.

    Attributes
    ----------
    threshold : fractions.Fraction
        ``T``.

    Raises
    ------
    ValueError
        If ``T == 0`` (every pair passes: no prefix filter applies; use a scan), the threshold,
        score or backend is invalid, or ``slice_entries < 1``.

    Notes
    -----
    Device memory (``cupy``): the docs' group sets (12 bytes per token of a distinct set) and the
    index entries (16 bytes per prefix token), besides the host copy of the prepared sets.
    """

    def __init__(self, docs: SetBatch, doc_ids, threshold, score: str, max_len: int, *, backend: str = "numpy",
                 slice_entries: int | None = None):
        self.score = check_score(score)
        key_scale(max_len, score)
        self.threshold = positive_threshold(threshold, score)
        self.xp = array_module(backend)
        self.cap = _slice_cap(slice_entries)
        self.max_len = max_len
        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        self.rank = frequency_order(docs.tokens, docs.id_bound)
        self.sets = prepare_sets(docs, self.rank)
        self.groups = _Groups(self.xp, self.sets)
        plan = length_plan(self.threshold, score, max_len, np.arange(max_len + 1), self.sets.lengths, ordered=False)
        self.entries = _index_entries(self.xp, self.groups, plan.index_prefix)

    @property
    def n_docs(self) -> int:
        """Docs of the corpus."""
        return self.sets.n_sets

    def probe(self, queries: SetBatch, k: int | None = None, min_doc_len=None) -> ThresholdPairs:
        """Every (query, doc) pair whose score reaches the threshold, exactly, best first.

        Parameters
        ----------
        queries : SetBatch
            ``n_queries`` sets (host memory) in the docs' id space (an id no doc holds matches nothing).
        k : int, optional
            Keep each query's ``k`` best pairs; None keeps all.
        min_doc_len : array_like of int, shape (n_queries,), optional
            Per query, only docs at least this long.

        Returns
        -------
        ThresholdPairs
            Host arrays, as :meth:`settopk.kernels.NumpyShardIndex.threshold_search`.

        Raises
        ------
        ValueError
            If ``k < 1`` or ``min_doc_len`` does not have one entry per query.
        """
        _check_k(k)
        xp, n_q = self.xp, queries.n_sets
        floor = checked_floor(min_doc_len, n_q)
        if n_q == 0 or self.n_docs == 0:
            return ThresholdPairs(np.zeros(n_q + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32),
                                  np.zeros(0, np.int32))
        q_sets = prepare_sets(queries, extended_rank(self.rank, queries.id_bound))
        probe = _Groups(xp, q_sets)
        plan = length_plan(self.threshold, self.score, self.max_len, q_sets.lengths, self.sets.lengths, ordered=False)
        q_len = probe.host_len
        first, end = probe_bounds(plan, q_len, self.groups.host_len, q_sets.group_of, floor)
        x, y, ov = _join(xp, probe, _per_group(xp, plan.probe_prefix, probe), xp.asarray(first), xp.asarray(end),
                         self.groups, self.entries, plan.need, self.cap)
        q, d, seg = expand_members(xp, (x, y, ov, xp.zeros(len(x), xp.int64)), probe, self.groups, False)
        dl = self.groups.lengths[y]
        if floor is not None:
            keep = xp.flatnonzero(dl[seg] >= xp.asarray(floor)[q])
            q, d, seg = q[keep], d[keep], seg[keep]
        return order_pairs(xp, n_q, (q, d, seg), (ov, probe.lengths[x], dl), self.doc_ids, self.score, k)


def prepare_docs(docs: SetBatch, doc_ids, threshold, score: str, max_len: int, *, backend: str = "numpy",
                 slice_entries: int | None = None) -> ArrayDocSide:
    """The doc side of an R-S join on the ``numpy`` or ``cupy`` backend (:class:`ArrayDocSide`;
    :func:`settopk.kernels.join.prepare_docs` dispatches here)."""
    return ArrayDocSide(docs, doc_ids, threshold, score, max_len, backend=backend, slice_entries=slice_entries)


def _group_join(xp, groups: _Groups, t: Fraction, score: str, max_len: int, cap: int, limit: int | None = None):
    """``(length plan, (x, y, overlap))``: the passing pairs of distinct groups, each unordered pair
    once (``y`` before ``x`` in group order, never longer), in ``xp`` memory; :class:`JoinTooLarge`
    past ``limit`` of them."""
    g_len = groups.lengths
    present = np.flatnonzero(np.bincount(groups.host_len))
    plan = length_plan(t, score, max_len, present, present, ordered=True)
    entries = _index_entries(xp, groups, plan.index_prefix)
    first, end = probe_bounds(plan, g_len, g_len, xp=xp)
    # Groups before x only: each unordered pair of groups once; a group's own members are paired by the caller.
    end = xp.minimum(end, xp.arange(len(g_len)))
    return plan, _join(xp, groups, _per_group(xp, plan.probe_prefix, groups), first, end, groups, entries, plan.need, cap,
                       limit)


def group_pairs(prepared, threshold, score: str, max_len: int, *, backend: str = "numpy",
                slice_entries: int | None = None, max_pairs: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The passing pairs of distinct groups of identical sets of a prepared corpus (``numpy`` or
    ``cupy``), as :func:`settopk.kernels.join.host_join.group_pairs` finds them on ``cpu``.

    Parameters
    ----------
    prepared : JoinSets or ArrayCorpus
        :func:`settopk.kernels.join.prepare_corpus` of the corpus.
    threshold, score, max_len, backend, slice_entries
        As :func:`self_join`; ``T > 0``, the score symmetric (not ``containment``).
    max_pairs : int, optional
        Refuse more pairs than this, before they are all held; None: no bound.

    Returns
    -------
    (numpy.ndarray of int64, numpy.ndarray of int64), each of shape (n_pairs,)
        The two groups of each pair (indexes into the prepared groups; host memory).

    Raises
    ------
    ValueError
        For containment, ``T == 0``, or ``slice_entries < 1``.
    JoinTooLarge
        Past ``max_pairs``.
    """
    score, t = group_join_threshold(threshold, score)
    xp = array_module(backend)
    groups = _prepared_groups(xp, prepared, backend)
    _, (x, y, _) = _group_join(xp, groups, t, score, max_len, _slice_cap(slice_entries), max_pairs)
    return to_host(xp, x).astype(np.int64), to_host(xp, y).astype(np.int64)


def _prepared_groups(xp, prepared, backend: str) -> _Groups:
    """The groups of a prepared corpus in ``xp`` memory (an ``ArrayCorpus`` of this backend's kept copy)."""
    if isinstance(prepared, ArrayCorpus):
        return prepared.groups if prepared.backend == backend else _Groups(xp, prepared.sets)
    return _Groups(xp, prepared)


def _slice_cap(slice_entries: int | None) -> int:
    """The candidate entries per slice (``slice_entries``, default :data:`SLICE_ENTRIES`), at least 1."""
    cap = int(slice_entries or SLICE_ENTRIES)
    if cap < 1:
        raise ValueError(f"slice_entries must be >= 1, found {slice_entries}")
    return cap


def self_join(sets: SetBatch, doc_ids, threshold, score: str, max_len: int, *, backend: str = "numpy",
              include_self: bool = False, k: int | None = None, slice_entries: int | None = None,
              prepared: JoinSets | None = None, max_pairs: int | None = None) -> ThresholdPairs:
    """The threshold self-join of a corpus on the ``numpy`` or ``cupy`` backend.

    Parameters
    ----------
    sets : SetBatch
        ``n_docs`` sets (host memory); each is also a query.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing doc ids.
    threshold, score, max_len, backend, slice_entries
        As :class:`ArrayDocSide`.
    include_self : bool
        Also each doc's pair with itself (where its own score reaches ``T``).
    k : int, optional
        Keep each query's ``k`` best pairs; None keeps all.
    prepared : JoinSets or ArrayCorpus, optional
        :func:`settopk.kernels.join.prepare_corpus` of ``sets``, kept by the caller between
        self-joins of one corpus; made here where None (an ``ArrayCorpus`` of another backend
        serves through its ``JoinSets``).
    max_pairs : int, optional
        Refuse more pairs than this (:class:`JoinTooLarge`), counted from the groups' sizes before
        any pair is listed (with ``k``, at most ``n_docs * k`` of them); None: no bound.
        Containment's self-join is not bounded.

    Returns
    -------
    ThresholdPairs
        Host arrays, ``n_queries = n_docs``, under the self-join rule of
        :func:`settopk.kernels.self_join_keep` (see :func:`settopk.kernels.join.self_join`).

    Raises
    ------
    ValueError
        As :class:`ArrayDocSide`, or ``k < 1``.
    JoinTooLarge
        Past ``max_pairs``.
    """
    score = check_score(score)
    _check_k(k)
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    if score == "containment":  # not symmetric: every ordered pair, through the R-S probe
        pairs = ArrayDocSide(sets, doc_ids, threshold, score, max_len, backend=backend,
                             slice_entries=slice_entries).probe(sets)
        return self_join_pairs(pairs, doc_ids, sets.lengths, score, include_self, k)
    return self_join_with_groups(sets, doc_ids, threshold, score, max_len, backend=backend, include_self=include_self,
                                 k=k, slice_entries=slice_entries, prepared=prepared, max_pairs=max_pairs)[0]


def self_join_with_groups(sets: SetBatch, doc_ids, threshold, score: str, max_len: int, *, backend: str = "numpy",
                          include_self: bool = False, k: int | None = None, slice_entries: int | None = None,
                          prepared=None, max_entries: int | None = None, max_pairs: int | None = None):
    """:func:`self_join` of a symmetric score at ``T > 0``, with what it found the pairs through:
    the groups of identical sets and their passing pairs of distinct groups (what ``--dedup``
    groups a shard's docs by).

    Parameters
    ----------
    sets, doc_ids, threshold, score, max_len, backend, include_self, k, slice_entries, prepared
        As :func:`self_join`; ``T > 0`` and a symmetric score (not ``containment``).
    max_entries : int, optional
        Refuse more pairs of groups than this (as they are found), or more pairs (counted from
        the groups' sizes before any is listed); None: no bound.
    max_pairs : int, optional
        As :func:`self_join`.

    Returns
    -------
    (ThresholdPairs, JoinSets, (numpy.ndarray of int64, numpy.ndarray of int64))
        The pairs (host memory, as :func:`self_join`), the groups (host memory) and the two
        groups of each passing pair of distinct groups, shape (n_group_pairs,) each.

    Raises
    ------
    ValueError
        For containment, ``T == 0``, ``k < 1`` or ``slice_entries < 1``.
    JoinTooLarge
        Past ``max_entries``.
    """
    score, t = group_join_threshold(threshold, score)
    _check_k(k)
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    cap = _slice_cap(slice_entries)
    xp = array_module(backend)
    if prepared is None:
        prepared = prepare_sets(sets, frequency_order(sets.tokens, sets.id_bound))
    js = prepared.sets if isinstance(prepared, ArrayCorpus) else prepared
    groups = _prepared_groups(xp, prepared, backend)
    g_len = groups.lengths  # in xp: the per-group steps below stay where the groups are
    plan, (x, y, ov) = _group_join(xp, groups, t, score, max_len, cap, max_entries)
    # y is never longer than x: y's members are the queries; at one length, the lower set index.
    mode = (g_len[y] == g_len[x]).astype(xp.int64)
    size = xp.diff(groups.member_offsets)
    inside = inside_groups(plan, g_len, size, include_self, xp)
    directed = (xp.concatenate([y, inside]), xp.concatenate([x, inside]),
                xp.concatenate([ov, g_len[inside].astype(xp.int64)]),
                xp.concatenate([mode, xp.full(len(inside), 2, xp.int64)]))
    dq, dt, dov, _ = directed
    # The member pairs, from the groups' sizes (one copy of three sums): of two groups, all; inside
    # one, s * s in the expansion (before the self-join rule), then a < b (and a == b).
    s_in = size[inside]
    cross, square, n_in = (int(v) for v in to_host(xp, xp.stack([(size[y] * size[x]).sum(), (s_in * s_in).sum(),
                                                                 s_in.sum()])))
    n_pairs = cross + (square - n_in) // 2 + (n_in if include_self else 0)  # before k
    if max_entries is not None and n_pairs > max_entries:
        raise JoinTooLarge(f"the self-join has more than {max_entries} pairs")
    check_pairs(n_pairs if k is None else min(n_pairs, js.n_sets * k), max_pairs)
    if xp is not np and (cross + square) * DEVICE_BYTES_PER_PAIR > device_bytes_free(xp):
        found = tuple(to_host(xp, v.astype(xp.int32)) for v in (x, y, ov))
        pairs = host_rows(sets, doc_ids, t, score, max_len, js, plan, found, include_self, k)
        return pairs, js, (found[0].astype(np.int64), found[1].astype(np.int64))
    members = expand_members(xp, directed, groups, groups, include_self)
    pairs = order_pairs(xp, js.n_sets, members, (dov, groups.lengths[dq], groups.lengths[dt]), doc_ids, score, k)
    return pairs, js, (to_host(xp, x).astype(np.int64), to_host(xp, y).astype(np.int64))

