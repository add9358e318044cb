"""Query chunks committed one by one into a work directory, so a killed run resumes.

A run's queries are cut into chunks of ``query_chunk_size``. Each finished chunk is
written as its own part file (atomically, by its merge task: :mod:`jobs.merge_task`)
into the run's work directory, which
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
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq

from .output import part_name

__all__ = ["Chunk", "plan_chunks", "resume_key", "open_work_dir", "check_parts"]

_KEY_FILE = "_resume.json"


@dataclass(frozen=True)
class Chunk:
    """Queries ``[lo, hi)`` of the run, written as part ``index``."""

    index: int
    lo: int
    hi: int


def plan_chunks(n_queries: int, chunk_size: int) -> list[Chunk]:
    """Cut ``n_queries`` queries into consecutive chunks of at most ``chunk_size``."""
    return [Chunk(i, lo, min(lo + chunk_size, n_queries)) for i, lo in enumerate(range(0, n_queries, chunk_size))]


def resume_key(**components) -> str:
    """SHA-256 of the JSON of ``components`` (sorted keys): equal only for runs whose results are equal."""
    return hashlib.sha256(json.dumps(components, sort_keys=True, default=str).encode()).hexdigest()


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
