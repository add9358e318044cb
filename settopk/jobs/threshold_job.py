"""The job's threshold search (``--threshold T``, config key ``threshold``; issue 32).

Every backend runs it end to end (``cpu``, ``numpy``, and ``cupy`` through the count kernel with
its floors fixed at ``T``: :mod:`settopk.kernels.cuda.threshold`): each batch goes once to the
shards whose length range it can reach (:func:`shard_rows`; no threshold exchange: every shard's
floor is ``T`` from the start), each shard returns its passing pairs
(:meth:`settopk.shards.searcher.ShardSearcher.threshold_search`), and the chunk's merge task ranks
each query's pairs over the shards (:func:`merge_pairs_table`) and writes them
(:func:`settopk.jobs.merge_task.merge_and_write_pairs`).

**The cap.** Only an explicit ``--k`` (the ``k=`` keyword of :func:`settopk.score`) caps a
threshold run; the config's ``k`` (100 by default) does not. An uncapped run carries
``k = MAX_K`` (32,767) in its config, so that its reruns and resumes compare as a run capped at
``MAX_K`` would (their results are equal wherever both exist: an uncapped run refuses a query
with more than ``MAX_K`` pairs instead of writing it), and its manifest says ``k_cap: null``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

import settopk.configs
from settopk.errors import SettopkError
from settopk.kernels import parse_threshold, score_key, score_value
from settopk.kernels.threshold import query_need, reachable_lengths
from settopk.shards.results import query_id_column

from .output import RESULT_SCHEMA

__all__ = ["TooManyPairs", "threshold_config", "threshold_cap", "threshold_section", "self_join_entries", "shard_cap", "shard_rows",
           "merge_pairs_table"]


class TooManyPairs(ValueError, SettopkError):
    """A query has more pairs at or above ``T`` than the int16 ``rank`` column holds and no ``--k``
    caps them: a rerun with the same arguments fails the same way, so the command exits 2."""


def threshold_config(cfg, explicit_k):
    """``cfg`` as a threshold run carries it: ``k`` is the explicit cap, or ``MAX_K`` where none was
    given (the config's own ``k`` never caps; see the module's docstring). A top-k run's ``cfg``
    is returned as it is.

    Parameters
    ----------
    cfg : settopk.configs.JobConfig
    explicit_k : int or None
        ``--k`` as given on the command line (or the ``k=`` keyword); None where absent.
    """
    if cfg.threshold is None or explicit_k is not None:
        return cfg
    return dataclasses.replace(cfg, k=settopk.configs.MAX_K)


def threshold_cap(args) -> int | None:
    """The pairs a threshold run keeps per query at most: ``--k`` where given, else None (all)."""
    return getattr(args, "k", None)


def threshold_section(cfg, args, pairs: int) -> dict:
    """The manifest's ``threshold`` section: ``T`` (exact fraction text), the cap (``k_cap``: ``--k``,
    or null: every pair), and the pairs written."""
    return {
        "T": cfg.threshold,
        "k_cap": threshold_cap(args),
        "pairs": pairs,
        "cap_rule": "only an explicit --k caps a threshold run; the config's k does not (an uncapped run "
                    f"carries k = {settopk.configs.MAX_K} in its config)",
        "self_join_rule": None if not cfg.self_join else (
            "ordered pairs (containment is not symmetric)" if cfg.score == "containment"
            else "each unordered pair once, under its shorter doc as query_id (the lower id of two of the same length)"),
    }


def shard_cap(cap: int | None) -> int:
    """The pairs a shard returns per query at most: ``--k`` (``cap``), or ``MAX_K + 1`` where none was
    given: one more than the ``rank`` column holds, enough for the merge to refuse such a query by
    name (:class:`TooManyPairs`), and a bound on every shard answer (``batch x shard_cap`` pairs).
    A self-join's shards apply its rule before they cut
    (:meth:`settopk.shards.ShardSearcher.threshold_search`'s ``own_ids``)."""
    return int(cap) if cap is not None else settopk.configs.MAX_K + 1


def self_join_entries(pairs_per_piece: int) -> int:
    """The most a shard's kept self-join may hold (its ``max_entries``): 4 x ``output.pairs_per_piece``
    pairs of groups, and list entries on ``cpu`` (``settopk.kernels.join.host_join.SelfJoin``, about
    12 bytes each; where sets repeat far fewer than the pairs it writes) or pairs on ``numpy`` and
    ``cupy`` (``settopk.kernels.join.kept.KeptSelfJoin``, 16 bytes each). A self-join beyond it is
    probed batch by batch, as other shards' queries are, so a shard holds about one batch's pairs
    at a time whatever the join's size; its ``--dedup`` groups are then found from the pairs of
    groups alone, within the same bound."""
    return 4 * int(pairs_per_piece)


def shard_rows(plan, query_len, threshold, max_len: int, score: str, min_doc_len=None) -> list[np.ndarray]:
    """Per shard of ``plan``, the batch rows whose query can pass ``threshold`` with some doc length
    of the shard's range (length filtering at the driver: a shard gets no query it cannot answer).

    For a fixed threshold the top-k's two-round exchange is unnecessary: every shard's floor is
    ``T`` from the start, so one round sends each query to the shards returned here.

    Parameters
    ----------
    plan : sequence of settopk.shards.ShardSpec
        ``min_len``, ``max_len`` per shard.
    query_len : numpy.ndarray of int, shape (n_queries,)
        The batch's query lengths.
    threshold : str or fractions.Fraction
        ``T`` (:func:`settopk.kernels.parse_threshold`).
    max_len, score
        The run's bound on set sizes and score.
    min_doc_len : numpy.ndarray of int, shape (n_queries,), optional
        Per query, the shortest doc length it searches (a symmetric self-join: its own length).

    Returns
    -------
    list of numpy.ndarray of int64
        One per shard, ascending rows (possibly empty).
    """
    query_len = np.asarray(query_len, dtype=np.int64)
    floor = np.zeros_like(query_len) if min_doc_len is None else np.asarray(min_doc_len, dtype=np.int64)
    # The reach depends on (length, least doc length) only: computed once per distinct pair.
    kinds, inverse = np.unique(query_len * (max_len + 2) + floor, return_inverse=True)
    kind_len, kind_floor = kinds // (max_len + 2), kinds % (max_len + 2)
    need = query_need(parse_threshold(threshold, score), kind_len, max_len, score,
                      None if min_doc_len is None else kind_floor)
    reach = reachable_lengths(need, kind_len)
    counts = np.cumsum(np.concatenate([np.zeros((len(kinds), 1), np.int64), reach], axis=1), axis=1)
    return [np.flatnonzero((counts[:, s.max_len + 1] - counts[:, s.min_len] > 0)[inverse.reshape(-1)]).astype(np.int64)
            for s in plan]


def _in_order(q_row, key, doc_ids) -> bool:
    """Whether the pairs are already in the result's order: by query, then key descending, then doc id."""
    if len(q_row) < 2:
        return True
    same_q = q_row[1:] == q_row[:-1]
    same_key = key[1:] == key[:-1]
    return bool(np.all((q_row[1:] > q_row[:-1]) | same_q & ((key[1:] < key[:-1]) | same_key & (doc_ids[1:] > doc_ids[:-1]))))


def _joined(arrays: list, dtype) -> np.ndarray:
    """The arrays one after another; one array as it is (a shard's answer is read, not copied)."""
    if len(arrays) == 1:
        return np.asarray(arrays[0])
    return np.concatenate(arrays + [np.zeros(0, dtype)])


def merge_pairs_table(query_ids, query_len, shard_results, max_len: int, score: str, k: int | None = None,
                      with_counts: bool = False):
    """One batch's result rows from the shards' threshold pairs: each query's pairs over all shards,
    best first, ranked ``1..n``.

    Parameters
    ----------
    query_ids : sequence of str, or pyarrow.StringArray, length n_queries
    query_len : numpy.ndarray of int, shape (n_queries,)
    shard_results : sequence of (numpy.ndarray of int64, ThresholdPairs)
        Per shard call: the batch rows it searched and its pairs (CSR over those rows). Each doc
        lives in one shard, so the union is every passing pair exactly once. A self-join's shards
        have applied its rule (:func:`settopk.kernels.self_join_pairs`, given each query's doc
        id): the pairs are merged as they come.
    max_len, score
        The run's bound on set sizes and score (the order, the ``score`` column).
    k : int, optional
        Keep each query's first ``k`` pairs; None keeps all (up to :data:`settopk.configs.MAX_K`).
    with_counts : bool
        Also return each query's row count.

    Returns
    -------
    pyarrow.Table, or (pyarrow.Table, numpy.ndarray of int64 of shape (n_queries,)) with ``with_counts``
        :data:`settopk.jobs.output.RESULT_SCHEMA`, rows in query order then rank; and the rows of each query.

    Raises
    ------
    TooManyPairs
        If a query has more than :data:`settopk.configs.MAX_K` pairs and no ``k`` caps them: the
        ``rank`` column is int16, and no pair is ever dropped unasked (a ``ValueError``).
    """
    query_len = np.asarray(query_len, dtype=np.int64)
    n = len(query_len)
    parts = [(np.asarray(rows, np.int64)[np.repeat(np.arange(p.n_queries), p.counts)], p)
             for rows, p in shard_results]
    q_row = _joined([r for r, _ in parts], np.int64)
    doc_ids, overlap, doc_len = (_joined([getattr(p, f) for _, p in parts], t)
                                 for f, t in (("doc_ids", np.int64), ("overlap", np.int32), ("doc_len", np.int32)))
    key = score_key(overlap, query_len[q_row], doc_len, max_len, score).astype(np.int64)
    if not _in_order(q_row, key, doc_ids):  # one shard's answer comes in order; several are sorted
        order = np.lexsort((doc_ids, -key, q_row))  # exact: keys order as the score does; ties by lower doc id
        q_row, doc_ids, overlap, doc_len = q_row[order], doc_ids[order], overlap[order], doc_len[order]
    first = np.zeros(n + 1, np.int64)  # each query's first row
    np.cumsum(np.bincount(q_row, minlength=n), out=first[1:])
    rank = np.arange(len(q_row), dtype=np.int64) - first[q_row] + 1
    if k is not None:
        keep = rank <= k
        q_row, doc_ids, overlap, doc_len, rank = q_row[keep], doc_ids[keep], overlap[keep], doc_len[keep], rank[keep]
    ids = query_id_column(query_ids)
    if len(rank) and rank.max() > settopk.configs.MAX_K:
        worst = int(q_row[np.argmax(rank)])
        raise TooManyPairs(f"query {ids[worst].as_py()!r} has more than {settopk.configs.MAX_K} pairs at or above the "
                         f"threshold, more than the result's rank column (int16) holds; raise --threshold, or cap "
                         f"each query's pairs with --k")
    qlen = query_len[q_row]
    columns = [
        ids.take(pa.array(q_row.astype(np.int32))) if n else pa.array([], pa.string()),
        pa.array(rank.astype(np.int16)),
        pa.array(doc_ids),
        pa.array(score_value(overlap, qlen, doc_len, score)),
        pa.array(overlap.astype(np.int16)),
        pa.array(qlen.astype(np.int16)),
        pa.array(doc_len.astype(np.int16)),
    ]
    table = pa.Table.from_arrays(columns, schema=RESULT_SCHEMA)
    return (table, np.bincount(q_row, minlength=n).astype(np.int64)) if with_counts else table
