"""The result type every search backend returns, and the exact ordering rule."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .keys import DEFAULT_SCORE, score_key

__all__ = ["TopK", "empty_topk", "order_candidates"]


class TopK(NamedTuple):
    """Top-k lists for a batch of queries, best first (host memory).

    Attributes
    ----------
    doc_ids : numpy.ndarray of int64, shape (n_queries, k)
        Doc ids; ``-1`` pads a row where fewer than ``k`` docs were searched.
    overlap : numpy.ndarray of int16, shape (n_queries, k)
        ``|q ∩ d|``; 0 where ``doc_ids == -1``.
    doc_len : numpy.ndarray of int16, shape (n_queries, k)
        ``|d|``; 0 where ``doc_ids == -1``.

    Rows are ordered by the search's score (Braun-Blanquet unless another was
    asked for) descending, then doc id ascending; padding comes last.
    """

    doc_ids: np.ndarray
    overlap: np.ndarray
    doc_len: np.ndarray


def empty_topk(n_queries: int, k: int) -> TopK:
    """All-padding :class:`TopK` of shape ``(n_queries, k)``."""
    return TopK(
        np.full((n_queries, k), -1, dtype=np.int64),
        np.zeros((n_queries, k), dtype=np.int16),
        np.zeros((n_queries, k), dtype=np.int16),
    )


def order_candidates(doc_ids, overlap, doc_len, query_len, k: int, max_len: int, score: str = DEFAULT_SCORE) -> TopK:
    """Exact top-k of candidate lists, row by row.

    Parameters
    ----------
    doc_ids : numpy.ndarray of int64, shape (n_queries, n_candidates)
        Candidate doc ids, ``-1`` for an unused slot. Each real id appears at most
        once per row.
    overlap, doc_len : numpy.ndarray of int, shape (n_queries, n_candidates)
        Overlap and doc length of each candidate.
    query_len : numpy.ndarray of int, shape (n_queries,)
        ``|q|`` per row.
    k : int
        Number of results per row.
    max_len : int
        Bound on set sizes (fixes the key scale).
    score : str
        One of :data:`settopk.kernels.SCORES`: what the rows are ranked by.

    Returns
    -------
    TopK
        Shape ``(n_queries, k)``, ordered by score descending then doc id ascending.

    Raises
    ------
    ValueError
        If ``score`` is unknown or ``max_len`` out of its range (:func:`settopk.kernels.key_scale`).
    """
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    n_queries, n_cand = doc_ids.shape
    out = empty_topk(n_queries, k)
    if n_cand == 0:
        return out
    key = score_key(overlap, np.asarray(query_len)[:, None], doc_len, max_len, score)
    valid = doc_ids >= 0
    order = _best_first(key, doc_ids, valid, k)
    take = np.take_along_axis
    width = order.shape[1]
    ok = take(valid, order, 1)
    out.doc_ids[:, :width] = np.where(ok, take(doc_ids, order, 1), -1)
    out.overlap[:, :width] = np.where(ok, take(np.asarray(overlap), order, 1), 0)
    out.doc_len[:, :width] = np.where(ok, take(np.asarray(doc_len), order, 1), 0)
    return out


def _best_first(key: np.ndarray, doc_ids: np.ndarray, valid: np.ndarray, k: int) -> np.ndarray:
    """Column order of each row's ``k`` best valid candidates (key descending, then id ascending),
    invalid slots last; shape ``(n_queries, min(k, n_candidates))``.

    Where ``(largest key - key, doc id)`` packs into one int64 (key bits + id bits <= 62), one
    integer per candidate orders it exactly: a partition picks the best ``k``, a sort of those
    orders them (much faster than a three-key lexsort of every candidate). Otherwise the
    lexsort.
    """
    width = min(k, key.shape[1])
    if valid.any():
        key = key.astype(np.int64)
        top = int(key[valid].max())
        id_bits = int(doc_ids[valid].max()).bit_length()
        if max(top, 1).bit_length() + id_bits <= 62 and int(key[valid].min()) >= 0:
            packed = np.where(valid, ((top - key) << id_bits) | np.where(valid, doc_ids, 0), np.iinfo(np.int64).max)
            best = np.argpartition(packed, width - 1, axis=1)[:, :width] if width < key.shape[1] else np.arange(
                key.shape[1])[None, :].repeat(key.shape[0], 0)
            return np.take_along_axis(best, np.argsort(np.take_along_axis(packed, best, 1), axis=1), 1)
    # lexsort: last key is primary. Invalid slots sort last, then key descending, then id ascending.
    return np.lexsort((doc_ids, -key.astype(np.int64), ~valid), axis=1)[:, :k]
