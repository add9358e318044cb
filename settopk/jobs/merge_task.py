"""The merge task: merges one chunk's shard lists exactly and writes the chunk's part.

It runs as a Ray task, so the driver never holds results: the shard actors' top-k lists
go from the object store straight into it. The task can start while its chunk is still
being searched (:mod:`settopk.jobs.search`): it takes the lists batch by batch, in order,
merging and writing each batch as soon as its lists exist, so only the last batch is
written after the search. A threshold run's task (:func:`merge_and_write_pairs`) does the same
with the shards' pairs, and records each query's row count in the part's footer.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np

from settopk.kernels import DEFAULT_SCORE, ThresholdPairs, score_definition
from settopk.shards import drop_own_docs, merge_topk, scatter_rounds
from settopk.shards.results import query_id_values

from .output import PartWriter, results_table

__all__ = ["BatchLayout", "merge_and_write_chunk", "merge_and_write_pairs"]


@dataclass(frozen=True)
class BatchLayout:
    """Which shard lists make up one batch of a chunk.

    Attributes
    ----------
    lo, hi : int
        The batch's queries, as rows ``[lo, hi)`` of its chunk.
    shard_lists : tuple of (int, numpy.ndarray)
        Per shard list, in the order the lists are passed: the shard and the batch
        rows (``0 .. hi - lo - 1``) it covers.
    """

    lo: int
    hi: int
    shard_lists: tuple


def merge_and_write_chunk(work: str, index: int, query_ids, query_len: np.ndarray, k: int, max_len: int, n_shards: int,
                          layouts: list[BatchLayout], metadata: dict, row_group_rows: int, results: list,
                          score: str = DEFAULT_SCORE, exclude_self: bool = False) -> dict:
    """Merge one chunk's shard lists exactly and commit them as part ``index`` of the work directory.

    Parameters
    ----------
    work : str
        The run's work directory: a path on a filesystem every node mounts, or a URI (a store
        prefix the task opens itself, with the credentials and endpoint of its node).
    index : int
        The chunk's part number.
    query_ids : sequence of str, or pyarrow.StringArray, length n_queries
        The chunk's query ids.
    query_len : numpy.ndarray of int, shape (n_queries,)
    k, max_len : int
    n_shards : int
    layouts : list of BatchLayout
        One per batch, in query order; together they consume ``results`` in order.
    metadata : dict
        Parquet footer metadata of the part.
    row_group_rows : int
    results : list of TopK or ray.ObjectRef
        The shard lists, batch after batch, in the order the layouts list them
        (references are fetched when their batch is merged).
    score : str
        The score the shards ranked by (one of :data:`settopk.kernels.SCORES`): the merge's order,
        the ``score`` column, and the part's ``settopk.score`` metadata.
    exclude_self : bool
        Self-join without the query's own doc: the query ids are doc ids (as text), the
        shards searched ``k`` per query (the job asks for one more than it writes), and each
        row loses its own doc, or its last entry where the own doc is not in it
        (:func:`settopk.shards.drop_own_docs`), so ``k - 1`` rows per query are written.

    Returns
    -------
    dict
        ``rows`` written, and ``merge_s`` and ``write_s`` spent (seconds, waits for results excluded).

    Raises
    ------
    ValueError
        If the layouts do not consume exactly ``results``.
    ray.exceptions.RayError
        If a search whose result is passed failed (the driver then sends the chunk again).
    """
    named = sum(len(layout.shard_lists) for layout in layouts)
    if named != len(results):
        raise ValueError(f"the layouts name {named} results, {len(results)} were passed")
    merge_s = write_s = 0.0
    rows = position = 0
    metadata = {**metadata, "settopk.score": score_definition(score)}  # the file names the score that ranked it
    writer = PartWriter(work, index, metadata=metadata, row_group_rows=row_group_rows)
    own_ids = query_id_values(query_ids) if exclude_self else None
    # Arrow encodes and compresses a batch's rows without the GIL, in this thread, while the
    # task fetches and merges the next batch: writing is most of a merge task's time.
    encoder = ThreadPoolExecutor(1, thread_name_prefix="settopk-write")
    pending = None
    try:
        for layout in layouts:
            fetched = _fetched(results[position : position + len(layout.shard_lists)])
            position += len(layout.shard_lists)
            start = time.perf_counter()
            n = layout.hi - layout.lo
            per_shard: list[list] = [[] for _ in range(n_shards)]
            for (shard, batch_rows), result in zip(layout.shard_lists, fetched):
                per_shard[shard].append((batch_rows, result))
            lists = [scatter_rounds(n, k, rounds) for rounds in per_shard if rounds]
            # One shard's list is already the exact top-k (replicas and single-shard layouts).
            topk = lists[0] if len(lists) == 1 else merge_topk(lists, query_len[layout.lo : layout.hi], k, max_len, score)
            if exclude_self:
                topk = drop_own_docs(topk, own_ids[layout.lo : layout.hi])
            middle = time.perf_counter()
            table = results_table(query_ids[layout.lo : layout.hi], query_len[layout.lo : layout.hi], topk, score)
            rows += table.num_rows
            merge_s += middle - start
            write_s += time.perf_counter() - middle
            if pending is not None:
                write_s += pending.result()  # in order: one batch is encoded at a time
            pending = encoder.submit(_timed, writer.write, table)
        if pending is not None:
            write_s += pending.result()
            pending = None
        write_s += _timed(writer.close)
    except BaseException:
        if pending is not None:
            pending.cancel() or wait([pending])  # the writer is not closed under a running write
        writer.abort()
        raise
    finally:
        encoder.shutdown(wait=False)
    return {"rows": rows, "merge_s": merge_s, "write_s": write_s}


def _timed(fn, *args) -> float:
    """Seconds ``fn(*args)`` took."""
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def _fetched(results: list) -> list:
    """The TopKs of one batch: references fetched (one call, so the batch waits once)."""
    refs = [i for i, r in enumerate(results) if type(r).__name__ == "ObjectRef"]
    if not refs:
        return results
    import ray

    values = ray.get([results[i] for i in refs])
    out = list(results)
    for i, value in zip(refs, values):
        out[i] = value
    return out


def merge_and_write_pairs(work: str, index: int, query_ids, query_len: np.ndarray, cap: int | None, max_len: int,
                          layouts: list[BatchLayout], metadata: dict, row_group_rows: int, results: list,
                          score: str = DEFAULT_SCORE, piece_pairs: int | None = None) -> dict:
    """A threshold run's :func:`merge_and_write_chunk`: merge one chunk's shard pairs exactly and
    commit them as part ``index``, batch by batch, each batch in pieces of whole queries of at
    most ``piece_pairs`` pairs (a chunk's pairs are never all in memory, nor a batch's merge).

    Parameters
    ----------
    work, index, query_ids, query_len, max_len, layouts, metadata, row_group_rows, score
        As :func:`merge_and_write_chunk`.
    cap : int or None
        ``--k``: each query's best ``cap`` pairs; None keeps every pair (a query with more than
        :data:`settopk.configs.MAX_K` is refused, never cut).
    results : list of settopk.kernels.ThresholdPairs or ray.ObjectRef
        Each shard call's pairs (CSR over the rows its layout names), batch after batch. A
        self-join's shards have applied its rule (given each query's doc id:
        :meth:`settopk.shards.ShardSearcher.threshold_search`), so the merge does not.
    piece_pairs : int, optional
        Most pairs (before the cap) merged and written at once; a query
        with more is a piece alone. None: a batch at a time.

    Returns
    -------
    dict
        ``rows`` written, ``merge_s`` and ``write_s`` (seconds), ``largest_piece`` (the most pairs
        one merge held).

    Raises
    ------
    ValueError
        If the layouts do not consume exactly ``results``, or a query has more than
        :data:`settopk.configs.MAX_K` pairs and no ``cap`` (the message names it).
    """
    from .chunks import pair_counts_metadata
    from .threshold_job import merge_pairs_table

    named = sum(len(layout.shard_lists) for layout in layouts)
    if named != len(results):
        raise ValueError(f"the layouts name {named} results, {len(results)} were passed")
    merge_s = write_s = 0.0
    position = 0
    metadata = {**metadata, "settopk.score": score_definition(score)}
    writer = PartWriter(work, index, metadata=metadata, row_group_rows=row_group_rows)
    counts = []
    largest = 0
    try:
        for layout in layouts:
            fetched = _fetched(results[position : position + len(layout.shard_lists)])
            position += len(layout.shard_lists)
            start = time.perf_counter()
            lo = layout.lo
            shard_pairs = [(np.asarray(rows, np.int64), pairs) for (_, rows), pairs in zip(layout.shard_lists, fetched)]
            for a, b, piece in _pieces(layout.hi - lo, shard_pairs, piece_pairs):
                largest = max(largest, sum(len(p.doc_ids) for _, p in piece))
                table, n = merge_pairs_table(query_ids[lo + a : lo + b], query_len[lo + a : lo + b], piece, max_len,
                                             score, k=cap, with_counts=True)
                counts.append(n)
                middle = time.perf_counter()
                writer.write(table)
                merge_s += middle - start
                write_s += time.perf_counter() - middle
                start = time.perf_counter()
        counts = np.concatenate(counts) if counts else np.zeros(0, np.int64)
        writer.add_metadata(pair_counts_metadata(counts))
        write_s += _timed(writer.close)
    except BaseException:
        writer.abort()
        raise
    return {"rows": int(counts.sum()), "merge_s": merge_s, "write_s": write_s, "largest_piece": largest}


def _pieces(n: int, shard_pairs: list, piece_pairs: int | None):
    """A batch of ``n`` queries cut into runs of whole queries ``[a, b)`` holding at most
    ``piece_pairs`` pairs over the shards (a query with more alone): ``(a, b, [(rows - a, pairs)])``
    per run, each shard's pairs sliced to its queries in the run (CSR slices, no copy)."""
    if piece_pairs is None or not shard_pairs:
        yield 0, n, shard_pairs
        return
    per_query = np.zeros(n, np.int64)
    for rows, pairs in shard_pairs:
        np.add.at(per_query, rows, pairs.counts)
    total = np.concatenate([[0], np.cumsum(per_query)])
    a = 0
    while a < n:
        b = max(a + 1, int(np.searchsorted(total, total[a] + piece_pairs, side="right")) - 1)
        piece = []
        for rows, pairs in shard_pairs:
            i, j = np.searchsorted(rows, a), np.searchsorted(rows, b)
            lo, hi = pairs.offsets[i], pairs.offsets[j]
            piece.append((rows[i:j] - a, ThresholdPairs(pairs.offsets[i : j + 1] - lo, pairs.doc_ids[lo:hi],
                                                        pairs.overlap[lo:hi], pairs.doc_len[lo:hi])))
        yield a, b, piece
        a = b
