"""The result rows: the schema of a result (one row per query and rank) and the table that
builds a batch's rows from its top-k lists.

Shared by the in-process index (:meth:`settopk.TopK.to_arrow`), the job's Parquet parts
(:mod:`settopk.jobs.parts`) and Ray Data (:mod:`settopk.ray`), which all import it from here, below
them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from settopk.kernels import DEFAULT_SCORE, TopK, score_definition, score_value

__all__ = ["RESULT_SCHEMA", "query_id_column", "query_id_values", "results_table"]

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
run's (:func:`settopk.kernels.score_definition`)."""


def query_id_column(query_ids) -> pa.StringArray:
    """The query ids as the result's ``query_id`` column.

    Parameters
    ----------
    query_ids : sequence of str, or pyarrow.StringArray, length n_queries
        An Arrow array is returned as it is (no copy): the job converts a chunk's ids once, and
        Ray passes the array to its merge task without pickling each string.

    Returns
    -------
    pyarrow.StringArray, length n_queries
    """
    if isinstance(query_ids, pa.Array):
        return query_ids
    return pa.array(list(query_ids), pa.string())


def query_id_values(query_ids) -> np.ndarray:
    """A self-join's query ids (its doc ids, written in decimal) as integers.

    Parameters
    ----------
    query_ids : sequence of str, or pyarrow.StringArray, length n_queries

    Returns
    -------
    numpy.ndarray of int64, shape (n_queries,)

    Raises
    ------
    pyarrow.ArrowInvalid
        If an id is not a decimal integer (a self-join's query ids always are).
    """
    return np.asarray(query_id_column(query_ids).cast(pa.int64())).astype(np.int64, copy=False)


def results_table(query_ids: Sequence[str], query_len: np.ndarray, topk: TopK, score: str = DEFAULT_SCORE) -> pa.Table:
    """Rows of the result dataset for a batch of queries, in query order then rank.

    Parameters
    ----------
    query_ids : sequence of str, or pyarrow.StringArray, length n_queries
    query_len : numpy.ndarray of int, shape (n_queries,)
    topk : TopK
        Shape ``(n_queries, k)``, host memory; ``-1`` padding is dropped.
    score : str
        The score ``topk`` is ranked by (one of :data:`settopk.kernels.SCORES`); its float64
        value (:func:`settopk.kernels.score_value`) fills the ``score`` column.

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
    ids = query_id_column(query_ids)
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
