"""Query chunks committed one by one into a work directory, so a killed run resumes.

A run's queries are cut into chunks of ``query_chunk_size``. Each finished chunk is
written as its own part file (atomically) into the run's work directory, which
sits beside the dataset root and is named after the output (see
:func:`jobs.output.work_dir`). The directory also records the run's *resume key*:
a hash of everything the results depend on (input fingerprints, config, k). A
rerun with the same key skips the chunks already there; a different key means
the inputs or settings changed, and the old parts are discarded. When every part
is present and checked, the directory is renamed into place as the result.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import time
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq

from kernels import DEFAULT_SCORE, score_definition
from shards import drop_own_docs, merge_topk, scatter_rounds

from .output import PartWriter, part_name, results_table

__all__ = ["Chunk", "BatchLayout", "plan_chunks", "resume_key", "open_work_dir", "check_parts", "finish_chunk"]

_KEY_FILE = "_resume.json"


@dataclass(frozen=True)
class Chunk:
    """Queries ``[lo, hi)`` of the run, written as part ``index``."""

    index: int
    lo: int
    hi: int


@dataclass(frozen=True)
class BatchLayout:
    """Which shard results make up one batch of a chunk.

    Attributes
    ----------
    lo, hi : int
        The batch's queries, as rows ``[lo, hi)`` of its chunk.
    parts : tuple of (int, numpy.ndarray)
        Per result, in the order the results are passed: the shard and the batch
        rows (``0 .. hi - lo - 1``) it covers.
    """

    lo: int
    hi: int
    parts: tuple


def finish_chunk(work: str, index: int, query_ids, query_len: np.ndarray, k: int, max_len: int, n_shards: int,
                 layouts: list[BatchLayout], metadata: dict, row_group_rows: int, results: list,
                 score: str = DEFAULT_SCORE, exclude_self: bool = False) -> dict:
    """Merge one chunk's shard results exactly and commit it as part ``index`` of the work directory.

    Runs as a Ray task, so the driver never holds results: they come straight from the
    shard actors. The task can start while the chunk is still being searched: it takes
    the results batch by batch, in order, merging and writing each batch as soon as its
    results exist, so only the last batch is written after the search.

    Parameters
    ----------
    work : str
        The run's work directory (on a filesystem every node sees).
    index : int
        The chunk's part number.
    query_ids : sequence of str, length n_queries
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
        The shard results, batch after batch, in the order the layouts list them
        (references are fetched when their batch is merged).
    score : str
        The score the shards ranked by (one of :data:`kernels.SCORES`): the merge's order,
        the ``score`` column, and the part's ``settopk.score`` metadata.
    exclude_self : bool
        Self-join without the query's own doc: the query ids are doc ids (as text), the
        shards searched ``k`` per query (the job asks for one more than it writes), and each
        row loses its own doc, or its last entry where the own doc is not in it
        (:func:`shards.drop_own_docs`), so ``k - 1`` rows per query are written.

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
    named = sum(len(layout.parts) for layout in layouts)
    if named != len(results):
        raise ValueError(f"the layouts name {named} results, {len(results)} were passed")
    merge_s = write_s = 0.0
    rows = position = 0
    metadata = {**metadata, "settopk.score": score_definition(score)}  # the file names the score that ranked it
    writer = PartWriter(work, index, metadata=metadata, row_group_rows=row_group_rows)
    own_ids = np.array([int(q) for q in query_ids], dtype=np.int64) if exclude_self else None
    try:
        for layout in layouts:
            fetched = _fetched(results[position : position + len(layout.parts)])
            position += len(layout.parts)
            start = time.perf_counter()
            n = layout.hi - layout.lo
            per_shard: list[list] = [[] for _ in range(n_shards)]
            for (shard, batch_rows), result in zip(layout.parts, fetched):
                per_shard[shard].append((batch_rows, result))
            parts = [scatter_rounds(n, k, pieces) for pieces in per_shard if pieces]
            # One shard's list is already the exact top-k (replicas and single-shard layouts).
            topk = parts[0] if len(parts) == 1 else merge_topk(parts, query_len[layout.lo : layout.hi], k, max_len, score)
            if exclude_self:
                topk = drop_own_docs(topk, own_ids[layout.lo : layout.hi])
            middle = time.perf_counter()
            table = results_table(query_ids[layout.lo : layout.hi], query_len[layout.lo : layout.hi], topk, score)
            writer.write(table)
            rows += table.num_rows
            merge_s += middle - start
            write_s += time.perf_counter() - middle
        start = time.perf_counter()
        writer.close()
        write_s += time.perf_counter() - start
    except BaseException:
        writer.abort()
        raise
    return {"rows": rows, "merge_s": merge_s, "write_s": write_s}


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


def plan_chunks(n_queries: int, chunk_size: int) -> list[Chunk]:
    """Cut ``n_queries`` queries into consecutive chunks of at most ``chunk_size``."""
    return [Chunk(i, lo, min(lo + chunk_size, n_queries)) for i, lo in enumerate(range(0, n_queries, chunk_size))]


def resume_key(**parts) -> str:
    """SHA-256 of the JSON of ``parts`` (sorted keys): equal only for runs whose results are equal."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def open_work_dir(path: pathlib.Path, key: str, chunks: list[Chunk], run_id: str) -> tuple[set[int], str]:
    """Create or reopen a run's work directory.

    Parameters
    ----------
    path : pathlib.Path
        The work directory.
    key : str
        The run's :func:`resume_key`.
    chunks : list of Chunk
        The run's chunks.
    run_id : str
        The run id to record for a fresh start.

    Returns
    -------
    (set of int, str)
        Indices of chunks whose part is already committed (empty for a fresh start), and
        the run id: the interrupted run's when resuming, so every part and the manifest
        name one run. Leftover temporary files of a killed writer are removed.
    """
    if path.exists():
        try:
            recorded = json.loads((path / _KEY_FILE).read_text())
        except (OSError, ValueError):
            recorded = {}
        if recorded.get("key") != key:
            shutil.rmtree(path)  # an earlier run of other inputs or settings: its parts do not apply
        else:
            run_id = recorded.get("run_id", run_id)
    path.mkdir(parents=True, exist_ok=True)
    for leftover in path.glob(".tmp-*"):  # a killed writer's file, or an older version's directory
        shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
    key_file = path / _KEY_FILE
    if not key_file.exists():
        tmp = path / ".tmp-key"
        tmp.write_text(json.dumps({"key": key, "run_id": run_id}) + "\n")
        os.replace(tmp, key_file)
    return {c.index for c in chunks if (path / part_name(c.index)).exists()}, run_id


def check_parts(path: pathlib.Path, chunks: list[Chunk], rows_per_query: int) -> int:
    """Check every part before the commit: present, and exactly ``rows_per_query`` rows per
    query with ranks ``1..rows_per_query`` in order.

    Returns
    -------
    int
        Total rows.

    Raises
    ------
    RuntimeError
        Naming the first part that is missing or whose rows do not match the plan.
    """
    total = 0
    for c in chunks:
        file = path / part_name(c.index)
        if not file.exists():
            raise RuntimeError(f"{file}: part of queries {c.lo}..{c.hi - 1} is missing; rerun the job to compute it")
        ranks = pq.read_table(file, columns=["rank"])["rank"].to_numpy()
        expected = (c.hi - c.lo) * rows_per_query
        if len(ranks) != expected:
            raise RuntimeError(f"{file}: {len(ranks)} rows, expected {expected} for queries {c.lo}..{c.hi - 1}; rerun with --force")
        if not np.array_equal(ranks, np.tile(np.arange(1, rows_per_query + 1), c.hi - c.lo)):
            raise RuntimeError(f"{file}: ranks are not 1..{rows_per_query} for every query; rerun with --force")
        total += len(ranks)
    return total
