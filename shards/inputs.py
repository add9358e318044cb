"""Input readers: the doc corpus and the queries, validated exactly, as CSR :class:`SetBatch` es.

Formats
-------
Corpus (docs), chosen by :func:`corpus_format`:

* ``text`` (the STI2 ``docs.txt`` format): one doc per line, comma-separated token ids; the doc id is
  the 0-based line number. An empty line is an empty doc. A final newline does not start another doc
  (``"1\\n2\\n"`` has 2 docs; ``"1\\n2"`` too; ``"1\\n\\n"`` has 2, the second empty). Lines end in
  ``\\n`` or ``\\r\\n``.
* ``parquet``: a ``*.parquet`` file, or a directory of them, with columns ``doc_id`` (any integer
  type, values in ``[0, 2**63)``, unique) and ``tokens`` (``list`` or ``large_list`` of any integer
  type). Docs may come in any ``doc_id`` order; they are returned sorted by ``doc_id``.

Queries, chosen by :func:`queries_format`:

* ``dir``: a directory with one query per file (comma-separated ids on a single line, final newline
  optional); the query id is the file name; files are read in sorted name order. Every entry counts:
  a subdirectory, an unreadable file or a file with a second line is an error.
* ``text``: one query per line, as the corpus text format; the query id is the 0-based line number.
* ``parquet``: as the corpus, with ``query_id`` (string or integer, returned as strings, unique)
  instead of ``doc_id``; rows keep their input order.

Policies (the same for every format)
------------------------------------
* Token ids are integers in ``[0, vocab_size)``. The order of ids in a set does not matter: sets are
  returned sorted. A repeated id counts once; ``n_with_repeats`` counts the sets that had one. After
  de-duplication a set holds at most ``max_len`` ids. An empty set is valid.
* Text whitespace: spaces and tabs around an id are allowed (``" 1 ,\\t2 "`` is ``{1, 2}``), and a line
  holding only spaces and tabs is an empty set. Everything else is an error: an empty field (``1,,2``,
  a trailing or leading comma), a sign (``-3``, ``+3``), a decimal point, hex, any other character, a
  space inside an id (``1 2``), or a carriage return that does not end the line.
* A Parquet directory is read in sorted file-name order; names starting with ``.`` or ``_`` (such as
  ``_SUCCESS``) are skipped, as Arrow, Spark and DuckDB do, and the files read are listed in
  ``files``. Any other entry that is not a ``*.parquet`` file is an error.
* A text line longer than 256 MiB is an error (a valid line is a few kB).
* Nothing is skipped silently: every problem raises :class:`InputError`, which names the file, the
  line (1-based, as editors count) or the Parquet row (0-based, within that file), what was expected,
  what was found and how to fix it. Readers stop at the first bad line or row in input order.

Performance
-----------
Text is parsed in 32 MiB blocks of whole lines without a per-line Python loop: NumPy finds separators,
one Arrow string array over the block (zero copy) is trimmed and cast to ``uint16`` by
``pyarrow.compute``, and sets are sorted and de-duplicated with one NumPy sort per block (skipped when
the block is already sorted and repeat-free). Only a block that fails is searched for its first bad
line: it is halved until small, then checked line by line to write the message. Lines are split by
this module rather than by ``pyarrow.csv``, which also treats a bare ``\\r`` as a line break and would
silently shift doc ids.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import hashlib
import os
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kernels.sets import SetBatch

__all__ = [
    "Corpus",
    "InputError",
    "ON_INVALID",
    "Queries",
    "Rejected",
    "SetLimits",
    "corpus_format",
    "fingerprint",
    "queries_format",
    "read_corpus",
    "read_queries",
]

_BLOCK_BYTES = 32 << 20  # text read block; a block always holds whole lines
_MAX_LINE_BYTES = 256 << 20
_SMALL_PIECE_LINES = 64  # a failing piece this small is checked line by line
_PARQUET_BATCH_ROWS = 1 << 17
_MAX_READ_THREADS = 16  # row groups decoded at once
_TAKE_ROWS = 1 << 20  # rows gathered at a time when re-ordering docs (bounds the int64 index arrays)
_REMAP = "remap the token ids into [0, vocab_size), or raise vocab_size (at most 65536)"
_ALLOWED_TEXT = "comma-separated token ids (non-negative integers; spaces or tabs around an id are allowed)"


class InputError(ValueError):
    """A bad input, located exactly.

    ``InputError(path, expected, found, fix, line=None, row=None)`` reads
    ``"<path>:<line>: expected <expected>, found <found>; fix: <fix>"`` for a text line (1-based),
    ``"<path> row <row>: ..."`` for a Parquet row (0-based within the file) and ``"<path>: ..."`` for the
    file as a whole. ``InputError(message)`` keeps a message written elsewhere (checks outside these
    readers); ``path``, ``line`` and ``row`` are then None.

    Attributes
    ----------
    path : str or None
        The file or directory at fault.
    line : int or None
        1-based line number, for text inputs.
    row : int or None
        0-based row number within the Parquet file ``path``.
    expected, found, fix : str or None
        The parts of the message.
    """

    def __init__(self, path, expected: str | None = None, found: str | None = None, fix: str | None = None, line: int | None = None, row: int | None = None):
        self.expected = expected
        self.found = found
        self.fix = fix
        self.line = line
        self.row = row
        if expected is None:
            self.path = None
            super().__init__(str(path))
            return
        self.path = os.fspath(path)
        where = self.path
        if line is not None:
            where = f"{self.path}:{line}"
        elif row is not None:
            where = f"{self.path} row {row}"
        super().__init__(f"{where}: expected {expected}, found {found}; fix: {fix}")

    def __reduce__(self):  # keeps the attributes across pickling (Ray ships exceptions between processes)
        if self.expected is None:
            return (type(self), self.args)
        return (type(self), (self.path, self.expected, self.found, self.fix, self.line, self.row))


@dataclass(frozen=True)
class SetLimits:
    """Bounds every set must respect: ids in ``[0, vocab_size)``, at most ``max_len`` distinct ids."""

    vocab_size: int = 65536
    max_len: int = 128

    def __post_init__(self) -> None:
        if not 1 <= self.vocab_size <= 65536:
            raise ValueError(f"vocab_size must be in [1, 65536], found {self.vocab_size}")
        if self.max_len < 0:
            raise ValueError(f"max_len must be >= 0, found {self.max_len}")


ON_INVALID = ("error", "quarantine")
"""Policies for an invalid line or row: stop with :class:`InputError`, or set it aside as :class:`Rejected`."""


@dataclass(frozen=True)
class Rejected:
    """One invalid line or row set aside under ``on_invalid="quarantine"``.

    Attributes
    ----------
    path : str
        The file it came from.
    line : int or None
        1-based line number (text inputs).
    row : int or None
        0-based row within ``path`` (Parquet inputs).
    reason : str
        What was expected, what was found and how to fix it (the :class:`InputError` message
        without its location).
    """

    path: str
    line: int | None
    row: int | None
    reason: str


class _Rejects:
    """Where readers send an invalid line or row: raised at once, or recorded (quarantine)."""

    def __init__(self, on_invalid: str):
        if on_invalid not in ON_INVALID:
            raise ValueError(f"on_invalid must be one of {ON_INVALID}, found {on_invalid!r}")
        self.quarantine = on_invalid == "quarantine"
        self.records: list[Rejected] = []

    def add(self, error: "InputError") -> None:
        if not self.quarantine:
            raise error
        reason = f"expected {error.expected}, found {error.found}; fix: {error.fix}"
        self.records.append(Rejected(error.path, error.line, error.row, reason))


@dataclass(frozen=True)
class Corpus:
    """The docs: ``docs[i]`` is the sorted, duplicate-free set of doc ``doc_ids[i]``.

    Attributes
    ----------
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing.
    docs : SetBatch
        Sets in ``doc_ids`` order.
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
    queries : SetBatch
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


def fingerprint(files, base: str) -> dict:
    """A cheap fingerprint of input files: SHA-256 over each file's name, size and mtime.

    Parameters
    ----------
    files : sequence of str
        The files read, in the order read.
    base : str
        The input path given; names are taken relative to it when it is a
        directory, so moving the whole input keeps the fingerprint.

    Returns
    -------
    dict
        ``sha256`` (hex), ``files`` (count), ``bytes`` (total size) and ``method``.
        Reading no content keeps this instant at corpus scale; a copy that keeps
        modification times (``cp -p``, ``rsync -a``) keeps the fingerprint, and an
        edit that changes neither size nor mtime goes unnoticed.
    """
    h = hashlib.sha256()
    total_bytes = 0
    for f in files:
        st = os.stat(f)
        name = os.path.relpath(f, base) if os.path.isdir(base) else os.path.basename(f)
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        total_bytes += st.st_size
    return {"method": "sha256(name, size_bytes, mtime_ns per file)", "sha256": h.hexdigest(), "files": len(files), "bytes": total_bytes}


# --------------------------------------------------------------------------------------------------
# Formats and file lists


def _require_exists(path) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(path, "an existing file or directory", "nothing at this path", "check the path and the working directory")
    return path


def _is_parquet_name(name: str) -> bool:
    return name.lower().endswith(".parquet")


def _is_hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def corpus_format(path) -> str:
    """``"parquet"`` for a directory or a ``*.parquet`` file, else ``"text"``.

    Raises
    ------
    InputError
        If nothing exists at ``path``.
    """
    path = _require_exists(path)
    return "parquet" if os.path.isdir(path) or _is_parquet_name(path) else "text"


def queries_format(path) -> str:
    """``"parquet"`` for a ``*.parquet`` file or a directory of them, ``"dir"`` for another directory,
    else ``"text"``.

    A directory is Parquet when it has at least one entry not starting with ``.`` or ``_`` and all such
    entries end in ``.parquet``.

    Raises
    ------
    InputError
        If nothing exists at ``path``.
    """
    path = _require_exists(path)
    if os.path.isdir(path):
        names = [n for n in os.listdir(path) if not _is_hidden(n)]
        return "parquet" if names and all(_is_parquet_name(n) for n in names) else "dir"
    return "parquet" if _is_parquet_name(path) else "text"


def _parquet_files(path: str) -> list[str]:
    """The Parquet files at ``path`` (a file, or a directory read in sorted name order)."""
    if not os.path.isdir(path):
        return [path]
    files = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if _is_hidden(name):
            continue
        if not os.path.isfile(full):
            raise InputError(full, "a *.parquet file (Parquet directories are read flat, without partitions)", "a subdirectory", "move the Parquet files of the subdirectory up into the directory, or remove it")
        if not _is_parquet_name(name):
            raise InputError(full, "only *.parquet files in a Parquet directory (names starting with '.' or '_' are skipped)", "a file without the .parquet suffix", "remove the file, or rename it to *.parquet if it is Parquet")
        files.append(full)
    if not files:
        raise InputError(path, "a directory holding at least one *.parquet file", "no Parquet file", "point to the directory that holds the Parquet files, or write a Parquet file with 0 rows for an empty input")
    return files


# --------------------------------------------------------------------------------------------------
# Sets: canonical form shared by every format


def _canonical(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort and de-duplicate each set of a flat batch.

    Parameters
    ----------
    values : numpy.ndarray of uint16, shape (n_values,)
        Ids of all sets, set after set; every id already checked to be in range.
    counts : numpy.ndarray of int64, shape (n_sets,)
        Ids per set before de-duplication; sums to ``n_values``.

    Returns
    -------
    lengths : numpy.ndarray of int64, shape (n_sets,)
        Distinct ids per set.
    tokens : numpy.ndarray of uint16, shape (lengths.sum(),)
        The sets, each ascending and duplicate-free.
    repeated : numpy.ndarray of bool, shape (n_sets,)
        Sets that had a repeated id.
    """
    n_sets = len(counts)
    if len(values) < 2:
        return counts.astype(np.int64), values.astype(np.uint16), np.zeros(n_sets, dtype=bool)
    ends = np.cumsum(counts)
    increasing = values[1:] > values[:-1]
    boundary = ends[:-1][(ends[:-1] > 0) & (ends[:-1] < len(values))] - 1  # pairs that straddle two sets
    increasing[boundary] = True
    if increasing.all():  # fast path: already sorted and repeat-free (the usual case for docs.txt)
        return counts.astype(np.int64), values.astype(np.uint16, copy=False), np.zeros(n_sets, dtype=bool)
    set_of = np.repeat(np.arange(n_sets, dtype=np.int64), counts)
    key = (set_of << 16) | values.astype(np.int64)
    key.sort()
    new = np.empty(len(key), dtype=bool)
    new[0] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    kept = key[new]
    repeated = np.zeros(n_sets, dtype=bool)
    repeated[key[~new] >> 16] = True
    lengths = np.bincount(kept >> 16, minlength=n_sets).astype(np.int64)
    return lengths, (kept & 0xFFFF).astype(np.uint16), repeated


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _select(lengths: np.ndarray, tokens: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sets of a CSR piece where ``keep`` (bool per set) holds."""
    if keep.all():
        return lengths, tokens
    return lengths[keep], tokens[np.repeat(keep, lengths)]


def _length_keep(lengths: np.ndarray, length_range) -> np.ndarray:
    if length_range is None:
        return np.ones(len(lengths), dtype=bool)
    lo, hi = length_range
    return (lengths >= lo) & (lengths <= hi)


def _check_length_range(length_range):
    if length_range is None:
        return None
    lo, hi = (int(x) for x in length_range)
    if lo < 0 or hi < lo:
        raise ValueError(f"length_range must be (lo, hi) with 0 <= lo <= hi, found {length_range!r}")
    return lo, hi


def _set_batch(lengths: list[np.ndarray], tokens: list[np.ndarray]) -> SetBatch:
    all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    all_tokens = np.concatenate(tokens) if tokens else np.zeros(0, dtype=np.uint16)
    return SetBatch(_offsets(all_lengths), all_tokens.astype(np.uint16, copy=False))


# --------------------------------------------------------------------------------------------------
# Text: vectorised block parser, and the line-by-line checker that explains a failing block

_DIGITS_RE = re.compile(rb"[0-9]+")
_NEGATIVE_RE = re.compile(rb"-[0-9]+")


def _show(text: bytes, limit: int = 60) -> str:
    s = text.decode("utf-8", errors="backslashreplace")
    return repr(s if len(s) <= limit else s[:limit] + "...")


def _check_line(line: bytes, limits: SetLimits):
    """Why one text line (without its ``\\n``) is bad, as ``(expected, found, fix)``; None if it is good."""
    if line.endswith(b"\r"):
        line = line[:-1]
    if b"\r" in line:
        return ("lines ending in '\\n' or '\\r\\n'", "a carriage return ('\\r') inside the line", "convert the line endings to '\\n' (for example with dos2unix) or remove the stray '\\r'")
    if not line.strip(b" \t"):
        return None
    ids = set()
    for position, field in enumerate(line.split(b","), start=1):
        text = field.strip(b" \t")
        if not text:
            return (_ALLOWED_TEXT, f"an empty field at id #{position} in {_show(line)}", "remove the extra comma (a set's ids are separated by single commas, with none before the first or after the last)")
        if _NEGATIVE_RE.fullmatch(text):
            return (f"token ids in [0, {limits.vocab_size})", f"the negative id {text.decode()} at id #{position}", _REMAP)
        if not _DIGITS_RE.fullmatch(text):
            return (_ALLOWED_TEXT, f"{_show(text)} at id #{position}", "write each token id as a plain decimal integer")
        value = int(text)
        if value >= limits.vocab_size:
            return (f"token ids in [0, {limits.vocab_size})", f"{value} at id #{position}", _REMAP)
        ids.add(value)
    if len(ids) > limits.max_len:
        return (f"at most {limits.max_len} distinct ids per set", f"{len(ids)} distinct ids", "shorten this set, or raise max_len")
    return None


def _parse_block(block, limits: SetLimits):
    """Parse whole text lines vectorised.

    Parameters
    ----------
    block : bytes-like
        Whole lines; the last byte is ``\\n``.

    Returns
    -------
    (lengths, tokens, repeated) as :func:`_canonical` returns, one set per line; None when some line is
    bad (then :func:`_first_bad_line` finds it).
    """
    b = np.frombuffer(block, dtype=np.uint8)
    if b.max() > ord("9"):  # letters ('0x1F' would cast as hex), '_', non-ASCII...: never valid
        return None
    cr = np.flatnonzero(b == ord("\r"))
    if len(cr) and (b[cr + 1] != ord("\n")).any():  # the last byte is '\n', so cr + 1 is in range
        return None
    # Every byte <= ',' is a separator when the block has no whitespace: the usual case, one compare.
    sep = np.flatnonzero(b <= ord(","))
    sep_byte = b[sep]
    if not ((sep_byte == ord(",")) | (sep_byte == ord("\n"))).all():
        sep = np.flatnonzero((b == ord(",")) | (b == ord("\n")))
        sep_byte = b[sep]
    # Field i is block[sep[i-1] + 1 : sep[i] + 1], its separator included; trimming drops it.
    offsets = np.empty(len(sep) + 1, dtype=np.int64 if len(b) >= 2**31 else np.int32)
    offsets[0] = 0
    offsets[1:] = sep + 1
    string_type = pa.large_string() if offsets.dtype == np.int64 else pa.string()
    fields = pa.Array.from_buffers(string_type, len(sep), [None, pa.py_buffer(offsets), pa.py_buffer(block)])
    fields = pc.ascii_trim(fields, " \t\r,\n")
    line_end = np.flatnonzero(sep_byte == ord("\n"))  # field index of each line's last field
    counts = np.diff(line_end, prepend=-1)
    empty = np.flatnonzero(pc.binary_length(fields).to_numpy(zero_copy_only=False) == 0)
    if len(empty):
        # An empty field is valid only as a whole line (an empty set).
        alone = (sep_byte[empty] == ord("\n")) & ((empty == 0) | (sep_byte[np.maximum(empty - 1, 0)] == ord("\n")))
        if not alone.all():
            return None
        keep = np.ones(len(sep), dtype=bool)
        keep[empty] = False
        fields = fields.filter(pa.array(keep))
        counts = counts - np.bincount(np.searchsorted(line_end, empty), minlength=len(counts))
    try:
        values = pc.cast(fields, pa.uint16()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:  # not a decimal integer, or >= 65536
        return None
    if limits.vocab_size < 65536 and len(values) and values.max() >= limits.vocab_size:
        return None
    if len(counts) and counts.max() > limits.max_len:  # may still fit after de-duplication
        lengths, tokens, repeated = _canonical(values, counts)
        if lengths.max() > limits.max_len:
            return None
        return lengths, tokens, repeated
    return _canonical(values, counts)


def _first_bad_line(block, limits: SetLimits, first_line: int):
    """The first bad line of a block that :func:`_parse_block` rejected: ``(line_number, reason)``.

    Halves the block while it fails, so only a few small pieces are checked line by line.
    """
    block = bytes(block)
    lines_in = block.count(b"\n")
    while lines_in > _SMALL_PIECE_LINES:
        middle = block.find(b"\n", len(block) // 2)
        if middle == len(block) - 1:  # one long line holds the second half: split by lines instead
            middle = -1
            for _ in range(lines_in // 2):
                middle = block.index(b"\n", middle + 1)
        left, right = block[: middle + 1], block[middle + 1 :]
        left_lines = left.count(b"\n")
        if _parse_block(left, limits) is None:
            block, lines_in = left, left_lines
        else:
            block, lines_in, first_line = right, lines_in - left_lines, first_line + left_lines
    for i, line in enumerate(block.split(b"\n")[:-1]):
        reason = _check_line(line, limits)
        if reason is not None:
            return first_line + i, reason
    raise RuntimeError(f"internal error: the vectorised text parser rejected lines {first_line + 1}..{first_line + lines_in} but no line in them is bad")


def _text_blocks(path: str):
    """Yield ``(block, first_line)``: memoryviews of whole lines (last byte ``\\n``) and the 0-based
    number of their first line. A block is valid only until the next one is requested."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise InputError(path, "a readable file", f"an error opening it ({e.strerror or e})", "check the path and its permissions") from e
    with f:
        buf = bytearray(_BLOCK_BYTES)
        carry = 0  # bytes of a partial line kept at the start of buf
        first_line = 0
        while True:
            if carry == len(buf):  # one line fills the buffer: grow it (a new buffer; old views may live)
                if len(buf) >= _MAX_LINE_BYTES:
                    raise InputError(path, f"lines shorter than {_MAX_LINE_BYTES >> 20} MiB", "a longer line", "check that this is a text file of comma-separated ids with one set per line", line=first_line + 1)
                grown = bytearray(2 * len(buf))
                grown[:carry] = buf[:carry]
                buf = grown
            try:
                n = f.readinto(memoryview(buf)[carry:])
            except OSError as e:
                raise InputError(path, "a readable file", f"a read error ({e.strerror or e})", "check the file and the storage it is on") from e
            if n == 0:
                break
            end = carry + n
            cut = buf.rfind(b"\n", 0, end) + 1
            if cut == 0:
                carry = end
                continue
            yield memoryview(buf)[:cut], first_line
            first_line += buf.count(b"\n", 0, cut)
            buf[: end - cut] = buf[cut:end]  # same size: allowed while the block's views live
            carry = end - cut
        if carry:  # a last line without a final newline
            yield bytes(buf[:carry]) + b"\n", first_line


def _set_aside_bad_lines(path: str, block, limits: SetLimits, first_line: int, rejects: _Rejects):
    """Quarantine the bad lines of a block: ``(good, clean_block)``, the 0-based indices of the good
    lines within the block and a block holding only them."""
    lines = bytes(block).split(b"\n")[:-1]
    good = []
    for i, line in enumerate(lines):
        reason = _check_line(line, limits)
        if reason is None:
            good.append(i)
        else:
            rejects.add(InputError(path, *reason, line=first_line + i + 1))
    return np.array(good, dtype=np.int64), b"".join(lines[i] + b"\n" for i in good)


_NO_SETS = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint16), np.zeros(0, dtype=bool))


def _text_sets(path: str, limits: SetLimits, rejects: _Rejects):
    """Yield ``(line_numbers, lengths, tokens, repeated)`` per block of a text file of sets: the
    0-based line numbers of the valid lines and their sets (:func:`_canonical`); bad lines raise
    or go to ``rejects``."""
    for block, first_line in _text_blocks(path):
        parsed = _parse_block(block, limits)
        line_numbers = None
        if parsed is None and not rejects.quarantine:
            line, (expected, found, fix) = _first_bad_line(block, limits, first_line)
            if line == 0 and bytes(block[:4]) == b"PAR1":
                fix = "this looks like a Parquet file: give it a .parquet suffix so it is read as Parquet"
            raise InputError(path, expected, found, fix, line=line + 1)
        if parsed is None:
            good, clean = _set_aside_bad_lines(path, block, limits, first_line, rejects)
            line_numbers = first_line + good
            parsed = _parse_block(clean, limits) if len(good) else _NO_SETS
            if parsed is None:
                raise RuntimeError(f"internal error: {path}: lines that passed the line check failed the block parser")
        lengths, tokens, repeated = parsed
        if line_numbers is None:
            line_numbers = first_line + np.arange(len(lengths), dtype=np.int64)
        yield line_numbers, lengths, tokens, repeated


def _read_text_sets(path: str, limits: SetLimits, length_range=None, rejects: _Rejects | None = None):
    """Parse a text file of sets, one per line.

    Returns
    -------
    lines : numpy.ndarray of int64
        0-based line numbers of the sets kept by ``length_range`` (all valid lines when None).
    batch : SetBatch
        Their sets.
    n_with_repeats : int
        Lines (kept or not) whose set had a repeated id.
    """
    rejects = rejects or _Rejects("error")
    kept_lines, kept_lengths, kept_tokens = [], [], []
    n_with_repeats = 0
    for line_numbers, lengths, tokens, repeated in _text_sets(path, limits, rejects):
        n_with_repeats += int(repeated.sum())
        keep = _length_keep(lengths, length_range)
        lengths, tokens = _select(lengths, tokens, keep)
        kept_lines.append(line_numbers[keep])
        kept_lengths.append(lengths)
        kept_tokens.append(tokens)
    lines = np.concatenate(kept_lines) if kept_lines else np.zeros(0, dtype=np.int64)
    return lines.astype(np.int64, copy=False), _set_batch(kept_lengths, kept_tokens), n_with_repeats


# --------------------------------------------------------------------------------------------------
# Parquet


def _open_parquet(file: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(file)
    except (pa.ArrowException, OSError) as e:
        raise InputError(file, "a readable Parquet file", f"unreadable data ({e})", "re-write the file (it may be truncated, corrupt or not Parquet at all)") from e


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _check_schema(file: str, schema: pa.Schema, id_column: str, id_kinds: str) -> None:
    for column, wanted in ((id_column, id_kinds), ("tokens", "list<integer>")):
        index = schema.get_field_index(column)
        if index < 0:
            raise InputError(file, f"a column '{column}' of type {wanted}", f"columns {schema.names}", f"add or rename the column to '{column}'")
        kind = schema.field(index).type
        if column == "tokens":
            ok = (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_integer(kind.value_type)
        elif id_kinds == "integer":
            ok = pa.types.is_integer(kind)
        else:
            ok = pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)
        if not ok:
            raise InputError(file, f"column '{column}' of type {wanted}", f"type {kind}", f"write column '{column}' as {wanted}")


def _null_row(file: str, array: pa.Array, column: str, row_base: int, what: str) -> None:
    if array.null_count:
        row = _first(array.is_null().to_numpy(zero_copy_only=False))
        raise InputError(file, f"a {what} in column '{column}'", "null", f"fill in or drop the row's '{column}'", row=row_base + row)


def _parquet_batch_sets(file: str, tokens: pa.Array, row_base: int, limits: SetLimits):
    """Validate one batch's ``tokens`` column; return ``(lengths, tokens, repeated)`` as :func:`_canonical`."""
    _null_row(file, tokens, "tokens", row_base, "list of token ids")
    counts = pc.list_value_length(tokens).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = tokens.flatten()
    ends = np.cumsum(counts)
    def row_and_id(position: int) -> tuple[int, int]:  # the row holding flat value `position`, its 1-based id #
        row = int(np.searchsorted(ends, position, side="right"))
        return row, int(position - (ends[row] - counts[row]) + 1)

    if flat.null_count:
        row, number = row_and_id(_first(flat.is_null().to_numpy(zero_copy_only=False)))
        raise InputError(file, "token ids without nulls in column 'tokens'", f"a null at id #{number}", "drop the null ids from the list", row=row_base + row)
    values = flat.to_numpy(zero_copy_only=False)
    if values.dtype.kind != "u" or limits.vocab_size <= np.iinfo(values.dtype).max:  # else every value is in range
        bad = (values >= limits.vocab_size) if values.dtype.kind == "u" else ((values < 0) | (values >= limits.vocab_size))
        if bad.any():
            position = _first(bad)
            row, number = row_and_id(position)
            raise InputError(file, f"token ids in [0, {limits.vocab_size})", f"{int(values[position])} at id #{number}", _REMAP, row=row_base + row)
    lengths, set_tokens, repeated = _canonical(values.astype(np.uint16, copy=False), counts)
    too_long = lengths > limits.max_len
    if too_long.any():
        row = _first(too_long)
        raise InputError(file, f"at most {limits.max_len} distinct ids per set", f"{int(lengths[row])} distinct ids", "shorten this set, or raise max_len", row=row_base + row)
    return lengths, set_tokens, repeated


def _parquet_ids(file: str, ids: pa.Array, id_column: str, row_base: int):
    """Validate one batch's id column: int64 NumPy array for ``doc_id``, list of str for ``query_id``."""
    _null_row(file, ids, id_column, row_base, "value")
    if id_column == "query_id":
        return [str(x) for x in ids.to_pylist()]
    values = ids.to_numpy(zero_copy_only=False)
    if values.dtype == np.uint64 and (values > np.iinfo(np.int64).max).any():
        row = _first(values > np.iinfo(np.int64).max)
        raise InputError(file, "doc_id values in [0, 2**63)", f"{int(values[row])}", "renumber the docs", row=row_base + row)
    values = values.astype(np.int64)
    if (values < 0).any():
        row = _first(values < 0)
        raise InputError(file, "non-negative doc_id values", f"{int(values[row])}", "renumber the docs with ids >= 0", row=row_base + row)
    return values


def _bad_rows(batch: pa.RecordBatch, id_column: str, limits: SetLimits) -> np.ndarray:
    """Bool mask of the rows of a batch that break a rule (vectorised; used only to quarantine)."""
    ids, tokens = batch.column(id_column), batch.column("tokens")
    bad = ids.is_null().to_numpy(zero_copy_only=False) | tokens.is_null().to_numpy(zero_copy_only=False)
    if id_column == "doc_id":
        values = pc.fill_null(ids, 0).to_numpy(zero_copy_only=False)
        bad |= (values > np.iinfo(np.int64).max) if values.dtype == np.uint64 else (values < 0)
    flat = pc.list_flatten(tokens)
    parents = pc.list_parent_indices(tokens).to_numpy(zero_copy_only=False)
    elements = pc.fill_null(flat, limits.vocab_size).to_numpy(zero_copy_only=False).astype(np.int64)
    bad[parents[(elements < 0) | (elements >= limits.vocab_size)]] = True
    counts = pc.fill_null(pc.list_value_length(tokens), 0).to_numpy(zero_copy_only=False)
    for row in np.flatnonzero((counts > limits.max_len) & ~bad):  # may still fit after de-duplication
        bad[row] = len(set(tokens[int(row)].as_py())) > limits.max_len
    return bad


def _validate_batch(file: str, batch: pa.RecordBatch, id_column: str, row_base: int, limits: SetLimits, rejects: _Rejects):
    """Validate one Parquet batch: ``(ids, (lengths, tokens, repeated), good)``.

    ``ids`` covers every row (``-1`` or None where a row was set aside); the sets and ``good`` (row
    indices within the batch) cover the valid rows only. Without quarantine the first bad row raises.
    """
    if not rejects.quarantine:
        ids = _parquet_ids(file, batch.column(id_column), id_column, row_base)
        sets = _parquet_batch_sets(file, batch.column("tokens"), row_base, limits)
        return ids, sets, np.arange(batch.num_rows, dtype=np.int64)
    bad = _bad_rows(batch, id_column, limits)
    for row in np.flatnonzero(bad):  # the strict checks on a one-row slice write the message
        one = batch.slice(int(row), 1)
        try:
            _parquet_ids(file, one.column(id_column), id_column, row_base + int(row))
            _parquet_batch_sets(file, one.column("tokens"), row_base + int(row), limits)
        except InputError as error:
            rejects.add(error)
        else:
            raise RuntimeError(f"internal error: {file} row {row_base + int(row)} was flagged bad but passes every check")
    good = np.flatnonzero(~bad)
    clean = batch.take(pa.array(good)) if bad.any() else batch
    good_ids = _parquet_ids(file, clean.column(id_column), id_column, row_base)
    sets = _parquet_batch_sets(file, clean.column("tokens"), row_base, limits)
    if id_column == "doc_id":
        ids = np.full(batch.num_rows, -1, dtype=np.int64)
        ids[good] = good_ids
    else:
        ids = [None] * batch.num_rows
        for i, query_id in zip(good.tolist(), good_ids):
            ids[i] = query_id
    return ids, sets, good


def _validated_batches(file: str, id_column: str, limits: SetLimits, rejects: _Rejects, row_groups=None, max_threads: int = _MAX_READ_THREADS):
    """Yield ``(ids, (lengths, tokens, repeated), good, row_base, n_rows)`` per batch of one file (or of
    its ``row_groups`` only), in row order. Row groups are decoded and validated in up to ``max_threads``
    parallel threads (Arrow and NumPy release the GIL), and consumed in order, so the first bad row in
    file order is the one reported."""
    parquet = _open_parquet(file)
    _check_schema(file, parquet.schema_arrow, id_column, "integer" if id_column == "doc_id" else "string or integer")
    n_groups = parquet.metadata.num_row_groups
    groups = list(range(n_groups)) if row_groups is None else [int(g) for g in row_groups]
    if any(not 0 <= g < n_groups for g in groups):
        raise ValueError(f"{file} has {n_groups} row groups; asked for {groups}")
    group_rows = [parquet.metadata.row_group(g).num_rows for g in range(n_groups)]
    group_base = np.concatenate([[0], np.cumsum(group_rows)]).astype(np.int64)

    def one_group(g: int):
        local = _Rejects("quarantine" if rejects.quarantine else "error")
        out, row_base = [], int(group_base[g])
        batches = pq.ParquetFile(file).iter_batches(batch_size=_PARQUET_BATCH_ROWS, row_groups=[g], columns=[id_column, "tokens"])
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowException, OSError) as e:
                raise InputError(file, "a readable Parquet file", f"unreadable data after row {row_base} ({e})", "re-write the file (it may be truncated or corrupt)") from e
            if batch is None:
                return out, local.records
            out.append((*_validate_batch(file, batch, id_column, row_base, limits, local), row_base, batch.num_rows))
            row_base += batch.num_rows

    # pa.cpu_count() follows OMP_NUM_THREADS, which Ray sets from the actor's num_cpus.
    workers = max(1, min(len(groups), pa.cpu_count(), max_threads))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        # A sliding window: at most `workers` row groups decoded ahead of the consumer, so
        # memory stays bounded however many row groups the file has.
        waiting = collections.deque(pool.submit(one_group, g) for g in groups[:workers])
        following = iter(groups[workers:])
        while waiting:
            out, records = waiting.popleft().result()
            for g in itertools.islice(following, 1):
                waiting.append(pool.submit(one_group, g))
            rejects.records.extend(records)
            yield from out


def _read_parquet_sets(path: str, id_column: str, limits: SetLimits, length_range=None, rejects: _Rejects | None = None, row_groups=None):
    """Read every Parquet file at ``path`` (only ``row_groups`` of it when given: ``path`` is then one file).

    Returns
    -------
    files : list of str
    ids : list of per-batch id arrays (int64) or lists (str), for every row
    where : list of (file, first_row, n_rows) per batch, to locate a row from its global index
    kept : numpy.ndarray of int64, global indices of the valid rows kept by ``length_range``
    batch : SetBatch of the kept rows, in input order
    n_with_repeats : int
    """
    rejects = rejects or _Rejects("error")
    files = _parquet_files(path)
    ids, where, kept, kept_lengths, kept_tokens = [], [], [], [], []
    n_with_repeats = 0
    n_rows = 0
    for file in files:
        batches = _validated_batches(file, id_column, limits, rejects, row_groups)
        for batch_ids, (lengths, tokens, repeated), good, row_base, n_batch_rows in batches:
            ids.append(batch_ids)
            n_with_repeats += int(repeated.sum())
            keep = _length_keep(lengths, length_range)
            lengths, tokens = _select(lengths, tokens, keep)
            kept.append(n_rows + good[keep])
            kept_lengths.append(lengths)
            kept_tokens.append(tokens)
            where.append((file, row_base, n_batch_rows))
            n_rows += n_batch_rows
    kept_rows = np.concatenate(kept).astype(np.int64) if kept else np.zeros(0, dtype=np.int64)
    return files, ids, where, kept_rows, _set_batch(kept_lengths, kept_tokens), n_with_repeats


def _locate(where, index: int) -> tuple[str, int]:
    """(file, row within it) of the row with global index ``index``."""
    starts = np.cumsum([0] + [n for _, _, n in where])
    batch = int(np.searchsorted(starts, index, side="right")) - 1
    file, first_row, _ = where[batch]
    return file, first_row + index - int(starts[batch])


def _duplicate_error(where, column: str, value, first: int, again: int) -> InputError:
    file, row = _locate(where, again)
    first_file, first_row = _locate(where, first)
    return InputError(file, f"unique {column} values", f"{column} {value!r} again (first at {first_file} row {first_row})", f"give every row its own {column}, or drop the repeated row", row=row)


# --------------------------------------------------------------------------------------------------
# Public readers


def read_corpus(
    path, limits: SetLimits = SetLimits(), length_range: tuple[int, int] | None = None, on_invalid: str = "error", row_groups=None
) -> Corpus:
    """Read and validate the doc corpus at ``path`` (format by :func:`corpus_format`).

    Parameters
    ----------
    path : str or os.PathLike
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
        corpus, see :mod:`shards.ingest`); row numbers in messages stay those of the whole file.

    Raises
    ------
    InputError
        At the first bad line or row (with ``on_invalid="error"``), or for a missing, unreadable or
        malformed file.
    """
    fmt = corpus_format(path)
    path = os.fspath(path)
    length_range = _check_length_range(length_range)
    rejects = _Rejects(on_invalid)
    if fmt == "text":
        if row_groups is not None:
            raise ValueError(f"row_groups needs a Parquet file, found the text corpus {path}")
        lines, docs, n_with_repeats = _read_text_sets(path, limits, length_range, rejects)
        return Corpus(lines, docs, n_with_repeats, "text", (path,), tuple(rejects.records), source_rows=lines)
    if row_groups is not None and os.path.isdir(path):
        raise ValueError(f"row_groups needs one Parquet file, found the directory {path}")
    files, ids, where, kept, docs, n_with_repeats = _read_parquet_sets(path, "doc_id", limits, length_range, rejects, row_groups)
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
            rejects.add(_duplicate_error(where, "doc_id", int(all_ids[index]), first, int(index)))
        stays = ~later[kept]
        kept = kept[stays]
        docs = docs.take(np.flatnonzero(stays))
    doc_ids = all_ids[kept]
    if len(doc_ids) > 1 and not (doc_ids[1:] > doc_ids[:-1]).all():
        by_id = np.argsort(doc_ids, kind="stable")
        pieces = [docs.take(by_id[i : i + _TAKE_ROWS]) for i in range(0, len(by_id), _TAKE_ROWS)]
        doc_ids, docs, kept = doc_ids[by_id], _set_batch([p.lengths for p in pieces], [p.tokens for p in pieces]), kept[by_id]
    batch_starts = np.cumsum([0] + [n for _, _, n in where])
    batch = np.searchsorted(batch_starts, kept, side="right") - 1
    first_rows = np.array([first for _, first, _ in where] or [0], dtype=np.int64)
    source_rows = first_rows[batch] + kept - batch_starts[batch] if len(kept) else np.zeros(0, dtype=np.int64)
    return Corpus(doc_ids, docs, n_with_repeats, "parquet", tuple(files), tuple(rejects.records), source_rows=source_rows)


def _read_query_dir(path: str, limits: SetLimits, rejects: _Rejects) -> Queries:
    names = sorted(os.listdir(path))
    files, bodies = [], []
    for name in names:
        full = os.path.join(path, name)
        if os.path.isdir(full):
            raise InputError(full, "only query files in a query directory (one query per file)", "a subdirectory", "move the subdirectory out of the query directory")
        if os.path.exists(full) and not os.path.isfile(full):  # a FIFO or device: opening it could block
            raise InputError(full, "a regular file holding one query", "a special file", "remove it from the query directory")
        try:
            with open(full, "rb") as f:
                data = f.read()
        except OSError as e:
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
        return Queries([], _set_batch([], []), 0, "dir", (), tuple(rejects.records))
    parsed = _parse_block(block, limits)
    good = np.arange(len(bodies))
    if parsed is None and not rejects.quarantine:
        index, (expected, found, fix) = _first_bad_line(block, limits, 0)
        if bodies[index].startswith(b"PAR1"):
            fix = "this looks like a Parquet file: a Parquet query directory must hold only *.parquet files"
        raise InputError(files[index], expected, found, fix, line=1)
    if parsed is None:
        good = np.array([i for i, body in enumerate(bodies) if _check_line(body, limits) is None], dtype=np.int64)
        for i in sorted(set(range(len(bodies))) - set(good.tolist())):
            rejects.add(InputError(files[i], *_check_line(bodies[i], limits), line=1))
        parsed = _parse_block(b"".join(bodies[i] + b"\n" for i in good), limits) if len(good) else _NO_SETS
    lengths, tokens, repeated = parsed
    kept_files = [files[i] for i in good]
    query_ids = [os.path.basename(f) for f in kept_files]
    in_file_order = tuple(sorted(rejects.records, key=lambda r: r.path))
    return Queries(query_ids, SetBatch(_offsets(lengths), tokens), int(repeated.sum()), "dir", tuple(kept_files), in_file_order)


def read_queries(path, limits: SetLimits = SetLimits(), on_invalid: str = "error") -> Queries:
    """Read and validate the queries at ``path`` (format by :func:`queries_format`).

    Parameters
    ----------
    path : str or os.PathLike
    limits : SetLimits
    on_invalid : {"error", "quarantine"}
        As in :func:`read_corpus`: with ``"quarantine"`` a bad line, row or query file (bad content,
        or a second line) is left out and listed in ``Queries.rejected``; a subdirectory or an
        unreadable file in a query directory is still an error.

    Raises
    ------
    InputError
        At the first bad file, line or row (with ``on_invalid="error"``), or for a missing, unreadable
        or malformed input.
    """
    fmt = queries_format(path)
    path = os.fspath(path)
    rejects = _Rejects(on_invalid)
    if fmt == "dir":
        return _read_query_dir(path, limits, rejects)
    if fmt == "text":
        lines, queries, n_with_repeats = _read_text_sets(path, limits, None, rejects)
        return Queries([str(i) for i in lines.tolist()], queries, n_with_repeats, "text", (path,), tuple(rejects.records))
    files, ids, where, kept, queries, n_with_repeats = _read_parquet_sets(path, "query_id", limits, None, rejects)
    all_ids = [q for batch in ids for q in batch]
    seen: dict[str, int] = {}
    repeats = set()
    for index in kept.tolist():
        first = seen.setdefault(all_ids[index], index)
        if first != index:
            rejects.add(_duplicate_error(where, "query_id", all_ids[index], first, index))
            repeats.add(index)
    if repeats:
        stays = np.array([i not in repeats for i in kept.tolist()], dtype=bool)
        kept, queries = kept[stays], queries.take(np.flatnonzero(stays))
    query_ids = [all_ids[i] for i in kept.tolist()]
    return Queries(query_ids, queries, n_with_repeats, "parquet", tuple(files), tuple(rejects.records))
