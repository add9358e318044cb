"""Result output: the Parquet schema, the atomic dataset write, and the TSV.

A reader never sees a partial result: the dataset is written into a staging
directory beside the output (same filesystem, outside the dataset root, so
DuckDB/Polars/Spark scans never pick it up), completed with ``_manifest.json`` and
``_SUCCESS``, then renamed into place in one ``os.rename``.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import uuid
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kernels import TopK, score_value

__all__ = ["RESULT_SCHEMA", "OutputExistsError", "check_output_dir", "results_table", "write_results", "write_tsv"]

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
        b"settopk.score": b"Braun-Blanquet |q & d| / max(|q|, |d|); 0/0 = 0; ties by lower doc_id",
    },
)
"""Schema of the result dataset: one row per (query, rank), rank 1 is best."""

SUCCESS = "_SUCCESS"
MANIFEST = "_manifest.json"  # "_" prefix: pyarrow, pandas and Spark skip it when scanning the dataset
_ROWS_PER_GROUP = 1 << 20


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


def results_table(query_ids: Sequence[str], query_len: np.ndarray, topk: TopK) -> pa.Table:
    """Rows of the result dataset for a batch of queries, in query order then rank.

    Parameters
    ----------
    query_ids : sequence of str, length n_queries
    query_len : numpy.ndarray of int, shape (n_queries,)
    topk : TopK
        Shape ``(n_queries, k)``; ``-1`` padding is dropped.

    Returns
    -------
    pyarrow.Table
        With schema :data:`RESULT_SCHEMA`.
    """
    n_queries, k = topk.doc_ids.shape
    valid = topk.doc_ids >= 0
    rows_q, rows_r = np.nonzero(valid)
    qlen = np.asarray(query_len, dtype=np.int64)[rows_q]
    overlap = topk.overlap[valid]
    doc_len = topk.doc_len[valid]
    ids = pa.array(list(query_ids), pa.string())
    columns = [
        ids.take(pa.array(rows_q)) if len(ids) else pa.array([], pa.string()),
        pa.array((rows_r + 1).astype(np.int16)),
        pa.array(topk.doc_ids[valid]),
        pa.array(score_value(overlap, qlen, doc_len)),
        pa.array(overlap.astype(np.int16)),
        pa.array(qlen.astype(np.int16)),
        pa.array(doc_len.astype(np.int16)),
    ]
    return pa.Table.from_arrays(columns, schema=RESULT_SCHEMA)


def write_results(out_dir: str | os.PathLike, table: pa.Table, manifest: dict) -> pathlib.Path:
    """Write ``table`` as a Parquet dataset at ``out_dir``, atomically.

    The directory holds ``part-00000.parquet`` (zstd), ``_manifest.json`` and
    ``_SUCCESS``. It appears in one rename; an existing finished result at
    ``out_dir`` is replaced only after the new one is complete.

    Raises
    ------
    ValueError
        If ``table`` does not have :data:`RESULT_SCHEMA`.
    """
    if not table.schema.equals(RESULT_SCHEMA, check_metadata=False):
        raise ValueError(f"result table schema differs from RESULT_SCHEMA:\n{table.schema}")
    out = pathlib.Path(out_dir).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = out.parent / f".{out.name}.staging-{uuid.uuid4().hex}"
    stage.mkdir()
    try:
        pq.write_table(
            table.replace_schema_metadata(RESULT_SCHEMA.metadata),
            stage / "part-00000.parquet",
            compression="zstd",
            row_group_size=_ROWS_PER_GROUP,
        )
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        (stage / SUCCESS).touch()
        _fsync_dir(stage)
        if out.exists():
            trash = out.parent / f".{out.name}.replaced-{uuid.uuid4().hex}"
            os.rename(out, trash)
            os.rename(stage, out)
            shutil.rmtree(trash)
        else:
            os.rename(stage, out)
        _fsync_dir(out.parent)
    finally:
        if stage.exists():
            shutil.rmtree(stage)
    return out


def write_tsv(path: str | os.PathLike, topk: TopK) -> None:
    """Write the competition's result format, atomically: one line per query in query
    order, its doc ids tab-separated (``-1`` padding left out)."""
    path = pathlib.Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        with open(tmp, "w") as f:
            for row in topk.doc_ids:
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
