"""Synthetic corpus shaped like the STI2 competition data, generated once into a cache.

Docs get lengths from the shipped STI2 doc length histogram and distinct token ids
from a Zipf (or uniform) law over the vocabulary. Half of the queries (by default)
are near-duplicates of random docs, the rest are random sets shaped like the docs.

Everything is a pure function of a :class:`SyntheticSpec`: the random streams are
derived from ``spec.seed`` with :class:`numpy.random.SeedSequence` spawn keys per
(purpose, length, chunk), so the output is the same on every run and for any
number of worker threads. The integer streams of NumPy's ``Generator`` are
platform-independent; the few float computations that shape the output (Zipf
probabilities, block widths) are rounded or thresholded so that last-bit
differences of another platform's math library are very unlikely to matter.

Exactness of the laws
---------------------
* Token ids of one set are the first ``length`` distinct values of an i.i.d.
  sequence drawn from the id law (successive sampling without replacement). The
  sequence is drawn in blocks and extended for the rare rows that come up short,
  so no row is ever conditioned on "enough distinct values in the first block".
* The id law is sampled with Walker's alias method: a uniform slot from
  ``Generator.integers`` (exact) and a 32-bit acceptance threshold, so each
  probability is exact up to ``2**-32 / vocab_size``.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import io
import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from kernels.sets import SetBatch

__all__ = [
    "GENERATOR_VERSION",
    "STI2_N_DOCS",
    "SyntheticSpec",
    "length_histogram",
    "generate_docs",
    "generate_queries",
    "write_parquet",
    "ensure_synthetic",
    "cache_name",
    "query_ids",
]

#: Bump whenever a change alters the output for an unchanged spec: it is part of the
#: cache key, so stale cached corpora are never reused.
GENERATOR_VERSION = 1

#: Number of docs of the STI2 competition corpus (the histogram's total).
STI2_N_DOCS = 7_853_052

HISTOGRAM_RESOURCE = "sti2_doc_length_histogram.csv"

# Near-duplicate queries keep a uniform share in [low, high) of their source doc.
NEAR_DUP_KEEP = (0.80, 0.95)

# Draws handled per task (rows x draw width). Small enough that a task's temporaries
# stay in cache (~20 bytes per draw); large enough that Python overhead is noise.
# Part of the output's definition (chunks own random streams): do not tune without
# bumping GENERATOR_VERSION.
_CHUNK_DRAWS = 1 << 18

# Spawn-key tags of the random streams.
_S_PERMUTATION, _S_DOC_LENGTHS, _S_DOC_IDS, _S_QUERY_PLAN, _S_QUERY_IDS, _S_NEAR_IDS = range(6)

# Rows parquet files are written in per batch (and per row group).
_WRITE_BATCH_ROWS = 1 << 18  # also the Parquet row group: readers decode row groups in parallel


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate; the output is a pure function of these fields.

    Attributes
    ----------
    n_docs : int
        Number of docs, ``>= 1``. With :data:`STI2_N_DOCS` the doc lengths are
        exactly the histogram's (shuffled); otherwise they are drawn from it.
    n_queries : int
        Number of queries, ``>= 0``.
    seed : int
        Seed of every random stream, ``>= 0``.
    vocab_size : int
        Token ids lie in ``[0, vocab_size)``; ``max_len <= vocab_size <= 65536``.
    id_dist : str
        ``"zipf"``: ``p(rank r) ∝ 1 / r**zipf_s``, ranks mapped to ids through a
        seeded permutation; ``"uniform"``: every id equally likely.
    zipf_s : float
        Zipf exponent, in ``[0, 10]`` (ignored by ``"uniform"``).
    near_duplicate_fraction : float
        Share of queries, in ``[0, 1]``, made by perturbing a random non-empty doc.
    max_len : int
        Most ids in a set, in ``[1, 65536]``; the histogram is cut at ``max_len``
        (and renormalised) when it is below 128.

    Raises
    ------
    ValueError
        If a field is out of range.
    """

    n_docs: int
    n_queries: int
    seed: int = 0
    vocab_size: int = 50001
    id_dist: str = "zipf"
    zipf_s: float = 1.0
    near_duplicate_fraction: float = 0.5
    max_len: int = 128

    def __post_init__(self) -> None:
        problems = []
        if self.n_docs < 1:
            problems.append(f"n_docs must be >= 1, found {self.n_docs}")
        if self.n_queries < 0:
            problems.append(f"n_queries must be >= 0, found {self.n_queries}")
        if self.seed < 0:
            problems.append(f"seed must be >= 0, found {self.seed}")
        if self.id_dist not in ("zipf", "uniform"):
            problems.append(f"id_dist must be 'zipf' or 'uniform', found {self.id_dist!r}")
        if not 0.0 <= self.zipf_s <= 10.0:
            problems.append(f"zipf_s must be in [0, 10], found {self.zipf_s}")
        if not 0.0 <= self.near_duplicate_fraction <= 1.0:
            problems.append(f"near_duplicate_fraction must be in [0, 1], found {self.near_duplicate_fraction}")
        if not 1 <= self.max_len <= 65536:
            problems.append(f"max_len must be in [1, 65536], found {self.max_len}")
        if not self.max_len <= self.vocab_size <= 65536:
            problems.append(f"vocab_size must be in [max_len, 65536] = [{self.max_len}, 65536], found {self.vocab_size}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def n_near_duplicates(self) -> int:
        """Number of near-duplicate queries (the first ones)."""
        return int(round(self.n_queries * self.near_duplicate_fraction))


# --------------------------------------------------------------------------- lengths


@functools.lru_cache(maxsize=1)
def _histogram_cached() -> np.ndarray:
    # `configs` and `jobs` are sibling packages (in a checkout and when installed);
    # reading the file directly avoids importing `configs` (and its YAML deps).
    sibling = Path(__file__).resolve().parent.parent / "configs" / HISTOGRAM_RESOURCE
    if sibling.is_file():
        text = sibling.read_text()
    else:
        text = resources.files("configs").joinpath(HISTOGRAM_RESOURCE).read_text()
    lengths, counts = [], []
    for row in csv.reader(io.StringIO(text)):
        if not row or not row[0].strip():
            continue
        try:
            length, count = int(row[0]), int(row[1])
        except ValueError:
            continue  # a header line such as "length,count"
        lengths.append(length)
        counts.append(count)
    if not lengths or min(lengths) < 0 or min(counts) < 0 or len(set(lengths)) != len(lengths):
        raise ValueError(f"configs/{HISTOGRAM_RESOURCE}: expected distinct 'length,count' rows of non-negative ints")
    hist = np.zeros(max(lengths) + 1, dtype=np.int64)
    hist[lengths] = counts
    hist.setflags(write=False)
    return hist


def length_histogram() -> np.ndarray:
    """STI2 doc length histogram.

    Returns
    -------
    numpy.ndarray of int64, shape (129,)
        ``hist[l]`` is the number of STI2 docs with ``l`` distinct ids; it sums to
        :data:`STI2_N_DOCS`. A fresh, writable copy.

    Raises
    ------
    ValueError
        If ``configs/sti2_doc_length_histogram.csv`` has malformed rows.
    """
    return _histogram_cached().copy()


def _length_probabilities(max_len: int) -> np.ndarray:
    hist = _histogram_cached()[: max_len + 1].astype(np.float64)
    return hist / hist.sum()


def _draw_lengths(rng: np.random.Generator, n: int, max_len: int) -> np.ndarray:
    hist = _histogram_cached()
    if n == hist.sum() and len(hist) - 1 <= max_len:
        # The exact STI2 multiset of lengths, in a seeded order.
        lengths = np.repeat(np.arange(len(hist), dtype=np.int64), hist)
        rng.shuffle(lengths)
        return lengths
    p = _length_probabilities(max_len)
    return rng.choice(len(p), size=n, p=p).astype(np.int64)


# --------------------------------------------------------------------------- id law


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


class _IdLaw:
    """The token id law of a spec, with an alias table for fast exact sampling."""

    def __init__(self, spec: SyntheticSpec) -> None:
        n = spec.vocab_size
        self.n = n
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
        perm = _rng(spec.seed, _S_PERMUTATION).permutation(n)
        self.p = np.empty(n)
        self.p[perm] = p_rank
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
        """I.i.d. ids of the law, uint16 array of ``shape``."""
        size = shape[0] * shape[1]
        if self.uniform:
            # int32 draws are several times faster than uint16 ones in NumPy.
            return rng.integers(0, self.n, size=shape, dtype=np.int32).astype(np.uint16)
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
        return _draw_widths(self.p, self.max_need)

    def width(self, need: int) -> int:
        """Draws per row so that a row rarely has fewer than ``need`` distinct ids."""
        w = self._widths
        return int(w[min(need, len(w) - 1)])

    def check(self) -> None:
        """Raise ValueError if sets of ``max_need`` distinct ids are impractical to draw."""
        self._widths


def _draw_widths(p: np.ndarray, max_need: int) -> np.ndarray:
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
    widths = np.zeros(max_need + 1, dtype=np.int64)
    log_miss = np.log1p(-np.minimum(p, 1.0 - 1e-16))
    cap = 64 * max_need + 1024
    n, d, mean = 1, 0, 0.0
    while n <= max_need and d < cap:
        d = min(cap, d + max(1, d // 64))
        hit = -np.expm1(d * log_miss)  # P(id i among d draws) = 1 - (1 - p_i)**d
        mean = float(hit.sum())
        # Both are heuristic upper bounds of the variance of the distinct count:
        # independent occupancy (loose for few draws, where occupancies are strongly
        # negatively correlated) and Poisson repeats (loose when a head id repeats
        # surely). Misses only cost an extension round in _distinct_rows.
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


# --------------------------------------------------------------------------- distinct rows


def _first_distinct_cut(draws: np.ndarray, need: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row, the first ``need`` distinct values in draw order.

    Parameters
    ----------
    draws : numpy.ndarray of uint16 or int, shape (m, width)
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
    dtype = np.int32 if 16 + bits <= 31 else np.int64
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


def _distinct_rows(
    rng: np.random.Generator,
    law: _IdLaw,
    need: np.ndarray,
    out_len: int,
    prefix: np.ndarray | None = None,
    drop: np.ndarray | None = None,
) -> np.ndarray:
    """Rows of distinct ids: ``prefix`` then i.i.d. draws, first ``need`` distinct, minus ``drop``.

    Parameters
    ----------
    rng : numpy.random.Generator
    law : _IdLaw
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
        happen for a law that passed :meth:`_IdLaw.check`, barring astronomically
        bad luck).
    """
    m = len(need)
    n_pre = 0 if prefix is None else prefix.shape[1]
    out = np.empty((m, out_len), dtype=np.uint16)
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


def _fill_lengths(
    lengths: np.ndarray, law: _IdLaw, seed: int, stream: int, workers: int | None
) -> SetBatch:
    """Random sets with the given lengths, each group of equal lengths in chunks."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.empty(offsets[-1], dtype=np.uint16)
    order = np.argsort(lengths, kind="stable")
    counts = np.bincount(lengths, minlength=1)
    starts = np.concatenate([[0], np.cumsum(counts)])

    def tasks() -> Iterator[Callable[[], None]]:
        for length in range(1, len(counts)):
            group = order[starts[length] : starts[length + 1]]
            if len(group) == 0:
                continue
            per_chunk = max(1, _CHUNK_DRAWS // law.width(length))
            for j, lo in enumerate(range(0, len(group), per_chunk)):
                yield functools.partial(_fill_chunk, tokens, offsets, group[lo : lo + per_chunk], length, law, seed, stream, j)

    _run(tasks(), workers)
    return SetBatch(offsets, tokens)


def _fill_chunk(tokens, offsets, rows, length, law, seed, stream, j) -> None:
    rng = _rng(seed, stream, length, j)
    need = np.full(len(rows), length, dtype=np.int64)
    ids = _distinct_rows(rng, law, need, length)
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


# --------------------------------------------------------------------------- public API


def generate_docs(spec: SyntheticSpec, *, workers: int | None = None) -> SetBatch:
    """The synthetic corpus of a spec.

    Parameters
    ----------
    spec : SyntheticSpec
    workers : int, optional
        Threads to use (default: the usable CPUs, at most 16). The output does
        not depend on it.

    Returns
    -------
    SetBatch
        ``n_docs`` sets; set ``i`` is doc ``i``. Lengths follow the STI2 histogram
        (exactly when ``n_docs == STI2_N_DOCS`` and ``max_len >= 128``, else drawn
        from it); ids are distinct, ascending, in ``[0, vocab_size)``.

    Raises
    ------
    ValueError
        If the id law is too concentrated to draw sets of ``max_len`` distinct
        ids in reasonable time (e.g. a large ``zipf_s`` with a small vocab).
    """
    law = _IdLaw(spec)
    law.check()
    lengths = _draw_lengths(_rng(spec.seed, _S_DOC_LENGTHS), spec.n_docs, spec.max_len)
    return _fill_lengths(lengths, law, spec.seed, _S_DOC_IDS, workers)


def generate_queries(spec: SyntheticSpec, docs: SetBatch, *, workers: int | None = None) -> SetBatch:
    """The queries of a spec: near-duplicates of docs first, then random sets.

    Query ``i < spec.n_near_duplicates`` copies a random non-empty doc, keeps a
    uniform share in [0.80, 0.95) of its ids (rounded, at least one) and replaces
    the others with fresh ids from the id law that are not in that doc, so it has
    the doc's length and overlaps it in exactly the kept ids. The remaining
    queries are random sets with lengths drawn from the histogram, like docs.

    Parameters
    ----------
    spec : SyntheticSpec
    docs : SetBatch
        The corpus of ``spec`` (from :func:`generate_docs`), shape (n_docs, <= max_len).
    workers : int, optional
        Threads to use; the output does not depend on it.

    Returns
    -------
    SetBatch
        ``n_queries`` sets of at most ``max_len`` distinct ascending ids.

    Raises
    ------
    ValueError
        If near-duplicates are wanted and every doc is empty, or the id law is
        too concentrated (see :func:`generate_docs`).
    """
    law = _IdLaw(spec)
    law.check()
    rng = _rng(spec.seed, _S_QUERY_PLAN)
    n_near = spec.n_near_duplicates
    doc_lengths = docs.lengths
    nonempty = np.flatnonzero(doc_lengths > 0)
    if n_near and len(nonempty) == 0:
        raise ValueError("near-duplicate queries need at least one non-empty doc")
    source = nonempty[rng.integers(0, max(1, len(nonempty)), size=n_near)]
    keep_share = rng.uniform(*NEAR_DUP_KEEP, size=n_near)
    random_lengths = _draw_lengths(rng, spec.n_queries - n_near, spec.max_len)

    near_lengths = doc_lengths[source]
    lengths = np.concatenate([near_lengths, random_lengths])
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.empty(offsets[-1], dtype=np.uint16)

    # Near-duplicates, by source length so each group is one rectangle.
    n_kept = np.clip(np.rint(keep_share * near_lengths).astype(np.int64), 1, near_lengths)
    # A tiny vocab may not hold enough ids outside the doc: keep more of it then.
    n_fresh = np.minimum(near_lengths - n_kept, spec.vocab_size - near_lengths)
    for length in np.unique(near_lengths):
        length = int(length)
        rows = np.flatnonzero(near_lengths == length)
        per_chunk = max(1, _CHUNK_DRAWS // (2 * law.width(length)))
        for j, lo in enumerate(range(0, len(rows), per_chunk)):
            r = rows[lo : lo + per_chunk]
            crng = _rng(spec.seed, _S_NEAR_IDS, length, j)
            src = docs.tokens[docs.offsets[source[r]][:, None] + np.arange(length)]
            # A seeded random subset of n_fresh positions per row is dropped.
            order = np.argsort(crng.random((len(r), length)), axis=1)
            drop = np.zeros((len(r), length), dtype=bool)
            np.put_along_axis(drop, order, np.arange(length) < n_fresh[r][:, None], axis=1)
            ids = _distinct_rows(crng, law, length + n_fresh[r], length, prefix=src, drop=drop)
            tokens[offsets[r][:, None] + np.arange(length)] = ids

    if len(random_lengths):
        rand = _fill_lengths(random_lengths, law, spec.seed, _S_QUERY_IDS, workers)
        tokens[offsets[n_near] :] = rand.tokens
    return SetBatch(offsets, tokens)


def _list_array(batch: SetBatch, lo: int, hi: int):
    import pyarrow as pa

    start, stop = batch.offsets[lo], batch.offsets[hi]
    # Rebased per batch so int32 list offsets suffice whatever the corpus size.
    offsets = (batch.offsets[lo : hi + 1] - start).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(batch.tokens[start:stop]), type=pa.list_(pa.uint16()))


def _write_sets(batch: SetBatch, path: Path, id_name: str, make_ids: Callable[[int, int], object], id_type) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(id_name, id_type), ("tokens", pa.list_(pa.uint16()))])
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            for lo in range(0, max(batch.n_sets, 1), _WRITE_BATCH_ROWS):
                hi = min(lo + _WRITE_BATCH_ROWS, batch.n_sets)
                table = pa.Table.from_arrays([make_ids(lo, hi), _list_array(batch, lo, hi)], schema=schema)
                writer.write_table(table, row_group_size=_WRITE_BATCH_ROWS)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def query_ids(lo: int, hi: int, n_total: int) -> list[str]:
    """Query ids ``q000000``-style for rows ``lo..hi-1``, zero-padded to fit ``n_total``."""
    width = max(6, len(str(max(n_total - 1, 0))))
    return [f"q{i:0{width}d}" for i in range(lo, hi)]


def write_parquet(docs: SetBatch, queries: SetBatch, out_dir) -> tuple[Path, Path]:
    """Write ``docs.parquet`` and ``queries.parquet`` into ``out_dir``, each atomically.

    Parameters
    ----------
    docs : SetBatch
        Shape (n_docs, <= max_len); doc ``i`` gets ``doc_id`` ``i``.
    queries : SetBatch
        Shape (n_queries, <= max_len); query ``i`` gets ``query_id`` ``f"q{i:06d}"``
        (wider when ``n_queries > 10**6``).
    out_dir : str or os.PathLike
        Created if missing.

    Returns
    -------
    (pathlib.Path, pathlib.Path)
        The docs file (``doc_id`` int64, ``tokens`` list<uint16>) and the queries
        file (``query_id`` string, ``tokens`` list<uint16>). Each is written under
        a temporary name in ``out_dir`` and then renamed, so a reader never sees a
        partial file.

    Raises
    ------
    OSError
        If ``out_dir`` cannot be created or written.
    """
    import pyarrow as pa

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    docs_path, queries_path = out / "docs.parquet", out / "queries.parquet"
    _write_sets(docs, docs_path, "doc_id", lambda lo, hi: pa.array(np.arange(lo, hi, dtype=np.int64)), pa.int64())
    nq = queries.n_sets
    _write_sets(queries, queries_path, "query_id", lambda lo, hi: pa.array(query_ids(lo, hi, nq), pa.string()), pa.string())
    return docs_path, queries_path


def cache_name(spec: SyntheticSpec) -> str:
    """Directory name of a spec's corpus in a cache: a hash of the spec, the
    generator version and the length histogram."""
    key = {
        "generator_version": GENERATOR_VERSION,
        "spec": dataclasses.asdict(spec),
        "histogram_sha256": hashlib.sha256(_histogram_cached().tobytes()).hexdigest(),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return f"synthetic-v{GENERATOR_VERSION}-{spec.n_docs}d-{spec.n_queries}q-{digest}"


def _complete(path: Path) -> bool:
    return (path / "docs.parquet").is_file() and (path / "queries.parquet").is_file()


def ensure_synthetic(spec: SyntheticSpec, cache_dir, *, workers: int | None = None) -> tuple[Path, Path]:
    """The spec's corpus in ``cache_dir``, generated only if it is not there yet.

    The corpus lives in ``cache_dir / cache_name(spec)`` (``docs.parquet``,
    ``queries.parquet``, ``spec.json``). It is generated into a temporary directory
    next to it and renamed into place, so the directory is complete whenever it
    exists; when two processes race, the first rename wins and the other keeps
    the winner's files (they are identical).

    Parameters
    ----------
    spec : SyntheticSpec
    cache_dir : str or os.PathLike
        Created if missing.
    workers : int, optional
        Threads for generation; the output does not depend on it.

    Returns
    -------
    (pathlib.Path, pathlib.Path)
        Paths of ``docs.parquet`` and ``queries.parquet``.

    Raises
    ------
    OSError
        If the cache directory cannot be created or written.
    """
    cache = Path(cache_dir).expanduser()
    target = cache / cache_name(spec)
    if not _complete(target):
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=cache))
        try:
            docs = generate_docs(spec, workers=workers)
            queries = generate_queries(spec, docs, workers=workers)
            write_parquet(docs, queries, tmp)
            del docs, queries
            meta = {"generator_version": GENERATOR_VERSION, "spec": dataclasses.asdict(spec)}
            (tmp / "spec.json").write_text(json.dumps(meta, indent=2) + "\n")
            _publish(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target / "docs.parquet", target / "queries.parquet"


def _publish(tmp: Path, target: Path) -> None:
    try:
        os.rename(tmp, target)
        return
    except OSError:
        if _complete(target):
            return  # another process finished first: keep its (identical) corpus
    # A target without both files was damaged by hand: move it aside, then publish.
    trash = target.with_name(f".{target.name}.stale-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.rename(target, trash)
    except FileNotFoundError:
        pass
    try:
        os.rename(tmp, target)
    except OSError:
        if not _complete(target):
            raise
    shutil.rmtree(trash, ignore_errors=True)
