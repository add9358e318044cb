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

Score keys, least overlaps and the 4-ary heaps: :mod:`settopk.kernels.numba_heaps`;
ScanCount (:func:`scancount_queries`): :mod:`settopk.kernels.numba_scancount`. Both are
re-exported here, so this module lists every kernel the index calls.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .numba_heaps import BRAUN_BLANQUET as _BRAUN_BLANQUET, COSINE as _COSINE, DICE as _DICE, JACCARD as _JACCARD
from .numba_heaps import JIT as _JIT, OVERLAP as _OVERLAP, POS_MASK as _POS_MASK
from .numba_heaps import least_overlap, new_heaps, score_key, sort_heaps
from .numba_heaps import offer as _offer
from .numba_scancount import scancount_queries
from .numba_simd import WORDS, at_least, count1, count8, ctz, ripple

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

_U64_ONE = np.uint64(1)


@njit(**_JIT)
def _reaches(score, scale, cosine_keys, t1, o, ql, dl):
    """Whether overlap ``o`` (``<= min(ql, dl)``) of a query and a doc of lengths ``ql, dl >= 1`` gives a
    key ``>= t1``, i.e. ``S * num >= t1 * den``: the key's formula without its division (cosine: its key
    read from ``cosine_keys``, :func:`settopk.kernels.cosine_key_table`)."""
    if score == _OVERLAP:
        return o >= t1
    if score == _BRAUN_BLANQUET:
        return scale * o >= t1 * max(ql, dl)
    if score == _JACCARD:
        return scale * o >= t1 * (ql + dl - o)
    if score == _COSINE:
        return score_key(score, scale, cosine_keys, o, ql, dl) >= t1
    if score == _DICE:
        return scale * 2 * o >= t1 * (ql + dl)
    return scale * o >= t1 * ql  # containment


@njit(**_JIT)
def _set_need(q, t, ql, lengths, need, planes, reach, score, scale, top, max_len, cosine_keys):
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
            while m <= fit and not _reaches(score, scale, cosine_keys, t1, m, ql, dl):
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
def scan_tables(q_len, q_floor, lengths, score, scale, top, max_len, cosine_keys, n_planes):
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
        _set_need(q, floor_t[q], q_len[q], lengths, need, planes, reach, score, scale, top, max_len, cosine_keys)
    valid = np.zeros(WORDS, np.uint64)
    for q in range(nq):
        valid[q >> 6] |= _U64_ONE << np.uint64(q & 63)
    for w in range(WORDS):
        planes[:, :, w] |= ~valid[w]
    return floor_t, need, planes, reach, valid


@njit(**_JIT)
def _count_doc(doc_tokens, start, end, slot_of, bits, table, acc, slots):
    """Count the doc ``doc_tokens[start:end]`` against every lane of ``table`` into ``acc`` (bit-sliced:
    row ``1 + b`` holds bit ``b`` of each lane's overlap); ``slots`` (int64, ``>= end - start`` entries) is
    scratch. ``bits`` (uint64, a bit per id: some query holds it; empty: none kept) is asked first
    where ``slot_of`` is too large for the caches (wide ids: a bit per id, not 4 bytes)."""
    n = 0
    filtered = len(bits) != 0
    for i in range(np.uint64(start), np.uint64(end)):  # the ids some query holds (row 0 adds 0)
        t = doc_tokens[i]
        if filtered and (bits[t >> 6] >> np.uint64(t & 63)) & _U64_ONE == 0:
            continue
        slot = slot_of[t]
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
def scan_range(doc_tokens, doc_offsets, doc_len, len_index, lengths, lo, hi, slot_of, bits, table, q_len, q_floor,
               score, scale, top, max_len, cosine_keys, n_planes, cap, refresh_after):
    """Top-``cap`` of docs ``lo .. hi - 1`` for each query of a group, by the bit-sliced scan.

    Parameters
    ----------
    doc_tokens : uint16 or uint32 array, shape (n_tokens,); doc_offsets : int64 array, shape (n_docs + 1,)
        The shard's docs (CSR), in position order.
    doc_len : int64 array, shape (n_docs,); len_index : int64 array, shape (n_docs,)
        Each doc's length and the index of that length in ``lengths``.
    lengths : int64 array, shape (n_lengths,)
        The distinct doc lengths of the shard.
    lo, hi : int
        The positions this call scans.
    slot_of : int32 array, shape (n_ids,); table : uint64 array, shape (n_slots, 8)
        Row ``slot_of[t]`` of ``table`` holds the group's membership bits of id ``t``
        (row 0, all zero, for ids no query of the group holds): :func:`build_group_table`. ``bits``
        (uint64): the ids some query holds, a bit each, asked before ``slot_of``; empty: not used.
    q_len, q_floor : int64 arrays, shape (n_group,)
        The group's query lengths and key floors (``-1``: none); ``n_group <= 512``.
    score, scale, top, max_len : int
        Score index, key scale, largest key and the bound on set sizes.
    cosine_keys : int32 array
        Cosine's key table (:func:`settopk.kernels.cosine_key_table`); read for cosine only.
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
    floor_t, need, planes, reach, valid = scan_tables(q_len, q_floor, lengths, score, scale, top, max_len, cosine_keys,
                                                      n_planes)
    t_true = floor_t.copy()  # the key a doc must exceed to enter (ties lose to the earlier positions)
    t_used = floor_t.copy()  # the key the bit-sliced tables were built for (never above t_true)
    rejects = np.zeros(nq, np.int64)
    acc = np.zeros((n_planes + 1, WORDS), np.uint64)
    slots = np.zeros(max_len + 1, np.int64)
    for d in range(lo, hi):
        li = len_index[d]
        if reach[li] == 0:
            continue
        _count_doc(doc_tokens, doc_offsets[d], doc_offsets[d + 1], slot_of, bits, table, acc, slots)
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
                key = score_key(score, scale, cosine_keys, o, q_len[q], dl)
                if key <= t_true[q]:
                    rejects[q] += 1
                    if rejects[q] >= refresh_after and t_used[q] < t_true[q]:
                        t_used[q] = t_true[q]
                        rejects[q] = 0
                        _set_need(q, t_used[q], q_len[q], lengths, need, planes, reach, score, scale, top, max_len,
                                  cosine_keys)
                    continue
                v = (key << 31) | (_POS_MASK - d)
                size[q] = _offer(heap, heap_ov, q, size[q], cap, v, o)
                if size[q] == cap:
                    t_true[q] = max(heap[q, 0] >> 31, floor_t[q])
                    if t_used[q] == floor_t[q] and t_true[q] > t_used[q]:
                        # The first threshold above the floor: refresh at once (the floor's tables admit every doc).
                        t_used[q] = t_true[q]
                        rejects[q] = 0
                        _set_need(q, t_used[q], q_len[q], lengths, need, planes, reach, score, scale, top, max_len,
                                  cosine_keys)
    return heap[:, : max(cap, 1)], heap_ov[:, : max(cap, 1)], size


@njit(**_JIT)
def scan_hits(doc_tokens, doc_offsets, len_index, lo, hi, slot_of, bits, table, planes, reach, valid, n_planes, max_len,
              hit_doc, hit_lane, hit_ov):
    """Count docs ``lo .. hi - 1`` against a group's lanes and record every (doc, lane) pair whose overlap
    reaches the lane's least overlap in ``planes`` (one part of a round of :meth:`NumbaShardIndex` scans on
    several threads; :func:`offer_hits` takes the pairs).

    Parameters
    ----------
    doc_tokens, doc_offsets, len_index, slot_of, bits, table, n_planes, max_len
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
        _count_doc(doc_tokens, doc_offsets[d], doc_offsets[d + 1], slot_of, bits, table, acc, slots)
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
def offer_hits(hit_doc, hit_lane, hit_ov, n_hits, lane_lo, lane_hi, doc_len, q_len, score, scale, cosine_keys, cap,
               floor_t, t_true, heap, heap_ov, size):
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
            key = score_key(score, scale, cosine_keys, o, q_len[q], doc_len[d])
            if key <= t_true[q]:
                continue
            size[q] = _offer(heap, heap_ov, q, size[q], cap, (key << 31) | (_POS_MASK - d), o)
            if size[q] == cap:
                t_true[q] = max(heap[q, 0] >> 31, floor_t[q])


@njit(**_JIT)
def refresh_needs(lane_lo, lane_hi, t_true, t_used, q_len, lengths, need, planes, reach, score, scale, top, max_len,
                  cosine_keys):
    """Rebuild the least overlaps (:func:`_set_need`) of the lanes ``lane_lo .. lane_hi - 1`` whose ``t_true``
    rose above ``t_used``, the key their tables were built for; ``reach`` counts these lanes' queries."""
    for q in range(lane_lo, lane_hi):
        if t_true[q] > t_used[q]:
            t_used[q] = t_true[q]
            _set_need(q, t_used[q], q_len[q], lengths, need, planes, reach, score, scale, top, max_len, cosine_keys)


@njit(**_JIT)
def build_group_table(q_tokens, q_offsets, slot_of, bits):
    """Membership table of a query group (CSR ``q_tokens``/``q_offsets``, ``uint16`` or ``uint32``
    ids, at most 512 queries).

    ``slot_of`` (int32, all zero, one entry per id below the index's id bound and the group's
    largest id + 1: 65536 for ``uint16`` sets) is filled here: the caller allocates it, so that a
    wide table comes as lazily zeroed pages (``numpy.zeros``) and costs only the pages touched.
    ``bits`` (uint64, all zero, ``ceil(len(slot_of) / 64)`` words, or empty) gets a bit per id held.

    Returns
    -------
    slot_of : int32 array
        Row of each id in ``table``; 0 (an all-zero row) for ids no query holds.
    table : uint64 array, shape (n_slots, 8)
        Bit ``j`` of word ``w`` of an id's row: query ``64 w + j`` holds the id.
    """
    n_slots = 1
    for i in range(len(q_tokens)):
        t = q_tokens[i]
        if slot_of[t] == 0:
            slot_of[t] = n_slots
            n_slots += 1
            if len(bits) != 0:
                bits[t >> 6] |= _U64_ONE << np.uint64(t & 63)
    table = np.zeros((n_slots, WORDS), np.uint64)
    for q in range(len(q_offsets) - 1):
        bit = _U64_ONE << np.uint64(q & 63)
        for i in range(q_offsets[q], q_offsets[q + 1]):
            table[slot_of[q_tokens[i]], q >> 6] |= bit
    return slot_of, table
