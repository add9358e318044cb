"""Queries read in chunks: the driver's memory stays bounded whatever the number of queries.

:class:`QueryStream` validates the queries in one pass that keeps only counts,
rejects and (for Parquet, whose ``query_id`` values must be unique) an 8-byte
hash per query; :meth:`QueryStream.chunks` then reads them again, chunk by
chunk, with the same rules, so the driver holds one chunk of queries at a
time. The result is the same as :func:`shards.inputs.read_queries` (same ids, sets,
order, errors and rejects); a query directory, whose file names are listed
anyway, is read whole.

:class:`DocQueryStream` is the same for a self-join: the corpus read as queries,
chunk by chunk, with the corpus readers' validation and the same docs left out
(bad rows or lines set aside, later repeats of a ``doc_id``), each query named
by its doc id.
"""

from __future__ import annotations

import hashlib
from typing import Iterator

import numpy as np

from kernels.sets import SetBatch

from .canonical import concat_sets
from .errors import InputError, Rejects, SetLimits
from .files import corpus_format, file_stat, parquet_files, queries_format
from .parquet import duplicate_error, validated_batches
from .readers import read_queries
from .text import text_sets

__all__ = ["DocQueryStream", "QueryStream"]

_QUERY_THREADS = 2  # row groups decoded at once on the driver: each holds a few hundred thousand queries


def _ids(blocks) -> list[str]:
    """One chunk's query ids from the slices of blocks it holds: lists of str, or arrays of line numbers."""
    return [str(q) for block in blocks for q in (block.tolist() if isinstance(block, np.ndarray) else block)]


def _hash(query_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(query_id.encode(), digest_size=8).digest(), "little")


class QueryStream:
    """The queries at ``path``, validated, then read chunk by chunk.

    Parameters
    ----------
    path : str
        Queries as :func:`shards.inputs.read_queries` takes them (a text file, Parquet, or a
        directory of one-query files).
    limits : SetLimits
    on_invalid : {"error", "quarantine"}

    Attributes
    ----------
    n_queries : int
        Queries kept (valid, and not a repeated ``query_id``).
    n_with_repeats : int
        Queries that had a repeated token id.
    fmt : str
        ``"dir"``, ``"text"`` or ``"parquet"``.
    files : tuple of str
        Files read.
    rejected : tuple of Rejected
        Lines, rows or files set aside under ``on_invalid="quarantine"``.

    Raises
    ------
    InputError
        As :func:`shards.inputs.read_queries`: the first bad line, row or file, or a repeated
        ``query_id`` (``on_invalid="error"``), or a missing or unreadable input.
    """

    _ID_COLUMN = "query_id"  # the Parquet id column

    def __init__(self, path, limits: SetLimits = SetLimits(), on_invalid: str = "error"):
        self.path, self.limits, self.on_invalid = str(path), limits, on_invalid
        self.fmt = queries_format(path)
        self._whole = None
        self._drop = np.zeros(0, dtype=np.int64)  # global rows of later repeats of a query_id
        if self.fmt == "dir":
            self._whole = read_queries(path, limits, on_invalid)
            self.n_queries, self.n_with_repeats = self._whole.queries.n_sets, self._whole.n_with_repeats
            self.files, self.rejected = self._whole.files, self._whole.rejected
            return
        self._count_pass()

    def _count_pass(self) -> None:
        """The validating pass: counts, rejects, and for Parquet the rows of repeated ids to drop."""
        rejects = Rejects(self.on_invalid)
        self.files = (self.path,) if self.fmt == "text" else tuple(parquet_files(self.path))
        # Each file's size and time before the pass: chunks() refuses files changed since (an
        # object store's clock is not the driver's, so the times are compared with each other only).
        self._stats = [file_stat(f) for f in self.files]
        keys, rows = [], []
        n_kept = n_repeats = 0
        for ids, rows_kept, lengths, _, repeated in self._blocks(rejects):
            n_kept += len(lengths)
            n_repeats += int(repeated.sum())
            if self.fmt == "parquet":
                keys.append(self._id_keys(ids))
                rows.append(rows_kept)
        self.n_with_repeats = n_repeats
        if self.fmt == "parquet" and n_kept:
            self._drop = self._repeated_ids(np.concatenate(keys), np.concatenate(rows), rejects)
        self.n_queries = n_kept - len(self._drop)
        self.rejected = tuple(rejects.records)

    @staticmethod
    def _id_keys(ids) -> np.ndarray:
        """What the pass keeps per Parquet id to find repeats: an 8-byte hash of each query id."""
        return np.array([_hash(q) for q in ids], dtype=np.uint64)

    @staticmethod
    def _kept_ids(ids, good: np.ndarray):
        """The ids of a record batch's valid rows ``good``."""
        return [ids[i] for i in good.tolist()] if len(good) != len(ids) else list(ids)

    def _blocks(self, rejects: Rejects):
        """Yield ``(ids, rows, lengths, tokens, repeated)`` per block of valid queries in input
        order: their ids (a list of str, or for text the line numbers, turned into strings only
        when a chunk is handed out), global row indices (0-based over all rows of all files), and sets."""
        if self.fmt == "text":
            for lines, lengths, tokens, repeated in text_sets(self.path, self.limits, rejects):
                yield lines, lines, lengths, tokens, repeated
            return
        self._where, base = [], 0
        for file in self.files:
            batches = validated_batches(file, self._ID_COLUMN, self.limits, rejects, max_threads=_QUERY_THREADS)
            for ids, (lengths, tokens, repeated), good, row_base, n_rows in batches:
                yield self._kept_ids(ids, good), base + good, lengths, tokens, repeated
                self._where.append((file, row_base, n_rows))
                base += n_rows

    def _repeated_ids(self, hashes: np.ndarray, rows: np.ndarray, rejects: Rejects) -> np.ndarray:
        """Rows repeating an earlier ``query_id``: equal hashes are candidates, confirmed on the ids
        themselves (read again, for the candidates only). Raises at the first repeat in input order
        unless quarantining; returns the rows to leave out."""
        order = np.argsort(hashes, kind="stable")  # stable: equal hashes stay in input order
        same = hashes[order][1:] == hashes[order][:-1]
        if not same.any():
            return np.zeros(0, dtype=np.int64)
        candidates = set(rows[order[1:][same]].tolist()) | set(rows[order[:-1][same]].tolist())
        found: dict[int, str] = {}
        for ids, block_rows, *_ in self._blocks(Rejects("quarantine")):
            for query_id, row in zip(ids, block_rows.tolist()):
                if row in candidates:
                    found[row] = query_id
        first: dict[str, int] = {}
        drop = []
        for row in sorted(found):
            earlier = first.setdefault(found[row], row)
            if earlier != row:
                rejects.add(duplicate_error(self._where, "query_id", found[row], earlier, row))
                drop.append(row)
        return np.asarray(drop, dtype=np.int64)

    def chunks(self, chunk_size: int, skip: int = 0) -> Iterator[tuple[list[str], SetBatch]]:
        """Yield ``(query_ids, queries)`` for consecutive chunks of ``chunk_size`` kept queries.

        Parameters
        ----------
        chunk_size : int
            Queries per chunk, ``>= 1``; the last chunk may be shorter.
        skip : int
            Leading chunks to read past without yielding them (already done).

        Raises
        ------
        InputError
            If a file's size or modification time changed since the validating pass.
        RuntimeError
            If the input no longer holds the queries the validating pass counted (it changed
            while the job ran).
        """
        if self._whole is not None:
            q = self._whole
            for lo in range(skip * chunk_size, q.queries.n_sets, chunk_size):
                hi = min(lo + chunk_size, q.queries.n_sets)
                yield q.query_ids[lo:hi], q.queries.take(np.arange(lo, hi))
            return
        changed = [f for f, before in zip(self.files, self._stats) if file_stat(f) != before]
        if changed:
            raise InputError(changed[0], "input files that stay unchanged while the job runs", "a file modified after the job validated it",
                             "run the job once the input is completely written (write it elsewhere, then move it into place)")
        drop = set(self._drop.tolist())
        ids_buf, len_buf, tok_buf, held, seen, total = [], [], [], 0, 0, 0
        for ids, rows, lengths, tokens, _ in self._blocks(Rejects(self.on_invalid)):
            if drop:
                keep = np.array([r not in drop for r in rows.tolist()], dtype=bool)
                ids = [q for q, k in zip(ids, keep) if k]  # only Parquet ids repeat
                tokens, lengths = tokens[np.repeat(keep, lengths)], lengths[keep]
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            total += len(lengths)
            start = 0
            while start < len(lengths):
                take = min(chunk_size - held, len(lengths) - start)
                ids_buf.append(ids[start : start + take])
                len_buf.append(lengths[start : start + take])
                tok_buf.append(tokens[offsets[start] : offsets[start + take]])
                held += take
                start += take
                if held == chunk_size:
                    if seen >= skip:
                        yield _ids(ids_buf), concat_sets(len_buf, tok_buf)
                    seen += 1
                    ids_buf, len_buf, tok_buf, held = [], [], [], 0
        if held and seen >= skip:
            yield _ids(ids_buf), concat_sets(len_buf, tok_buf)
        if total != self.n_queries:
            raise RuntimeError(f"{self.path}: the queries changed while the job ran (validated {self.n_queries}, "
                               f"read {total} now); rerun the job")


class DocQueryStream(QueryStream):
    """The corpus at ``path`` as queries (a self-join), validated, then read chunk by chunk.

    Query ``i`` is the ``i``-th doc the corpus readers keep, in read order (files in
    sorted name order, then rows or lines), and its query id is that doc's id as text
    (the 0-based line number for the text format). The docs kept are exactly those of
    :func:`shards.inputs.read_corpus` (and of the job's reader tasks): the same rules, the same
    rows or lines set aside under ``on_invalid="quarantine"``, and of rows repeating a
    ``doc_id`` only the first in read order stays. So the query ids are the corpus's doc
    ids, each once. The order is read order, not ``doc_id`` order (for a corpus written in
    id order, the usual case, the two agree).

    Parameters
    ----------
    path : str
        The corpus as :func:`shards.inputs.read_corpus` takes it: a text file (STI2 ``docs.txt``),
        a ``*.parquet`` file or a directory of them (``doc_id``, ``tokens``).
    limits : SetLimits
    on_invalid : {"error", "quarantine"}

    Attributes
    ----------
    n_queries : int
        Docs kept (= :attr:`shards.inputs.Corpus.doc_ids` length).
    n_with_repeats : int
        Docs that had a repeated token id.
    fmt : str
        ``"text"`` or ``"parquet"``.
    files : tuple of str
        Files read.
    rejected : tuple of Rejected
        Lines or rows set aside under ``on_invalid="quarantine"``, then later repeats of a
        ``doc_id`` (as :func:`shards.inputs.read_corpus` lists them).

    Raises
    ------
    InputError
        As :func:`shards.inputs.read_corpus` (``on_invalid="error"``): the first bad line or row in
        read order, else the first repeated ``doc_id`` in read order; or a missing or
        unreadable input.

    Notes
    -----
    The validating pass keeps, for Parquet, 16 bytes per doc (its ``doc_id`` and row, to
    find repeated ids exactly) and nothing per doc for text, whose ids are line numbers.
    """

    _ID_COLUMN = "doc_id"  # the Parquet id column

    def __init__(self, path, limits: SetLimits = SetLimits(), on_invalid: str = "error"):
        self.path, self.limits, self.on_invalid = str(path), limits, on_invalid
        self.fmt = corpus_format(path)
        self._whole = None  # QueryStream.chunks reads the blocks again
        self._drop = np.zeros(0, dtype=np.int64)
        self._count_pass()

    @staticmethod
    def _id_keys(ids) -> np.ndarray:
        """Doc ids are integers: the pass keeps them whole (8 bytes), so repeats are exact."""
        return ids

    @staticmethod
    def _kept_ids(ids, good: np.ndarray):
        # ids covers every row of the record batch (-1 where one was set aside); good, the valid rows.
        return ids[good]

    def _repeated_ids(self, ids: np.ndarray, rows: np.ndarray, rejects: Rejects) -> np.ndarray:
        """Rows repeating the ``doc_id`` of an earlier kept row (read order), as the corpus readers
        drop them; raises at the first one in read order unless quarantining. Returns the rows."""
        order = np.argsort(ids, kind="stable")  # stable: equal ids stay in read order (rows increase)
        sorted_ids = ids[order]
        again = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1]) + 1
        if not len(again):
            return np.zeros(0, dtype=np.int64)
        first = order[np.searchsorted(sorted_ids, sorted_ids[again])]  # each id's first occurrence
        drop = []
        for later, earlier in sorted(zip(rows[order[again]].tolist(), rows[first].tolist())):
            rejects.add(duplicate_error(self._where, "doc_id", int(ids[np.searchsorted(rows, later)]), earlier, later))
            drop.append(later)
        return np.asarray(drop, dtype=np.int64)
