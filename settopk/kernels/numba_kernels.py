"""Numba-compiled kernels of :class:`settopk.kernels.numba_index.NumbaShardIndex` (imports numba; load it lazily).

Every function is compiled with ``nogil=True`` (threads run them side by side)
and ``cache=True`` (the machine code is kept on disk beside this file, or in
``NUMBA_CACHE_DIR``, so only the first run on a machine compiles).

Scores are passed as their index in :data:`settopk.kernels.SCORES`; keys and least
overlaps are the integer formulas of :mod:`settopk.kernels.keys` (``score_key``,
``min_overlap_above``) in int64 arithmetic: every product stays below
``2**53``, so integer division gives the floor the float formula gives there.
Candidates are ranked by one int64 value, ``(key << 31) | (2**31 - 1 -
position)``: larger is better, ties go to the lower position (doc id).

Bit-sliced scan (:func:`scan_range`), after the GPU kernel
(``settopk/kernels/cuda/bitslice_topk.cu``): a group of up to 512 queries gets a table
with one row of 8 uint64 words per token id its queries hold (bit ``j`` of
word ``w``: query ``64 w + j`` holds the id; :func:`build_group_table`). A
doc's overlaps with all of them are counted bit-sliced, one 512-bit vector
per bit plane, with carry-save adders in the Harley-Seal pattern (Mula, Kurz,
Lemire, "Faster population counts using AVX2 instructions", 2018; positional
population count: Klarqvist, Mula, Lemire, 2021), 8 ids per step
(:mod:`settopk.kernels.numba_simd`). Each query keeps a heap of its best docs so far
and, per doc length, the least overlap a doc needs to enter it
(:func:`least_overlap`), stored bit-sliced; one bit-sliced comparison per doc
finds the queries the doc can enter, and only those are scored exactly. On
several threads a group is scanned in rounds (:func:`scan_hits` counts a part
of the docs and records the pairs that pass, :func:`offer_hits` and
:func:`refresh_needs` take the pairs of the queries a thread owns); the tables
are then refreshed between rounds only.

The heaps are 4-ary (:func:`_offer`): a heap of 100 is 4 levels deep below its
root, not 7, and the 4 children of a node lie side by side, 32 bytes (d-ary heaps:
Johnson, "Priority queues with update and finding minimum spanning trees",
1975).

ScanCount (:func:`scancount_queries`): see its notes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .numba_simd import WORDS, at_least, count1, count8, ctz, prefetch, ripple

__all__ = [
    "least_overlap",
    "new_heaps",
    "offer_hits",
    "refresh_needs",
    "scan_hits",
    "scan_range",
    "scan_tables",
    "scancount_queries",
    "score_key",
    "sort_heaps",
]

_JIT = {"cache": True, "nogil": True}
# Scores by index in settopk.kernels.SCORES (tests/test_numba_index.py checks the order).
_BRAUN_BLANQUET, _JACCARD, _COSINE, _DICE, _OVERLAP, _CONTAINMENT = 0, 1, 2, 3, 4, 5
_POS_MASK = (1 << 31) - 1  # heap values: (key << 31) | (_POS_MASK - position), larger is better
_NO_CHILD = np.iinfo(np.int64).max  # fills a heap's slots past its capacity (keys stay below 2**32)
_U64_ONE = np.uint64(1)


@njit(**_JIT)
def score_key(score, scale, o, ql, dl):
    """``floor(S * num / den)`` of ``score`` (0 where ``den == 0``): :func:`settopk.kernels.score_key` for one pair (int64)."""
    if score == _OVERLAP:
        return o
    if score == _BRAUN_BLANQUET:
        num, den = o, max(ql, dl)
    elif score == _JACCARD:
        num, den = o, ql + dl - o
    elif score == _COSINE:
        num, den = o * o, ql * dl
    elif score == _DICE:
        num, den = 2 * o, ql + dl
    else:  # containment
        num, den = o, ql
    if den <= 0:
        return 0
    return (scale * num) // den


@njit(**_JIT)
def least_overlap(score, scale, top, max_len, t, ql, dl):
    """Least overlap whose key exceeds ``t``: :func:`settopk.kernels.min_overlap_above` for one pair, unclamped (int64).

    ``top`` is :func:`settopk.kernels.max_key`. ``max_len + 1`` (never reached) where the
    key is always 0 and ``t >= 0``.
    """
    t1 = min(max(t, -1), top) + 1
    if score == _BRAUN_BLANQUET:
        den = max(ql, dl)
    elif score == _COSINE:
        den = ql * dl
    elif score == _OVERLAP:
        den = 1
    elif score == _CONTAINMENT:
        den = ql
    else:  # jaccard (|q| + |d|, zero exactly where |q u d| is), dice
        den = ql + dl
    if den == 0:
        return 0 if t1 <= 0 else max_len + 1
    if score == _JACCARD:
        return (t1 * den + scale + t1 - 1) // (scale + t1)
    if score == _COSINE:
        x = (t1 * den + scale - 1) // scale  # o * o must reach x
        r = np.int64(np.sqrt(np.float64(x)))
        while r * r > x:
            r -= 1
        while (r + 1) * (r + 1) <= x:
            r += 1
        return r + 1 if r * r < x else r
    c = 2 if score == _DICE else 1
    return (t1 * den + c * scale - 1) // (c * scale)


@njit(**_JIT)
def new_heaps(n_heaps, cap):
    """``n_heaps`` empty heaps of ``cap`` entries for :func:`_offer`: values (int64) and overlaps (int16),
    shape (n_heaps, cap + 3), the slots past ``cap`` holding the largest int64 (no entry is that large)."""
    return np.full((n_heaps, cap + 3), _NO_CHILD, np.int64), np.zeros((n_heaps, cap + 3), np.int16)


@njit(**_JIT)
def _offer(h, g, q, size, cap, v, o):
    """Keep value ``v`` (overlap ``o``) if it is among the ``cap`` largest values seen by the min-heap of
    row ``q`` (``h[q, :size]``, overlaps in ``g[q]``; rows from :func:`new_heaps`); returns the new size.

    The heap is 4-ary: a full heap of 100 has 4 levels below the root, not 7, and a node's children lie
    side by side. The slots past ``cap`` hold the largest int64, so every node has 4 children to compare.
    """
    if size < cap:
        i = size
        while i > 0:
            p = (i - 1) >> 2
            hp = h[q, p]
            if hp <= v:
                break
            h[q, i] = hp
            g[q, i] = g[q, p]
            i = p
        h[q, i] = v
        g[q, i] = o
        return size + 1
    if v <= h[q, 0]:
        return size
    i = 0
    while True:
        c = 4 * i + 1
        if c >= cap:
            break
        # The least child without branches: which one it is can't be predicted.
        a0, a1, a2, a3 = h[q, c], h[q, c + 1], h[q, c + 2], h[q, c + 3]
        m01, m23 = min(a0, a1), min(a2, a3)
        m = (c + 2 + np.int64(a3 < a2)) if m23 < m01 else (c + np.int64(a1 < a0))
        hm = min(m01, m23)
        if hm >= v:
            break
        h[q, i] = hm
        g[q, i] = g[q, m]
        i = m
    h[q, i] = v
    g[q, i] = o
    return size


@njit(**_JIT)
def _reaches(score, scale, t1, o, ql, dl):
    """Whether overlap ``o`` (``<= min(ql, dl)``) of a query and a doc of lengths ``ql, dl >= 1`` gives a
    key ``>= t1``, i.e. ``S * num >= t1 * den``: the key's formula without its division."""
    if score == _OVERLAP:
        return o >= t1
    if score == _BRAUN_BLANQUET:
        return scale * o >= t1 * max(ql, dl)
    if score == _JACCARD:
        return scale * o >= t1 * (ql + dl - o)
    if score == _COSINE:
        return scale * o * o >= t1 * ql * dl
    if score == _DICE:
        return scale * 2 * o >= t1 * (ql + dl)
    return scale * o >= t1 * ql  # containment


@njit(**_JIT)
def _set_need(q, t, ql, lengths, need, planes, reach, score, scale, top, max_len):
    """Store query ``q``'s least overlaps above key ``t`` for every doc length, bit-sliced, and its reach.

    A length that no overlap can reach gets ``min(ql, dl) + 1`` or more. Every key falls as ``|d|``
    grows, so the least overlap never falls from one length to the next (``lengths`` ascend): it is
    stepped up from the last length's, a multiplication a step (:func:`_reaches`), where
    :func:`least_overlap` would divide (and take a square root for cosine) at every length.
    """
    w = q >> 6
    bit = _U64_ONE << np.uint64(q & 63)
    t1 = min(max(t, -1), top) + 1
    m = 0
    for li in range(len(lengths)):
        dl = lengths[li]
        fit = min(ql, dl)
        if fit == 0:  # no id to share: the key is 0
            here = 0 if t1 <= 0 else max_len + 1
        else:
            while m <= fit and not _reaches(score, scale, t1, m, ql, dl):
                m += 1
            here = m
        was = need[q, li] <= fit
        now = here <= fit
        if was and not now:
            reach[li] -= 1
        elif now and not was:
            reach[li] += 1
        flip = need[q, li] ^ here
        need[q, li] = here
        b = 0
        while flip != 0:
            if flip & 1:
                planes[li, b, w] ^= bit
            flip >>= 1
            b += 1


@njit(**_JIT)
def scan_tables(q_len, q_floor, lengths, score, scale, top, max_len, n_planes):
    """The bit-sliced tables of a scan group (``n_group <= 512`` queries) for their key floors.

    Returns
    -------
    floor_t : int64 array, shape (n_group,)
        ``q_floor - 1``: the key a doc must exceed (``key >= floor  <=>  key > floor - 1``).
    need : int64 array, shape (n_group, n_lengths)
        Each query's least overlap above ``floor_t`` per doc length (:func:`_set_need`).
    planes : uint64 array, shape (n_lengths, n_planes, 8)
        ``need`` bit-sliced (bit ``b`` of lane ``q`` in row ``b``); lanes without a query need more than
        any counter holds.
    reach : int64 array, shape (n_lengths,)
        Queries that can reach each length.
    valid : uint64 array, shape (8,)
        The lanes that hold a query.
    """
    nq = len(q_len)
    nl = len(lengths)
    floor_t = q_floor - 1
    need = np.zeros((nq, nl), np.int64)  # as the planes hold it: 0 everywhere
    planes = np.zeros((nl, n_planes, WORDS), np.uint64)
    reach = np.full(nl, nq, np.int64)  # need 0 reaches every length
    for q in range(nq):
        _set_need(q, floor_t[q], q_len[q], lengths, need, planes, reach, score, scale, top, max_len)
    valid = np.zeros(WORDS, np.uint64)
    for q in range(nq):
        valid[q >> 6] |= _U64_ONE << np.uint64(q & 63)
    for w in range(WORDS):
        planes[:, :, w] |= ~valid[w]
    return floor_t, need, planes, reach, valid


@njit(**_JIT)
def _count_doc(doc_tokens, start, end, slot_of, table, acc, slots):
    """Count the doc ``doc_tokens[start:end]`` against every lane of ``table`` into ``acc`` (bit-sliced:
    row ``1 + b`` holds bit ``b`` of each lane's overlap); ``slots`` (int64, ``>= end - start`` entries) is
    scratch."""
    n = 0
    for i in range(np.uint64(start), np.uint64(end)):  # the ids some query holds (row 0 adds 0)
        slot = slot_of[doc_tokens[i]]
        slots[np.uint64(n)] = slot
        n += slot != 0
    acc[:] = 0
    i = np.uint64(0)
    un = np.uint64(n)
    while i + np.uint64(8) <= un:
        if count8(table, acc, slots[i], slots[i + np.uint64(1)], slots[i + np.uint64(2)], slots[i + np.uint64(3)],
                  slots[i + np.uint64(4)], slots[i + np.uint64(5)], slots[i + np.uint64(6)],
                  slots[i + np.uint64(7)]) != 0:
            r = 4
            while ripple(acc, r) != 0:
                r += 1
        i += np.uint64(8)
    while i < un:
        if count1(table, acc, slots[i]) != 0:
            r = 4
            while ripple(acc, r) != 0:
                r += 1
        i += _U64_ONE


@njit(**_JIT)
def _lane_count(acc, w, j, n_planes):
    """The overlap counted in lane ``64 w + j`` of ``acc``."""
    sh = np.uint64(j)
    o = 0
    for b in range(n_planes):
        o |= np.int64((acc[1 + b, w] >> sh) & _U64_ONE) << b
    return o


@njit(**_JIT)
def scan_range(doc_tokens, doc_offsets, doc_len, len_index, lengths, lo, hi, slot_of, table, q_len, q_floor,
               score, scale, top, max_len, n_planes, cap, refresh_after):
    """Top-``cap`` of docs ``lo .. hi - 1`` for each query of a group, by the bit-sliced scan.

    Parameters
    ----------
    doc_tokens : uint16 array, shape (n_tokens,); doc_offsets : int64 array, shape (n_docs + 1,)
        The shard's docs (CSR), in position order.
    doc_len : int64 array, shape (n_docs,); len_index : int64 array, shape (n_docs,)
        Each doc's length and the index of that length in ``lengths``.
    lengths : int64 array, shape (n_lengths,)
        The distinct doc lengths of the shard.
    lo, hi : int
        The positions this call scans.
    slot_of : int32 array, shape (65536,); table : uint64 array, shape (n_slots, 8)
        Row ``slot_of[t]`` of ``table`` holds the group's membership bits of id ``t``
        (row 0, all zero, for ids no query of the group holds): :func:`build_group_table`.
    q_len, q_floor : int64 arrays, shape (n_group,)
        The group's query lengths and key floors (``-1``: none); ``n_group <= 512``.
    score, scale, top, max_len : int
        Score index, key scale, largest key and the bound on set sizes.
    n_planes : int
        Counter bits, ``>= 3`` and ``2**n_planes > max_len + 1`` (the carries of the highest plane are
        never set: an overlap is at most ``max_len``).
    cap : int
        Heap size: ``min(k, hi - lo)``.
    refresh_after : int
        Docs a query's stale threshold may admit in vain before its tables are refreshed.

    Returns
    -------
    values : int64 array, shape (n_group, cap)
        Heap of each query, values ``(key << 31) | (2**31 - 1 - position)``.
    overlaps : int64 array, shape (n_group, cap)
        The overlap of each heap entry.
    sizes : int64 array, shape (n_group,)
        Filled entries of each heap.
    """
    nq = len(q_len)
    heap, heap_ov = new_heaps(nq, max(cap, 1))
    size = np.zeros(nq, np.int64)
    floor_t, need, planes, reach, valid = scan_tables(q_len, q_floor, lengths, score, scale, top, max_len, n_planes)
    t_true = floor_t.copy()  # the key a doc must exceed to enter (ties lose to the earlier positions)
    t_used = floor_t.copy()  # the key the bit-sliced tables were built for (never above t_true)
    rejects = np.zeros(nq, np.int64)
    acc = np.zeros((n_planes + 1, WORDS), np.uint64)
    slots = np.zeros(max_len + 1, np.int64)
    for d in range(lo, hi):
        li = len_index[d]
        if reach[li] == 0:
            continue
        _count_doc(doc_tokens, doc_offsets[d], doc_offsets[d + 1], slot_of, table, acc, slots)
        if at_least(acc, planes, li * n_planes, n_planes) == 0:
            continue
        dl = doc_len[d]
        for w in range(WORDS):
            hit = acc[0, w] & valid[w]
            while hit != 0:
                j = ctz(hit)
                hit &= hit - _U64_ONE
                o = _lane_count(acc, w, j, n_planes)
                q = w * 64 + np.int64(j)
                key = score_key(score, scale, o, q_len[q], dl)
                if key <= t_true[q]:
                    rejects[q] += 1
                    if rejects[q] >= refresh_after and t_used[q] < t_true[q]:
                        t_used[q] = t_true[q]
                        rejects[q] = 0
                        _set_need(q, t_used[q], q_len[q], lengths, need, planes, reach, score, scale, top, max_len)
                    continue
                v = (key << 31) | (_POS_MASK - d)
                size[q] = _offer(heap, heap_ov, q, size[q], cap, v, o)
                if size[q] == cap:
                    t_true[q] = max(heap[q, 0] >> 31, floor_t[q])
                    if t_used[q] == floor_t[q] and t_true[q] > t_used[q]:
                        # The first threshold above the floor: refresh at once (the floor's tables admit every doc).
                        t_used[q] = t_true[q]
                        rejects[q] = 0
                        _set_need(q, t_used[q], q_len[q], lengths, need, planes, reach, score, scale, top, max_len)
    return heap[:, : max(cap, 1)], heap_ov[:, : max(cap, 1)], size


@njit(**_JIT)
def scan_hits(doc_tokens, doc_offsets, len_index, lo, hi, slot_of, table, planes, reach, valid, n_planes, max_len,
              hit_doc, hit_lane, hit_ov):
    """Count docs ``lo .. hi - 1`` against a group's lanes and record every (doc, lane) pair whose overlap
    reaches the lane's least overlap in ``planes`` (one part of a round of :meth:`NumbaShardIndex` scans on
    several threads; :func:`offer_hits` takes the pairs).

    Parameters
    ----------
    doc_tokens, doc_offsets, len_index, slot_of, table, n_planes, max_len
        As :func:`scan_range`.
    lo, hi : int
        The positions this call counts.
    planes : uint64 array, shape (n_lengths, n_planes, 8); reach : int64 array, shape (n_lengths,);
    valid : uint64 array, shape (8,)
        The group's tables (:func:`scan_tables`, as refreshed by :func:`refresh_needs`); ``reach`` counts
        the queries of every owner.
    hit_doc : int32 array, shape (n_slots,); hit_lane, hit_ov : int16 arrays, shape (n_slots,)
        Receive the pairs' positions, lanes and overlaps in position order; ``n_slots >= 512``.

    Returns
    -------
    next_doc : int
        ``hi``, or the first doc not counted because its pairs might not fit.
    n_hits : int
        Pairs recorded.
    """
    acc = np.zeros((n_planes + 1, WORDS), np.uint64)
    slots = np.zeros(max_len + 1, np.int64)
    n = 0
    for d in range(lo, hi):
        li = len_index[d]
        if reach[li] == 0:
            continue
        if n + 64 * WORDS > len(hit_doc):
            return d, n
        _count_doc(doc_tokens, doc_offsets[d], doc_offsets[d + 1], slot_of, table, acc, slots)
        if at_least(acc, planes, li * n_planes, n_planes) == 0:
            continue
        for w in range(WORDS):
            hit = acc[0, w] & valid[w]
            while hit != 0:
                j = ctz(hit)
                hit &= hit - _U64_ONE
                hit_doc[n] = d
                hit_lane[n] = w * 64 + np.int64(j)
                hit_ov[n] = _lane_count(acc, w, j, n_planes)
                n += 1
    return hi, n


@njit(**_JIT)
def offer_hits(hit_doc, hit_lane, hit_ov, n_hits, lane_lo, lane_hi, doc_len, q_len, score, scale, cap, floor_t,
               t_true, heap, heap_ov, size):
    """Offer the pairs of :func:`scan_hits` whose lane is in ``lane_lo .. lane_hi - 1`` to those lanes'
    heaps (:func:`new_heaps`, sizes in ``size``), in position order, and raise each lane's ``t_true``
    (the key a doc must exceed; ``floor_t`` until its heap holds ``cap``). A pair that only ties
    ``t_true`` loses: every entry with that key came from an earlier position.

    ``hit_doc``, ``hit_lane``, ``hit_ov`` (shape (n_parts, n_slots)) hold the pairs of consecutive parts
    of the docs, row by row, ``n_hits[p]`` in row ``p`` (int64, shape (n_parts,)): one call takes a
    round's pairs (each call of a compiled function takes the GIL for its arguments).
    """
    for p in range(len(n_hits)):
        for i in range(n_hits[p]):
            q = np.int64(hit_lane[p, i])
            if q < lane_lo or q >= lane_hi:
                continue
            d = np.int64(hit_doc[p, i])
            o = np.int64(hit_ov[p, i])
            key = score_key(score, scale, o, q_len[q], doc_len[d])
            if key <= t_true[q]:
                continue
            size[q] = _offer(heap, heap_ov, q, size[q], cap, (key << 31) | (_POS_MASK - d), o)
            if size[q] == cap:
                t_true[q] = max(heap[q, 0] >> 31, floor_t[q])


@njit(**_JIT)
def refresh_needs(lane_lo, lane_hi, t_true, t_used, q_len, lengths, need, planes, reach, score, scale, top, max_len):
    """Rebuild the least overlaps (:func:`_set_need`) of the lanes ``lane_lo .. lane_hi - 1`` whose ``t_true``
    rose above ``t_used``, the key their tables were built for; ``reach`` counts these lanes' queries."""
    for q in range(lane_lo, lane_hi):
        if t_true[q] > t_used[q]:
            t_used[q] = t_true[q]
            _set_need(q, t_used[q], q_len[q], lengths, need, planes, reach, score, scale, top, max_len)


@njit(**_JIT)
def _write_row(heap, heap_ov, r, size, out_pos, out_ov, q):
    """Write the ``size`` entries of heap row ``r`` (:func:`new_heaps`) into row ``q`` of ``out_pos`` and
    ``out_ov`` (positions and overlaps), best first; ``size <= out_pos.shape[1]``."""
    order = np.argsort(heap[r, :size])[::-1]
    for i in range(size):
        out_pos[q, i] = _POS_MASK - (heap[r, order[i]] & _POS_MASK)
        out_ov[q, i] = heap_ov[r, order[i]]


@njit(**_JIT)
def sort_heaps(heap, heap_ov, size, out_pos, out_ov):
    """Each query's heap entries, best first.

    Parameters
    ----------
    heap : int64 array, shape (n_queries, >= cap); heap_ov : int16 array, the same shape
        Heaps of :func:`scan_range` (values ``(key << 31) | (2**31 - 1 - position)`` and overlaps).
    size : int64 array, shape (n_queries,)
        Filled entries of each heap, at most ``k``.
    out_pos, out_ov : int64 arrays, shape (n_queries, k)
        Receive positions (``-1`` padding) and overlaps (0 padding), best first.
    """
    for q in range(heap.shape[0]):
        _write_row(heap, heap_ov, q, size[q], out_pos, out_ov, q)
        out_pos[q, size[q]:] = -1
        out_ov[q, size[q]:] = 0


@njit(**_JIT)
def _first_at_least(positions, lo, hi, value):
    """Least index ``e`` in ``[lo, hi]`` with ``positions[e] >= value`` (``hi`` if none); ascending positions."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if positions[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(**_JIT)
def _block_need(score, scale, top, max_len, least, ql, lo_len, hi_len, omin_pass, ordered):
    """Least overlap a doc of length ``lo_len .. hi_len`` needs to reach key ``least``, and at least
    ``omin_pass``. ``ordered``: keys do not depend on ``|d|``, so one length tells it."""
    omin = max(omin_pass, least_overlap(score, scale, top, max_len, least - 1, ql, lo_len))
    if ordered:
        return omin
    for dl in range(lo_len + 1, hi_len + 1):
        if omin <= omin_pass:
            break
        omin = max(omin_pass, min(omin, least_overlap(score, scale, top, max_len, least - 1, ql, dl)))
    return omin


@njit(**_JIT)
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
            e = _first_at_least(p_positions, e, end, first)
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


@njit(**_JIT)
def _scancount_pass(p_offsets, p_positions, rank_pos, rank_len, block_lo, block_hi, counts, found, q_tokens, qs, ql,
                    omin_pass, omax_pass, ordered, least, heap, heap_ov, size, cap, score, scale, top, max_len):
    """One ScanCount pass of the query ``q_tokens[qs:qs + ql]`` over the blocks of ranks, offering the docs
    with overlap in ``[omin_pass, omax_pass]`` and key ``>= least`` to the min-heap ``heap[0, :size]`` of the
    ``cap`` best values (overlaps in ``heap_ov``; :func:`_offer`). ``found`` (int32, ``len(counts)`` slots)
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
        omin = _block_need(score, scale, top, max_len, least, ql, block_lo[b], block_hi[b], omin_pass, ordered)
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
            key = score_key(score, scale, o, ql, 0 if ordered else np.int64(rank_len[r]))
            if key < least:
                continue
            v = (key << 31) | (_POS_MASK - (r if ordered else np.int64(rank_pos[r])))
            if size == cap and v <= heap[0, 0]:
                continue  # most candidates tie the least key kept at a higher position: no call for them
            size = _offer(heap, heap_ov, 0, size, cap, v, o)
            if size == cap:
                least = max(least, heap[0, 0] >> 31)
        counts[: min(block, n_docs - first)] = 0
    return size, least


@njit(**_JIT)
def scancount_queries(p_offsets, p_positions, rank_pos, rank_len, block_lo, block_hi, ordered, counts, q_tokens,
                      q_offsets, q_floor, k, score, scale, top, max_len, out_pos, out_ov):
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
                                          cap, score, scale, top, max_len)
            # A single shared id scores best in the shortest doc that has one (every key falls with |d|).
            if score_key(score, scale, 1, ql, shortest) >= least:
                size, least = _scancount_pass(p_offsets, p_positions, rank_pos, rank_len, block_lo, block_hi, counts,
                                              found, q_tokens, qs, ql, 1, 1, ordered, least, heap, heap_ov, size,
                                              cap, score, scale, top, max_len)
        elif ql == 1:
            size, least = _scancount_pass(p_offsets, p_positions, rank_pos, rank_len, block_lo, block_hi, counts,
                                          found, q_tokens, qs, ql, 1, 1 << 30, ordered, least, heap, heap_ov, size,
                                          cap, score, scale, top, max_len)
        _write_row(heap, heap_ov, 0, size, out_pos, out_ov, q)
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


@njit(**_JIT)
def build_group_table(q_tokens, q_offsets):
    """Membership table of a query group (CSR ``q_tokens``/``q_offsets``, at most 512 queries).

    Returns
    -------
    slot_of : int32 array, shape (65536,)
        Row of each id in ``table``; 0 (an all-zero row) for ids no query holds.
    table : uint64 array, shape (n_slots, 8)
        Bit ``j`` of word ``w`` of an id's row: query ``64 w + j`` holds the id.
    """
    slot_of = np.zeros(65536, np.int32)
    n_slots = 1
    for i in range(len(q_tokens)):
        t = q_tokens[i]
        if slot_of[t] == 0:
            slot_of[t] = n_slots
            n_slots += 1
    table = np.zeros((n_slots, WORDS), np.uint64)
    for q in range(len(q_offsets) - 1):
        bit = _U64_ONE << np.uint64(q & 63)
        for i in range(q_offsets[q], q_offsets[q + 1]):
            table[slot_of[q_tokens[i]], q >> 6] |= bit
    return slot_of, table
