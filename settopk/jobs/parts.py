"""The result's Parquet parts: the schema, the table of a batch's top-k lists, the part writer
(streaming, row groups of whole queries) and the competition's TSV.

Parts are written into the run's work directory (:func:`settopk.jobs.output.work_dir`) and made
visible only by the commit (:func:`settopk.jobs.output.commit_results`). They are
zstd-compressed, hold rows in query order then rank, with row groups of whole queries, and carry
the run in their schema metadata (``settopk.run_id``, ``settopk.k``, ``settopk.score``).
"""

from __future__ import annotations

import uuid
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from settopk.shards.results import RESULT_SCHEMA, results_table
from settopk.shards.location import Location

__all__ = ["RESULT_SCHEMA", "ROW_GROUP_ROWS", "PartWriter", "part_name", "read_part_doc_ids", "results_table",
           "write_part", "write_tsv"]

ROW_GROUP_ROWS = 131_072
"""Default target rows per row group (config ``output.row_group_rows``)."""

_PART_TEMPLATE = "part-{i}.parquet"

# Dictionaries only where they pay: doc ids are nearly all
# distinct within a row group, and query_id, rank and query_len come in runs (each query's k rows),
# which zstd packs smaller and faster without one; score, overlap and doc_len keep theirs.
_DICTIONARY_COLUMNS = ["score", "overlap", "doc_len"]
def part_name(index: int) -> str:
    """File name of result part ``index``: ``part-00000.parquet``, ``part-00001.parquet``, ..."""
    return _PART_TEMPLATE.format(i=f"{index:05d}")


class PartWriter:
    """Writes result part ``index`` into ``directory`` table by table, atomically.

    Rows go to a temporary file as they come, in row groups of whole queries
    (``row_group_rows`` rounded down to the rows per query, the largest ``rank``
    of the first rows written), every group full but the last; :meth:`close`
    moves the file into place (a rename on a local disk, a server-side copy on a store).
    A merge task writes a chunk's batches as their searches end, so only the last batch
    is written after the chunk's search.

    Parameters
    ----------
    directory : path or str
        A staging or work directory (not yet visible to readers): a local path or a URI.
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
        where = Location.real(directory)
        self.final = where / part_name(index)
        self.tmp = where / f".tmp-{uuid.uuid4().hex}.parquet"
        file_metadata = {**RESULT_SCHEMA.metadata, **{k.encode(): str(v).encode() for k, v in extra.items()}}
        self._schema = RESULT_SCHEMA.with_metadata(file_metadata)
        self._writer = pq.ParquetWriter(self.tmp.path, self._schema, filesystem=self.tmp.fs, compression="zstd",
                                        use_dictionary=_DICTIONARY_COLUMNS)
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

    def add_metadata(self, metadata: Mapping[str, str]) -> None:
        """Footer metadata known only once the rows are written (a threshold part's row counts);
        call before :meth:`close`. Keys must start with ``settopk.``."""
        bad = sorted(key for key in metadata if not key.startswith("settopk."))
        if bad:
            raise ValueError(f"Parquet metadata keys must start with 'settopk.', found {bad}; rename them")
        self._writer.add_key_value_metadata({k: str(v) for k, v in metadata.items()})

    def close(self):
        """Write the rows still held, close the file and move it into place; returns its path (or URI)."""
        try:
            if self._pending_rows:
                self._flush(self._pending_rows)
            self._writer.close()
            self.tmp.move_to(self.final)
        finally:
            self.tmp.delete(missing_ok=True)
        return self.final.shown

    def abort(self) -> None:
        """Drop the temporary file (after an error); nothing appears under the part's name."""
        try:
            self._writer.close()
        finally:
            self.tmp.delete(missing_ok=True)


def write_part(directory, index: int, table: pa.Table, *, metadata: Mapping[str, str] | None = None,
               row_group_rows: int = ROW_GROUP_ROWS):
    """Write result part ``index`` into ``directory`` in one call, atomically (:class:`PartWriter`).

    Parameters
    ----------
    directory : path or str
        A staging or work directory (not yet visible to readers): a local path or a URI.
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
    pathlib.Path or settopk.shards.location.Location
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


def read_part_doc_ids(directory, index: int, rows_per_query: int) -> np.ndarray:
    """Doc ids of part ``index`` as an int64 array of shape ``(n_queries_in_part, rows_per_query)``."""
    part = Location.real(directory) / part_name(index)
    ids = pq.read_table(part.path, filesystem=part.fs, columns=["doc_id"])["doc_id"].to_numpy()
    return ids.reshape(-1, max(rows_per_query, 1)) if rows_per_query else np.zeros((0, 0), np.int64)


def write_tsv(path, blocks) -> None:
    """Write the competition's result format, atomically: one line per query in query
    order, its doc ids tab-separated (``-1`` padding left out).

    Parameters
    ----------
    path : path or str
        The TSV file, a local path or a URI.
    blocks : iterable of numpy.ndarray of int64, shape (n_queries_in_block, k)
        Doc ids of consecutive queries (e.g. one :func:`read_part_doc_ids` per part,
        or ``[topk.doc_ids]``).
    """
    final = Location.real(path)
    tmp = final.sibling(f".{final.name}.tmp-{uuid.uuid4().hex}")
    try:
        with tmp.fs.open_output_stream(tmp.path) as f:
            for block in blocks:
                f.write("".join("\t".join(map(str, row[row >= 0].tolist())) + "\n" for row in block).encode())
        tmp.move_to(final)
    finally:
        tmp.delete(missing_ok=True)
