"""Reading the corpus once, in parallel pieces, and handing each shard its docs.

The driver never holds the corpus. It lists the corpus's *pieces* from file
footers (:func:`plan_pieces`: some row groups of one Parquet file, or a whole
text file); reader tasks validate and decode one piece each
(:func:`read_piece`) and return a small :class:`PieceSummary` to the driver
and the piece's docs to the object store. The driver checks doc ids across
pieces (:func:`check_doc_ids`), plans the length-bucket shards from the summed
length histograms, and each shard actor takes its length range out of every
piece (:func:`assemble_shard`). Every doc is decoded once, wherever the
readers run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from settopk.kernels.sets import SetBatch

from ..location import Location
from .canonical import csr_offsets
from .errors import InputError, Rejected, Rejects, SetLimits
from .files import corpus_format, file_stat, parquet_files, as_location
from .parquet import open_parquet
from .readers import Corpus, read_corpus
from .vocabulary import has_negative, token_type

__all__ = ["CorpusPiece", "PieceSummary", "assemble_shard", "check_doc_ids", "group_pieces", "pieces_ordered", "plan_pieces", "read_piece"]


@dataclass(frozen=True)
class CorpusPiece:
    """A piece of the corpus: the slice one reader task decodes.

    Attributes
    ----------
    index : int
        Position in the corpus's read order (file order, then row-group order).
    path : Location
        The file (its URI's credentials travel with it to the reader task, never shown).
    fmt : str
        ``"parquet"`` or ``"text"``.
    row_groups : tuple of int or None
        Row groups of ``path`` (Parquet); None for a whole text file.
    n_rows : int
        Rows in those row groups (Parquet footers); -1 for text (unknown before reading).
    size_bytes, mtime_ns : int
        The file's size and modification time when the piece was planned; a reader
        refuses the piece if either changed.
    """

    index: int
    path: Location
    fmt: str
    row_groups: tuple[int, ...] | None
    n_rows: int
    size_bytes: int
    mtime_ns: int


@dataclass(frozen=True)
class PieceSummary:
    """What the driver learns from reading one piece (small; the docs stay in the object store).

    Attributes
    ----------
    index : int
        The piece's :attr:`CorpusPiece.index`.
    length_counts : numpy.ndarray of int64, shape (max_len + 1,)
        Docs of each length kept from the piece.
    n_docs, n_tokens : int
        Docs and token ids kept.
    id_min, id_max : int
        Smallest and largest doc id kept (-1 for an empty piece).
    n_with_repeats : int
        Docs that had a repeated id.
    rejected : tuple of Rejected
        Rows or lines set aside under ``on_invalid="quarantine"``.
    token_type : str
        ``"small"`` (every token an integer in ``[0, vocab_size)``: the docs are kernel ids),
        else the wide values' Arrow type: ``"int64"``, ``"uint64"`` or ``"large_binary"``
        (:mod:`settopk.shards.inputs.vocabulary`).
    has_negative : bool
        Some token is a negative integer.
    """

    index: int
    length_counts: np.ndarray
    n_docs: int
    n_tokens: int
    id_min: int
    id_max: int
    n_with_repeats: int
    rejected: tuple[Rejected, ...]
    token_type: str = "small"
    has_negative: bool = False


def plan_pieces(path, target_rows: int) -> tuple[list[CorpusPiece], str, tuple[str, ...]]:
    """Split the corpus into pieces of about ``target_rows`` rows, from Parquet footers only.

    Consecutive row groups of one file are grouped until a piece holds at least
    ``target_rows`` rows; a row group is never split, and a text corpus is one piece.

    Parameters
    ----------
    path : str, os.PathLike or settopk.shards.location.Location
        The corpus: a text file, a ``*.parquet`` file or a directory of them.
    target_rows : int
        Rows per piece to aim for, ``>= 1``.

    Returns
    -------
    (list of CorpusPiece, str, tuple of str)
        The pieces in read order, the format (``"text"`` or ``"parquet"``), and the files.

    Raises
    ------
    InputError
        If the path is missing, a Parquet file is unreadable, or a directory holds other entries.
    """
    if target_rows < 1:
        raise ValueError(f"target_rows must be >= 1, found {target_rows}")
    fmt = corpus_format(path)
    path = as_location(path)
    if fmt == "text":
        size, mtime_ns = file_stat(path)
        return [CorpusPiece(0, path, "text", None, -1, size, mtime_ns)], fmt, (path,)
    files = parquet_files(path)
    row_groups: list[CorpusPiece] = []  # one piece per row group first, grouped below
    for file in files:
        size, mtime_ns = file_stat(file)
        meta = open_parquet(file).metadata
        for g in range(meta.num_row_groups):
            row_groups.append(CorpusPiece(len(row_groups), file, "parquet", (g,), meta.row_group(g).num_rows, size, mtime_ns))
        if meta.num_row_groups == 0:  # keep the file: its schema is still checked by a reader
            row_groups.append(CorpusPiece(len(row_groups), file, "parquet", (), 0, size, mtime_ns))
    return group_pieces(row_groups, target_rows), fmt, tuple(files)


def group_pieces(pieces: list[CorpusPiece], target_rows: int) -> list[CorpusPiece]:
    """Join consecutive Parquet pieces of one file until each holds at least ``target_rows`` rows
    (the last piece of a file may hold fewer); a text piece stays as it is. No footer is read."""
    out: list[CorpusPiece] = []
    pending: list[CorpusPiece] = []

    def flush() -> None:
        if pending:
            first = pending[0]
            groups = tuple(g for p in pending for g in p.row_groups)
            out.append(CorpusPiece(len(out), first.path, first.fmt, groups, sum(p.n_rows for p in pending), first.size_bytes, first.mtime_ns))
            pending.clear()

    for piece in pieces:
        if piece.fmt != "parquet" or not piece.row_groups:
            flush()
            out.append(CorpusPiece(len(out), *dataclasses.astuple(piece)[1:]))
            continue
        if pending and pending[0].path != piece.path:
            flush()
        pending.append(piece)
        if sum(p.n_rows for p in pending) >= target_rows:
            flush()
    flush()
    return out


def read_piece(piece: CorpusPiece, limits: SetLimits, on_invalid: str = "error") -> tuple[PieceSummary, Corpus]:
    """Read and validate one piece (in a reader task).

    Parameters
    ----------
    piece : CorpusPiece
    limits : SetLimits
    on_invalid : {"error", "quarantine"}

    Returns
    -------
    (PieceSummary, Corpus)
        The summary for the driver, and the piece's docs in doc id order (host memory) with
        ``source_rows`` set.

    Raises
    ------
    InputError
        At the piece's first bad row or line (``on_invalid="error"``), for an unreadable file,
        or when the file changed (size or modification time) since the piece was planned.
    """
    if file_stat(piece.path) != (piece.size_bytes, piece.mtime_ns):
        raise InputError(
            piece.path, "input files that stay unchanged while the job runs", "a file modified after the job listed it",
            "run the job once the input is completely written (write it elsewhere, then move it into place)",
        )
    corpus = read_corpus(piece.path, limits, on_invalid=on_invalid, row_groups=piece.row_groups)
    lengths = corpus.docs.lengths
    ids = corpus.doc_ids
    summary = PieceSummary(
        index=piece.index,
        length_counts=np.bincount(lengths, minlength=limits.max_len + 1).astype(np.int64),
        n_docs=int(len(ids)),
        n_tokens=int(len(corpus.docs.tokens)),
        id_min=int(ids[0]) if len(ids) else -1,
        id_max=int(ids[-1]) if len(ids) else -1,
        n_with_repeats=corpus.n_with_repeats,
        rejected=corpus.rejected,
        token_type=token_type(corpus.docs.tokens),
        has_negative=has_negative(corpus.docs.tokens),
    )
    return summary, corpus


def pieces_ordered(summaries: list[PieceSummary]) -> bool:
    """True when the pieces' doc id ranges are strictly increasing in read order (no id can repeat
    across pieces, and concatenating pieces keeps ids sorted)."""
    last = -1
    for s in summaries:
        if s.n_docs == 0:
            continue
        if s.id_min <= last:
            return False
        last = s.id_max
    return True


def check_doc_ids(pieces: list[CorpusPiece], summaries: list[PieceSummary], fetch_ids, on_invalid: str):
    """Find doc ids repeated across pieces (within a piece the reader already did).

    Parameters
    ----------
    pieces, summaries : lists in read order
    fetch_ids : callable
        ``fetch_ids(piece_index) -> (doc_ids, source_rows)``, int64 arrays of the piece's kept docs;
        called only when the id ranges of pieces overlap.
    on_invalid : {"error", "quarantine"}

    Returns
    -------
    (dict, list of Rejected)
        Doc ids to drop per piece index (later repeats; the first occurrence in read order stays),
        and their rejection records.

    Raises
    ------
    InputError
        With ``on_invalid="error"``, at the first repeat in read order, naming both rows.
    """
    if pieces_ordered(summaries):
        return {}, []
    ids, rows, owner = [], [], []
    for s in summaries:
        if s.n_docs:
            piece_ids, piece_rows = fetch_ids(s.index)
            ids.append(piece_ids)
            rows.append(piece_rows)
            owner.append(np.full(len(piece_ids), s.index, dtype=np.int64))
    ids, rows, owner = np.concatenate(ids), np.concatenate(rows), np.concatenate(owner)
    order = np.lexsort((rows, owner, ids))  # by id, then read order
    sorted_ids = ids[order]
    again = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1]) + 1
    if not len(again):
        return {}, []
    first_of = np.searchsorted(sorted_ids, sorted_ids[again])  # index (in `order`) of each id's first occurrence
    repeats = sorted(zip(owner[order[again]].tolist(), rows[order[again]].tolist(), order[first_of].tolist(), order[again].tolist()))
    by_index = {p.index: p for p in pieces}
    rejects = Rejects(on_invalid)  # raises the error itself unless quarantining
    drops: dict[int, list[int]] = {}
    for piece_index, row, first, later in repeats:
        first_piece = by_index[int(owner[first])]
        error = InputError(
            by_index[piece_index].path, "unique doc_id values",
            f"doc_id {int(ids[later])} again (first at {first_piece.path} row {int(rows[first])})",
            "give every row its own doc_id, or drop the repeated row", row=row,
        )
        rejects.add(error)
        drops.setdefault(piece_index, []).append(int(ids[later]))
    return {i: np.asarray(v, dtype=np.int64) for i, v in drops.items()}, rejects.records


def assemble_shard(min_len: int, max_len: int, pieces, drops: dict | None = None, ordered: bool = True, concatenate: bool = True):
    """Take one shard's docs out of the pieces: lengths in ``[min_len, max_len]``, in doc id order.

    Parameters
    ----------
    min_len, max_len : int
        The shard's inclusive length range.
    pieces : iterable of Corpus
        Each piece's docs (from :func:`read_piece`), in read order.
    drops : dict, optional
        Doc ids to leave out per piece position in ``pieces`` (repeats found by :func:`check_doc_ids`).
    ordered : bool
        The pieces' id ranges increase in read order (:func:`pieces_ordered`); if not, the
        result is sorted by doc id.
    concatenate : bool
        Return one SetBatch (True), or, where the pieces are ordered, one per piece in order
        (False: the GPU index concatenates them on the device, saving a host copy).

    Returns
    -------
    (numpy.ndarray, SetBatch or list of SetBatch)
        ``doc_ids`` (int64, shape (n_docs,), strictly increasing) and their sets (host memory).
    """
    drops = drops or {}
    ids, lengths, tokens = [], [], []
    for position, corpus in enumerate(pieces):
        piece_lengths = corpus.docs.lengths
        keep = (piece_lengths >= min_len) & (piece_lengths <= max_len)
        if position in drops:
            keep &= ~np.isin(corpus.doc_ids, drops[position])
        if keep.all():
            ids.append(corpus.doc_ids)
            lengths.append(piece_lengths)
            tokens.append(corpus.docs.tokens)
            continue
        ids.append(corpus.doc_ids[keep])
        lengths.append(piece_lengths[keep])
        tokens.append(corpus.docs.tokens[np.repeat(keep, piece_lengths)])
    doc_ids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    if ordered and not concatenate:
        return doc_ids, [SetBatch(csr_offsets(piece_lengths), piece_tokens) for piece_lengths, piece_tokens in zip(lengths, tokens)]
    all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    docs = SetBatch(csr_offsets(all_lengths), np.concatenate(tokens) if tokens else np.zeros(0, dtype=np.uint16))
    if not ordered and len(doc_ids) > 1:
        by_id = np.argsort(doc_ids, kind="stable")
        doc_ids, docs = doc_ids[by_id], docs.take(by_id)
    return doc_ids, docs
