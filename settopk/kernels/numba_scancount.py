"""ScanCount over a shard's postings, compiled (imports numba): :func:`scancount_queries`.

Part of :class:`settopk.kernels.numba_index.NumbaShardIndex`'s postings routing; keys, least
overlaps and heaps from :mod:`settopk.kernels.numba_heaps`. See :func:`scancount_queries`'s notes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .numba_heaps import JIT, POS_MASK, first_at_least, least_overlap, new_heaps, offer, score_key, write_row
from .numba_simd import prefetch

__all__ = ["scancount_queries"]

_U64_ONE = np.uint64(1)


@njit(**JIT)
def _block_need(score, scale, top, max_len, cosine_keys, least, ql, lo_len, hi_len, omin_pass, ordered):
    """Least overlap a doc of length ``lo_len .. hi_len`` needs to reach key ``least``, and at least
    ``omin_pass``. ``ordered``: keys do not depend on ``|d|``, so one length tells it."""
    omin = max(omin_pass, least_overlap(score, scale, top, max_len, cosine_keys, least - 1, ql, lo_len))
    if ordered:
        return omin
    for dl in range(lo_len + 1, hi_len + 1):
        if omin <= omin_pass:
            break
        omin = max(omin_pass, min(omin, least_overlap(score, scale, top, max_len, cosine_keys, least - 1, ql, dl)))
    return omin


@njit(**JIT)
def _count_block(p_offsets, p_positions, cursor, synced, q_tokens, qs, ql, first, counts, found, omin, rank_pos,
                 rank_len, ordered):
    """Count the query's postings entries of ranks ``first .. first + len(counts) - 1`` into ``counts`` and
    advance the cursors past them; the ranks (less ``first``) whose count reaches ``omin >= 1`` go to
    ``found``, each once, as they reach it. Returns their number. ``synced``: the cursors stand at
    ``first`` already (else they are moved there by binary search). Unless ``ordered``, the found ranks'
    positions and lengths are prefetched: they are looked up at random once the block is counted."""
    block = len(counts)
    n_found = 0
    for i in range(ql):
        e = cursor[i]
        end = p_offsets[np.int64(q_tokens[qs + i]) + 1]
        if not synced:
            e = first_at_least(p_positions, e, end, first)
        # Unsigned indices: Numba then leaves out the wraparound of negative ones (all are >= 0 here).
        ue, uend, ufirst, ublock = np.uint64(e), np.uint64(end), np.uint64(first), np.uint64(block)
        while ue < uend:
            p = np.uint64(p_positions[ue]) - ufirst
            if p >= ublock:
                break
            c = counts[p] + 1
            counts[p] = c
            if c == omin:
                found[n_found] = p
                n_found += 1
                if not ordered:
                    prefetch(rank_pos, first + np.int64(p))
                    prefetch(rank_len, first + np.int64(p))
            ue += _U64_ONE
        e = np.int64(ue)
        cursor[i] = e
        prefetch(p_positions, e + 16)  # the list's next block starts on the next cache line
    return n_found


@njit(**JIT)
def _scancount_pass(p_offsets, p_positions, rank_pos, rank_len, block_lo, block_hi, counts, found, q_tokens, qs, ql,
                    omin_pass, omax_pass, ordered, least, heap, heap_ov, size, cap, score, scale, top, max_len,
                    cosine_keys):
    """One ScanCount pass of the query ``q_tokens[qs:qs + ql]`` over the blocks of ranks, offering the docs
    with overlap in ``[omin_pass, omax_pass]`` and key ``>= least`` to the min-heap ``heap[0, :size]`` of the
    ``cap`` best values (overlaps in ``heap_ov``; :func:`offer`). ``found`` (int32, ``len(counts)`` slots)
    receives a block's candidates. ``ordered``: ranks are positions, keys rise with the overlap and every
    entry of the heap with its least key was offered by this pass, so from the next block on a doc that only
    ties that key has a higher position than each of them, and loses. Returns the heap's size and ``least``,
    raised to the key of the heap's least value once the heap is full."""
    n_docs = len(rank_pos)
    block = len(counts)
    cursor = np.empty(ql, np.int64)
    for i in range(ql):
        cursor[i] = p_offsets[np.int64(q_tokens[qs + i])]
        prefetch(p_positions, cursor[i])
    synced = True  # the cursors stand at the block's first rank
    for first in range(0, n_docs, block):
        if ordered and size == cap:
            least = max(least, (heap[0, 0] >> 31) + 1)
        b = first // block
        omin = _block_need(score, scale, top, max_len, cosine_keys, least, ql, block_lo[b], block_hi[b], omin_pass,
                           ordered)
        if omin > min(omax_pass, ql, block_hi[b]):
            synced = False  # nothing here can enter: the block's postings are passed over
            continue
        # The candidates are found while counting, so the counters need no scan, only clearing.
        n_found = _count_block(p_offsets, p_positions, cursor, synced, q_tokens, qs, ql, first, counts, found, omin,
                               rank_pos, rank_len, ordered)
        synced = True
        for f in range(n_found):
            p = found[f]
            o = np.int64(counts[p])
            if o > omax_pass:
                continue
            r = first + p
            # Ordered: the key does not depend on |d| and the rank is the position, so neither is looked up.
            key = score_key(score, scale, cosine_keys, o, ql, 0 if ordered else np.int64(rank_len[r]))
            if key < least:
                continue
            v = (key << 31) | (POS_MASK - (r if ordered else np.int64(rank_pos[r])))
            if size == cap and v <= heap[0, 0]:
                continue  # most candidates tie the least key kept at a higher position: no call for them
            size = offer(heap, heap_ov, 0, size, cap, v, o)
            if size == cap:
                least = max(least, heap[0, 0] >> 31)
        counts[: min(block, n_docs - first)] = 0
    return size, least


@njit(**JIT)
def scancount_queries(p_offsets, p_positions, rank_pos, rank_len, block_lo, block_hi, ordered, counts, q_tokens,
                      q_offsets, q_floor, k, score, scale, top, max_len, cosine_keys, out_pos, out_ov):
    """Exact top-k of each query through the postings (ScanCount), as :func:`settopk.kernels.postings.postings_search`.

    Parameters
    ----------
    p_offsets : int64 array, shape (vocab_size + 1,); p_positions : int32 array, shape (n_tokens,)
        Postings of the shard's docs by rank (:class:`settopk.kernels.postings.Postings` of the docs in
        ``rank_pos`` order).
    rank_pos : int32 array, shape (n_docs,); rank_len : int16 array, shape (n_docs,)
        Position and length of the doc of each rank: ranks order the docs by length, then position, or
        are the positions (``ordered``).
    block_lo, block_hi : int64 arrays, shape (n_blocks,)
        Least and largest doc length of each block of ``block`` ranks.
    ordered : bool
        Ranks are positions (for scores whose keys do not depend on ``|d|``: no length to filter by,
        and a doc that only ties the least key kept loses from the next block on).
    counts : uint8 (``max_len <= 255``) or uint16 array, shape (block,)
        All zero (and left so): the counters of one block of ranks, counted at a time so that they stay
        in the L1 cache.
    q_tokens, q_offsets : the queries (CSR, ``n_queries`` sets).
    q_floor : int64 array, shape (n_queries,)
        Key floors (``-1``: none).
    k : int
    score, scale, top, max_len : int
        Score index, key scale, largest key and the bound on set sizes.
    cosine_keys : int32 array
        Cosine's key table (:func:`settopk.kernels.cosine_key_table`); read for cosine only.
    out_pos, out_ov : int64 arrays, shape (n_queries, k)
        Receive positions (``-1`` padding) and overlaps (0 padding), best first.

    Notes
    -----
    A doc with overlap ``o >= 1`` appears in exactly ``o`` of the query's lists;
    every other doc has overlap 0 and key 0 (every key of ``o >= 1`` is ``>= 1``),
    so when fewer than ``k`` docs have a positive key and the floor is at most 0,
    the lowest positions with overlap 0 fill the row.

    Candidates must reach the least key kept so far. A block of ranks holds a
    narrow range of lengths, so its docs need an overlap of at least the least
    :func:`least_overlap` over those lengths (length filtering, as in the set
    similarity joins surveyed by Mann, Augsten, Bouros, VLDB 2016); a block
    that needs more than it can hold is not counted, and in the others a
    counter is noted as it reaches that need (each once), so that only those
    docs are looked at and the counters are cleared, not scanned. Most docs
    a query reaches share a single id with it, so a first pass admits
    overlaps ``>= 2`` only; a second admits overlap 1, from the least key the
    first kept, and counts only the blocks where a single shared id can reach it.
    The best ``k`` so far are a min-heap, whose least key is the one to beat.
    """
    n_docs = len(rank_pos)
    cap = max(1, min(k, n_docs))
    heap, heap_ov = new_heaps(1, cap)
    found = np.empty(len(counts), np.int32)
    shortest = max_len + 1  # the shortest doc that can share an id
    for b in range(len(block_lo)):
        shortest = min(shortest, max(block_lo[b], 1))
    for q in range(len(q_offsets) - 1):
        qs, qe = q_offsets[q], q_offsets[q + 1]
        ql = qe - qs
        floor = q_floor[q]
        least = max(floor, 1)  # keys of touched docs are >= 1
        size = 0
        if ql >= 2:
            size, least = _scancount_pass(p_offsets, p_positions, rank_pos, rank_len, block_lo, block_hi, counts,
                                          found, q_tokens, qs, ql, 2, 1 << 30, ordered, least, heap, heap_ov, size,
                                          cap, score, scale, top, max_len, cosine_keys)
            # A single shared id scores best in the shortest doc that has one (every key falls with |d|).
            if score_key(score, scale, cosine_keys, 1, ql, shortest) >= least:
                size, least = _scancount_pass(p_offsets, p_positions, rank_pos, rank_len, block_lo, block_hi, counts,
                                              found, q_tokens, qs, ql, 1, 1, ordered, least, heap, heap_ov, size,
                                              cap, score, scale, top, max_len, cosine_keys)
        elif ql == 1:
            size, least = _scancount_pass(p_offsets, p_positions, rank_pos, rank_len, block_lo, block_hi, counts,
                                          found, q_tokens, qs, ql, 1, 1 << 30, ordered, least, heap, heap_ov, size,
                                          cap, score, scale, top, max_len, cosine_keys)
        write_row(heap, heap_ov, 0, size, out_pos, out_ov, q)
        filled = size
        if filled < k and floor <= 0:
            # Every doc with overlap >= 1 is kept (fewer than k were found): fill with the lowest other positions.
            taken = np.sort(out_pos[q, :size])
            j = 0
            p = 0
            while filled < k and p < n_docs:
                if j < size and taken[j] == p:
                    j += 1
                else:
                    out_pos[q, filled] = p
                    out_ov[q, filled] = 0
                    filled += 1
                p += 1
        for i in range(filled, k):
            out_pos[q, i] = -1
            out_ov[q, i] = 0
