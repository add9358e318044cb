"""The in-process threshold join: :class:`Pairs`, :meth:`settopk.Index.threshold_search`,
:meth:`settopk.Index.self_join` and :func:`dedup` (issue 46)::

    import settopk

    index = settopk.Index.build(docs, score="jaccard")
    pairs = index.threshold_search(queries, "0.8")   # settopk.Pairs: every pair with score >= 4/5
    pairs = index.self_join(0.8)                      # each unordered pair of docs once
    groups, duplicates = settopk.dedup(docs, 0.8)     # the job's --dedup tables (settopk.index.dedup)

Results are exact and equal to the job's (``settopk score --threshold T``, ``--self-join``,
``--dedup``) for the same inputs: the threshold ``T`` is an exact fraction
(:func:`settopk.kernels.parse_threshold`: ``"0.8"``, ``0.8`` and ``"4/5"`` are one threshold),
a pair passes when its score reaches it (ties pass), pairs come best first (score descending,
doc id ascending). The search is the kernel indexes' own (``threshold_search`` of
:class:`settopk.kernels.ShardIndex`, which the job's shards run), the self-join the join of
:mod:`settopk.kernels.join` where it applies, and the groups the components of
:mod:`settopk.shards.components`, which the job's ``--dedup`` streams through too.
"""

from __future__ import annotations

import dataclasses
import numbers
import os

import numpy as np
import pyarrow as pa

from settopk.errors import SettopkError
from settopk.kernels import SetBatch, ThresholdPairs, build_index, parse_threshold, score_definition
from settopk.kernels.join.array_ops import run_starts
from settopk.kernels.threshold import self_join_pairs
from settopk.shards.results import RESULT_SCHEMA

from .inputs import checked_query_ids

__all__ = ["PAIR_BYTES", "JoinArgumentError", "Pairs", "ResultTooLarge", "checked_threshold", "kernel_self_join", "self_join", "threshold_search"]

_MAX_RANK = 32767  # the result's rank column is int16 (settopk.configs.MAX_K)
_SCAN_BATCH = 65536  # queries per kernel call on the scan path: bounds its temporaries


class JoinArgumentError(ValueError, SettopkError):
    """A bad argument of the threshold join (``threshold``, ``k``, ``include_self``, ``score``):
    the message names it, says what was expected and what was found."""


class ResultTooLarge(MemoryError, SettopkError):
    """A self-join whose pairs would take more memory than this machine has available, found
    from their count before any is written: the message gives the count, the bytes and the ways
    around it (a higher threshold, ``k``, or the job, which streams the pairs to Parquet)."""


#: Host bytes a pair takes in :class:`Pairs`: int64 query index, doc id and float64 score, int32
#: overlap, query length and doc length.
PAIR_BYTES = 36


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Pairs:
    """Every (query, doc) pair whose score reaches a threshold, grouped by query, best first (host memory).

    Attributes
    ----------
    query_index : numpy.ndarray of int64, shape (n_pairs,)
        Each pair's query: its row in the call's queries (:meth:`settopk.Index.threshold_search`),
        or its doc id (:meth:`settopk.Index.self_join`). Non-decreasing: the pairs come query by
        query, in query order.
    doc_ids : numpy.ndarray of int64, shape (n_pairs,)
        Each pair's doc; within a query ordered by score descending, then doc id ascending.
    scores : numpy.ndarray of float64, shape (n_pairs,)
        The score (:func:`settopk.kernels.score_value`: the correctly rounded value of the exact
        fraction, ``0/0`` is 0.0), the job's ``score`` column.
    overlap : numpy.ndarray of int32, shape (n_pairs,)
        ``|q ∩ d|``.
    query_len, doc_len : numpy.ndarray of int32, shape (n_pairs,)
        ``|q|`` and ``|d|``, distinct tokens.
    n_queries : int
        Queries of the call (every doc for a self-join), those without pairs included.
    score : str
        The score, one of :data:`settopk.kernels.SCORES`.
    threshold : str
        ``T`` as its exact fraction's text (``"4/5"``), as the job's manifest writes it.
    k : int or None
        The cap on pairs per query that was asked for; None: every pair.
    query_ids : tuple of str, optional
        Names of the queries by row, where the input named them (a file, or a table with
        ``query_id``); None: a query is named by its ``query_index`` as text.
    query_keys : numpy.ndarray of int64, shape (n_queries,), optional
        A self-join: the doc id of each query, ascending (the values ``query_index`` takes).

    Memory: 32 bytes per pair, host memory.
    """

    query_index: np.ndarray
    doc_ids: np.ndarray
    scores: np.ndarray
    overlap: np.ndarray
    query_len: np.ndarray
    doc_len: np.ndarray
    n_queries: int
    score: str
    threshold: str
    k: int | None = None
    query_ids: tuple[str, ...] | None = None
    query_keys: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = self.query_index.shape
        wanted = (("query_index", np.int64), ("doc_ids", np.int64), ("scores", np.float64), ("overlap", np.int32),
                  ("query_len", np.int32), ("doc_len", np.int32))
        for name, dtype in wanted:
            array = getattr(self, name)
            if not isinstance(array, np.ndarray) or array.dtype != dtype or array.shape != n or len(n) != 1:
                found = f"{array.dtype} {array.shape}" if isinstance(array, np.ndarray) else type(array).__name__
                raise ValueError(f"Pairs.{name} must be a {np.dtype(dtype)} array of shape {n} (n_pairs,), found {found}")
        if self.query_ids is not None and len(self.query_ids) != self.n_queries:
            raise ValueError(f"Pairs.query_ids must name the {self.n_queries} queries, found {len(self.query_ids)}")

    @property
    def n_pairs(self) -> int:
        """Number of pairs."""
        return len(self.doc_ids)

    def __len__(self) -> int:
        return self.n_pairs

    def __repr__(self) -> str:
        cap = "" if self.k is None else f", k={self.k}"
        return (f"settopk.Pairs(n_pairs={self.n_pairs}, n_queries={self.n_queries}, score={self.score!r}, "
                f"threshold={self.threshold!r}{cap})")

    def to_arrow(self, query_ids=None) -> pa.Table:
        """The pairs as the job writes a threshold run's rows: one row per pair, ranked per query.

        Parameters
        ----------
        query_ids : sequence of str, length n_queries, optional
            Names of the queries by row (for a self-join: by the doc's position, ascending ids).
            Default: :attr:`query_ids`, else each pair's ``query_index`` as text (the job's names
            of text-file lines, and of a self-join's queries: their doc ids).

        Returns
        -------
        pyarrow.Table
            Schema :data:`settopk.shards.results.RESULT_SCHEMA` (``query_id`` string, ``rank``
            int16 from 1 within each query, ``doc_id`` int64, ``score`` float64, ``overlap``,
            ``query_len`` and ``doc_len`` int16), the pairs' order; schema metadata
            ``settopk.score``, ``settopk.threshold`` and ``settopk.k`` (``"None"`` uncapped), as a
            part file's. Equal to the job's result (``Table.equals``) for the same inputs.

        Raises
        ------
        JoinArgumentError
            (a ValueError) If ``query_ids`` does not hold one unique string per query, or a query
            has more than 32,767 pairs (the ``rank`` column is int16, as the job refuses such a
            query: pass ``k``, or raise the threshold).
        """
        rows = (np.arange(len(self.query_index)) if self.query_keys is None
                else np.searchsorted(self.query_keys, self.query_index))
        row = self.query_index if self.query_keys is None else rows
        # The pairs are in query order: each query's pairs are one run of equal rows.
        starts = run_starts(np, row) if len(row) else np.zeros(0, np.int64)
        run_of = np.repeat(np.arange(len(starts), dtype=np.int32), np.diff(np.append(starts, len(row))))
        rank = np.arange(len(row), dtype=np.int64) - starts[run_of] + 1
        if len(rank) and rank.max() > _MAX_RANK:
            worst = int(self.query_index[np.argmax(rank)])
            raise JoinArgumentError(f"query {worst} has more than {_MAX_RANK} pairs, more than the result's rank column "
                                    "(int16) holds; pass k= to cap each query's pairs, or raise the threshold")
        if query_ids is not None:
            try:
                names = pa.array(checked_query_ids(query_ids, self.n_queries), pa.string())
            except ValueError as exc:
                raise JoinArgumentError(str(exc)) from None
            column = names.take(pa.array(row)) if self.n_queries else pa.array([], pa.string())
        elif self.query_ids is not None:
            column = pa.array(self.query_ids, pa.string()).take(pa.array(row)) if self.n_queries else pa.array([], pa.string())
        else:  # each query's index as decimal text, cast by Arrow once per query
            column = pa.array(self.query_index[starts]).cast(pa.string()).take(pa.array(run_of))
        columns = [column, pa.array(rank.astype(np.int16)), pa.array(self.doc_ids), pa.array(self.scores),
                   pa.array(self.overlap.astype(np.int16)), pa.array(self.query_len.astype(np.int16)),
                   pa.array(self.doc_len.astype(np.int16))]
        metadata = {**RESULT_SCHEMA.metadata, b"settopk.score": score_definition(self.score).encode(),
                    b"settopk.threshold": self.threshold.encode(), b"settopk.k": str(self.k).encode()}
        return pa.Table.from_arrays(columns, schema=RESULT_SCHEMA).replace_schema_metadata(metadata)


def threshold_search(index, query_ids, sets: SetBatch, threshold, k=None) -> Pairs:
    """What :meth:`settopk.Index.threshold_search` returns, for queries already read.

    Parameters
    ----------
    index : settopk.Index
        Its kernel index is searched (``threshold_search`` of :class:`settopk.kernels.ShardIndex`,
        the job's shard search).
    query_ids : sequence of str or None
        The queries' names where the input named them.
    sets : settopk.kernels.SetBatch
        ``n_queries`` queries in the index's kernel ids (host memory).
    threshold : str, int, float or fractions.Fraction
        ``T``, exact: decimal text (``"0.8"``), a fraction (``"2/3"``), a float read as its
        shortest decimal (0.8 is 4/5). In ``[0, 1]`` (``>= 0`` for ``overlap``).
    k : int, optional
        Keep each query's best ``k`` pairs (``k >= 1``); None keeps every pair.

    Returns
    -------
    Pairs
        ``query_index`` the query's row; host arrays of shape (n_pairs,), in query order, each
        query's pairs best first.

    Raises
    ------
    JoinArgumentError
        (a ValueError and :class:`settopk.errors.SettopkError`) If ``threshold`` is not a finite
        number in the score's range, or ``k`` is not an integer >= 1 or None.
    """
    t = checked_threshold(threshold, index.score)
    k = _cap(k)
    n = sets.n_sets
    if index.kernel is None or n == 0:
        found = ThresholdPairs(np.zeros(n + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32))
    else:
        found = _concat([index.kernel.threshold_search(sets.slice(lo, min(lo + _SCAN_BATCH, n)), t, k)
                         for lo in range(0, n, _SCAN_BATCH)])
    return _pairs(found, np.arange(n, dtype=np.int64), sets.lengths, index.score, t, k,
                  None if query_ids is None else tuple(query_ids), threads=index.threads)


def self_join(index, sets: SetBatch, threshold, include_self=False, k=None) -> Pairs:
    """What :meth:`settopk.Index.self_join` returns: every pair of the index's docs reaching ``threshold``.

    The job's self-join rule (:func:`settopk.kernels.self_join_keep`): for every score but
    containment (the only asymmetric one) each unordered pair once, under its shorter doc, or the
    lower id of two of one length; for containment every ordered pair; a doc's pair with itself
    only with ``include_self``. On the ``cpu`` backend (``T > 0``) the prefix-filtered join of
    :mod:`settopk.kernels.join` (identical sets grouped, PPJoin's filters); else the kernel
    index's threshold search of the corpus against itself (each query from its own length where
    the score is symmetric).

    Parameters
    ----------
    index : settopk.Index
    sets : settopk.kernels.SetBatch
        The index's ``n_docs`` docs in its kernel ids.
    threshold, k
        As :func:`threshold_search`.
    include_self : bool, default False
        Keep each doc's pair with itself (where its score with itself reaches ``T``).

    Returns
    -------
    Pairs
        ``query_index`` the query doc's id, ``n_queries = n_docs``, ``query_keys`` the doc ids;
        host arrays of shape (n_pairs,), queries by ascending id, each query's pairs best first.
        Its :meth:`Pairs.to_arrow` equals the job's ``--self-join --threshold T`` rows.

    Raises
    ------
    JoinArgumentError
        As :func:`threshold_search`, or if ``include_self`` is not a bool.
    ResultTooLarge
        If the pairs (``T > 0``, any score but containment) would take more than the memory
        available (:data:`PAIR_BYTES` a pair), counted before any is written.
    """
    t = checked_threshold(threshold, index.score)
    k = _cap(k)
    if not isinstance(include_self, (bool, np.bool_)):
        raise JoinArgumentError(f"include_self must be True or False, found {include_self!r}")
    from settopk.kernels.join import JoinTooLarge

    available = _available_bytes()
    try:
        found = kernel_self_join(index.backend, sets, index.doc_ids, t, index.score, index.max_len, bool(include_self), k,
                                 kernel=index.kernel, threads=index.threads, vocab_size=index.vocab_size,
                                 prepared=index.join_corpus if t > 0 and sets.n_sets else None,
                                 max_pairs=available // PAIR_BYTES)
    except JoinTooLarge as exc:
        raise ResultTooLarge(
            f"Index.self_join at threshold {threshold!r}: {exc}, at {PAIR_BYTES} bytes a pair more than the "
            f"{available / 1e9:.1f} GB of memory this machine has available; raise the threshold, keep each doc's best "
            f"pairs with k=..., or run the job (settopk score --self-join --threshold T --out DIR), which streams the "
            f"pairs to Parquet parts") from None
    return _pairs(found, index.doc_ids, sets.lengths, index.score, t, k, None, query_keys=index.doc_ids,
                  threads=index.threads)


def _available_bytes() -> int:
    """Memory this machine has available now (psutil's ``available``: free, and what the kernel can reclaim)."""
    import psutil

    return int(psutil.virtual_memory().available)


def kernel_self_join(backend: str, sets: SetBatch, doc_ids: np.ndarray, t, score: str, max_len: int,
                     include_self: bool, k, *, kernel=None, threads=None, vocab_size: int = 65536,
                     prepared=None, max_pairs: int | None = None) -> ThresholdPairs:
    """The self-join of ``sets`` (ids ``doc_ids``) under :func:`settopk.kernels.self_join_keep`, each
    query's best ``k`` (a :class:`settopk.kernels.ThresholdPairs` over the sets as queries): the one
    place that picks the kernel. Where the prefix-filtered join of
    :mod:`settopk.kernels.join` applies (``T > 0``), that join; else the
    kernel index's threshold search of the corpus against itself, then the self-join rule.
    ``max_pairs`` bounds the prefix-filtered join's result (:class:`settopk.kernels.join.JoinTooLarge`
    before any pair is written; :func:`settopk.kernels.join.self_join`), not the scan's."""
    from settopk.kernels.join import join_applies

    if sets.n_sets == 0:
        return ThresholdPairs(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32))
    if join_applies(t):  # every backend has it: cpu compiled, numpy and cupy as array programs
        from settopk.kernels.join import self_join as join_self_join

        return join_self_join(sets, doc_ids, t, score, max_len, backend=backend, include_self=include_self, k=k,
                              threads=threads, prepared=prepared, max_pairs=max_pairs)
    if kernel is None:
        kernel = build_index(backend, doc_ids, sets, max_len=max_len, vocab_size=vocab_size, score=score, threads=threads)
    n, lengths = sets.n_sets, sets.lengths
    symmetric = score != "containment"  # a query needs only the docs at least as long as itself
    pieces = []
    for lo in range(0, n, _SCAN_BATCH):
        hi = min(lo + _SCAN_BATCH, n)
        found = kernel.threshold_search(sets.slice(lo, hi), t, None, min_doc_len=lengths[lo:hi] if symmetric else None)
        pieces.append(self_join_pairs(found, doc_ids[lo:hi], lengths[lo:hi], score, include_self, k))
    return _concat(pieces)


def checked_threshold(threshold, score: str):
    """``T`` as an exact fraction (:func:`settopk.kernels.parse_threshold`); a bad one raises
    :class:`JoinArgumentError` naming ``threshold``."""
    try:
        return parse_threshold(threshold, score)
    except ValueError as exc:
        raise JoinArgumentError(str(exc)) from None


def _cap(k):
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise JoinArgumentError(f"k must be an integer >= 1 (each query's best k pairs) or None (every pair), found {k!r}")
    return int(k)


def _concat(pieces: list) -> ThresholdPairs:
    """One ThresholdPairs of consecutive query batches."""
    if len(pieces) == 1:
        return pieces[0]
    offsets = [np.zeros(1, np.int64)]
    total = 0
    for p in pieces:
        offsets.append(p.offsets[1:] + total)
        total += int(p.offsets[-1])
    return ThresholdPairs(np.concatenate(offsets), *(np.concatenate([getattr(p, f) for p in pieces])
                                                     for f in ("doc_ids", "overlap", "doc_len")))


def _pairs(found: ThresholdPairs, row_index, lengths, score: str, t, k, query_ids, query_keys=None,
           threads: int | None = None) -> Pairs:
    """A :class:`Pairs` from the kernels' pairs; ``row_index``: each row's ``query_index``, ``lengths`` by row."""
    from settopk.kernels.numba_pairs import pair_columns

    overlap = found.overlap.astype(np.int32, copy=False)
    doc_len = found.doc_len.astype(np.int32, copy=False)
    query_index, query_len, scores = pair_columns(found.offsets, row_index, lengths, overlap, doc_len, score,
                                                  threads or len(os.sched_getaffinity(0)))
    return Pairs(query_index, found.doc_ids.astype(np.int64, copy=False), scores, overlap, query_len, doc_len,
                 found.n_queries, score, str(t), k, query_ids, query_keys)
