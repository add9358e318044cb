"""Result output: the result dataset's layout, its run record, and the atomic commit of its
parts (the parts themselves: :mod:`settopk.jobs.parts`; whether a run may write a result, and
where: :class:`settopk.jobs.target.Target`).

A reader never sees a partial result: the dataset is written into a staging (work)
directory beside the dataset root (same filesystem, outside the root, so
DuckDB/Polars/Spark scans of the root never pick it up), completed with an empty
``_SUCCESS``, then renamed into place in one ``os.rename``. The result may also go to an
object store (any PyArrow filesystem, named by a URI: :class:`settopk.shards.location.Location`), which
has no atomic rename: there the parts are moved into place, then ``_SUCCESS`` is written
last (:func:`commit_results`).

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

import functools
import hashlib
import json
import os
import pathlib
import re
import uuid
from typing import TYPE_CHECKING, Mapping

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from settopk.errors import SettopkError
from settopk.shards.location import Location

# The parts' names are part of this module's surface: every caller finds the result's pieces here.
from .parts import RESULT_SCHEMA, ROW_GROUP_ROWS, PartWriter, part_name, read_part_doc_ids, results_table, write_part, write_tsv

__all__ = [
    "DEFAULT_OUT",
    "RESULT_SCHEMA",
    "DT_PARTITIONING",
    "ROW_GROUP_ROWS",
    "OutputExistsError",
    "PathError",
    "foreign_entries",
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
    "read_part_doc_ids",
]

if TYPE_CHECKING:
    import pyarrow.dataset

PARTITION_KEY = "dt"


@functools.cache
def _dt_partitioning():
    import pyarrow.dataset as ds

    return ds.partitioning(pa.schema([(PARTITION_KEY, pa.date32())]), flavor="hive")


def __getattr__(name: str):
    """``DT_PARTITIONING``: the Hive partitioning of a nightly dataset root, with ``dt`` pinned to
    ``date32`` (pyarrow would otherwise infer ``string``, while DuckDB and Polars infer a date).

    Made on first use: ``pyarrow.dataset`` imports pandas where it is installed (a large part of a
    process's start), and the Ray workers that import this module to write parts never need it.
    """
    if name == "DT_PARTITIONING":
        return _dt_partitioning()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

SUCCESS = "_SUCCESS"  # empty: Polars skips empty files in a directory scan, and fails on others
RECORD_SUFFIX = ".run"  # the run record of ROOT is ROOT.run, beside it
MANIFEST = "manifest.json"
REJECTED = "rejected.parquet"
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
PARTITION_NAME = re.compile(r"dt=\d{4}-\d{2}-\d{2}")
"""The name of a nightly partition directory under its dataset root."""
_PART_NAME = re.compile(r"part-\d{5,}\.parquet")
# A writer killed mid-write leaves its temporary file (settopk.jobs.parts, Location.write_bytes) among the parts.
_TEMP_NAME = re.compile(r"\.(?:tmp-[0-9a-f]{32}\.parquet|[^/]+\.tmp-[0-9a-f]{32})")

DATASETS = ("pairs", "groups", "duplicates")
"""The datasets under ``--out DIR`` of a ``--dedup`` run (:mod:`settopk.jobs.dedup`), each with its own ``_SUCCESS``."""

DEFAULT_OUT = "out/settopk-results"
"""Where the result goes when no output is given (relative to the working directory)."""


class OutputExistsError(FileExistsError, SettopkError):
    """The output directory exists and is not a finished result of this job."""

    @classmethod
    def not_a_result(cls, out: Location, names: list[str], why: str) -> "OutputExistsError":
        """The refusal of a directory that is not a settopk result, naming a few of ``names``."""
        few = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return cls(f"{out}: expected a new or empty directory or a settopk result, found a directory that is not a settopk "
                   f"result ({why}; it holds {few}); settopk never replaces or deletes it, with or without --force; "
                   "fix: choose another --out, or move those files away")


class PathError(ValueError, SettopkError):
    """An output path the run cannot use (overlapping an input, not writable, or locked)."""


def foreign_entries(out) -> list[str]:
    """The entries under the result directory ``out`` that a settopk run does not write:
    anything but ``_SUCCESS``, part files and a killed writer's temporary files, at its top or
    (a ``--dedup`` result) in its ``pairs/``, ``groups/`` and ``duplicates/``; paths relative to
    ``out``, sorted."""
    out = Location.real(out)
    base = out.path.rstrip("/") + "/"
    found = out.fs.get_file_info(pafs.FileSelector(out.path, recursive=True, allow_not_found=True))
    strays = []
    for entry in found:
        parts = entry.path[len(base):].split("/")
        if entry.type == pafs.FileType.Directory:
            ok = len(parts) == 1 and parts[0] in DATASETS
        else:
            ok = (len(parts) == 1 or (len(parts) == 2 and parts[0] in DATASETS)) and (
                parts[-1] == SUCCESS or _PART_NAME.fullmatch(parts[-1]) or _TEMP_NAME.fullmatch(parts[-1]))
        if not ok:
            strays.append("/".join(parts))
    return sorted(strays)


def _record(out: Location, root: Location) -> Location:
    record = root.sibling(root.name + RECORD_SUFFIX)
    return record if out.path == root.path else record / out.relative_to(root)


def _places(out_dir, dataset_root) -> tuple[Location, Location]:
    """The result and its dataset root; by default the root is ``out_dir`` itself, or its parent
    where ``out_dir`` is named ``dt=YYYY-MM-DD`` (a partition)."""
    out = Location.real(out_dir)
    if dataset_root is not None:
        return out, Location.real(dataset_root)
    return out, (out.parent if PARTITION_NAME.fullmatch(out.name) else out)


def record_dir(out_dir, dataset_root=None):
    """The run record of the result at ``out_dir``: where its manifest and quarantined lines live.

    A sibling of the dataset root, mirroring the result's place in it: ``ROOT.run`` for a result
    directory ``ROOT``, ``ROOT.run/dt=YYYY-MM-DD`` for a partition. Outside the root, so no
    reader of the results ever sees it.

    Parameters
    ----------
    out_dir : path or str
        The result directory, a local path or a URI.
    dataset_root : path or str, optional
        Its dataset root. By default ``out_dir`` itself, or its parent where ``out_dir`` is named
        ``dt=YYYY-MM-DD`` (a partition).

    Returns
    -------
    pathlib.Path or settopk.shards.location.Location
        A path (symbolic links resolved, as the commit writes it) or a URI.
    """
    return _record(*_places(out_dir, dataset_root)).shown


def manifest_path(out_dir, dataset_root=None):
    """The manifest of the result at ``out_dir``: ``manifest.json`` in its :func:`record_dir`."""
    return (_record(*_places(out_dir, dataset_root)) / MANIFEST).shown


def rejected_path(out_dir, dataset_root=None):
    """The quarantined input lines of the result at ``out_dir``: ``rejected.parquet`` in its
    :func:`record_dir` (present only for a run under ``on_invalid: quarantine``)."""
    return (_record(*_places(out_dir, dataset_root)) / REJECTED).shown


def read_manifest(out_dir, dataset_root=None) -> dict:
    """The manifest of the finished result at ``out_dir``, a path or URI (see :func:`record_dir`
    for ``dataset_root``).

    Raises
    ------
    FileNotFoundError
        If ``out_dir`` holds no finished result (no ``_SUCCESS``), or its manifest is missing.
    ValueError
        If the manifest is not JSON.
    """
    out, root = _places(out_dir, dataset_root)
    if not (out / SUCCESS).is_file():
        raise FileNotFoundError(f"{out}: expected a finished settopk result, found no {SUCCESS}")
    return json.loads((_record(out, root) / MANIFEST).read_bytes())


def partition_dir(root, day):
    """The Hive partition of ``day`` (a ``datetime.date``) under ``root``: ``root/dt=YYYY-MM-DD``
    (a :class:`pathlib.Path` for a local ``root``, else a :class:`~settopk.shards.location.Location`)."""
    name = f"{PARTITION_KEY}={day.isoformat()}"
    root = Location.of(root)
    return pathlib.Path(root) / name if root.local else root / name


def open_results(path) -> pyarrow.dataset.Dataset:
    """Open a result directory or a nightly dataset root (a path or URI) as a ``pyarrow.dataset.Dataset``.

    A root of ``dt=YYYY-MM-DD`` partitions gets a ``dt`` column of type ``date32``;
    ``_SUCCESS`` and hidden entries are skipped.
    """
    import pyarrow.dataset as ds

    place = Location.real(path)
    partitioned = any(PARTITION_NAME.fullmatch(e.base_name) for e in place.children())
    return ds.dataset(place.path, filesystem=place.fs, format="parquet", partitioning=_dt_partitioning() if partitioned else None)


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
        The root that readers scan: by default ``out_dir`` itself, or its parent where
        ``out_dir`` is named ``dt=YYYY-MM-DD`` (a partition). Staging happens beside it,
        never inside it, so a scan of the root never sees a partial write.
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
    stage = root.sibling(f".{root.name}.staging-{uuid.uuid4().hex}")
    stage.make_dirs()
    try:
        write_part(stage, 0, table, metadata=metadata, row_group_rows=row_group_rows)
        return commit_results(stage, out, manifest, dataset_root=root)
    finally:
        stage.delete_tree()


def _out_and_root(out_dir, dataset_root) -> tuple[Location, Location]:
    """:func:`_places`, checked: the result must lie inside the root, since staging, work and
    replaced directories go beside the root and nothing is written elsewhere."""
    out, root = _places(out_dir, dataset_root)
    if root.fs != out.fs or not root.contains(out):
        raise ValueError(f"{out} is not inside the dataset root {root}")
    if not out.local and "/" not in root.path.strip("/"):
        raise ValueError(f"{root}: expected a prefix inside a bucket (s3://BUCKET/results), found a bucket; "
                         "the run writes its work and run record beside the dataset root")
    return out, root


def work_dir(out_dir, dataset_root=None):
    """The directory (or store prefix) where a run's parts accumulate before the commit: beside
    the dataset root (never inside it, so scans of the root never see it), named after
    ``out_dir`` so a rerun of the same target finds the parts an interrupted run committed.

    Returns
    -------
    pathlib.Path or settopk.shards.location.Location
        A path, or a URI for a URI ``out_dir``.
    """
    out, root = _out_and_root(out_dir, dataset_root)
    name = str(out.shown) if out.local else ":".join(out.key)  # no credentials: a rotated key finds the same parts
    tag = hashlib.sha256(name.encode()).hexdigest()[:12]
    return root.sibling(f".{root.name}.work-{tag}").shown


def _write_rejected(place: Location, table: pa.Table) -> None:
    """Write the quarantined lines as ``place``, atomically."""
    if not table.schema.equals(REJECTED_SCHEMA, check_metadata=False):
        raise ValueError(f"rejected table schema differs from REJECTED_SCHEMA:\n{table.schema}")
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    place.write_bytes(sink.getvalue().to_pybytes())


def rejected_paths(out_dir, input_name: str, dataset_root=None) -> set[str]:
    """The files of ``input_name`` (``"docs"`` or ``"queries"``) that the result at ``out_dir``
    lists as quarantined in its run record (empty if it lists none)."""
    place = _record(*_places(out_dir, dataset_root)) / REJECTED
    if not place.is_file():
        return set()
    table = pq.read_table(place.path, filesystem=place.fs, columns=["input", "path"]).to_pydict()
    return {p for name, p in zip(table["input"], table["path"]) if name == input_name}


def commit_results(stage, out_dir, manifest: dict, *, dataset_root=None, rejected: pa.Table | None = None):
    """Make a staged result visible, with its run record.

    The order keeps a manifest from ever describing other data than the ``_SUCCESS`` beside
    it: a finished result already at ``out_dir`` first leaves view, then the run record is
    written (each file atomically), then the new result appears with ``_SUCCESS``.

    - On a local disk the old result is renamed away (beside the root) and the staging
      directory, completed with ``_SUCCESS``, is renamed to ``out_dir`` in one step.
    - On a store without atomic rename the old ``_SUCCESS`` is deleted first, then the old
      parts; the new parts are moved (server-side copies) into ``out_dir`` and ``_SUCCESS`` is
      written last: readers that wait for ``_SUCCESS`` never see a partial result.

    Parameters
    ----------
    stage : path or str
        Directory (or prefix) holding every part; on the same filesystem as ``out_dir``,
        outside the dataset root.
    out_dir : path or str
        The result directory (for a nightly run, the partition ``ROOT/dt=...``).
    manifest : dict
        Written as the run record's ``manifest.json`` (:func:`manifest_path`).
    dataset_root : path or str, optional
        The root readers scan: by default ``out_dir`` itself, or its parent where ``out_dir``
        is named ``dt=YYYY-MM-DD`` (a partition); old results are moved beside it, never
        inside it, while they are replaced.
    rejected : pyarrow.Table, optional
        The quarantined lines (:data:`REJECTED_SCHEMA`), written as the run record's
        ``rejected.parquet``; None (not under quarantine) leaves no such file.

    Returns
    -------
    pathlib.Path or settopk.shards.location.Location
        The result directory (resolved), or its URI.

    Raises
    ------
    OutputExistsError
        Before anything is moved or deleted, where ``out_dir`` is a file, or a directory that
        is not a settopk result (no run record, or files a settopk run never writes): only a
        settopk result is ever replaced.
    """
    stage = Location.real(stage)
    out, root = _out_and_root(out_dir, dataset_root)
    record = _record(out, root)
    _check_replaceable(out, record)
    out.parent.make_dirs()
    record.make_dirs()
    trash = None
    if out.renames:
        (stage / SUCCESS).write_bytes(b"")
        _fsync_dir(stage)
        if out.exists():
            trash = root.sibling(f".{root.name}.replaced-{uuid.uuid4().hex}")
            out.move_to(trash)
            _fsync_dir(out.parent)
    elif out.exists():
        (out / SUCCESS).delete(missing_ok=True)  # first: readers stop taking it as finished
        out.delete_tree()
    if rejected is not None:
        _write_rejected(record / REJECTED, rejected)
    else:
        (record / REJECTED).delete(missing_ok=True)
    (record / MANIFEST).write_bytes((json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    _fsync_dir(record)
    if out.renames:
        stage.move_to(out)
        _fsync_dir(out.parent)
        if trash is not None:
            trash.delete_tree()
    else:
        for entry in stage.children():
            if _PART_NAME.fullmatch(entry.base_name):
                (stage / entry.base_name).move_to(out / entry.base_name)
        (out / SUCCESS).write_bytes(b"")  # last
        stage.delete_tree()
    return out.shown


def _check_replaceable(out: Location, record: Location) -> None:
    """Refuse, at the commit itself, to remove anything but a settopk result: ``out`` must be
    missing, empty, or hold only a settopk result's files with its run record beside it (the
    validate stage checked this; files added since, or a library call, are caught here)."""
    kind = out.kind()
    if kind == pafs.FileType.File:
        raise OutputExistsError(f"{out}: expected a result directory, found a file; fix: choose another --out, or move the file away")
    if kind == pafs.FileType.NotFound or not out.children():
        return
    strays = foreign_entries(out)
    if not (record / MANIFEST).is_file():
        raise OutputExistsError.not_a_result(out, sorted(e.base_name for e in out.children()),
                                             f"no settopk run record {(record / MANIFEST).shown}")
    if strays:
        raise OutputExistsError.not_a_result(out, strays, "besides a settopk result it holds files a settopk run never "
                                                          "writes, which replacing it would delete")


def _fsync_dir(place: Location) -> None:
    """Make a local directory's entries durable (a store has no directories to sync)."""
    if not place.local:
        return
    fd = os.open(place.path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
