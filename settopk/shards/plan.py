"""Shard planning: contiguous doc-length ranges balanced by search cost (token count by default)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["ShardSpec", "plan_shards", "plan_shards_from_counts"]


@dataclass(frozen=True)
class ShardSpec:
    """One length-bucket shard: the docs whose length lies in ``[min_len, max_len]``.

    Attributes
    ----------
    shard_id : int
        Position in the plan, from 0.
    min_len, max_len : int
        Inclusive range of doc lengths (ids per doc after de-duplication).
    n_docs, n_tokens : int
        Docs and token ids the plan expects the shard to hold.
    """

    shard_id: int
    min_len: int
    max_len: int
    n_docs: int
    n_tokens: int

    def to_dict(self) -> dict:
        """Plain-data copy, for manifests and logs."""
        return asdict(self)


def _fits(weights: np.ndarray, cap: int, n_shards: int) -> bool:
    shards, load = 1, 0
    for w in weights:
        if load + w > cap:
            shards, load = shards + 1, 0
        load += w
    return shards <= n_shards


def _boundaries(weights: np.ndarray, n_shards: int) -> list[int]:
    """Start index of each shard in the optimal contiguous partition (min of max load)."""
    lo, hi = int(weights.max()), int(weights.sum())
    while lo < hi:  # binary search on the largest load a greedy packing can meet
        mid = (lo + hi) // 2
        if _fits(weights, mid, n_shards):
            hi = mid
        else:
            lo = mid + 1
    starts, load = [0], 0
    for i, w in enumerate(weights):
        if load + w > lo:
            starts.append(i)
            load = 0
        load += w
    # Splitting a part never raises the maximum, so use every shard we may.
    while len(starts) < n_shards:
        ends = starts[1:] + [len(weights)]
        loads = [(weights[s:e].sum(), s, e) for s, e in zip(starts, ends) if e - s > 1]
        if not loads:
            break
        _, s, e = max(loads)
        cut = s + 1 + int(np.searchsorted(np.cumsum(weights[s:e]), weights[s:e].sum() / 2))
        starts.append(min(max(cut, s + 1), e - 1))
        starts.sort()
    return starts


def plan_shards(doc_lengths: np.ndarray, n_shards: int, max_len: int) -> list[ShardSpec]:
    """Split docs into at most ``n_shards`` contiguous length ranges of balanced token count.

    The ranges cover ``[0, max_len]`` without gaps, so every doc belongs to
    exactly one shard. A single length is never split, so there are at most as
    many shards as distinct lengths; empty shards are never planned. The
    partition minimises the largest shard's token count (binary search on that
    load with greedy packing, optimal for contiguous partitions).

    Parameters
    ----------
    doc_lengths : numpy.ndarray of int, shape (n_docs,)
        Length of every doc of the corpus.
    n_shards : int
        Most shards wanted, ``>= 1``.
    max_len : int
        Largest length the run accepts; the last shard's range ends there.

    Returns
    -------
    list of ShardSpec
        Between 1 and ``n_shards`` shards in length order (empty list for an
        empty corpus).

    Raises
    ------
    ValueError
        If ``n_shards < 1`` or a length is negative or above ``max_len``.
    """
    doc_lengths = np.asarray(doc_lengths, dtype=np.int64)
    if len(doc_lengths) and (doc_lengths.min() < 0 or doc_lengths.max() > max_len):
        raise ValueError(f"doc lengths must lie in [0, {max_len}]")
    return plan_shards_from_counts(np.bincount(doc_lengths, minlength=max_len + 1), n_shards)


def plan_shards_from_counts(length_counts: np.ndarray, n_shards: int, doc_cost: np.ndarray | None = None) -> list[ShardSpec]:
    """:func:`plan_shards` from a length histogram (what the readers report; the driver
    never holds the corpus).

    Parameters
    ----------
    length_counts : numpy.ndarray of int, shape (max_len + 1,)
        Docs of each length ``0 .. max_len``.
    n_shards : int
        Most shards wanted, ``>= 1``.
    doc_cost : numpy.ndarray of int, shape (max_len + 1,), optional
        Search work of one doc of each length, balanced instead of token counts (default:
        the length itself). On the GPU a doc costs its ids padded to a multiple of 8 plus a
        per-doc overhead (:func:`settopk.kernels.cost.cupy_search_cost_per_doc`), so short docs cost more
        than their ids.

    Returns
    -------
    list of ShardSpec
        As :func:`plan_shards`; the last range ends at ``max_len = len(length_counts) - 1``.

    Raises
    ------
    ValueError
        If ``n_shards < 1``, the histogram is empty or has negative counts.
    """
    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, found {n_shards}")
    counts = np.asarray(length_counts, dtype=np.int64)
    if counts.ndim != 1 or len(counts) == 0 or (counts < 0).any():
        raise ValueError("length_counts must be a non-empty 1-D array of counts >= 0")
    max_len = len(counts) - 1
    present = np.flatnonzero(counts)
    if len(present) == 0:
        return []
    # Weight by tokens (or the given cost); empty docs weigh one, so a corpus of only empty docs still plans.
    cost = present if doc_cost is None else np.asarray(doc_cost, dtype=np.int64)[present]
    weights = np.maximum(cost * counts[present], 1)
    starts = _boundaries(weights, min(n_shards, len(present)))
    ends = starts[1:] + [len(present)]
    specs = []
    for shard_id, (s, e) in enumerate(zip(starts, ends)):
        lo = 0 if shard_id == 0 else int(present[s])
        hi = max_len if e == len(present) else int(present[e]) - 1
        lens = present[s:e]
        specs.append(
            ShardSpec(shard_id, lo, hi, int(counts[lens].sum()), int((lens * counts[lens]).sum()))
        )
    return specs
