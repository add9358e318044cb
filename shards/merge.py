"""Exact merge of shard-local top-k lists."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from kernels import DEFAULT_SCORE, TopK, order_candidates

__all__ = ["merge_topk"]


def merge_topk(parts: Sequence[TopK], query_len: np.ndarray, k: int, max_len: int, score: str = DEFAULT_SCORE) -> TopK:
    """Merge shard-local top-k lists into the global top-k.

    Each doc lives in exactly one shard, so the global top-k is the top-k of the
    union of the shard lists: concatenate and order exactly (score descending,
    then doc id ascending).

    Parameters
    ----------
    parts : sequence of TopK
        One per shard, each of shape ``(n_queries, k_s)`` with ``-1`` padding.
    query_len : numpy.ndarray of int, shape (n_queries,)
        ``|q|`` per query.
    k : int
        Results per query in the merged list.
    max_len : int
        Bound on set sizes (fixes the score key scale).
    score : str
        The score the shard lists are ranked by (one of :data:`kernels.SCORES`).

    Returns
    -------
    TopK
        Shape ``(n_queries, k)``; ``-1`` ids pad rows when all shards together
        hold fewer than ``k`` docs.

    Raises
    ------
    ValueError
        If ``parts`` is empty or the parts disagree on ``n_queries``.
    """
    if not parts:
        raise ValueError("merge_topk needs at least one shard's results")
    n_queries = {p.doc_ids.shape[0] for p in parts}
    if n_queries != {len(query_len)}:
        raise ValueError(f"shard results cover {sorted(n_queries)} queries, expected {len(query_len)}")
    return order_candidates(
        np.concatenate([p.doc_ids for p in parts], axis=1),
        np.concatenate([p.overlap for p in parts], axis=1),
        np.concatenate([p.doc_len for p in parts], axis=1),
        query_len,
        k,
        max_len,
        score,
    )
