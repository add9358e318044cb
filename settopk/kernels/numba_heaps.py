"""Score keys, least overlaps and 4-ary top-k heaps shared by the compiled CPU scans
(:mod:`settopk.kernels.numba_kernels`, :mod:`settopk.kernels.numba_scancount`; imports numba).

Scores are passed as their index in :data:`settopk.kernels.SCORES`; keys and least overlaps are
the integer formulas of :mod:`settopk.kernels.keys` (``score_key``, ``min_overlap_above``) in
int64 arithmetic: every product stays below ``2**53``, so integer division gives the floor the
float formula gives there. Candidates are ranked by one int64 value, ``(key << 31) | (2**31 - 1
- position)``: larger is better, ties go to the lower position (doc id).

The heaps are 4-ary (:func:`offer`): a heap of 100 is 4 levels deep below its root, not 7, and
the 4 children of a node lie side by side, 32 bytes (d-ary heaps: Johnson, "Priority queues
with update and finding minimum spanning trees", 1975).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["BRAUN_BLANQUET", "JACCARD", "COSINE", "DICE", "OVERLAP", "CONTAINMENT", "JIT", "NO_CHILD", "POS_MASK",
           "first_at_least", "least_overlap", "new_heaps", "offer", "score_key", "sort_heaps", "write_row"]

JIT = {"cache": True, "nogil": True}
"""Every compiled CPU kernel: ``nogil`` (threads run them side by side) and ``cache`` (machine
code kept on disk beside the module, or in ``NUMBA_CACHE_DIR``)."""
# Scores by index in settopk.kernels.SCORES (tests/test_numba_index.py checks the order).
BRAUN_BLANQUET, JACCARD, COSINE, DICE, OVERLAP, CONTAINMENT = 0, 1, 2, 3, 4, 5
POS_MASK = (1 << 31) - 1  # heap values: (key << 31) | (POS_MASK - position), larger is better
NO_CHILD = np.iinfo(np.int64).max  # fills a heap's slots past its capacity (keys stay below 2**32)


@njit(**JIT)
def first_at_least(values, lo, hi, value):
    """Least index ``e`` in ``[lo, hi]`` with ``values[e] >= value`` (``hi`` if none), ``values``
    ascending over ``lo .. hi - 1``: a binary search into a posting list."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(**JIT)
def score_key(score, scale, cosine_keys, o, ql, dl):
    """``floor(S * num / den)`` of ``score`` (0 where ``den == 0``), cosine's from ``cosine_keys``
    (:func:`settopk.kernels.cosine_key_table`; any int32 array for the other scores):
    :func:`settopk.kernels.score_key` for one pair (int64)."""
    if score == OVERLAP:
        return o
    if score == COSINE:
        return np.int64(cosine_keys[dl * (dl + 1) // 2 + o])
    if score == BRAUN_BLANQUET:
        num, den = o, max(ql, dl)
    elif score == JACCARD:
        num, den = o, ql + dl - o
    elif score == DICE:
        num, den = 2 * o, ql + dl
    else:  # containment
        num, den = o, ql
    if den <= 0:
        return 0
    return (scale * num) // den


@njit(**JIT)
def least_overlap(score, scale, top, max_len, cosine_keys, t, ql, dl):
    """Least overlap whose key exceeds ``t``: :func:`settopk.kernels.min_overlap_above` for one pair, unclamped (int64).

    ``top`` is :func:`settopk.kernels.max_key`. ``max_len + 1`` (never reached) where the
    key is always 0 and ``t >= 0``. Cosine's keys are read from ``cosine_keys`` (as :func:`score_key`).
    """
    t1 = min(max(t, -1), top) + 1
    if score == BRAUN_BLANQUET:
        den = max(ql, dl)
    elif score == COSINE:
        den = ql * dl
    elif score == OVERLAP:
        den = 1
    elif score == CONTAINMENT:
        den = ql
    else:  # jaccard (|q| + |d|, zero exactly where |q u d| is), dice
        den = ql + dl
    if den == 0:
        return 0 if t1 <= 0 else max_len + 1
    if score == JACCARD:
        return (t1 * den + scale + t1 - 1) // (scale + t1)
    if score == COSINE:  # the first key of row dl above t1 - 1 (a row increases): binary search
        start = dl * (dl + 1) // 2
        lo, hi = np.int64(0), dl + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if cosine_keys[start + mid] < t1:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo <= dl else max_len + 1
    c = 2 if score == DICE else 1
    return (t1 * den + c * scale - 1) // (c * scale)


@njit(**JIT)
def new_heaps(n_heaps, cap):
    """``n_heaps`` empty heaps of ``cap`` entries for :func:`offer`: values (int64) and overlaps (int16),
    shape (n_heaps, cap + 3), the slots past ``cap`` holding the largest int64 (no entry is that large)."""
    return np.full((n_heaps, cap + 3), NO_CHILD, np.int64), np.zeros((n_heaps, cap + 3), np.int16)


@njit(**JIT)
def offer(h, g, q, size, cap, v, o):
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


@njit(**JIT)
def write_row(heap, heap_ov, r, size, out_pos, out_ov, q):
    """Write the ``size`` entries of heap row ``r`` (:func:`new_heaps`) into row ``q`` of ``out_pos`` and
    ``out_ov`` (positions and overlaps), best first; ``size <= out_pos.shape[1]``."""
    order = np.argsort(heap[r, :size])[::-1]
    for i in range(size):
        out_pos[q, i] = POS_MASK - (heap[r, order[i]] & POS_MASK)
        out_ov[q, i] = heap_ov[r, order[i]]


@njit(**JIT)
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
        write_row(heap, heap_ov, q, size[q], out_pos, out_ov, q)
        out_pos[q, size[q]:] = -1
        out_ov[q, size[q]:] = 0
