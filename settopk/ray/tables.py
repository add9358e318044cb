"""A corpus held in memory (a :class:`pyarrow.Table` or a :class:`ray.data.Dataset`) read into the object store.

What :func:`settopk.ray.load_corpus` does for a path, done for Arrow data: the rows are cut into
pieces in the object store (a table's slices, put once; a dataset's own Arrow blocks,
``Dataset.to_arrow_refs``), and one Ray reader task per piece checks its rows by the Parquet
reader's own rules (:func:`settopk.shards.inputs.parquet.validate_batch`, so a bad row is named by
its 0-based row in the table or dataset), and leaves the piece's docs in the object store as a
:class:`settopk.shards.inputs.Corpus`, exactly as a file's piece. Doc ids repeated across pieces
are found as for files (:func:`settopk.shards.inputs.check_doc_ids`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import ray

from settopk.shards.inputs import Corpus, InputError, PieceSummary, SetLimits, check_doc_ids, pieces_ordered
from settopk.shards.inputs.canonical import concat_sets
from settopk.shards.inputs.errors import Rejects
from settopk.shards.inputs.parquet import check_schema, duplicate_error, mixed_types_error, validate_batch
from settopk.shards.inputs.vocabulary import has_negative, token_type

__all__ = ["DATASET", "TABLE", "TableRead", "read_arrow_corpus"]

TABLE = "<arrow table>"
"""How errors name a :class:`pyarrow.Table` corpus (in place of a file path)."""
DATASET = "<dataset>"
"""How errors name a :class:`ray.data.Dataset` corpus."""
_MIN_PIECE_ROWS = 1 << 16  # as a file's pieces: below this, a task costs more than it saves
_BATCH_ROWS = 1 << 17  # rows checked at a time (bounds the temporary arrays)


@dataclass(frozen=True)
class _Piece:
    """What :func:`settopk.shards.inputs.check_doc_ids` needs of a piece: its index and how to name it."""

    index: int
    path: str


@dataclass
class TableRead:
    """The corpus as the readers left it (the fields :func:`settopk.ray.load_corpus` uses of
    :class:`settopk.shards.reading.CorpusRead`)."""

    corpus_refs: list
    drops: dict
    ordered: bool
    length_counts: np.ndarray
    n_docs: int
    rejected: list = field(default_factory=list)


def read_arrow_corpus(docs, limits: SetLimits, on_invalid: str, n_cpus: float) -> tuple[TableRead, str]:
    """Read a table or a dataset of docs into the object store with Ray reader tasks.

    Parameters
    ----------
    docs : pyarrow.Table or ray.data.Dataset
        Columns ``doc_id`` (integer, unique, non-negative) and ``tokens`` (a list of integers,
        strings or binary), as a Parquet corpus.
    limits : SetLimits
    on_invalid : {"error", "quarantine"}
    n_cpus : float
        The cluster's CPUs: a table is cut into about one piece per CPU.

    Returns
    -------
    (TableRead, str)
        The corpus read, and how messages name it (:data:`TABLE` or :data:`DATASET`).

    Raises
    ------
    settopk.shards.inputs.InputError
        A missing or mistyped column (before any task runs), or the first bad row in row order,
        named by its 0-based row in the table or dataset, or a doc id repeated across rows.
    """
    if isinstance(docs, pa.Table):
        source = TABLE
        check_schema(TABLE, docs.schema, "doc_id", "integer")
        rows = max(_MIN_PIECE_ROWS, -(-docs.num_rows // max(1, int(n_cpus))))
        blocks = [ray.put(docs.slice(start, rows)) for start in range(0, docs.num_rows, rows)]
        counts = [min(rows, docs.num_rows - start) for start in range(0, docs.num_rows, rows)]
    else:
        source = DATASET
        schema = docs.schema()  # the dataset's, from metadata where Ray Data knows it without running
        arrow_schema = getattr(schema, "base_schema", None)
        if isinstance(arrow_schema, pa.Schema):
            check_schema(DATASET, arrow_schema, "doc_id", "integer")
        blocks = docs.select_columns(["doc_id", "tokens"]).to_arrow_refs()
        counts = ray.get([_num_rows.remote(block) for block in blocks])
    bases = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).tolist()
    reader = ray.remote(num_returns=3)(_read_block)
    refs = [reader.remote(block, i, int(bases[i]), source, limits, on_invalid) for i, block in enumerate(blocks)]
    summaries, errors = [], []
    for i, ref in enumerate(refs):  # in row order: the first bad row in row order is the one raised
        try:
            summaries.append(ray.get(ref[0]))
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if not isinstance(cause, InputError):
                raise
            errors.append(cause)
            for other in ref[1:]:  # taken, so that Ray does not log the same error again as unhandled
                try:
                    ray.get(other)
                except ray.exceptions.RayTaskError:
                    pass
            break
    if errors:
        raise errors[0]
    pieces = [_Piece(i, source) for i in range(len(refs))]
    drops, repeat_rejects = check_doc_ids(pieces, summaries, lambda i: ray.get(refs[i][1])[:2], on_invalid)
    length_counts = np.sum([s.length_counts for s in summaries], axis=0).astype(np.int64) if summaries else \
        np.zeros(limits.max_len + 1, dtype=np.int64)
    n_docs = sum(s.n_docs for s in summaries)
    for index, dropped in drops.items():
        ids, _, lengths = ray.get(refs[index][1])
        gone = np.isin(ids, dropped)
        np.subtract.at(length_counts, lengths[gone], 1)
        n_docs -= int(gone.sum())
    rejected = [r for s in summaries for r in s.rejected] + list(repeat_rejects)
    read = TableRead([r[2] for r in refs], drops, pieces_ordered(summaries), length_counts, n_docs, rejected)
    return read, source


@ray.remote(num_cpus=0)
def _num_rows(block: pa.Table) -> int:
    return block.num_rows


def _read_block(block: pa.Table, index: int, row_base: int, source: str, limits: SetLimits, on_invalid: str):
    """A reader task: ``(summary, (doc_ids, source_rows, lengths), corpus)`` of one piece, as a
    file's reader gives (:func:`settopk.shards.inputs.read_piece`)."""
    check_schema(source, block.schema, "doc_id", "integer")
    rejects = Rejects(on_invalid)
    ids, rows, lengths, tokens, n_with_repeats, base = [], [], [], [], 0, row_base
    for batch in block.select(["doc_id", "tokens"]).to_batches(max_chunksize=_BATCH_ROWS):
        batch_ids, (batch_lengths, batch_tokens, repeated), good = validate_batch(source, batch, "doc_id", base, limits, rejects)
        ids.append(batch_ids[good])
        rows.append(base + good)
        lengths.append(batch_lengths)
        tokens.append(batch_tokens)
        n_with_repeats += int(repeated.sum())
        base += batch.num_rows
    try:
        sets = concat_sets(lengths, tokens)
    except ValueError:
        raise mixed_types_error([(source, t) for t in tokens]) from None
    doc_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    source_rows = np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)
    order = np.argsort(doc_ids, kind="stable")
    again = np.flatnonzero(doc_ids[order][1:] == doc_ids[order][:-1]) + 1
    keep = np.ones(len(order), dtype=bool)
    for position in again:  # a later row with an id seen before in this piece (the earlier stays)
        first = order[np.searchsorted(doc_ids[order], doc_ids[order[position]])]
        rejects.add(duplicate_error([(source, 0, base)], "doc_id", int(doc_ids[order[position]]),
                                    int(source_rows[first]), int(source_rows[order[position]])))
        keep[position] = False
    order = order[keep]
    doc_ids, source_rows, sets = doc_ids[order], source_rows[order], sets.take(order)
    corpus = Corpus(doc_ids, sets, n_with_repeats, "parquet", (source,), tuple(rejects.records), source_rows=source_rows)
    summary = PieceSummary(
        index=index,
        length_counts=np.bincount(sets.lengths, minlength=limits.max_len + 1).astype(np.int64),
        n_docs=int(len(doc_ids)),
        n_tokens=int(len(sets.tokens)),
        id_min=int(doc_ids[0]) if len(doc_ids) else -1,
        id_max=int(doc_ids[-1]) if len(doc_ids) else -1,
        n_with_repeats=n_with_repeats,
        rejected=corpus.rejected,
        token_type=token_type(sets.tokens),
        has_negative=has_negative(sets.tokens),
    )
    return summary, (doc_ids, source_rows, sets.lengths), corpus
