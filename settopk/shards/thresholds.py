"""Threshold exchange between shards: each query's k-th best score from its home shard becomes a
floor for the other shards.

A query's *home shard* is the one whose length range holds ``|q|``: docs of
about the query's length are the ones that can score highest, so the home
shard's k-th best key is usually close to the global one. It is always a lower
bound on it (the home shard's docs are a subset of the corpus), so another
shard only needs to return its docs whose key is at least that floor; a shard
whose whole length range cannot reach the floor skips the query. Ties at the
floor are kept (a doc with the same key and a lower id can still enter the
top-k), so results stay exact.

The search of a batch then takes two rounds: every shard searches its home
queries with no floor, then every shard searches the batch's other queries with
the floors taken from the first round. :func:`scatter_rounds` puts both rounds
back into one ``(n_queries, k)`` list per shard for :func:`settopk.shards.merge_topk`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from settopk.kernels import DEFAULT_SCORE, TopK, empty_topk, score_key

from .plan import ShardSpec

__all__ = ["home_shards", "floors_from", "split_rounds", "scatter_rounds"]


def home_shards(plan: Sequence[ShardSpec], query_len: np.ndarray) -> np.ndarray:
    """Index in ``plan`` of the shard whose length range holds each query's length.

    Parameters
    ----------
    plan : sequence of ShardSpec
        Contiguous ranges in length order covering ``[0, max_len]`` (as :func:`plan_shards` makes).
    query_len : numpy.ndarray of int, shape (n_queries,)

    Returns
    -------
    numpy.ndarray of int64, shape (n_queries,)
    """
    starts = np.array([spec.min_len for spec in plan], dtype=np.int64)
    return np.clip(np.searchsorted(starts, np.asarray(query_len, dtype=np.int64), side="right") - 1, 0, len(plan) - 1)


def split_rounds(plan: Sequence[ShardSpec], query_len: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Rows each shard searches in the first round (its home queries) and in the second (the others).

    Returns
    -------
    (list of numpy.ndarray, list of numpy.ndarray)
        Per shard, int64 row indices into the batch, ascending.
    """
    home = home_shards(plan, query_len)
    every = np.arange(len(home), dtype=np.int64)
    first = [every[home == s] for s in range(len(plan))]
    second = [every[home != s] for s in range(len(plan))]
    return first, second


def floors_from(results: Sequence[TopK], rows: Sequence[np.ndarray], query_len: np.ndarray, k: int, max_len: int,
                score: str = DEFAULT_SCORE) -> np.ndarray:
    """Floor key of each query of a batch: the key of the k-th entry of its first-round result.

    Parameters
    ----------
    results : sequence of TopK
        First-round results, ``results[i]`` of shape ``(len(rows[i]), k)``.
    rows : sequence of numpy.ndarray of int
        The batch rows each result covers; each row at most once overall.
    query_len : numpy.ndarray of int, shape (n_queries,)
        ``|q|`` of every query of the batch.
    k : int
    max_len : int
        Fixes the key scale.
    score : str
        The score the results are ranked by (one of :data:`settopk.kernels.SCORES`); the floors are its keys.

    Returns
    -------
    numpy.ndarray of int64, shape (n_queries,)
        ``-1`` (no floor) where a query had no first-round result or fewer than ``k`` entries.
    """
    floors = np.full(len(query_len), -1, dtype=np.int64)
    for result, row in zip(results, rows):
        row = np.asarray(row, dtype=np.int64)
        if len(row) == 0:
            continue
        if result.doc_ids.shape != (len(row), k):
            raise ValueError(f"a first-round result has shape {result.doc_ids.shape}, expected {(len(row), k)}")
        full = result.doc_ids[:, k - 1] >= 0
        keys = score_key(result.overlap[:, k - 1], query_len[row], result.doc_len[:, k - 1], max_len, score)
        floors[row[full]] = keys[full]
    return floors


def scatter_rounds(n_queries: int, k: int, rounds: Sequence[tuple[np.ndarray, TopK]]) -> TopK:
    """One shard's ``(n_queries, k)`` result from its per-round results on subsets of rows.

    Parameters
    ----------
    n_queries, k : int
    rounds : sequence of (rows, TopK)
        Disjoint row sets and their results (``TopK`` of shape ``(len(rows), k)``).

    Returns
    -------
    TopK
        Shape ``(n_queries, k)``; rows no round covers are padding (``-1`` ids).
    """
    if len(rounds) == 1 and len(rounds[0][0]) == n_queries and np.array_equal(rounds[0][0], np.arange(n_queries)):
        return rounds[0][1]  # one round covered every row in order: nothing to scatter
    out = empty_topk(n_queries, k)
    for rows, result in rounds:
        for name in TopK._fields:
            getattr(out, name)[rows] = getattr(result, name)
    return out
