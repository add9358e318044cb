"""Query chunks committed one by one into a work directory, so a killed run resumes.

A run's queries are cut into chunks of ``query_chunk_size``. Each finished chunk is
written as its own part file (atomically, by its merge task: :mod:`settopk.jobs.merge_task`)
into the run's work directory, which
sits beside the dataset root and is named after the output (see
:func:`settopk.jobs.output.work_dir`). The directory also records the run's *resume key*:
a hash of everything the results depend on (input fingerprints, config, k). A
rerun with the same key skips the chunks already there; a different key means
the inputs or settings changed, and the old parts are discarded. When every part
is present and checked, the directory is committed as the result (:func:`settopk.jobs.output.commit_results`).
The work directory may be a local path or a URI (a prefix on an object store).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from settopk.shards.location import Location
from .output import part_name

__all__ = ["Chunk", "ReadAhead", "TAIL_MIN_QUERIES", "TAIL_SHARE", "chunk_stream", "plan_chunks", "resume_key", "open_work_dir",
           "drop_resume_key", "check_parts", "pair_counts_metadata", "read_pair_counts", "read_part_pair_ids"]

_KEY_FILE = "_resume.json"
_COUNTS_KEY = "settopk.pair_counts"  # a threshold part's rows per query: int32 little-endian, zlib, base64
_CHECK_THREADS = min(8, os.cpu_count() or 1)  # parts checked at once before the commit
_CHECK_BATCH_ROWS = 1 << 20  # ranks read at a time per part (a few MB)


@dataclass(frozen=True)
class Chunk:
    """Queries ``[lo, hi)`` of the run, written as part ``index``."""

    index: int
    lo: int
    hi: int


TAIL_SHARE = 4
"""Near the run's end a chunk holds at most ``1 / TAIL_SHARE`` of the queries after it."""
TAIL_MIN_QUERIES = 10_000
"""Fewest queries in a chunk cut smaller than ``query_chunk_size``: smaller parts are not worth a task."""


def plan_chunks(n_queries: int, chunk_size: int) -> list[Chunk]:
    """Cut ``n_queries`` queries into consecutive chunks of at most ``chunk_size``, smaller near the end.

    A chunk's part is written by one merge task on one core, while the GPUs' results arrive
    several times as fast (docs/benchmarks.md, "Host path with stand-in shards", has the rates
    of both). For the search's end not to wait for the
    writes, each part must be written while the queries after it are searched, so near the
    end a chunk holds no more than a quarter (1 / :data:`TAIL_SHARE`) of the queries after it,
    and at least :data:`TAIL_MIN_QUERIES`: the chunks shrink toward the end, and the last ones
    are written by several tasks at once. Earlier chunks keep ``chunk_size``, so parts stay large. A chunk
    never spans two windows of ``chunk_size`` queries (the queries are read in those windows:
    :func:`chunk_stream`), and no window keeps a remainder smaller than ``TAIL_MIN_QUERIES``.

    Returns
    -------
    list of Chunk
        Indexed from 0 in query order; empty for ``n_queries == 0``.
    """
    bounds, hi = [], n_queries
    while hi > 0:
        window_lo = (hi - 1) // chunk_size * chunk_size
        lo = max(window_lo, hi - max(TAIL_MIN_QUERIES, (n_queries - hi) // TAIL_SHARE))
        if lo - window_lo < TAIL_MIN_QUERIES:
            lo = window_lo
        bounds.append((lo, hi))
        hi = lo
    return [Chunk(i, lo, hi) for i, (lo, hi) in enumerate(reversed(bounds))]


def chunk_stream(chunks: list[Chunk], windows, chunk_size: int, done=frozenset()):
    """Pair each chunk not in ``done`` with its queries: ``(chunk, query_ids, queries)``.

    Parameters
    ----------
    chunks : list of Chunk
        :func:`plan_chunks` ``(n_queries, chunk_size)``.
    windows : iterable of (list of str, SetBatch)
        The queries in windows of ``chunk_size`` (:meth:`settopk.shards.inputs.QueryStream.chunks`), read
        one at a time; a window that :func:`plan_chunks` cut is sliced here.
    chunk_size : int
    done : set of int
        Indices of chunks already committed: read past, not yielded.
    """
    pending = iter(chunks)
    chunk = next(pending, None)
    for w, (ids, sets) in enumerate(windows):
        lo = w * chunk_size
        hi = lo + len(ids)
        while chunk is not None and chunk.lo < hi:
            if chunk.index not in done:
                if (chunk.lo, chunk.hi) == (lo, hi):
                    yield chunk, ids, sets
                else:
                    a, b = chunk.lo - lo, chunk.hi - lo
                    yield chunk, ids[a:b], sets.take(np.arange(a, b))
            chunk = next(pending, None)


class ReadAhead:
    """The items of ``items``, each read in a thread while the caller works on the one before.

    The first item is read from construction on, so a caller can start the read before it
    needs the items (the job starts it before it waits for the shards to load). Iterate it
    once; an error raised by ``items`` is raised where the item would have come.

    Parameters
    ----------
    items : iterable
        Read in one thread, one item ahead of the caller (:func:`chunk_stream`).
    """

    _END = object()

    def __init__(self, items) -> None:
        self._items = iter(items)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="settopk-read-ahead")
        self._next = self._pool.submit(next, self._items, self._END)

    def __iter__(self):
        while True:
            item = self._next.result()
            if item is self._END:
                return
            self._next = self._pool.submit(next, self._items, self._END)
            yield item

    def close(self) -> None:
        """Stop reading ahead (waits for an item being read); may be called more than once."""
        self._next.cancel()
        self._pool.shutdown(wait=True)


def resume_key(**components) -> str:
    """SHA-256 of the JSON of ``components`` (sorted keys): equal only for runs whose results are equal."""
    return hashlib.sha256(json.dumps(components, sort_keys=True, default=str).encode()).hexdigest()


def open_work_dir(path, key: str, chunks: list[Chunk], run_id: str) -> tuple[set[int], str]:
    """Create or reopen a run's work directory.

    Parameters
    ----------
    path : path or str
        The work directory: a local path, or a URI (a prefix on a store).
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
    work = Location.real(path)
    if work.exists():
        try:
            recorded = json.loads((work / _KEY_FILE).read_bytes())
        except (OSError, ValueError):
            recorded = {}
        if recorded.get("key") != key:
            work.delete_tree()  # an earlier run of other inputs or settings: its parts do not apply
        else:
            run_id = recorded.get("run_id", run_id)
    work.make_dirs()
    names = set()
    for entry in work.children():
        if entry.base_name.startswith(".tmp-"):  # a killed writer's file, or an older version's directory
            leftover = work / entry.base_name
            leftover.delete_tree() if entry.type == pafs.FileType.Directory else leftover.delete(missing_ok=True)
        else:
            names.add(entry.base_name)
    if _KEY_FILE not in names:
        (work / _KEY_FILE).write_bytes((json.dumps({"key": key, "run_id": run_id}) + "\n").encode())
    return {c.index for c in chunks if part_name(c.index) in names}, run_id


def drop_resume_key(path) -> None:
    """Remove the work directory's resume key before its commit: the directory becomes the
    result (a local rename), which holds only parts."""
    (Location.real(path) / _KEY_FILE).delete(missing_ok=True)


def pair_counts_metadata(counts) -> dict:
    """The footer metadata that records a threshold part's rows per query (:func:`read_pair_counts`):
    a query's pairs are not fixed in number, so the part says how many each query has, and
    :func:`check_parts` checks the part against it (compressed: most counts are small or zero)."""
    raw = np.asarray(counts, dtype="<i4").tobytes()
    return {_COUNTS_KEY: base64.b64encode(zlib.compress(raw, 6)).decode("ascii"), "settopk.queries": str(len(counts))}


def read_pair_counts(metadata) -> np.ndarray | None:
    """Rows per query recorded in a part's footer (:func:`pair_counts_metadata`); None where absent
    (a top-k part). ``metadata``: ``pyarrow.parquet.FileMetaData.metadata`` (bytes keys)."""
    value = (metadata or {}).get(_COUNTS_KEY.encode())
    if value is None:
        return None
    return np.frombuffer(zlib.decompress(base64.b64decode(value)), dtype="<i4").astype(np.int64)


def read_part_pair_ids(directory, index: int) -> list[np.ndarray]:
    """Doc ids of a threshold part, one array per query of its chunk (empty where a query has no pair)."""
    part = Location.real(directory) / part_name(index)
    with part.fs.open_input_file(part.path) as handle:
        parquet = pq.ParquetFile(handle)
        counts = read_pair_counts(parquet.metadata.metadata)
        ids = parquet.read(columns=["doc_id"], use_threads=False)["doc_id"].to_numpy()
    if counts is None:
        raise RuntimeError(f"{part}: no {_COUNTS_KEY} in its footer, expected a threshold run's part; rerun with --force")
    return np.split(ids, np.cumsum(counts)[:-1])


def check_parts(path, chunks: list[Chunk], rows_per_query: int | None) -> int:
    """Check every part before the commit: present, and exactly ``rows_per_query`` rows per
    query with ranks ``1..rows_per_query`` in order; for a threshold run (``rows_per_query``
    None), exactly the rows per query its footer records (:func:`pair_counts_metadata`), one
    count per query of its chunk, with ranks ``1..n`` per query in order.

    The parts are read on several threads (Arrow decodes without the GIL): at 10 M queries the
    check reads a billion ranks.

    Returns
    -------
    int
        Total rows.

    Raises
    ------
    RuntimeError
        Naming the first part (in query order) that is missing or whose rows do not match the plan.
    """
    work = Location.real(path)
    with ThreadPoolExecutor(min(_CHECK_THREADS, max(1, len(chunks)))) as pool:
        outcomes = list(pool.map(lambda c: _check_part(work, c, rows_per_query), chunks))
    for outcome in outcomes:
        if isinstance(outcome, str):
            raise RuntimeError(outcome)
    return sum(outcomes)


def _check_part(work: Location, c: Chunk, rows_per_query: int | None) -> int | str:
    """Rows of chunk ``c``'s part, or what is wrong with it. Reads the ranks a batch at a time, so
    that several parts are checked at once in little memory."""
    file = work / part_name(c.index)
    if not file.is_file():
        return f"{file}: part of queries {c.lo}..{c.hi - 1} is missing; rerun the job to compute it"
    with file.fs.open_input_file(file.path) as handle:
        parquet = pq.ParquetFile(handle)
        if rows_per_query is None:
            counts = read_pair_counts(parquet.metadata.metadata)
            if counts is None or len(counts) != c.hi - c.lo:
                found = "none" if counts is None else f"{len(counts)} queries"
                return (f"{file}: its footer's rows per query ({_COUNTS_KEY}) cover {found}, expected "
                        f"{c.hi - c.lo} for queries {c.lo}..{c.hi - 1}; rerun with --force")
            starts = np.cumsum(counts) - counts  # each query's first row
        else:
            counts = np.full(c.hi - c.lo, rows_per_query, dtype=np.int64)
            starts = None
        expected = int(counts.sum())
        if parquet.metadata.num_rows != expected:
            return f"{file}: {parquet.metadata.num_rows} rows, expected {expected} for queries {c.lo}..{c.hi - 1}; rerun with --force"
        seen = 0
        for batch in parquet.iter_batches(batch_size=_CHECK_BATCH_ROWS, columns=["rank"], use_threads=False):
            ranks = batch.column(0).to_numpy()
            position = np.arange(seen, seen + len(ranks))
            if starts is None:
                want = position % rows_per_query + 1
            else:  # the query of each row: the last one starting at or before it (empty queries start nowhere)
                nonempty = np.flatnonzero(counts)
                want = position - starts[nonempty][np.searchsorted(starts[nonempty], position, side="right") - 1] + 1
            if not np.array_equal(ranks, want):
                what = rows_per_query if starts is None else "n"
                return f"{file}: ranks are not 1..{what} for every query; rerun with --force"
            seen += len(ranks)
    return expected
