"""The Ray Data stages: :class:`ShardSearch` (a callable class, one pool per shard) and :func:`result_rows`.

A query batch goes through one :class:`ShardSearch` stage per shard, in shard order. The first
stage reads the user's id and tokens columns and writes the batch in the *carried* layout; each
later stage searches its shard and merges its lists with the carried ones exactly
(:func:`settopk.shards.merge_topk`: score descending, then doc id ascending). After the last
stage, :func:`result_rows` (a plain function: Ray Data runs it as tasks, on CPUs beside the
search actors) turns the carried top-k into the job's result rows.

Carried layout (one row per query)
----------------------------------
``query_id`` string; ``query_len`` int16 (distinct ids); ``tokens`` list<uint16>, or list<uint32> above 65536 ids (the query's
canonical set: ascending, each id once); ``topk_doc_id`` fixed_size_list<int64>[k] (-1 pads a
query that has fewer than k docs); ``topk_overlap`` and ``topk_doc_len`` fixed_size_list<int16>[k]
(0 at padding). Best first.
"""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray

from settopk.shards.results import RESULT_SCHEMA, results_table
from settopk.kernels import SetBatch, TopK, empty_topk, score_definition, score_value
from settopk.shards import merge_topk
from settopk.shards.inputs.canonical import canonical
from settopk.shards.searcher import ShardSearcher

from .corpus import CorpusHandle, shard_of

__all__ = ["CARRIED_COLUMNS", "PER_QUERY_SCHEMA", "ROWS", "ShardSearch", "result_rows"]

CARRIED_COLUMNS = ("query_id", "query_len", "tokens", "topk_doc_id", "topk_overlap", "topk_doc_len")
"""Columns of a :class:`ShardSearch` stage's output (the carried layout, in the module's docstring)."""
ROWS = ("per_rank", "per_query")
"""Row layouts of :func:`result_rows`: one row per (query, rank) as the job writes, or one per query."""
PER_QUERY_SCHEMA = pa.schema([
    pa.field("query_id", pa.string(), nullable=False),
    pa.field("query_len", pa.int16(), nullable=False),
    pa.field("doc_id", pa.list_(pa.int64()), nullable=False),
    pa.field("score", pa.list_(pa.float64()), nullable=False),
    pa.field("overlap", pa.list_(pa.int16()), nullable=False),
    pa.field("doc_len", pa.list_(pa.int16()), nullable=False),
])
"""``rows="per_query"``: one row per query, its results as lists best first (rank = position + 1),
as long as k, or shorter where the corpus holds fewer docs."""


class ShardSearch:
    """Searches one shard of a corpus for each query of a Ray Data batch: a callable class for ``map_batches``.

    Built once per pool actor: the constructor starts a thread that takes the shard's docs from the
    object store through the corpus's holder actor (also after a restart) and builds the backend's
    index, and returns at once. So Ray Data counts the actor as started and sends it blocks while
    the index is built: the queries are read and cut into blocks meanwhile, as the job reads its
    queries while its shards load, and the first call starts searching the moment the index is
    there. Each call waits for the index (:attr:`built`).

    Parameters
    ----------
    corpus : CorpusHandle
        From :func:`settopk.ray.load_corpus`.
    shard : int
        Which of ``corpus.shards`` this pool searches (0 for a corpus in one shard). Stages run in
        shard order: the first reads the user's columns, each later one merges into the carried lists.
    id_column, tokens_column : str
        The first stage's query columns: ids (string or integer; written as strings, integers as
        their decimal text, as the job does) and token ids (list of integer).

    Attributes
    ----------
    built : concurrent.futures.Future
        Done when the index is built (result None), or failed with the build's error, which each
        call then raises. A subclass may ``add_done_callback`` to it, e.g. to time the actors.

    Raises
    ------
    ValueError
        ``shard`` outside the plan.
    RuntimeError
        From each call: the shard's docs no longer match the plan, or the GPU ran out of memory
        (the message says what to lower).

    Examples
    --------
    >>> corpus = settopk.ray.load_corpus("docs.parquet", k=10, backend="numpy")  # doctest: +SKIP
    >>> ds = ds.map_batches(settopk.ray.ShardSearch, fn_constructor_kwargs={"corpus": corpus},
    ...                     compute=ray.data.ActorPoolStrategy(size=2), batch_size=256,
    ...                     batch_format="pyarrow", num_cpus=1)  # doctest: +SKIP
    >>> ds = ds.map_batches(settopk.ray.result_rows, fn_kwargs={"score": corpus.score},
    ...                     batch_format="pyarrow")  # doctest: +SKIP
    """

    def __init__(self, corpus: CorpusHandle, shard: int = 0, *, id_column: str = "query_id", tokens_column: str = "tokens"):
        if not isinstance(corpus, CorpusHandle):
            raise TypeError(f"corpus must be a CorpusHandle from settopk.ray.load_corpus, found {type(corpus).__name__}")
        shard_of(corpus, shard)
        self.corpus, self.shard = corpus, shard
        self.id_column, self.tokens_column = id_column, tokens_column
        self.searcher: ShardSearcher | None = None
        self.built: concurrent.futures.Future = concurrent.futures.Future()
        threading.Thread(target=self._build, name=f"settopk-build-shard-{shard}", daemon=True).start()

    def _build(self) -> None:
        """Take the shard's docs and build its index (the constructor's thread); settles :attr:`built`."""
        try:
            corpus = self.corpus
            (held,) = ray.get(corpus.holder.take.remote(self.shard))
            spec, refs, drops, ordered = ray.get(held)
            self.searcher = ShardSearcher(spec, refs, corpus.limits, corpus.backend, drops=drops, ordered=ordered,
                                          score=corpus.score, routing=corpus.routing, threads=corpus.threads)
        except BaseException as exc:  # raised again by every call: a failed build fails the dataset, naming why
            self.built.set_exception(exc)
        else:
            self.built.set_result(None)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Search a batch (``batch_format="pyarrow"``); returns it in the carried layout.

        Parameters
        ----------
        batch : pyarrow.Table
            Queries with ``id_column`` and ``tokens_column`` (first stage), or a stage's output.

        Returns
        -------
        pyarrow.Table
            The :data:`CARRIED_COLUMNS`, one row per query, in the batch's order.

        Raises
        ------
        ValueError
            A missing or mistyped column, a null, an id outside ``[0, vocab_size)`` or a set of more
            than ``max_len`` distinct ids (the message names the column and the row of the batch).
        RuntimeError
            The index could not be built (:attr:`built`'s error), or the GPU ran out of memory.
        """
        carried = "topk_doc_id" in batch.column_names
        id_column, tokens_column = ("query_id", "tokens") if carried else (self.id_column, self.tokens_column)
        query_ids = _query_ids(batch, id_column)
        sets = _query_sets(batch, tokens_column, self.corpus.vocab_size, self.corpus.max_len)
        k = self.corpus.k
        if sets.n_sets == 0:  # an empty block: nothing to search, the columns still typed
            return _carried_table(query_ids, sets, empty_topk(0, k))
        self.built.result()  # the query checks above ran while the index may still be building
        found = self.searcher.search(sets, k)
        if carried:
            found = merge_topk([_carried_topk(batch, k), found], sets.lengths, k, self.corpus.max_len, self.corpus.score)
        return _carried_table(query_ids, sets, found)


def _column(batch: pa.Table, name: str, wanted: str) -> pa.Array:
    if name not in batch.column_names:
        raise ValueError(f"expected a query column '{name}' of type {wanted}, found columns {batch.column_names}; "
                         f"rename the column, or pass id_column=/tokens_column= to settopk.ray.search")
    column = batch.column(name)
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.null_count:
        row = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise ValueError(f"query column '{name}': expected no nulls, found a null at row {row} of a batch; "
                         "fill in or drop the row (Dataset.filter)")
    return array


def _query_ids(batch: pa.Table, name: str) -> pa.Array:
    """The id column as strings (integers as their decimal text, as the job writes them)."""
    ids = _column(batch, name, "string or integer")
    if pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type):
        return ids.cast(pa.string())
    if pa.types.is_integer(ids.type):
        return pc.cast(ids, pa.string())
    raise ValueError(f"query column '{name}': expected string or integer ids, found type {ids.type}; "
                     f"cast the column (e.g. Dataset.map_batches with pyarrow.compute.cast)")


def _query_sets(batch: pa.Table, name: str, vocab_size: int, max_len: int) -> SetBatch:
    """The tokens column as canonical sets (ascending, each id once), checked against the limits."""
    tokens = _column(batch, name, "list of integer")
    if not ((pa.types.is_list(tokens.type) or pa.types.is_large_list(tokens.type)) and pa.types.is_integer(tokens.type.value_type)):
        raise ValueError(f"query column '{name}': expected a list of integer token ids, found type {tokens.type}; "
                         "write the tokens as list<int32> (or any integer type)")
    counts = pc.list_value_length(tokens).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = tokens.flatten()
    if flat.null_count:
        where = int(np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0])
        raise ValueError(f"query column '{name}': expected token ids without nulls, found a null in row "
                         f"{_row_of(counts, where)} of a batch; drop the nulls from the lists")
    values = flat.to_numpy(zero_copy_only=False)
    bad = (values >= vocab_size) if values.dtype.kind == "u" else ((values < 0) | (values >= vocab_size))
    if bad.any():
        where = int(np.flatnonzero(bad)[0])
        raise ValueError(f"query column '{name}': expected token ids in [0, {vocab_size}), found {int(values[where])} "
                         f"in row {_row_of(counts, where)} of a batch; remap the ids into the vocabulary, or raise vocab_size")
    # The kernels' id width: uint16 where every id fits (the GPU's), uint32 up to 2**24 (cpu, numpy).
    lengths, set_tokens, _ = canonical(values.astype(np.uint16 if vocab_size <= 65536 else np.uint32, copy=False), counts)
    if len(lengths) and lengths.max() > max_len:
        row = int(np.argmax(lengths > max_len))
        raise ValueError(f"query column '{name}': expected at most {max_len} distinct ids per set, found "
                         f"{int(lengths[row])} in row {row} of a batch; shorten the set, or raise max_len")
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return SetBatch(offsets, set_tokens)


def _row_of(counts: np.ndarray, position: int) -> int:
    """The row holding flat value ``position`` of a list column with ``counts`` values per row."""
    return int(np.searchsorted(np.cumsum(counts), position, side="right"))


def _carried_topk(batch: pa.Table, k: int) -> TopK:
    """The carried lists of a batch as a :class:`TopK` of shape (n_queries, k)."""
    def matrix(name: str, dtype) -> np.ndarray:
        array = batch.column(name).combine_chunks()
        if not pa.types.is_fixed_size_list(array.type) or array.type.list_size != k:
            raise ValueError(f"carried column '{name}': expected fixed_size_list[{k}] from a ShardSearch stage of "
                             f"the same corpus, found type {array.type}; chain stages of one CorpusHandle only")
        return array.flatten().to_numpy(zero_copy_only=False).astype(dtype, copy=False).reshape(-1, k)

    return TopK(matrix("topk_doc_id", np.int64), matrix("topk_overlap", np.int16), matrix("topk_doc_len", np.int16))


def _carried_table(query_ids: pa.Array, sets: SetBatch, topk: TopK) -> pa.Table:
    n, k = topk.doc_ids.shape

    def fixed(values: np.ndarray, kind: pa.DataType) -> pa.Array:
        return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), kind), k)

    return pa.table({
        "query_id": query_ids,
        "query_len": pa.array(sets.lengths.astype(np.int16)),
        "tokens": pa.ListArray.from_arrays(pa.array(sets.offsets.astype(np.int32)), pa.array(sets.tokens, pa.from_numpy_dtype(sets.tokens.dtype))),
        "topk_doc_id": fixed(topk.doc_ids, pa.int64()),
        "topk_overlap": fixed(topk.overlap, pa.int16()),
        "topk_doc_len": fixed(topk.doc_len, pa.int16()),
    })


def result_rows(batch: pa.Table, *, score: str = "braun_blanquet", rows: str = "per_rank") -> pa.Table:
    """The result rows of a batch in the carried layout (the last :class:`ShardSearch` stage's output).

    Parameters
    ----------
    batch : pyarrow.Table
        :data:`CARRIED_COLUMNS`.
    score : str
        The corpus's score (``CorpusHandle.score``): fills the ``score`` column and the schema's
        ``settopk.score`` metadata.
    rows : str
        ``"per_rank"``: :data:`settopk.jobs.output.RESULT_SCHEMA`, one row per (query, rank), the
        job's columns and types, padding dropped; ``"per_query"``: :data:`PER_QUERY_SCHEMA`.

    Returns
    -------
    pyarrow.Table
        Queries in the batch's order, each one's results best first.

    Raises
    ------
    ValueError
        ``rows`` or ``score`` unknown, or a carried column missing.
    """
    if rows not in ROWS:
        raise ValueError(f"rows must be one of {', '.join(ROWS)}, found {rows!r}")
    missing = [c for c in CARRIED_COLUMNS if c not in batch.column_names]
    if missing:
        raise ValueError(f"expected the columns of a ShardSearch stage {list(CARRIED_COLUMNS)}, missing {missing}; "
                         "run result_rows after the last ShardSearch stage")
    k = batch.schema.field("topk_doc_id").type.list_size
    topk = _carried_topk(batch, k)
    query_len = batch.column("query_len").to_numpy()
    query_ids = batch.column("query_id").combine_chunks()
    metadata = {**RESULT_SCHEMA.metadata, b"settopk.score": score_definition(score).encode()}
    if rows == "per_rank":
        return results_table(query_ids.to_pylist(), query_len, topk, score).replace_schema_metadata(metadata)
    valid = topk.doc_ids >= 0
    offsets = pa.array(np.concatenate([[0], np.cumsum(valid.sum(axis=1))]).astype(np.int32))
    qlen = np.broadcast_to(query_len[:, None], valid.shape)[valid]
    values = {
        "doc_id": topk.doc_ids[valid],
        "score": score_value(topk.overlap[valid], qlen, topk.doc_len[valid], score),
        "overlap": topk.overlap[valid],
        "doc_len": topk.doc_len[valid],
    }
    columns = [query_ids.cast(pa.string()), pa.array(query_len.astype(np.int16))]
    columns += [pa.ListArray.from_arrays(offsets, pa.array(values[name], PER_QUERY_SCHEMA.field(name).type.value_type))
                for name in ("doc_id", "score", "overlap", "doc_len")]
    return pa.Table.from_arrays(columns, schema=PER_QUERY_SCHEMA.with_metadata(metadata))
