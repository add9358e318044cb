"""Exact merge of shard-local top-k lists."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from settopk.kernels import DEFAULT_SCORE, TopK, order_candidates

__all__ = ["drop_own_docs", "merge_topk"]


def merge_topk(shard_lists: Sequence[TopK], query_len: np.ndarray, k: int, max_len: int, score: str = DEFAULT_SCORE) -> TopK:
    """Merge shard-local top-k lists into the global top-k.

    Each doc lives in exactly one shard, so the global top-k is the top-k of the
    union of the shard lists: concatenate and order exactly (score descending,
    then doc id ascending).

    Parameters
    ----------
    shard_lists : sequence of TopK
        One per shard, each of shape ``(n_queries, k_s)`` with ``-1`` padding.
    query_len : numpy.ndarray of int, shape (n_queries,)
        ``|q|`` per query.
    k : int
        Results per query in the merged list.
    max_len : int
        Bound on set sizes (fixes the score key scale).
    score : str
        The score the shard lists are ranked by (one of :data:`settopk.kernels.SCORES`).

    Returns
    -------
    TopK
        Shape ``(n_queries, k)``; ``-1`` ids pad rows when all shards together
        hold fewer than ``k`` docs.

    Raises
    ------
    ValueError
        If ``shard_lists`` is empty or the lists disagree on ``n_queries``.
    """
    if not shard_lists:
        raise ValueError("merge_topk needs at least one shard's results")
    n_queries = {p.doc_ids.shape[0] for p in shard_lists}
    if n_queries != {len(query_len)}:
        raise ValueError(f"shard results cover {sorted(n_queries)} queries, expected {len(query_len)}")
    return order_candidates(
        np.concatenate([p.doc_ids for p in shard_lists], axis=1),
        np.concatenate([p.overlap for p in shard_lists], axis=1),
        np.concatenate([p.doc_len for p in shard_lists], axis=1),
        query_len,
        k,
        max_len,
        score,
    )


def drop_own_docs(topk: TopK, own_ids: np.ndarray) -> TopK:
    """Leave each query's own doc out of its top-(k+1) list: the exact top-k of the others (self-join).

    Why this is exact: the ranking (score descending, then doc id ascending) is a strict
    total order on docs, and where a doc ranks against another depends only on the query
    and those two docs. So the ranking of the corpus without doc ``d`` is the corpus's
    ranking with ``d`` removed, and its first ``k`` docs are the first ``k + 1`` docs of
    the full ranking without ``d`` where ``d`` is among them, else the first ``k``. A row
    with ``-1`` padding lists every doc of the corpus, its own doc included, so it loses
    that doc and keeps its other docs and padding.

    Parameters
    ----------
    topk : TopK
        Shape ``(n_queries, k + 1)``: the exact top-(k+1) of every query, best first,
        ``-1`` padding last.
    own_ids : numpy.ndarray of int64, shape (n_queries,)
        Each query's own doc id (``>= 0``).

    Returns
    -------
    TopK
        Shape ``(n_queries, k)``: per row, the own doc removed where present, else the
        last entry; the order of the others is kept.

    Raises
    ------
    ValueError
        If ``topk`` has no column or ``own_ids`` does not have one id per row.
    """
    n_queries, width = topk.doc_ids.shape
    own_ids = np.asarray(own_ids, dtype=np.int64)
    if width < 1 or own_ids.shape != (n_queries,):
        raise ValueError(f"expected a top-(k+1) list of width >= 1 and one own id per row; found shape {topk.doc_ids.shape} "
                         f"and {own_ids.shape[0] if own_ids.ndim else 'a scalar'} own id(s)")
    own = topk.doc_ids == own_ids[:, None]  # at most one hit per row: a row lists each doc once
    column = np.where(own.any(axis=1), own.argmax(axis=1), width - 1)
    keep = np.ones((n_queries, width), dtype=bool)
    keep[np.arange(n_queries), column] = False
    return TopK(*(a[keep].reshape(n_queries, width - 1) for a in topk))  # row-major: each row keeps its order
