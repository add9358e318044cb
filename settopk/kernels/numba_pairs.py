"""The per-pair columns of a threshold result, compiled: each pair's query key and length and its
float64 score, written in one pass by several threads (imports Numba; load it lazily).

:func:`settopk.kernels.score_value` gives the same scores (bit for bit: the same IEEE operations
on the same exact integers) as NumPy expressions, which convert every operand to a float64 array
first; on a join of millions of pairs that pass costs more than the join's emit.
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from .keys import SCORES, check_score
from .numba_heaps import BRAUN_BLANQUET, COSINE, DICE, JACCARD, OVERLAP

__all__ = ["pair_columns"]

_PARALLEL_PAIRS = 1 << 18  # fewer pairs are written by the calling thread: starting threads would cost more


def pair_columns(offsets, row_key, row_len, overlap, doc_len, score: str, threads: int = 1):
    """Each pair's query key, query length and score (host memory).

    Parameters
    ----------
    offsets : numpy.ndarray of int64, shape (n_rows + 1,)
        Row ``r``'s pairs are ``offsets[r]:offsets[r + 1]``.
    row_key : numpy.ndarray of int64, shape (n_rows,)
        The value each row's pairs carry (a query index or a doc id).
    row_len : numpy.ndarray of int32, shape (n_rows,)
        ``|q|`` per row.
    overlap, doc_len : numpy.ndarray of int32, shape (n_pairs,)
        ``|q ∩ d|`` and ``|d|`` per pair.
    score : str
        One of :data:`settopk.kernels.SCORES`.
    threads : int, default 1
        Threads that write the columns (where there are many pairs).

    Returns
    -------
    query_key : numpy.ndarray of int64, shape (n_pairs,)
    query_len : numpy.ndarray of int32, shape (n_pairs,)
    scores : numpy.ndarray of float64, shape (n_pairs,)
        Equal to ``score_value(overlap, query_len, doc_len, score)``.

    Raises
    ------
    ValueError
        If ``score`` is unknown.
    """
    code = SCORES.index(check_score(score))
    offsets = np.ascontiguousarray(offsets, np.int64)
    row_key = np.ascontiguousarray(row_key, np.int64)
    row_len = np.ascontiguousarray(row_len, np.int32)
    overlap = np.ascontiguousarray(overlap, np.int32)
    doc_len = np.ascontiguousarray(doc_len, np.int32)
    n = int(offsets[-1])
    key, length, scores = np.empty(n, np.int64), np.empty(n, np.int32), np.empty(n, np.float64)
    n_rows = len(offsets) - 1
    if threads <= 1 or n < _PARALLEL_PAIRS:
        _fill(0, n_rows, offsets, row_key, row_len, overlap, doc_len, code, key, length, scores)
        return key, length, scores
    # Ranges of at least half _PARALLEL_PAIRS pairs, up to four per thread: on many cores a range of
    # fewer pairs costs more to hand off than to write.
    n_ranges = min(4 * threads, 2 * (n // _PARALLEL_PAIRS))
    cuts = np.unique(np.searchsorted(offsets, np.linspace(0, n, n_ranges + 1)).clip(0, n_rows))
    list(_pool(threads).map(lambda lo_hi: _fill(lo_hi[0], lo_hi[1], offsets, row_key, row_len, overlap, doc_len, code, key,
                                                length, scores), zip(cuts[:-1].tolist(), cuts[1:].tolist())))
    return key, length, scores


@functools.lru_cache(maxsize=None)
def _pool(threads: int) -> ThreadPoolExecutor:
    """The threads of :func:`pair_columns`, started once per count and kept: idle, they cost
    nothing, where starting them at each call weighs on a join of few pairs."""
    return ThreadPoolExecutor(threads, thread_name_prefix="settopk-pairs")


@njit(cache=True, nogil=True)
def _fill(lo, hi, offsets, row_key, row_len, overlap, doc_len, code, key, length, scores):
    """Rows ``lo .. hi - 1`` of :func:`pair_columns` (``code``: the score's index in SCORES)."""
    for r in range(lo, hi):
        rk = row_key[r]
        q = row_len[r]
        last_o, last_d, value = -1, -1, 0.0
        for p in range(offsets[r], offsets[r + 1]):
            key[p] = rk
            length[p] = q
            if overlap[p] != last_o or doc_len[p] != last_d:  # a row's pairs come in runs of one score
                last_o, last_d = overlap[p], doc_len[p]
                value = _score(code, np.float64(last_o), q, last_d)
            scores[p] = value


@njit(cache=True, nogil=True, inline="always")
def _score(code, o, q, d):
    """The score of overlap ``o`` (float64) between lengths ``q`` and ``d``."""
    if code == BRAUN_BLANQUET:
        return o / np.float64(max(q, d, 1))
    if code == JACCARD:
        return o / max(np.float64(q) + np.float64(d) - o, 1.0)
    if code == COSINE:
        return o / math.sqrt(max(np.float64(q) * np.float64(d), 1.0))
    if code == DICE:
        return (2.0 * o) / max(np.float64(q) + np.float64(d), 1.0)
    if code == OVERLAP:
        return o
    return o / max(np.float64(q), 1.0)  # containment
