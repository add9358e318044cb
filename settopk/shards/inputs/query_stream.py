"""Queries read in chunks: the driver's memory stays bounded whatever the number of queries.

:class:`QueryStream` validates the queries in one pass that keeps only counts,
rejects and (for Parquet, whose ``query_id`` values must be unique) an 8-byte
hash per query; :meth:`QueryStream.chunks` then reads them again, chunk by
chunk, with the same rules, so the driver holds one chunk of queries at a
time. The result is the same as :func:`settopk.shards.inputs.read_queries` (same ids, sets,
order, errors and rejects); a query directory, whose file names are listed
anyway, is read whole.

:class:`DocQueryStream` is the same for a self-join: the corpus read as queries,
chunk by chunk, with the corpus readers' validation and the same docs left out
(bad rows or lines set aside, later repeats of a ``doc_id``), each query named
by its doc id.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa

from settopk.kernels.sets import SetBatch

from .canonical import concat_sets, take_tokens
from .errors import InputError, Rejects, SetLimits
from .files import corpus_format, file_stat, parquet_files, queries_format, as_location
from .parquet import duplicate_error, open_parquet, validated_batches
from .readers import read_queries
from .text import text_sets
from .vocabulary import VocabCounter, WideSets

__all__ = ["DocQueryStream", "QueryStream"]

_QUERY_THREADS = 2  # row groups decoded at once on the driver: each holds a few hundred thousand queries
# Rows per record batch on the driver: Arrow's decoding memory grows with it while the time does not
# (docs/benchmarks.md, "Settings chosen from these measurements", has the runs).
_QUERY_BATCH_ROWS = 1 << 15


def _ids(blocks) -> list[str]:
    """One chunk's query ids from the slices of blocks it holds: Arrow string arrays, lists of str,
    or arrays of line numbers (or doc ids)."""
    return [str(q) for block in blocks for q in (block if isinstance(block, list) else block.tolist())]


def _select(ids, keep: np.ndarray):
    """The ids of a block where ``keep`` (bool) is true: an Arrow array or a NumPy array."""
    return ids.filter(pa.array(keep)) if isinstance(ids, pa.Array) else ids[keep]


_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))  # splitmix64's finaliser
_LENGTH_FACTOR = np.uint64(0x9E3779B97F4A7C15)
_MAX_COLUMN_WIDTH = 64  # ids up to this many bytes, all of one width, are hashed column by column
_multipliers = np.zeros(0, dtype=np.uint64)


def _byte_multipliers(n: int) -> np.ndarray:
    """Odd 64-bit multipliers for byte positions ``0..n-1``: fixed (seeded), grown on demand."""
    global _multipliers
    if len(_multipliers) < n:
        size = max(n, 2 * len(_multipliers), 64)
        _multipliers = np.random.default_rng(0x5E7_709).integers(0, 2**64, size, dtype=np.uint64, endpoint=False) | np.uint64(1)
    return _multipliers


def _string_hashes(ids: pa.Array) -> np.ndarray:
    """An 8-byte hash of each string of ``ids`` (no nulls), without a Python object per string.

    A multilinear hash of each string's bytes (byte ``j`` times the ``j``-th fixed odd multiplier,
    summed modulo 2**64 through one running sum over the whole data buffer), mixed with its length
    and finalised as splitmix64. Equal strings get equal hashes, so repeats are found among equal
    hashes and then confirmed on the strings themselves.
    """
    _, offsets_buffer, data_buffer = ids.buffers()
    offset_type = np.int64 if pa.types.is_large_string(ids.type) else np.int32
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[ids.offset : ids.offset + len(ids) + 1].astype(np.int64)
    data = np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]] if data_buffer is not None else np.zeros(0, np.uint8)
    offsets -= offsets[0]
    lengths = np.diff(offsets)
    width = int(lengths[0]) if len(lengths) else 0
    if 0 < width <= _MAX_COLUMN_WIDTH and (lengths == width).all():
        # Ids of one width (zero-padded, the usual case): the same sum, one column of bytes at a time.
        columns = data.reshape(len(lengths), width)
        multipliers = _byte_multipliers(width)
        h = np.zeros(len(lengths), dtype=np.uint64)
        for j in range(width):
            h += (columns[:, j].astype(np.uint64) + np.uint64(1)) * multipliers[j]
    else:
        position = np.arange(len(data), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
        terms = (data.astype(np.uint64) + np.uint64(1)) * _byte_multipliers(int(lengths.max(initial=0)))[position]
        running = np.zeros(len(data) + 1, dtype=np.uint64)
        np.cumsum(terms, dtype=np.uint64, out=running[1:])
        h = running[offsets[1:]] - running[offsets[:-1]]  # modulo 2**64, as the sums wrap
    h ^= lengths.astype(np.uint64) * _LENGTH_FACTOR
    h ^= h >> np.uint64(30)
    h *= _MIX[0]
    h ^= h >> np.uint64(27)
    h *= _MIX[1]
    h ^= h >> np.uint64(31)
    return h


class QueryStream:
    """The queries at ``path``, validated, then read chunk by chunk.

    Parameters
    ----------
    path : str
        Queries as :func:`settopk.shards.inputs.read_queries` takes them (a text file, Parquet, or a
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
    vocab : settopk.shards.inputs.vocabulary.Vocab
        The queries' distinct tokens (counted by the validating pass).
    token_types : dict of str to str
        Token types seen, each with the first file holding it
        (:attr:`settopk.shards.inputs.vocabulary.VocabCounter.types`).
    longest : int
        The most distinct tokens in one query.
    token_map : settopk.shards.inputs.vocabulary.TokenMap or None
        The run's mapping to dense ids, set by the job before :meth:`chunks`.

    Raises
    ------
    InputError
        As :func:`settopk.shards.inputs.read_queries`: the first bad line, row or file, or a repeated
        ``query_id`` (``on_invalid="error"``), or a missing or unreadable input.
    """

    _ID_COLUMN = "query_id"  # the Parquet id column
    _KEEP_ROWS = False  # the validating pass keeps 8 bytes per query (a hash of its id), not its row

    def __init__(self, path, limits: SetLimits = SetLimits(), on_invalid: str = "error"):
        self.path, self.limits, self.on_invalid = as_location(path), limits, on_invalid
        self.fmt = queries_format(path)
        self._whole = None
        self._drop = np.zeros(0, dtype=np.int64)  # global rows of later repeats of a query_id
        self.token_map = None
        if self.fmt == "dir":
            self._whole = read_queries(path, limits, on_invalid)
            self.n_queries, self.n_with_repeats = self._whole.queries.n_sets, self._whole.n_with_repeats
            self.files, self.rejected = self._whole.files, self._whole.rejected
            counter = VocabCounter(limits.vocab_size)
            counter.add(self._whole.queries.tokens, self.path)
            self.longest = int(self._whole.queries.lengths.max(initial=0))
            self.vocab, self.token_types = counter.result(), counter.types
            return
        self._count_pass()

    def _count_pass(self) -> None:
        """The validating pass: counts, rejects, and for Parquet the rows of repeated ids to drop."""
        rejects = Rejects(self.on_invalid)
        self.files = (self.path,) if self.fmt == "text" else tuple(parquet_files(self.path))
        # Each file's size and time before the pass: chunks() refuses files changed since (an
        # object store's clock is not the driver's, so the times are compared with each other only).
        self._stats = [file_stat(f) for f in self.files]
        # One array of keys, sized from the footers: no second copy to join per-block arrays.
        keys = np.empty(sum(open_parquet(f).metadata.num_rows for f in self.files) if self.fmt == "parquet" else 0, dtype=np.int64)
        rows = []
        n_kept = n_repeats = 0
        counter = VocabCounter(self.limits.vocab_size)
        self.longest = 0
        for ids, rows_kept, lengths, tokens, repeated in self._blocks(rejects):
            counter.add(tokens, self._file)
            self.longest = max(self.longest, int(lengths.max(initial=0)))
            if self.fmt == "parquet":
                keys[n_kept : n_kept + len(lengths)] = self._id_keys(ids).view(np.int64)
                if self._KEEP_ROWS:
                    rows.append(rows_kept)
            n_kept += len(lengths)
            n_repeats += int(repeated.sum())
        self.n_with_repeats = n_repeats
        if self.fmt == "parquet" and n_kept:
            if n_kept > len(keys):
                raise RuntimeError(f"{self.path}: more rows than the Parquet footers count; rerun the job once the input is written")
            self._drop = self._repeated_ids(keys[:n_kept], np.concatenate(rows) if rows else None, rejects)
        self.n_queries = n_kept - len(self._drop)
        self.rejected = tuple(rejects.records)
        # The distinct tokens of the queries kept and of later repeats of a query_id (a
        # repeat's tokens may then count as shared: harmless, the mapping stays exact).
        self.vocab, self.token_types = counter.result(), counter.types

    @staticmethod
    def _id_keys(ids) -> np.ndarray:
        """What the pass keeps per Parquet id to find repeats: an 8-byte hash of each query id (int64 bits)."""
        return _string_hashes(ids).view(np.int64)

    @staticmethod
    def _kept_ids(ids, good: np.ndarray):
        """The ids of a record batch's valid rows ``good`` (an Arrow string array)."""
        return ids.take(pa.array(good)) if len(good) != len(ids) else ids

    def _blocks(self, rejects: Rejects):
        """Yield ``(ids, rows, lengths, tokens, repeated)`` per block of valid queries in input
        order: their ids (a list of str, or for text the line numbers, turned into strings only
        when a chunk is handed out), global row indices (0-based over all rows of all files), and sets."""
        self._file = self.path
        if self.fmt == "text":
            for lines, lengths, tokens, repeated in text_sets(self.path, self.limits, rejects):
                yield lines, lines, lengths, tokens, repeated
            return
        self._where, base = [], 0
        for file in self.files:
            self._file = file
            batches = validated_batches(file, self._ID_COLUMN, self.limits, rejects, max_threads=_QUERY_THREADS, arrow_ids=True,
                                        batch_rows=_QUERY_BATCH_ROWS)
            for ids, (lengths, tokens, repeated), good, row_base, n_rows in batches:
                yield self._kept_ids(ids, good), base + good, lengths, tokens, repeated
                self._where.append((file, row_base, n_rows))
                base += n_rows

    def _repeated_ids(self, hashes: np.ndarray, rows, rejects: Rejects) -> np.ndarray:
        """Rows repeating an earlier ``query_id``: ids with a hash seen twice are candidates, confirmed
        on the ids themselves (read again, for the candidates only). Raises at the first repeat in
        input order unless quarantining; returns the rows to leave out. ``hashes`` is sorted in place."""
        hashes.sort()
        twice = hashes[1:][hashes[1:] == hashes[:-1]]
        if not len(twice):
            return np.zeros(0, dtype=np.int64)
        twice = np.unique(twice)
        found: dict[int, str] = {}
        for ids, block_rows, *_ in self._blocks(Rejects("quarantine")):
            candidate = np.isin(self._id_keys(ids), twice)
            if candidate.any():
                found.update(zip(block_rows[candidate].tolist(), _ids([_select(ids, candidate)])))
        first: dict[str, int] = {}
        drop = []
        for row in sorted(found):
            earlier = first.setdefault(found[row], row)
            if earlier != row:
                rejects.add(duplicate_error(self._where, "query_id", found[row], earlier, row))
                drop.append(row)
        return np.asarray(drop, dtype=np.int64)

    def _mapped(self, sets) -> SetBatch:
        """A chunk's sets as the kernels' dense ids (:attr:`token_map`)."""
        # Without a map (a stream used on its own) the sets come as read: a SetBatch, or
        # WideSets of token values that no kernel takes.
        return self.token_map.queries(sets) if self.token_map is not None else sets

    def chunks(self, chunk_size: int, skip: int = 0) -> Iterator[tuple[list[str], SetBatch | WideSets]]:
        """Yield ``(query_ids, queries)`` for consecutive chunks of ``chunk_size`` kept queries.

        Parameters
        ----------
        chunk_size : int
            Queries per chunk, ``>= 1``; the last chunk may be shorter.
        skip : int
            Leading chunks to read past without yielding them (already done).

        Each chunk's sets are the kernels' dense ids where :attr:`token_map` is set
        (:func:`settopk.jobs.vocabulary.settle_tokens`), else as read (a SetBatch, or
        WideSets where some token is not a small id).

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
                yield q.query_ids[lo:hi], self._mapped(q.queries.take(np.arange(lo, hi)))
            return
        changed = [f for f, before in zip(self.files, self._stats) if file_stat(f) != before]
        if changed:
            raise InputError(changed[0], "input files that stay unchanged while the job runs", "a file modified after the job validated it",
                             "run the job once the input is completely written (write it elsewhere, then move it into place)")
        ids_buf, len_buf, tok_buf, held, seen, total = [], [], [], 0, 0, 0
        for ids, rows, lengths, tokens, _ in self._blocks(Rejects(self.on_invalid)):
            if len(self._drop):
                keep = ~np.isin(rows, self._drop)
                ids = _select(ids, keep)  # only Parquet ids repeat
                tokens, lengths = take_tokens(tokens, np.repeat(keep, lengths)), lengths[keep]
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
                        yield _ids(ids_buf), self._mapped(concat_sets(len_buf, tok_buf))
                    seen += 1
                    ids_buf, len_buf, tok_buf, held = [], [], [], 0
        if held and seen >= skip:
            yield _ids(ids_buf), self._mapped(concat_sets(len_buf, tok_buf))
        if total != self.n_queries:
            raise RuntimeError(f"{self.path}: the queries changed while the job ran (validated {self.n_queries}, "
                               f"read {total} now); rerun the job")


class DocQueryStream(QueryStream):
    """The corpus at ``path`` as queries (a self-join), validated, then read chunk by chunk.

    Query ``i`` is the ``i``-th doc the corpus readers keep, in read order (files in
    sorted name order, then rows or lines), and its query id is that doc's id as text
    (the 0-based line number for the text format). The docs kept are exactly those of
    :func:`settopk.shards.inputs.read_corpus` (and of the job's reader tasks): the same rules, the same
    rows or lines set aside under ``on_invalid="quarantine"``, and of rows repeating a
    ``doc_id`` only the first in read order stays. So the query ids are the corpus's doc
    ids, each once. The order is read order, not ``doc_id`` order (for a corpus written in
    id order, the usual case, the two agree).

    Parameters
    ----------
    path : str
        The corpus as :func:`settopk.shards.inputs.read_corpus` takes it: a text file (STI2 ``docs.txt``),
        a ``*.parquet`` file or a directory of them (``doc_id``, ``tokens``).
    limits : SetLimits
    on_invalid : {"error", "quarantine"}

    Attributes
    ----------
    n_queries : int
        Docs kept (= :attr:`settopk.shards.inputs.Corpus.doc_ids` length).
    n_with_repeats : int
        Docs that had a repeated token id.
    fmt : str
        ``"text"`` or ``"parquet"``.
    files : tuple of str
        Files read.
    rejected : tuple of Rejected
        Lines or rows set aside under ``on_invalid="quarantine"``, then later repeats of a
        ``doc_id`` (as :func:`settopk.shards.inputs.read_corpus` lists them).

    Raises
    ------
    InputError
        As :func:`settopk.shards.inputs.read_corpus` (``on_invalid="error"``): the first bad line or row in
        read order, else the first repeated ``doc_id`` in read order; or a missing or
        unreadable input.

    Notes
    -----
    The validating pass keeps, for Parquet, 16 bytes per doc (its ``doc_id`` and row, to
    find repeated ids exactly) and nothing per doc for text, whose ids are line numbers.
    """

    _ID_COLUMN = "doc_id"  # the Parquet id column
    _KEEP_ROWS = True  # doc ids are kept whole with their rows: repeats are found exactly

    def __init__(self, path, limits: SetLimits = SetLimits(), on_invalid: str = "error"):
        self.path, self.limits, self.on_invalid = as_location(path), limits, on_invalid
        self.fmt = corpus_format(path)
        self._whole = None  # QueryStream.chunks reads the blocks again
        self.token_map = None
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
