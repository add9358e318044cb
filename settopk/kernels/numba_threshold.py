"""Compiled threshold search of :class:`settopk.kernels.numba_index.NumbaShardIndex` (imports numba; load it lazily).

The method and its exactness are those of :mod:`settopk.kernels.threshold`: per query, the
least overlap ``need[|d|]`` with ``score >= T`` (exact, from ``T``'s decimal text) and the doc
lengths it can reach. Per query, :func:`threshold_part` either

* **scans** the docs of the reachable lengths only (the docs are visited by length through
  ``by_len``), counting each doc's ids against a membership table (one entry per id of the docs
  and queries: 65536 for ``uint16`` sets) and stopping a doc
  as soon as its remaining ids cannot reach ``need`` (length filtering); or
* **prefix filters** through the postings (Chaudhuri et al., ICDE 2006; Bayardo et al., WWW
  2007): with ``m`` the least need over the reachable lengths, a passing doc shares at least
  ``m`` ids with the query, so it holds one of its ``|q| - m + 1`` rarest ids; only the docs in
  those postings are counted (each once, a stamp per doc), and only if their length is reachable.

``"postings"`` routing prefix-filters every query with ``T > 0``; ``"auto"`` does where the probed
postings are shorter than the docs the scan would count; ``"scan"`` (no postings) always scans.
The passing pairs come back unordered; :func:`settopk.kernels.threshold.order_pairs` orders them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from .sets import SetBatch
from .threshold import ThresholdPairs, order_pairs, parse_threshold, query_need, reachable_lengths

__all__ = ["numba_threshold_search", "threshold_part"]

_JIT = {"cache": True, "nogil": True}
_PARTS_PER_THREAD = 4  # query parts per thread, taken as threads free up
_MODE_SCAN, _MODE_AUTO, _MODE_PREFIX = 0, 1, 2


@njit(**_JIT)
def _grow(a, n):
    """``a`` copied into an array of at least ``n`` slots (twice its size or more)."""
    b = np.empty(max(2 * len(a), n), a.dtype)
    b[: len(a)] = a
    return b


@njit(**_JIT)
def _count(doc_tokens, start, end, member, need):
    """Overlap of one doc with the marked query ids, or -1 as soon as ``need`` is out of reach."""
    o = 0
    for j in range(start, end):
        if member[doc_tokens[j]]:
            o += 1
        elif o + (end - j - 1) < need:
            return -1
    return o


@njit(**_JIT)
def threshold_part(doc_tokens, doc_offsets, doc_len, by_len, len_start, q_tokens, q_offsets, q_lo, q_hi, need, reach,
                   p_offsets, p_positions, rank_pos, mode, positive, member):
    """Every passing (query, doc) pair of queries ``q_lo .. q_hi - 1``, unordered.

    Parameters
    ----------
    doc_tokens, doc_offsets : uint16 or uint32 (n_tokens,), int64 (n_docs + 1,)
        The shard's docs (CSR).
    doc_len : int64 (n_docs,)
        ``|d|`` per position.
    by_len, len_start : int64 (n_docs,), int64 (max_len + 2,)
        Positions sorted by length; length ``l``'s are ``by_len[len_start[l]:len_start[l + 1]]``.
    q_tokens, q_offsets : uint16 or uint32, int64 (n_queries + 1,)
        The batch's queries (CSR).
    need : int32 (n_queries, max_len + 1)
        Least passing overlap per query and doc length.
    reach : bool (n_queries, max_len + 1)
        Lengths a query can pass at (and the shard holds).
    p_offsets, p_positions, rank_pos : int64, int32, int32
        The postings (by rank) and each rank's position; empty arrays where there are none.
    mode : int
        0 scan, 1 auto (per query, the cheaper path), 2 prefix filtering.
    positive : bool
        ``T > 0`` (prefix filtering needs ``m >= 1``).
    member : bool (n_ids,)
        All False, one entry per id of the docs and the queries; left all False. Allocated by
        the caller, one per thread: a wide table comes as lazily zeroed pages, and each query
        clears only the entries it set.

    Returns
    -------
    (int64, int64, int32) arrays of shape (n_found,)
        Query row, doc position and overlap of each passing pair; the number of prefix-filtered queries.
    """
    n_docs = len(doc_len)
    stamp = np.full(n_docs if mode != 0 else 0, -1, np.int64)
    out_q = np.empty(1024, np.int64)
    out_pos = np.empty(1024, np.int64)
    out_ov = np.empty(1024, np.int32)
    n = 0
    n_prefix = 0
    max_len = need.shape[1] - 1
    for qi in range(q_lo, q_hi):
        s, e = q_offsets[qi], q_offsets[qi + 1]
        ql = e - s
        m = max_len + 1
        in_range = 0
        for length in range(max_len + 1):
            if reach[qi, length]:
                m = min(m, need[qi, length])
                in_range += len_start[length + 1] - len_start[length]
        if in_range == 0:
            continue
        for j in range(s, e):
            member[q_tokens[j]] = True
        use_prefix = False
        order = np.empty(0, np.int64)
        n_probe = 0
        if mode != 0 and positive:
            freq = np.empty(ql, np.int64)
            for j in range(ql):
                t = q_tokens[s + j]
                freq[j] = p_offsets[t + 1] - p_offsets[t]
            order = np.argsort(freq, kind="mergesort")  # stable: ties by id (a set's ids ascend)
            n_probe = ql - m + 1
            entries = 0
            for j in range(n_probe):
                entries += freq[order[j]]
            use_prefix = mode == 2 or entries < in_range
        if use_prefix:
            n_prefix += 1
            for j in range(n_probe):
                t = q_tokens[s + order[j]]
                for r in range(p_offsets[t], p_offsets[t + 1]):
                    p = rank_pos[p_positions[r]]
                    if stamp[p] == qi:
                        continue
                    stamp[p] = qi
                    dl = doc_len[p]
                    if not reach[qi, dl]:
                        continue
                    o = _count(doc_tokens, doc_offsets[p], doc_offsets[p + 1], member, need[qi, dl])
                    if o >= need[qi, dl]:
                        if n == len(out_q):
                            out_q, out_pos, out_ov = _grow(out_q, n + 1), _grow(out_pos, n + 1), _grow(out_ov, n + 1)
                        out_q[n], out_pos[n], out_ov[n] = qi, p, o
                        n += 1
        else:
            for length in range(max_len + 1):
                if not reach[qi, length]:
                    continue
                bar = need[qi, length]
                for i in range(len_start[length], len_start[length + 1]):
                    p = by_len[i]
                    o = _count(doc_tokens, doc_offsets[p], doc_offsets[p + 1], member, bar)
                    if o >= bar:
                        if n == len(out_q):
                            out_q, out_pos, out_ov = _grow(out_q, n + 1), _grow(out_pos, n + 1), _grow(out_ov, n + 1)
                        out_q[n], out_pos[n], out_ov[n] = qi, p, o
                        n += 1
        for j in range(s, e):
            member[q_tokens[j]] = False
    return out_q[:n], out_pos[:n], out_ov[:n], n_prefix


def numba_threshold_search(index, queries: SetBatch, threshold, k: int | None = None,
                           min_doc_len=None) -> ThresholdPairs:
    """:meth:`settopk.kernels.numba_index.NumbaShardIndex.threshold_search` (see there)."""
    t = parse_threshold(threshold, index.score)
    n_q, max_len = queries.n_sets, index.max_len
    qlen = queries.lengths
    need = query_need(t, qlen, max_len, index.score, min_doc_len)
    counts = np.bincount(index._doc_len64, minlength=max_len + 1)
    reach = np.ascontiguousarray(reachable_lengths(need, qlen) & (counts > 0)[None, :])
    if getattr(index, "_by_len", None) is None:  # built on the first threshold search, kept for the next
        index._by_len = np.argsort(index._doc_len64, kind="stable").astype(np.int64)
        index._len_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    if index.postings is not None:
        p_offsets, p_positions, rank_pos = index.postings.offsets, index.postings.positions, index._rank_pos
        mode = _MODE_PREFIX if index.routing == "postings" else _MODE_AUTO
    else:
        p_offsets, p_positions, rank_pos = np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32)
        mode = _MODE_SCAN
    active = int(reach.any(axis=1).sum())
    index.last_skipped = n_q - active
    parts = max(1, min(n_q, index.threads * _PARTS_PER_THREAD))
    bounds = np.linspace(0, n_q, parts + 1).astype(np.int64)
    args = (index._tokens, index._offsets, index._doc_len64, index._by_len, index._len_start,
            np.ascontiguousarray(queries.tokens), np.ascontiguousarray(queries.offsets))

    def run(part):
        member = np.zeros(max(index._n_ids, queries.id_bound), np.bool_)
        return threshold_part(*args, bounds[part], bounds[part + 1], need, reach, p_offsets, p_positions, rank_pos,
                              mode, t > 0, member)

    if index.threads > 1 and parts > 1:
        with ThreadPoolExecutor(index.threads) as pool:  # the kernel releases the GIL
            found = list(pool.map(run, range(parts)))
    else:
        found = [run(p) for p in range(parts)]
    q_row, pos, ov = (np.concatenate([f[i] for f in found]) for i in range(3))
    n_prefix = sum(f[3] for f in found)
    index.last_routing = {"scan": active - n_prefix, "postings": n_prefix, "scancount": 0, "prefix": n_prefix}
    return order_pairs(n_q, q_row, pos, ov, index._doc_len64[pos], qlen, index.doc_ids, max_len, index.score, k)
