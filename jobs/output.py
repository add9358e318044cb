"""Result output: the Parquet schema, the atomic dataset write, and the TSV.

A reader never sees a partial result: the dataset is written into a staging
directory beside the dataset root (same filesystem, outside the root, so
DuckDB/Polars/Spark scans of the root never pick it up), completed with an empty
``_SUCCESS``, then renamed into place in one ``os.rename``.

A result directory holds only its part files and the empty ``_SUCCESS``: Polars refuses a
directory holding any other non-empty file, and reads any ``.parquet`` below it as data. The
run's manifest and its quarantined lines live in the *run record*, a sibling of the dataset
root (:func:`record_dir`): ``ROOT.run/manifest.json`` (``ROOT.run/dt=YYYY-MM-DD/manifest.json``
for a partition), written before the result appears; :func:`read_manifest` finds it.

Two layouts (config ``output.partition``):

- ``"none"``: ``--out DIR`` is the result: ``DIR/part-00000.parquet``.
- ``"dt"``: ``--out ROOT`` is a Hive-partitioned dataset root and each run
  writes ``ROOT/dt=YYYY-MM-DD/part-00000.parquet``; DuckDB, Polars and Spark read ``dt``
  as a date, pyarrow and pandas as strings unless given :data:`DT_PARTITIONING`.

The Parquet files are zstd-compressed, hold rows in query order then rank, with
row groups of whole queries, and carry the run in their schema metadata
(``settopk.run_id``, ``settopk.k``, ``settopk.score``).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import uuid
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from kernels import DEFAULT_SCORE, TopK, score_definition, score_value

__all__ = [
    "RESULT_SCHEMA",
    "DT_PARTITIONING",
    "ROW_GROUP_ROWS",
    "OutputExistsError",
    "check_output_dir",
    "check_dataset_root",
    "partition_dir",
    "open_results",
    "results_table",
    "write_results",
    "write_tsv",
    "part_name",
    "write_part",
    "PartWriter",
    "commit_results",
    "work_dir",
    "REJECTED_SCHEMA",
    "record_dir",
    "manifest_path",
    "rejected_path",
    "read_manifest",
    "rejected_paths",
]

RESULT_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("rank", pa.int16(), nullable=False),
        pa.field("doc_id", pa.int64(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
        pa.field("overlap", pa.int16(), nullable=False),
        pa.field("query_len", pa.int16(), nullable=False),
        pa.field("doc_len", pa.int16(), nullable=False),
    ],
    metadata={
        b"settopk.score": score_definition(DEFAULT_SCORE).encode(),
        b"settopk.schema_version": b"1",
    },
)
"""Schema of the result dataset: one row per (query, rank), rank 1 is best.

Signed integer types only (unsigned Parquet integers need Spark >= 3.2). Each
written file adds ``settopk.run_id`` and ``settopk.k`` to this metadata, and
replaces ``settopk.score`` (the default score's name and definition) with the
run's (:func:`kernels.score_definition`)."""

PARTITION_KEY = "dt"
DT_PARTITIONING = ds.partitioning(pa.schema([(PARTITION_KEY, pa.date32())]), flavor="hive")
"""Hive partitioning of a nightly dataset root, with ``dt`` pinned to ``date32``
(pyarrow would otherwise infer ``string``, while DuckDB and Polars infer a date)."""

ROW_GROUP_ROWS = 131_072
"""Default target rows per row group (config ``output.row_group_rows``)."""

SUCCESS = "_SUCCESS"  # empty: Polars skips empty files in a directory scan, and fails on others
RECORD_SUFFIX = ".run"  # the run record of ROOT is ROOT.run, beside it
MANIFEST = "manifest.json"
REJECTED = "rejected.parquet"
_PART_TEMPLATE = "part-{i}.parquet"

REJECTED_SCHEMA = pa.schema(
    [
        pa.field("input", pa.string(), nullable=False),  # "docs" or "queries"
        pa.field("path", pa.string(), nullable=False),
        pa.field("line", pa.int64()),  # 1-based, text inputs
        pa.field("row", pa.int64()),  # 0-based within the file, Parquet inputs
        pa.field("reason", pa.string(), nullable=False),
    ]
)
"""Schema of the run record's ``rejected.parquet`` (:func:`rejected_path`): the input lines and
rows set aside under ``on_invalid: quarantine``, with why."""
# Doc ids are nearly all distinct within a row group, so a dictionary costs time and space and
# saves nothing; the other columns repeat values and keep their dictionaries.
_DICTIONARY_COLUMNS = [f.name for f in RESULT_SCHEMA if f.name != "doc_id"]
_PARTITION_NAME = re.compile(r"dt=\d{4}-\d{2}-\d{2}")


class OutputExistsError(FileExistsError):
    """The output directory exists and is not a finished result of this job."""


def check_output_dir(out_dir: str | os.PathLike, force: bool) -> bool:
    """Decide, before any work starts, whether the job may write ``out_dir``.

    Returns
    -------
    bool
        True if ``out_dir`` already holds a finished result (``_SUCCESS``) and
        ``force`` is false: the run is a no-op.

    Raises
    ------
    OutputExistsError
        If ``out_dir`` exists without ``_SUCCESS`` (not written by this job, or a
        different tool's directory), or is a file.
    """
    out = pathlib.Path(out_dir)
    _refuse_a_record(out)
    if not out.exists():
        if out.parent.exists() and not out.parent.is_dir():
            raise OutputExistsError(f"{out}: {out.parent} is a file, not a directory; choose another --out")
        return False
    if out.is_dir() and (out / SUCCESS).exists():
        return not force
    if out.is_dir() and not any(out.iterdir()):
        return False
    raise OutputExistsError(
        f"{out}: exists and is not a finished settopk result (no {SUCCESS}); "
        "choose another --out or remove it"
    )


def check_dataset_root(root: str | os.PathLike) -> None:
    """Check that ``root`` can hold ``dt=YYYY-MM-DD`` partitions, before any work starts.

    Raises
    ------
    OutputExistsError
        If ``root`` is a file, or a directory holding anything other than
        ``dt=YYYY-MM-DD`` partitions and hidden (``.``/``_``) entries, for example
        an unpartitioned result: readers of the root would then mix the two.
    """
    root = pathlib.Path(root)
    _refuse_a_record(root)
    if not root.exists():
        if root.parent.exists() and not root.parent.is_dir():
            raise OutputExistsError(f"{root}: {root.parent} is a file, not a directory; choose another --out")
        return
    if not root.is_dir():
        raise OutputExistsError(f"{root}: is a file; --out of a partitioned config must be a dataset root directory")
    strays = sorted(
        p.name for p in root.iterdir()
        if not p.name.startswith((".", "_")) and not (p.is_dir() and _PARTITION_NAME.fullmatch(p.name))
    )
    if strays:
        raise OutputExistsError(
            f"{root}: expected a dataset root holding only dt=YYYY-MM-DD partitions, found {strays[:3]}; "
            "choose another --out for the partitioned (nightly) dataset"
        )


def _refuse_a_record(path: pathlib.Path) -> None:
    """Refuse an output that is the run record of a result beside it (``X.run`` next to ``X``)."""
    if path.name.endswith(RECORD_SUFFIX) and path.with_name(path.name[: -len(RECORD_SUFFIX)]).is_dir():
        raise OutputExistsError(
            f"{path}: expected a result path, found the run record (manifest) of "
            f"{path.with_name(path.name[: -len(RECORD_SUFFIX)])}; choose another --out"
        )


def record_dir(out_dir: str | os.PathLike, dataset_root: str | os.PathLike | None = None) -> pathlib.Path:
    """The run record of the result at ``out_dir``: where its manifest and quarantined lines live.

    A sibling of the dataset root, mirroring the result's place in it: ``ROOT.run`` for a result
    directory ``ROOT``, ``ROOT.run/dt=YYYY-MM-DD`` for a partition. Outside the root, so no
    reader of the results ever sees it.

    Parameters
    ----------
    out_dir : path
        The result directory.
    dataset_root : path, optional
        Its dataset root. By default ``out_dir`` itself, or its parent where ``out_dir`` is named
        ``dt=YYYY-MM-DD`` (a partition).
    """
    out = pathlib.Path(os.path.realpath(out_dir))  # as the commit resolves it (_out_and_root)
    if dataset_root is None:
        root = out.parent if _PARTITION_NAME.fullmatch(out.name) else out
    else:
        root = pathlib.Path(os.path.realpath(dataset_root))
    record = root.with_name(root.name + RECORD_SUFFIX)
    return record / out.relative_to(root) if out != root else record


def manifest_path(out_dir: str | os.PathLike, dataset_root: str | os.PathLike | None = None) -> pathlib.Path:
    """The manifest of the result at ``out_dir``: ``manifest.json`` in its :func:`record_dir`."""
    return record_dir(out_dir, dataset_root) / MANIFEST


def rejected_path(out_dir: str | os.PathLike, dataset_root: str | os.PathLike | None = None) -> pathlib.Path:
    """The quarantined input lines of the result at ``out_dir``: ``rejected.parquet`` in its
    :func:`record_dir` (present only for a run under ``on_invalid: quarantine``)."""
    return record_dir(out_dir, dataset_root) / REJECTED


def read_manifest(out_dir: str | os.PathLike, dataset_root: str | os.PathLike | None = None) -> dict:
    """The manifest of the finished result at ``out_dir`` (see :func:`record_dir` for ``dataset_root``).

    Raises
    ------
    FileNotFoundError
        If ``out_dir`` holds no finished result (no ``_SUCCESS``), or its manifest is missing.
    ValueError
        If the manifest is not JSON.
    """
    if not (pathlib.Path(out_dir) / SUCCESS).is_file():
        raise FileNotFoundError(f"{out_dir}: expected a finished settopk result, found no {SUCCESS}")
    return json.loads(manifest_path(out_dir, dataset_root).read_text())


def partition_dir(root: str | os.PathLike, day) -> pathlib.Path:
    """The Hive partition of ``day`` (a ``datetime.date``) under ``root``: ``root/dt=YYYY-MM-DD``."""
    return pathlib.Path(root) / f"{PARTITION_KEY}={day.isoformat()}"


def open_results(path: str | os.PathLike) -> ds.Dataset:
    """Open a result directory or a nightly dataset root as a ``pyarrow.dataset.Dataset``.

    A root of ``dt=YYYY-MM-DD`` partitions gets a ``dt`` column of type ``date32``;
    ``_SUCCESS`` and hidden entries are skipped.
    """
    partitioned = any(_PARTITION_NAME.fullmatch(p.name) for p in pathlib.Path(path).iterdir())
    return ds.dataset(path, format="parquet", partitioning=DT_PARTITIONING if partitioned else None)


def results_table(query_ids: Sequence[str], query_len: np.ndarray, topk: TopK, score: str = DEFAULT_SCORE) -> pa.Table:
    """Rows of the result dataset for a batch of queries, in query order then rank.

    Parameters
    ----------
    query_ids : sequence of str, length n_queries
    query_len : numpy.ndarray of int, shape (n_queries,)
    topk : TopK
        Shape ``(n_queries, k)``, host memory; ``-1`` padding is dropped.
    score : str
        The score ``topk`` is ranked by (one of :data:`kernels.SCORES`); its float64
        value (:func:`kernels.score_value`) fills the ``score`` column.

    Returns
    -------
    pyarrow.Table
        With schema :data:`RESULT_SCHEMA`.

    Raises
    ------
    ValueError
        If ``score`` is unknown.
    """
    n_queries, k = topk.doc_ids.shape
    query_len = np.asarray(query_len, dtype=np.int16)
    valid = topk.doc_ids >= 0
    if valid.all():  # the common case (n_docs >= k): every row full, no mask copies
        rows_q = np.repeat(np.arange(n_queries, dtype=np.int32), k)
        rank = np.tile(np.arange(1, k + 1, dtype=np.int16), n_queries)
        doc_ids, overlap, doc_len = (a.reshape(-1) for a in topk)
        qlen = np.repeat(query_len, k)
    else:
        rows_q, rows_r = np.nonzero(valid)
        rows_q = rows_q.astype(np.int32)
        rank = (rows_r + 1).astype(np.int16)
        doc_ids, overlap, doc_len = (a[valid] for a in topk)
        qlen = query_len[rows_q]
    ids = pa.array(list(query_ids), pa.string())
    columns = [
        ids.take(pa.array(rows_q)) if len(ids) else pa.array([], pa.string()),
        pa.array(rank),
        pa.array(doc_ids.astype(np.int64, copy=False)),
        pa.array(score_value(overlap, qlen, doc_len, score)),
        pa.array(overlap.astype(np.int16, copy=False)),
        pa.array(qlen),
        pa.array(doc_len.astype(np.int16, copy=False)),
    ]
    return pa.Table.from_arrays(columns, schema=RESULT_SCHEMA)


def write_results(
    out_dir: str | os.PathLike,
    table: pa.Table,
    manifest: dict,
    *,
    dataset_root: str | os.PathLike | None = None,
    metadata: Mapping[str, str] | None = None,
    row_group_rows: int = ROW_GROUP_ROWS,
) -> pathlib.Path:
    """Write ``table`` as a Parquet dataset at ``out_dir``, atomically.

    The directory holds ``part-00000.parquet`` (zstd) and ``_SUCCESS``; the manifest goes
    to its run record (:func:`manifest_path`). It appears in one rename; an existing finished
    result at ``out_dir`` is replaced only after the new one is complete.

    Parameters
    ----------
    out_dir : path
        The result directory (for a nightly run, the partition ``ROOT/dt=...``).
    table : pyarrow.Table
        Rows with :data:`RESULT_SCHEMA`, in query order then rank (kept as given).
    manifest : dict
        Written as the run record's ``manifest.json``.
    dataset_root : path, optional
        The root that readers scan, ``out_dir`` itself by default. Staging happens
        beside it, never inside it, so a scan of the root never sees a partial write.
    metadata : mapping of str to str, optional
        Extra Parquet schema metadata; keys must start with ``settopk.``.
    row_group_rows : int
        Target rows per row group, rounded down to whole queries (rows per query =
        the largest ``rank``), so every group but the last has the same size.

    Returns
    -------
    pathlib.Path
        The absolute result directory.

    Raises
    ------
    ValueError
        If ``table`` does not have :data:`RESULT_SCHEMA`, a metadata key is not
        namespaced, or ``out_dir`` is not inside ``dataset_root``.
    """
    out, root = _out_and_root(out_dir, dataset_root)
    stage = root.parent / f".{root.name}.staging-{uuid.uuid4().hex}"
    out.parent.mkdir(parents=True, exist_ok=True)
    stage.mkdir()
    try:
        write_part(stage, 0, table, metadata=metadata, row_group_rows=row_group_rows)
        return commit_results(stage, out, manifest, dataset_root=root)
    finally:
        if stage.exists():
            shutil.rmtree(stage)


def _out_and_root(out_dir, dataset_root) -> tuple[pathlib.Path, pathlib.Path]:
    """Absolute result directory and dataset root; the result must lie inside the root, since
    staging, work and replaced directories go beside the root and nothing is written elsewhere."""
    out = pathlib.Path(os.path.realpath(out_dir))
    root = pathlib.Path(os.path.realpath(dataset_root)) if dataset_root is not None else out
    if root != out and root not in out.parents:
        raise ValueError(f"{out} is not inside the dataset root {root}")
    return out, root


def part_name(index: int) -> str:
    """File name of result part ``index``: ``part-00000.parquet``, ``part-00001.parquet``, ..."""
    return _PART_TEMPLATE.format(i=f"{index:05d}")


def work_dir(out_dir: str | os.PathLike, dataset_root: str | os.PathLike | None = None) -> pathlib.Path:
    """The directory where a run's parts accumulate before the commit: beside the dataset
    root (never inside it, so scans of the root never see it), named after ``out_dir`` so a
    rerun of the same target finds the parts an interrupted run committed."""
    out, root = _out_and_root(out_dir, dataset_root)
    tag = hashlib.sha256(str(out).encode()).hexdigest()[:12]
    return root.parent / f".{root.name}.work-{tag}"


class PartWriter:
    """Writes result part ``index`` into ``directory`` table by table, atomically.

    Rows go to a temporary file as they come, in row groups of whole queries
    (``row_group_rows`` rounded down to the rows per query, the largest ``rank``
    of the first rows written), every group full but the last; :meth:`close`
    renames the file into place. A merge task writes a chunk's batches as their
    searches end, so only the last batch is written after the chunk's search.

    Parameters
    ----------
    directory : path
        A staging or work directory (not yet visible to readers).
    index : int
        Part number; the file is :func:`part_name` ``(index)``.
    metadata : mapping of str to str, optional
        Extra Parquet schema metadata; keys must start with ``settopk.``.
    row_group_rows : int
        Target rows per row group.

    Raises
    ------
    ValueError
        If a metadata key is not namespaced, or ``row_group_rows < 1``.
    """

    def __init__(self, directory, index: int, *, metadata: Mapping[str, str] | None = None,
                 row_group_rows: int = ROW_GROUP_ROWS):
        extra = dict(metadata or {})
        bad = sorted(key for key in extra if not key.startswith("settopk."))
        if bad:
            raise ValueError(f"Parquet metadata keys must start with 'settopk.', found {bad}; rename them")
        if row_group_rows < 1:
            raise ValueError(f"row_group_rows must be >= 1, found {row_group_rows}")
        self.final = pathlib.Path(directory) / part_name(index)
        self.tmp = pathlib.Path(directory) / f".tmp-{uuid.uuid4().hex}.parquet"
        file_metadata = {**RESULT_SCHEMA.metadata, **{k.encode(): str(v).encode() for k, v in extra.items()}}
        self._schema = RESULT_SCHEMA.with_metadata(file_metadata)
        self._writer = pq.ParquetWriter(self.tmp, self._schema, compression="zstd", use_dictionary=_DICTIONARY_COLUMNS)
        self._row_group_rows = row_group_rows
        self._group = 0  # rows per group, fixed by the first rows written
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    def write(self, table: pa.Table) -> None:
        """Append rows with :data:`RESULT_SCHEMA`, in query order then rank, after those written.

        Raises
        ------
        ValueError
            If ``table`` does not have :data:`RESULT_SCHEMA`.
        """
        if not table.schema.equals(RESULT_SCHEMA, check_metadata=False):
            raise ValueError(f"result table schema differs from RESULT_SCHEMA:\n{table.schema}")
        if table.num_rows == 0:
            return
        if not self._group:
            rows_per_query = max(1, int(pc.max(table["rank"]).as_py()))
            self._group = max(1, self._row_group_rows // rows_per_query) * rows_per_query
        self._pending.append(table.replace_schema_metadata(self._schema.metadata))
        self._pending_rows += table.num_rows
        if self._pending_rows >= self._group:
            self._flush(self._pending_rows - self._pending_rows % self._group)

    def _flush(self, n_rows: int) -> None:
        rows = pa.concat_tables(self._pending)
        self._writer.write_table(rows.slice(0, n_rows), row_group_size=self._group)
        rest = rows.slice(n_rows)
        self._pending, self._pending_rows = ([rest] if rest.num_rows else []), rest.num_rows

    def close(self) -> pathlib.Path:
        """Write the rows still held, close the file and rename it into place; returns its path."""
        try:
            if self._pending_rows:
                self._flush(self._pending_rows)
            self._writer.close()
            os.replace(self.tmp, self.final)
        finally:
            self.tmp.unlink(missing_ok=True)
        return self.final

    def abort(self) -> None:
        """Drop the temporary file (after an error); nothing appears under the part's name."""
        try:
            self._writer.close()
        finally:
            self.tmp.unlink(missing_ok=True)


def write_part(
    directory: str | os.PathLike,
    index: int,
    table: pa.Table,
    *,
    metadata: Mapping[str, str] | None = None,
    row_group_rows: int = ROW_GROUP_ROWS,
) -> pathlib.Path:
    """Write result part ``index`` into ``directory`` in one call, atomically (:class:`PartWriter`).

    Parameters
    ----------
    directory : path
        A staging or work directory (not yet visible to readers).
    index : int
        Part number; the file is :func:`part_name` ``(index)``.
    table : pyarrow.Table
        Rows with :data:`RESULT_SCHEMA`, in query order then rank (kept as given).
    metadata : mapping of str to str, optional
        Extra Parquet schema metadata; keys must start with ``settopk.``.
    row_group_rows : int
        Target rows per row group, rounded down to whole queries (rows per query =
        the largest ``rank``), so every group but the last has the same size.

    Returns
    -------
    pathlib.Path
        The part file.

    Raises
    ------
    ValueError
        If ``table`` does not have :data:`RESULT_SCHEMA`, a metadata key is not
        namespaced, or ``row_group_rows < 1``.
    """
    writer = PartWriter(directory, index, metadata=metadata, row_group_rows=row_group_rows)
    try:
        writer.write(table)
    except BaseException:
        writer.abort()
        raise
    return writer.close()


def _write_rejected(path: pathlib.Path, table: pa.Table) -> None:
    """Write the quarantined lines as ``path``, atomically (a temporary file, then a rename)."""
    if not table.schema.equals(REJECTED_SCHEMA, check_metadata=False):
        raise ValueError(f"rejected table schema differs from REJECTED_SCHEMA:\n{table.schema}")
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def rejected_paths(out_dir: str | os.PathLike, input_name: str, dataset_root: str | os.PathLike | None = None) -> set[str]:
    """The files of ``input_name`` (``"docs"`` or ``"queries"``) that the result at ``out_dir``
    lists as quarantined in its run record (empty if it lists none)."""
    path = rejected_path(out_dir, dataset_root)
    if not path.is_file():
        return set()
    table = pq.read_table(path, columns=["input", "path"]).to_pydict()
    return {p for name, p in zip(table["input"], table["path"]) if name == input_name}


def commit_results(
    stage: str | os.PathLike,
    out_dir: str | os.PathLike,
    manifest: dict,
    *,
    dataset_root: str | os.PathLike | None = None,
    rejected: pa.Table | None = None,
) -> pathlib.Path:
    """Make a staged result visible: add ``_SUCCESS``, write the run record, then rename the
    staging directory to ``out_dir`` in one step.

    The order keeps a manifest from ever describing other data than the ``_SUCCESS`` beside
    it: a finished result already at ``out_dir`` is first moved away (beside the root), then
    the run record is written (each file atomically), then the new result appears.

    Parameters
    ----------
    stage : path
        Directory holding every part; on the same filesystem as ``out_dir``, outside the
        dataset root.
    out_dir : path
        The result directory (for a nightly run, the partition ``ROOT/dt=...``).
    manifest : dict
        Written as the run record's ``manifest.json`` (:func:`manifest_path`).
    dataset_root : path, optional
        The root readers scan (``out_dir`` itself by default); old results are moved
        beside it, never inside it, while they are replaced.
    rejected : pyarrow.Table, optional
        The quarantined lines (:data:`REJECTED_SCHEMA`), written as the run record's
        ``rejected.parquet``; None (not under quarantine) leaves no such file.

    Returns
    -------
    pathlib.Path
        The absolute result directory.
    """
    stage = pathlib.Path(stage)
    out, root = _out_and_root(out_dir, dataset_root)
    record = record_dir(out, root)
    out.parent.mkdir(parents=True, exist_ok=True)
    record.mkdir(parents=True, exist_ok=True)
    (stage / SUCCESS).touch()
    _fsync_dir(stage)
    trash = None
    if out.exists():
        trash = root.parent / f".{root.name}.replaced-{uuid.uuid4().hex}"
        os.rename(out, trash)
        _fsync_dir(out.parent)
    if rejected is not None:
        _write_rejected(record / REJECTED, rejected)
    else:
        (record / REJECTED).unlink(missing_ok=True)
    _write_json(record / MANIFEST, manifest)
    _fsync_dir(record)
    os.rename(stage, out)
    _fsync_dir(out.parent)
    if trash is not None:
        shutil.rmtree(trash)
    return out


def _write_json(path: pathlib.Path, value: dict) -> None:
    """Write ``value`` as JSON to ``path``, atomically (a temporary file, fsynced, then a rename)."""
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        with open(tmp, "w") as f:
            f.write(json.dumps(value, indent=2, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_part_doc_ids(directory: str | os.PathLike, index: int, rows_per_query: int) -> np.ndarray:
    """Doc ids of part ``index`` as an int64 array of shape ``(n_queries_in_part, rows_per_query)``."""
    ids = pq.read_table(pathlib.Path(directory) / part_name(index), columns=["doc_id"])["doc_id"].to_numpy()
    return ids.reshape(-1, max(rows_per_query, 1)) if rows_per_query else np.zeros((0, 0), np.int64)


def write_tsv(path: str | os.PathLike, blocks) -> None:
    """Write the competition's result format, atomically: one line per query in query
    order, its doc ids tab-separated (``-1`` padding left out).

    Parameters
    ----------
    path : path
        The TSV file.
    blocks : iterable of numpy.ndarray of int64, shape (n_queries_in_block, k)
        Doc ids of consecutive queries (e.g. one :func:`read_part_doc_ids` per part,
        or ``[topk.doc_ids]``).
    """
    path = pathlib.Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        with open(tmp, "w") as f:
            for block in blocks:
                for row in block:
                    f.write("\t".join(map(str, row[row >= 0].tolist())) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_dir(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
