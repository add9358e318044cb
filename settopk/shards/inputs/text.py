"""The text formats: one set per line, comma-separated token ids (the STI2 ``docs.txt`` format), or
whitespace-separated non-negative ids in a ``*.dat`` file (the FIMI format of the Frequent Itemset
Mining Implementations repository, http://fimi.uantwerpen.be/data/, as set-similarity-join papers use it).

The rules a line must follow are in :mod:`settopk.shards.inputs`. Text is parsed in 32 MiB blocks of whole
lines without a per-line Python loop: NumPy finds separators, one Arrow string array over the block
(zero copy) is trimmed and cast to ``uint16`` by ``pyarrow.compute``, and sets are sorted and
de-duplicated with one NumPy sort per block (:func:`settopk.shards.inputs.canonical.canonical`). Only a block
that fails is searched for its first bad line: it is halved until small, then checked line by line
(:func:`check_line`) to write the message. Lines are split by this module rather than by
``pyarrow.csv``, which also treats a bare ``\\r`` as a line break and would silently shift doc ids.
A FIMI block goes through the same parser with its spaces and tabs read as commas, empty fields
dropped (runs of whitespace, whitespace at a line's ends), after a check that it holds no comma or minus.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..location import Location
from .canonical import NO_SETS, canonical, concat_sets, in_length_range, select_sets
from .errors import InputError, Rejects, SetLimits
from .files import as_location, is_fimi_name, open_stream, store_error
from .vocabulary import dedup_values

__all__ = ["check_line", "first_bad_line", "parse_block", "read_text_sets", "text_sets"]

_BLOCK_BYTES = 32 << 20  # text read block; a block always holds whole lines
_MAX_LINE_BYTES = 256 << 20  # a valid line is a few kB: a longer one is not a text file of sets
_SMALL_SLICE_LINES = 64  # a failing slice of a block this small is checked line by line
_ALLOWED_TEXT = "comma-separated token ids (decimal integers, '-' allowed; spaces or tabs around an id are allowed)"
_INTEGER_RE = re.compile(rb"-?[0-9]+")
_ALLOWED_FIMI = "whitespace-separated non-negative token ids (decimal integers; the FIMI .dat format)"
_FIMI_ID_RE = re.compile(rb"[0-9]+")
_FIMI_SPLIT_RE = re.compile(rb"[ \t]+")
_RANGE = "token ids in [-2**63, 2**64) (64-bit integers)"
_RANGE_FIX = "hash or remap the ids into 64 bits"
_MIXED = "token ids all in [-2**63, 2**63) or all in [0, 2**64) (negative ids and ids of 2**63 or more do not mix)"


def _show(text: bytes, limit: int = 60) -> str:
    s = text.decode("utf-8", errors="backslashreplace")
    return repr(s if len(s) <= limit else s[:limit] + "...")


def check_line(line: bytes, limits: SetLimits, fimi: bool = False):
    """Why one text line is bad: the rules of the text format, checked one line at a time.

    The reference the vectorised :func:`parse_block` must agree with, and what writes the message
    once a block has failed.

    Parameters
    ----------
    line : bytes
        One line without its ``\\n`` (a final ``\\r`` is allowed).
    limits : SetLimits
    fimi : bool
        The line is FIMI (whitespace-separated non-negative ids), not STI2 (comma-separated).

    Returns
    -------
    (str, str, str) or None
        ``(expected, found, fix)``, the fields of an :class:`InputError`; None if the line is good.
    """
    if line.endswith(b"\r"):
        line = line[:-1]
    if b"\r" in line:
        return ("lines ending in '\\n' or '\\r\\n'", "a carriage return ('\\r') inside the line", "convert the line endings to '\\n' (for example with dos2unix) or remove the stray '\\r'")
    if not line.strip(b" \t"):
        return None
    if fimi:
        return _check_fimi_line(line, limits)
    ids = set()
    for position, field in enumerate(line.split(b","), start=1):
        text = field.strip(b" \t")
        if not text:
            return (_ALLOWED_TEXT, f"an empty field at id #{position} in {_show(line)}", "remove the extra comma (a set's ids are separated by single commas, with none before the first or after the last)")
        if not _INTEGER_RE.fullmatch(text):
            return (_ALLOWED_TEXT, f"{_show(text)} at id #{position}", "write each token id as a plain decimal integer")
        value = int(text)
        if not -(2**63) <= value < 2**64:
            return (_RANGE, f"{value} at id #{position}", _RANGE_FIX)
        ids.add(value)
    if len(ids) > limits.max_len:
        return (f"at most {limits.max_len} distinct ids per set", f"{len(ids)} distinct ids", "shorten this set, or raise max_len")
    return None


def _check_fimi_line(line: bytes, limits: SetLimits):
    """:func:`check_line` of a non-blank FIMI line (no carriage return left in it)."""
    ids = set()
    for position, text in enumerate(_FIMI_SPLIT_RE.split(line.strip(b" \t")), start=1):
        if not _FIMI_ID_RE.fullmatch(text):
            return (_ALLOWED_FIMI, f"{_show(text)} at id #{position} in {_show(line)}",
                    "write each token id as a plain non-negative decimal integer, ids separated by spaces or tabs "
                    "(a file of comma-separated ids must not end in .dat)")
        value = int(text)
        if value >= 2**64:
            return ("token ids in [0, 2**64) (64-bit integers)", f"{value} at id #{position}", _RANGE_FIX)
        ids.add(value)
    if len(ids) > limits.max_len:
        return (f"at most {limits.max_len} distinct ids per set", f"{len(ids)} distinct ids", "shorten this set, or raise max_len")
    return None


def parse_block(block, limits: SetLimits, fimi: bool = False):
    """Parse whole text lines vectorised.

    Parameters
    ----------
    block : bytes-like
        Whole lines; the last byte is ``\\n``.
    limits : SetLimits
    fimi : bool
        FIMI lines (whitespace-separated non-negative ids), not STI2 (comma-separated).

    Returns
    -------
    (lengths, tokens, repeated) or None
        As :func:`settopk.shards.inputs.canonical.canonical` returns them, one set per line; None when some
        line is bad (then :func:`first_bad_line` finds it).
    """
    b = np.frombuffer(block, dtype=np.uint8)
    if b.max() > ord("9"):  # letters ('0x1F' would cast as hex), '_', non-ASCII...: never valid
        return None
    if fimi:
        if ((b == ord(",")) | (b == ord("-"))).any():  # ids are non-negative and never comma-separated
            return None
        b = b.copy()  # spaces and tabs become commas: then a FIMI line parses as a comma-separated one
        b[(b == ord(" ")) | (b == ord("\t"))] = ord(",")
        block = b
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
        if not fimi and not alone.all():  # FIMI: runs of whitespace, and whitespace at a line's ends
            return None
        keep = np.ones(len(sep), dtype=bool)
        keep[empty] = False
        fields = fields.filter(pa.array(keep))
        counts = counts - np.bincount(np.searchsorted(line_end, empty), minlength=len(counts))
    try:
        values = pc.cast(fields, pa.uint16()).to_numpy(zero_copy_only=False)
        if limits.vocab_size < 65536 and len(values) and values.max() >= limits.vocab_size:
            values = None
    except pa.ArrowInvalid:  # not a decimal integer, or outside [0, 65536)
        values = None
    if values is None and limits.vocab_size > 65536:  # dense ids of a wider vocabulary: uint32
        try:
            values = pc.cast(fields, pa.uint32()).to_numpy(zero_copy_only=False)
            if len(values) and values.max() >= limits.vocab_size:
                values = None
        except pa.ArrowInvalid:
            values = None
    if values is None:  # wide: any 64-bit integer (settopk.shards.inputs.vocabulary)
        wide = _wide_values(fields)
        if wide is None:
            return None
        lengths, tokens, repeated = dedup_values(wide, counts)
        if len(lengths) and lengths.max() > limits.max_len:
            return None
        return lengths, tokens, repeated
    if len(counts) and counts.max() > limits.max_len:  # may still fit after de-duplication
        lengths, tokens, repeated = canonical(values, counts)
        if lengths.max() > limits.max_len:
            return None
        return lengths, tokens, repeated
    return canonical(values, counts)


def _wide_values(fields: pa.Array) -> pa.Array | None:
    """Trimmed fields as ``int64``, else ``uint64``; None if some field is neither."""
    for to in (pa.int64(), pa.uint64()):
        try:
            return pc.cast(fields, to)
        except pa.ArrowInvalid:
            pass
    return None


def _first_huge_line(block: bytes, first_line: int):
    """``(line, reason)`` for a block whose lines are each valid but whose ids mix negatives
    with ids of ``2**63`` and more (no 64-bit type holds both): the first line holding a
    huge id; None if the block does not mix them."""
    lines = block.split(b"\n")[:-1]
    values = [[int(f) for f in line.rstrip(b"\r").split(b",") if f.strip(b" \t")] for line in lines]
    if not any(v < 0 for vs in values for v in vs):
        return None
    for i, vs in enumerate(values):
        huge = [v for v in vs if v >= 2**63]
        if huge:
            return first_line + i, (_MIXED, f"{huge[0]} after a negative id", "write all ids as signed or all as unsigned 64-bit integers")
    return None


def first_bad_line(block, limits: SetLimits, first_line: int, fimi: bool = False):
    """The first bad line of a block that :func:`parse_block` rejected.

    Halves the block while it fails, so only a few small slices are checked line by line.

    Parameters
    ----------
    block : bytes-like
        Whole lines; the last byte is ``\\n``.
    limits : SetLimits
    first_line : int
        0-based number of the block's first line in its file.
    fimi : bool
        FIMI lines, as :func:`parse_block`.

    Returns
    -------
    (int, (str, str, str))
        The bad line's 0-based number in the file, and ``(expected, found, fix)`` from :func:`check_line`.

    Raises
    ------
    RuntimeError
        If no line of the block is bad (the two parsers disagree: a bug).
    """
    block = whole = bytes(block)
    whole_first = first_line
    lines_in = block.count(b"\n")
    while lines_in > _SMALL_SLICE_LINES:
        middle = block.find(b"\n", len(block) // 2)
        if middle == len(block) - 1:  # one long line holds the second half: split by lines instead
            middle = -1
            for _ in range(lines_in // 2):
                middle = block.index(b"\n", middle + 1)
        left, right = block[: middle + 1], block[middle + 1 :]
        left_lines = left.count(b"\n")
        if parse_block(left, limits, fimi) is None:
            block, lines_in = left, left_lines
        else:
            block, lines_in, first_line = right, lines_in - left_lines, first_line + left_lines
    for i, line in enumerate(block.split(b"\n")[:-1]):
        reason = check_line(line, limits, fimi)
        if reason is not None:
            return first_line + i, reason
    mixed = None if fimi else _first_huge_line(whole, whole_first)  # FIMI ids are never negative  # each line valid, both halves too: ids of both signs mix
    if mixed is not None:
        return mixed
    raise RuntimeError(f"internal error: the vectorised text parser rejected lines {first_line + 1}..{first_line + lines_in} but no line in them is bad")


def _text_blocks(path: Location):
    """Yield ``(block, first_line)``: memoryviews of whole lines (last byte ``\\n``) and the 0-based
    number of their first line. A block is valid only until the next one is requested."""
    try:
        f = open_stream(path)
    except OSError as e:
        if not path.local:
            raise store_error(path, e) from None
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
                if not path.local:
                    raise store_error(path, e) from None
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


def _set_aside_bad_lines(path: Location, block, limits: SetLimits, first_line: int, rejects: Rejects, fimi: bool):
    """Quarantine the bad lines of a block: ``(good, clean_block)``, the 0-based indices of the good
    lines within the block and a block holding only them."""
    lines = bytes(block).split(b"\n")[:-1]
    good = []
    for i, line in enumerate(lines):
        reason = check_line(line, limits, fimi)
        if reason is None:
            good.append(i)
        else:
            rejects.add(InputError(path, *reason, line=first_line + i + 1))
    return np.array(good, dtype=np.int64), b"".join(lines[i] + b"\n" for i in good)


def text_sets(path, limits: SetLimits, rejects: Rejects):
    """Read a text file of sets block by block, in bounded memory (FIMI where its name ends in ``.dat``).

    Parameters
    ----------
    path : str
    limits : SetLimits
    rejects : Rejects
        Where bad lines go: raised at once, or set aside under quarantine.

    Yields
    ------
    (line_numbers, lengths, tokens, repeated)
        Per block: the 0-based line numbers of its valid lines (int64, shape (n_sets,)) and their
        sets as :func:`settopk.shards.inputs.canonical.canonical` returns them.

    Raises
    ------
    InputError
        At the first bad line (unless quarantining), or for a file that cannot be read.
    """
    path = as_location(path)
    fimi = is_fimi_name(path.name)
    for block, first_line in _text_blocks(path):
        parsed = parse_block(block, limits, fimi)
        line_numbers = None
        if parsed is None and not rejects.quarantine:
            line, (expected, found, fix) = first_bad_line(block, limits, first_line, fimi)
            if line == 0 and bytes(block[:4]) == b"PAR1":
                fix = "this looks like a Parquet file: give it a .parquet suffix so it is read as Parquet"
            raise InputError(path, expected, found, fix, line=line + 1)
        if parsed is None:
            good, clean = _set_aside_bad_lines(path, block, limits, first_line, rejects, fimi)
            line_numbers = first_line + good
            parsed = parse_block(clean, limits, fimi) if len(good) else NO_SETS
            mixed = _first_huge_line(clean, 0) if parsed is None and not fimi else None
            if mixed is not None:
                raise InputError(path, *mixed[1], line=int(line_numbers[mixed[0]]) + 1)
            if parsed is None:
                raise RuntimeError(f"internal error: {path}: lines that passed the line check failed the block parser")
        lengths, tokens, repeated = parsed
        if line_numbers is None:
            line_numbers = first_line + np.arange(len(lengths), dtype=np.int64)
        yield line_numbers, lengths, tokens, repeated


def read_text_sets(path, limits: SetLimits, length_range=None, rejects: Rejects | None = None):
    """Parse a text file of sets, one per line.

    Parameters
    ----------
    path : str
    limits : SetLimits
    length_range : (int, int) or None
        ``(lo, hi)``, inclusive: keep only sets whose de-duplicated length lies in it.
    rejects : Rejects, optional
        Where bad lines go; by default the first one raises.

    Returns
    -------
    lines : numpy.ndarray of int64
        0-based line numbers of the sets kept by ``length_range`` (all valid lines when None).
    batch : SetBatch
        Their sets.
    n_with_repeats : int
        Lines (kept or not) whose set had a repeated id.

    Raises
    ------
    InputError
        As :func:`text_sets`.
    """
    rejects = rejects or Rejects("error")
    kept_lines, kept_lengths, kept_tokens = [], [], []
    n_with_repeats = 0
    for line_numbers, lengths, tokens, repeated in text_sets(path, limits, rejects):
        n_with_repeats += int(repeated.sum())
        keep = in_length_range(lengths, length_range)
        lengths, tokens = select_sets(lengths, tokens, keep)
        kept_lines.append(line_numbers[keep])
        kept_lengths.append(lengths)
        kept_tokens.append(tokens)
    lines = np.concatenate(kept_lines) if kept_lines else np.zeros(0, dtype=np.int64)
    try:
        sets = concat_sets(kept_lengths, kept_tokens)
    except ValueError:  # signed blocks and unsigned blocks: no 64-bit type holds both
        raise InputError(path, _MIXED, "negative ids and ids of 2**63 or more in one file",
                         "write all ids as signed or all as unsigned 64-bit integers") from None
    return lines.astype(np.int64, copy=False), sets, n_with_repeats

