"""The whole-input readers: :func:`read_corpus` and :func:`read_queries`, each input read and
validated in one call into host memory.

They choose the format (:mod:`settopk.shards.inputs.files`), read it (:mod:`settopk.shards.inputs.text`,
:mod:`settopk.shards.inputs.parquet`, or here a directory of one-query files), then apply what needs every
row at once: repeated ids, and the corpus sorted by ``doc_id``. The job reads the corpus in pieces
(:mod:`settopk.shards.inputs.pieces`) and the queries in chunks (:mod:`settopk.shards.inputs.query_stream`), with
the same rules and the same errors as here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from settopk.kernels.sets import SetBatch

from ..location import Location
from .canonical import NO_SETS, concat_sets
from .errors import InputError, Rejected, Rejects, SetLimits
from .files import corpus_format, is_dir, is_hidden, list_dir, open_stream, queries_format, store_error, as_location
from .parquet import duplicate_error, read_parquet_sets
from .text import check_line, first_bad_line, parse_block, read_text_sets

__all__ = ["Corpus", "Queries", "read_corpus", "read_queries"]

_TAKE_ROWS = 1 << 20  # rows gathered at a time when re-ordering docs (bounds the int64 index arrays)


@dataclass(frozen=True)
class Corpus:
    """The docs: ``docs[i]`` is the sorted, duplicate-free set of doc ``doc_ids[i]``.

    Attributes
    ----------
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing.
    docs : SetBatch or WideSets
        Sets in ``doc_ids`` order: a :class:`SetBatch` where every token is an integer in
        ``[0, vocab_size)``, else a :class:`settopk.shards.inputs.vocabulary.WideSets` of token values.
    n_with_repeats : int
        Docs read (before any ``length_range`` filter) that had a repeated id.
    fmt : str
        ``"text"`` or ``"parquet"``.
    files : tuple of str
        Files read.
    rejected : tuple of Rejected
        Lines or rows set aside under ``on_invalid="quarantine"`` (empty otherwise).
    source_rows : numpy.ndarray of int64, shape (n_docs,), optional
        Where each doc was read: its 0-based line (text) or its 0-based row within its Parquet file.
    """

    doc_ids: np.ndarray
    docs: SetBatch
    n_with_repeats: int
    fmt: str
    files: tuple[str, ...]
    rejected: tuple[Rejected, ...] = ()
    source_rows: np.ndarray | None = None


@dataclass(frozen=True)
class Queries:
    """The queries: ``queries[i]`` is the sorted, duplicate-free set of query ``query_ids[i]``.

    Attributes
    ----------
    query_ids : list of str
        In input order (sorted file names for ``"dir"``).
    queries : SetBatch or WideSets
        As :attr:`Corpus.docs`.
    n_with_repeats : int
        Queries that had a repeated id.
    fmt : str
        ``"dir"``, ``"text"`` or ``"parquet"``.
    files : tuple of str
        Files read.
    rejected : tuple of Rejected
        Lines, rows or files set aside under ``on_invalid="quarantine"`` (empty otherwise).
    """

    query_ids: list[str]
    queries: SetBatch
    n_with_repeats: int
    fmt: str
    files: tuple[str, ...]
    rejected: tuple[Rejected, ...] = ()


def _check_length_range(length_range):
    """``length_range`` as a pair of ints, checked; None stays None."""
    if length_range is None:
        return None
    lo, hi = (int(x) for x in length_range)
    if lo < 0 or hi < lo:
        raise ValueError(f"length_range must be (lo, hi) with 0 <= lo <= hi, found {length_range!r}")
    return lo, hi


def read_corpus(
    path, limits: SetLimits = SetLimits(), length_range: tuple[int, int] | None = None, on_invalid: str = "error", row_groups=None
) -> Corpus:
    """Read and validate the doc corpus at ``path`` (format by :func:`corpus_format`).

    Parameters
    ----------
    path : str, os.PathLike or settopk.shards.location.Location
        A text file, a ``*.parquet`` file or a directory of Parquet files.
    limits : SetLimits
    length_range : (int, int) or None
        ``(lo, hi)``, inclusive: keep only docs whose de-duplicated length lies in it. Every doc is still
        validated, and ``n_with_repeats`` counts all of them.
    on_invalid : {"error", "quarantine"}
        ``"error"``: the first bad line or row raises. ``"quarantine"``: bad lines and rows (and later
        rows repeating a ``doc_id``) are left out of the corpus and listed in ``Corpus.rejected``; doc ids
        of the other lines keep their line numbers.
    row_groups : sequence of int, optional
        Read only these row groups of ``path``, which must then be one Parquet file (a piece of the
        corpus, see :mod:`settopk.shards.inputs.pieces`); row numbers in messages stay those of the whole file.

    Returns
    -------
    Corpus
        The docs kept, sorted by ``doc_id``.

    Raises
    ------
    InputError
        At the first bad line or row (with ``on_invalid="error"``), or for a missing, unreadable or
        malformed file.
    ValueError
        For a bad ``length_range`` or ``on_invalid``, or ``row_groups`` given for anything but one
        Parquet file.
    """
    fmt = corpus_format(path)
    path = as_location(path)
    length_range = _check_length_range(length_range)
    rejects = Rejects(on_invalid)
    if fmt == "text":
        if row_groups is not None:
            raise ValueError(f"row_groups needs a Parquet file, found the text corpus {path}")
        lines, docs, n_with_repeats = read_text_sets(path, limits, length_range, rejects)
        return Corpus(lines, docs, n_with_repeats, "text", (path,), tuple(rejects.records), source_rows=lines)
    if row_groups is not None and is_dir(path):
        raise ValueError(f"row_groups needs one Parquet file, found the directory {path}")
    files, ids, where, kept, docs, n_with_repeats = read_parquet_sets(path, "doc_id", limits, length_range, rejects, row_groups)
    all_ids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    valid = np.flatnonzero(all_ids >= 0)  # rows set aside carry -1
    order = valid[np.argsort(all_ids[valid], kind="stable")]
    sorted_ids = all_ids[order]
    again = sorted_ids[1:] == sorted_ids[:-1]
    if again.any():
        later = np.zeros(len(all_ids), dtype=bool)
        later[order[1:][again]] = True
        for index in np.flatnonzero(later):  # repeats in input order; the first occurrence stays
            first = int(order[np.searchsorted(sorted_ids, all_ids[index])])
            rejects.add(duplicate_error(where, "doc_id", int(all_ids[index]), first, int(index)))
        stays = ~later[kept]
        kept = kept[stays]
        docs = docs.take(np.flatnonzero(stays))
    doc_ids = all_ids[kept]
    if len(doc_ids) > 1 and not (doc_ids[1:] > doc_ids[:-1]).all():
        by_id = np.argsort(doc_ids, kind="stable")
        slices = [docs.take(by_id[i : i + _TAKE_ROWS]) for i in range(0, len(by_id), _TAKE_ROWS)]
        doc_ids, docs, kept = doc_ids[by_id], concat_sets([s.lengths for s in slices], [s.tokens for s in slices]), kept[by_id]
    batch_starts = np.cumsum([0] + [n for _, _, n in where])
    batch = np.searchsorted(batch_starts, kept, side="right") - 1
    first_rows = np.array([first for _, first, _ in where] or [0], dtype=np.int64)
    source_rows = first_rows[batch] + kept - batch_starts[batch] if len(kept) else np.zeros(0, dtype=np.int64)
    return Corpus(doc_ids, docs, n_with_repeats, "parquet", tuple(files), tuple(rejects.records), source_rows=source_rows)


def _read_query_dir(path: Location, limits: SetLimits, rejects: Rejects) -> Queries:
    """A directory of one-query files, parsed as one text block (one line per file)."""
    entries = [(name, directory) for name, directory in list_dir(path) if not is_hidden(name)]  # .DS_Store, _SUCCESS, editor files
    files, bodies = [], []
    for name, directory in entries:
        full = path / name
        if directory:
            raise InputError(full, "only query files in a query directory (one query per file)", "a subdirectory", "move the subdirectory out of the query directory")
        if full.local and os.path.exists(full.path) and not os.path.isfile(full.path):  # a FIFO or device: opening it could block
            raise InputError(full, "a regular file holding one query", "a special file", "remove it from the query directory")
        try:
            with open_stream(full) as f:
                data = f.read()
        except OSError as e:
            if not full.local:
                raise store_error(full, e) from None
            raise InputError(full, "a readable query file", f"an error reading it ({e.strerror or e})", "check the file's permissions") from e
        body = data[:-1] if data.endswith(b"\n") else data
        if b"\n" in body:
            hint = " (this looks like a Parquet file: a Parquet query directory must hold only *.parquet files)" if data.startswith(b"PAR1") else ""
            rejects.add(InputError(full, "one query per file, on a single line (the final newline is optional)", "a second line" + hint, "put each query in its own file, or use the one-query-per-line text format", line=2))
            continue
        files.append(full)
        bodies.append(body)
    block = b"\n".join(bodies) + b"\n" if bodies else b""
    if not block:
        return Queries([], concat_sets([], []), 0, "dir", (), tuple(rejects.records))
    parsed = parse_block(block, limits)
    good = np.arange(len(bodies))
    if parsed is None and not rejects.quarantine:
        index, (expected, found, fix) = first_bad_line(block, limits, 0)
        if bodies[index].startswith(b"PAR1"):
            fix = "this looks like a Parquet file: a Parquet query directory must hold only *.parquet files"
        raise InputError(files[index], expected, found, fix, line=1)
    if parsed is None:
        good = np.array([i for i, body in enumerate(bodies) if check_line(body, limits) is None], dtype=np.int64)
        for i in sorted(set(range(len(bodies))) - set(good.tolist())):
            rejects.add(InputError(files[i], *check_line(bodies[i], limits), line=1))
        parsed = parse_block(b"".join(bodies[i] + b"\n" for i in good), limits) if len(good) else NO_SETS
    lengths, tokens, repeated = parsed
    kept_files = [files[i] for i in good]
    query_ids = [f.name for f in kept_files]
    in_file_order = tuple(sorted(rejects.records, key=lambda r: r.path))
    return Queries(query_ids, concat_sets([lengths], [tokens]), int(repeated.sum()), "dir", tuple(kept_files), in_file_order)


def read_queries(path, limits: SetLimits = SetLimits(), on_invalid: str = "error") -> Queries:
    """Read and validate the queries at ``path`` (format by :func:`queries_format`).

    Parameters
    ----------
    path : str, os.PathLike or settopk.shards.location.Location
    limits : SetLimits
    on_invalid : {"error", "quarantine"}
        As in :func:`read_corpus`: with ``"quarantine"`` a bad line, row or query file (bad content,
        or a second line) is left out and listed in ``Queries.rejected``; a subdirectory or an
        unreadable file in a query directory is still an error.

    Returns
    -------
    Queries
        The queries kept, in input order.

    Raises
    ------
    InputError
        At the first bad file, line or row (with ``on_invalid="error"``), or for a missing, unreadable
        or malformed input.
    ValueError
        For a bad ``on_invalid``.
    """
    fmt = queries_format(path)
    path = as_location(path)
    rejects = Rejects(on_invalid)
    if fmt == "dir":
        return _read_query_dir(path, limits, rejects)
    if fmt == "text":
        lines, queries, n_with_repeats = read_text_sets(path, limits, None, rejects)
        return Queries([str(i) for i in lines.tolist()], queries, n_with_repeats, "text", (path,), tuple(rejects.records))
    files, ids, where, kept, queries, n_with_repeats = read_parquet_sets(path, "query_id", limits, None, rejects)
    all_ids = [q for batch in ids for q in batch]
    seen: dict[str, int] = {}
    repeats = set()
    for index in kept.tolist():
        first = seen.setdefault(all_ids[index], index)
        if first != index:
            rejects.add(duplicate_error(where, "query_id", all_ids[index], first, index))
            repeats.add(index)
    if repeats:
        stays = np.array([i not in repeats for i in kept.tolist()], dtype=bool)
        kept, queries = kept[stays], queries.take(np.flatnonzero(stays))
    query_ids = [all_ids[i] for i in kept.tolist()]
    return Queries(query_ids, queries, n_with_repeats, "parquet", tuple(files), tuple(rejects.records))
