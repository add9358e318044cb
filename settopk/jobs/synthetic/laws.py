"""How synthetic sets are drawn: the random streams, the token id law and rows of distinct ids.

Exactness of the laws
---------------------
* Token ids of one set are the first ``length`` distinct values of an i.i.d.
  sequence drawn from the id law (successive sampling without replacement). The
  sequence is drawn in blocks and extended for the rare rows that come up short,
  so no row is ever conditioned on "enough distinct values in the first block".
* The id law is sampled with Walker's alias method: a uniform slot from
  ``Generator.integers`` (exact) and a 32-bit acceptance threshold, so each
  probability is exact up to ``2**-32 / vocab_size``.
* Vocabularies above 65536 ids (up to ``2**24``, ``uint32`` ids): a Zipf law is sampled by
  inverting its CDF (a binary search of a float64 uniform, exact up to float64 rounding of
  the CDF); building an alias table in Python would take minutes at ``2**24`` ids. The draw
  widths are computed from the law with its tail grouped in buckets (they only shape the
  random streams, not the law). Vocabularies up to 65536 are drawn exactly as before.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

import numpy as np

from settopk.kernels.sets import NARROW_VOCAB, SetBatch, token_dtype

from .spec import SyntheticSpec

__all__ = [
    "CHUNK_DRAWS",
    "IdLaw",
    "STREAM_DOC_IDS",
    "STREAM_DOC_LENGTHS",
    "STREAM_NEAR_IDS",
    "STREAM_PERMUTATION",
    "STREAM_QUERY_IDS",
    "STREAM_QUERY_PLAN",
    "distinct_rows",
    "edited_rows",
    "fill_lengths",
    "stream_rng",
]

# Draws handled per task (rows x draw width). Small enough that a task's temporaries
# stay in cache (~20 bytes per draw); large enough that Python overhead is noise.
# Part of the output's definition (chunks own random streams): do not tune without
# bumping GENERATOR_VERSION.
CHUNK_DRAWS = 1 << 18

# Spawn-key tags of the random streams (part of the output's definition).
STREAM_PERMUTATION, STREAM_DOC_LENGTHS, STREAM_DOC_IDS, STREAM_QUERY_PLAN, STREAM_QUERY_IDS, STREAM_NEAR_IDS = range(6)


def stream_rng(seed: int, *key: int) -> np.random.Generator:
    """The random stream of ``seed`` and spawn key ``key`` (a stream tag, then e.g. length and chunk)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


class IdLaw:
    """The token id law of a spec, with an alias table for fast exact sampling.

    Parameters
    ----------
    spec : SyntheticSpec
        Uses ``vocab_size``, ``id_dist``, ``zipf_s``, ``seed`` (the Zipf ranks' permutation)
        and ``max_len``.
    """

    def __init__(self, spec: SyntheticSpec) -> None:
        n = spec.vocab_size
        self.n = n
        self.dtype = token_dtype(n)  # uint16 up to 65536 ids, else uint32
        # Near-duplicate queries need their doc's ids plus up to ~20% fresh ones.
        self.max_need = min(n, spec.max_len + int(np.ceil(0.2 * spec.max_len)) + 1)
        if spec.id_dist == "uniform" or spec.zipf_s == 0.0:
            self.p = np.full(n, 1.0 / n)
            self.uniform = True
            return
        self.uniform = False
        ranks = np.arange(1, n + 1, dtype=np.float64)
        p_rank = ranks ** -spec.zipf_s
        p_rank /= p_rank.sum()
        # Without the permutation the frequent ids would be the small ones, which
        # real token ids are not, and which would bias anything sorted by id.
        perm = stream_rng(spec.seed, STREAM_PERMUTATION).permutation(n)
        self.p = np.empty(n)
        self.p[perm] = p_rank
        if n > NARROW_VOCAB:
            self.perm = perm.astype(np.uint32)
            self.cdf = np.cumsum(p_rank)
            return
        self._build_alias(self.p)

    def _build_alias(self, p: np.ndarray) -> None:
        n = self.n
        scaled = p * n
        alias = np.arange(n, dtype=np.int64)
        prob = np.ones(n)
        small = [int(i) for i in np.flatnonzero(scaled < 1.0)]
        large = [int(i) for i in np.flatnonzero(scaled >= 1.0)]
        scaled = scaled.tolist()
        while small and large:
            s, g = small.pop(), large[-1]
            prob[s] = scaled[s]
            alias[s] = g
            scaled[g] -= 1.0 - scaled[s]
            if scaled[g] < 1.0:
                small.append(large.pop())
        # Leftover slots have prob 1 up to rounding and alias[i] == i, so clamping
        # their threshold to 2**32 - 1 cannot change what they give.
        self.threshold = np.minimum(np.floor(prob * 2.0**32), 2.0**32 - 1).astype(np.uint32)
        # Slot i gives id i (accepted) or alias[i] (rejected): id | alias << 16, one gather.
        self.pair = np.arange(n, dtype=np.uint32) | (alias.astype(np.uint32) << 16)

    def sample(self, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        """I.i.d. ids of the law, array of ``shape`` (``self.dtype``: uint16, or uint32 above 65536 ids)."""
        size = shape[0] * shape[1]
        if self.uniform:
            # int32 draws are several times faster than uint16 ones in NumPy.
            return rng.integers(0, self.n, size=shape, dtype=np.int32).astype(self.dtype)
        if self.n > NARROW_VOCAB:  # inverse CDF over the ranks, then the ranks' permutation
            rank = np.searchsorted(self.cdf, rng.random(size) * self.cdf[-1], side="right")
            return self.perm[np.minimum(rank, self.n - 1)].reshape(shape)
        slot = rng.integers(0, self.n, size=size, dtype=np.int32)
        u = rng.integers(0, 2**32, size=size, dtype=np.uint32)
        # Rejected slots take the high half of `pair`: shift by 16 instead of a where().
        shift = (u >= self.threshold[slot]).view(np.uint8).astype(np.uint32)
        shift <<= 4
        out = self.pair[slot]
        out >>= shift
        return out.astype(np.uint16).reshape(shape)

    @functools.cached_property
    def _widths(self) -> np.ndarray:
        if self.n <= NARROW_VOCAB:
            return _draw_widths(self.p, self.max_need)
        return _draw_widths(*_bucketed(self.p), self.max_need)

    def width(self, need: int) -> int:
        """Draws per row so that a row rarely has fewer than ``need`` distinct ids."""
        w = self._widths
        return int(w[min(need, len(w) - 1)])

    def check(self) -> None:
        """Raise ValueError if sets of ``max_need`` distinct ids are impractical to draw."""
        self._widths


def _bucketed(p: np.ndarray, head: int = NARROW_VOCAB, buckets: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """``(values, weights)``: the ``head`` largest probabilities of ``p`` as they are, the rest as
    ``buckets`` bucket means of equal counts (the widths' sums over a 2**24-id law, cheaply)."""
    q = np.sort(p)[::-1]
    tail = q[head:]
    edges = np.linspace(0, len(tail), min(buckets, len(tail)) + 1).astype(np.int64)
    counts = np.diff(edges)
    sums = np.add.reduceat(tail, edges[:-1]) if len(tail) else np.zeros(0)
    return np.concatenate([q[:head], sums / counts]), np.concatenate([np.ones(head), counts.astype(np.float64)])


def _draw_widths(p: np.ndarray, *rest) -> np.ndarray:
    """``w[n]``: draws per row whose distinct count is rarely below ``n``.

    With ``d`` draws the distinct count has mean ``sum_i 1 - (1 - p_i)**d``; ``w[n]``
    is the smallest ``d`` (on a grid growing ~1.5% a step) whose mean minus 3.1
    standard deviations (bounded heuristically) reaches ``n``. Rows that still come
    up short are extended when drawn, so the widths only set the speed (and, being
    block sizes of the random streams, the exact output).

    Raises
    ------
    ValueError
        If ``64 * max_need + 1024`` draws hold fewer than ``max_need - 0.5``
        distinct ids on average (the tail of the law has too little mass).
    """
    weights, max_need = rest if len(rest) == 2 else (None, rest[0])  # (p, max_need) or (values, weights, max_need)
    widths = np.zeros(max_need + 1, dtype=np.int64)
    log_miss = np.log1p(-np.minimum(p, 1.0 - 1e-16))
    cap = 64 * max_need + 1024
    n, d, mean = 1, 0, 0.0
    while n <= max_need and d < cap:
        d = min(cap, d + max(1, d // 64))
        hit = -np.expm1(d * log_miss)  # P(id i among d draws) = 1 - (1 - p_i)**d
        if weights is not None:
            mean = float((weights * hit).sum())
            var = min(float((weights * hit * (1.0 - hit)).sum()), max(d - mean, 0.0))
            reach = round(mean - 3.1 * np.sqrt(var), 3)
            while n <= max_need and reach >= n:
                widths[n] = d
                n += 1
            continue
        mean = float(hit.sum())
        # Both are heuristic upper bounds of the variance of the distinct count:
        # independent occupancy (loose for few draws, where occupancies are strongly
        # negatively correlated) and Poisson repeats (loose when a head id repeats
        # surely). Misses only cost an extension round in distinct_rows.
        var = min(float((hit * (1.0 - hit)).sum()), max(d - mean, 0.0))
        # Rounded to 1e-3 so that last-bit differences of float sums across
        # platforms cannot move a width (widths shape the output).
        reach = round(mean - 3.1 * np.sqrt(var), 3)
        while n <= max_need and reach >= n:
            widths[n] = d
            n += 1
    if n <= max_need:
        if mean < max_need - 0.5:
            raise ValueError(
                f"the id law is too concentrated: {cap} draws hold {mean:.0f} < {max_need} distinct ids on average; "
                "lower zipf_s or max_len, or raise vocab_size"
            )
        widths[n:] = cap
    return widths


def _first_distinct_cut(draws: np.ndarray, need: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row, the first ``need`` distinct values in draw order.

    Parameters
    ----------
    draws : numpy.ndarray of uint16, uint32 (ids below 2**24) or int, shape (m, width)
    need : numpy.ndarray of int64, shape (m,)

    Returns
    -------
    vals : numpy.ndarray of int, shape (m, width)
        Each row's draws, ascending.
    pos : numpy.ndarray of int, shape (m, width)
        The draw position of each entry of ``vals``.
    keep : numpy.ndarray of bool, shape (m, width)
        Entries of ``vals`` that are selected (first occurrence of a value, and
        among the first ``need`` distinct values in draw order).
    short : numpy.ndarray of bool, shape (m,)
        Rows with fewer than ``need`` distinct values (their ``keep`` is incomplete).
    """
    m, width = draws.shape
    bits = max(1, (width - 1).bit_length())
    id_bits = 24 if draws.dtype == np.uint32 else 16
    dtype = np.int32 if id_bits + bits <= 31 else np.int64
    # value << bits | position: one row sort groups equal values, and puts each
    # value's first draw first within its group.
    keys = draws.astype(dtype)
    keys <<= bits
    keys |= np.arange(width, dtype=dtype)
    keys.sort(axis=1)
    vals = keys >> bits
    pos = keys
    pos &= (1 << bits) - 1
    first = np.empty((m, width), dtype=bool)
    first[:, 0] = True
    np.not_equal(vals[:, 1:], vals[:, :-1], out=first[:, 1:])
    # The need-th smallest first-occurrence position is where each row's cut lies.
    big = np.iinfo(dtype).max
    first_pos = np.where(first, pos, big)
    first_pos.sort(axis=1)
    n_distinct = first.sum(axis=1)
    short = n_distinct < need
    idx = np.minimum(need, width) - 1
    cut = np.take_along_axis(first_pos, idx[:, None], axis=1)
    keep = first & (pos <= cut)
    return vals, pos, keep, short


def distinct_rows(
    rng: np.random.Generator,
    law: IdLaw,
    need: np.ndarray,
    out_len: int,
    prefix: np.ndarray | None = None,
    drop: np.ndarray | None = None,
) -> np.ndarray:
    """Rows of distinct ids: ``prefix`` then i.i.d. draws, first ``need`` distinct, minus ``drop``.

    Parameters
    ----------
    rng : numpy.random.Generator
    law : IdLaw
    need : numpy.ndarray of int64, shape (m,)
        Distinct values to take per row, counting the prefix's.
    out_len : int
        Ids per output row: ``need - drop.sum(axis=1)``, the same for every row.
    prefix : numpy.ndarray of uint16, shape (m, p), optional
        Distinct ids that come first in each row's sequence (a source doc).
    drop : numpy.ndarray of bool, shape (m, p), optional
        Prefix entries to leave out of the output (they still block repeats).

    Returns
    -------
    numpy.ndarray of uint16, shape (m, out_len)
        Each row ascending and distinct.

    Raises
    ------
    RuntimeError
        If a row cannot reach ``need`` distinct ids in ``2**24`` draws (cannot
        happen for a law that passed :meth:`IdLaw.check`, barring astronomically
        bad luck).
    """
    m = len(need)
    n_pre = 0 if prefix is None else prefix.shape[1]
    out = np.empty((m, out_len), dtype=law.dtype)
    if m == 0:
        return out
    rows = np.arange(m)
    draws = law.sample(rng, (m, max(1, law.width(int(need.max())) - n_pre // 2)))
    while True:
        seq = draws if prefix is None else np.concatenate([prefix[rows], draws], axis=1)
        vals, pos, keep, short = _first_distinct_cut(seq, need[rows])
        if drop is not None:
            dropped = np.zeros(seq.shape, dtype=bool)
            dropped[:, :n_pre] = drop[rows]
            keep &= ~np.take_along_axis(dropped, pos, axis=1)
        done = ~short
        if done.all():
            out[rows] = vals[keep].reshape(len(rows), out_len)
            return out
        out[rows[done]] = vals[done][keep[done]].reshape(-1, out_len)
        rows = rows[short]
        if draws.shape[1] >= 1 << 24:
            raise RuntimeError(
                f"could not draw {int(need[rows].max())} distinct ids from the id law in {draws.shape[1]} draws; "
                "the law is too concentrated for this vocab_size and max_len"
            )
        # Extend the same sequences (not redraw them), so short rows stay exact.
        draws = np.concatenate([draws[short], law.sample(rng, (len(rows), draws.shape[1]))], axis=1)


def edited_rows(rng: np.random.Generator, law: IdLaw, source: np.ndarray, n_fresh: np.ndarray) -> np.ndarray:
    """Rows of ``source`` with ``n_fresh`` ids each replaced by fresh ids of the law that the row does not hold.

    A seeded random subset of ``n_fresh[i]`` positions of row ``i`` is dropped, and the first
    ``n_fresh[i]`` distinct draws of the law outside the row take their place (the dropped ids
    still block repeats), so row ``i`` keeps its length and shares exactly
    ``length - n_fresh[i]`` ids with its source.

    Parameters
    ----------
    rng : numpy.random.Generator
    law : IdLaw
    source : numpy.ndarray of uint16, shape (m, length)
        Rows of distinct ids, all of one length.
    n_fresh : numpy.ndarray of int64, shape (m,)
        Ids to replace per row, in ``[0, length]``.

    Returns
    -------
    numpy.ndarray of uint16, shape (m, length)
        Each row ascending and distinct.
    """
    m, length = source.shape
    order = np.argsort(rng.random((m, length)), axis=1)
    drop = np.zeros((m, length), dtype=bool)
    np.put_along_axis(drop, order, np.arange(length) < n_fresh[:, None], axis=1)
    return distinct_rows(rng, law, length + n_fresh, length, prefix=source, drop=drop)


def fill_lengths(
    lengths: np.ndarray, law: IdLaw, seed: int, stream: int, workers: int | None
) -> SetBatch:
    """Random sets with the given lengths, each group of equal lengths in chunks.

    Parameters
    ----------
    lengths : numpy.ndarray of int64, shape (n_sets,)
    law : IdLaw
    seed, stream : int
        Chunk ``j`` of length ``l`` draws from ``stream_rng(seed, stream, l, j)``.
    workers : int, optional
        Threads (default: the usable CPUs, at most 16); the output does not depend on it.

    Returns
    -------
    SetBatch
        ``n_sets`` sets of distinct ascending ids, set ``i`` of length ``lengths[i]``.
    """
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.empty(offsets[-1], dtype=law.dtype)
    order = np.argsort(lengths, kind="stable")
    counts = np.bincount(lengths, minlength=1)
    starts = np.concatenate([[0], np.cumsum(counts)])

    def tasks() -> Iterator[Callable[[], None]]:
        for length in range(1, len(counts)):
            group = order[starts[length] : starts[length + 1]]
            if len(group) == 0:
                continue
            per_chunk = max(1, CHUNK_DRAWS // law.width(length))
            for j, lo in enumerate(range(0, len(group), per_chunk)):
                yield functools.partial(_fill_chunk, tokens, offsets, group[lo : lo + per_chunk], length, law, seed, stream, j)

    _run(tasks(), workers)
    return SetBatch(offsets, tokens)


def _fill_chunk(tokens, offsets, rows, length, law, seed, stream, j) -> None:
    rng = stream_rng(seed, stream, length, j)
    need = np.full(len(rows), length, dtype=np.int64)
    ids = distinct_rows(rng, law, need, length)
    tokens[offsets[rows][:, None] + np.arange(length)] = ids


def _run(tasks: Iterator[Callable[[], None]], workers: int | None) -> None:
    workers = _default_workers() if workers is None else workers
    if workers <= 1:
        for t in tasks:
            t()
        return
    # NumPy's RNG fills, sorts and ufuncs release the GIL, so threads scale; tasks
    # write disjoint slices of preallocated arrays and own their random streams.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(t) for t in tasks]:
            f.result()


def _default_workers() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(n, 16))
