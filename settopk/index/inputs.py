"""What :class:`settopk.Index` accepts as docs and queries, read into validated CSR sets.

Four kinds of input, each checked by the rules of :mod:`settopk.shards.inputs` (a repeated token
counted once, at most ``max_len`` distinct tokens per set, ids unique), with the same
:class:`settopk.shards.inputs.InputError` naming the row at fault. Sets whose tokens are all
integers in ``[0, vocab_size)`` come as a :class:`SetBatch` of those ids; any other tokens
(strings, bytes, other integers) as a :class:`settopk.shards.inputs.vocabulary.WideSets` of their
values, as the job's readers give them, where the caller takes values (always for docs; for
queries of an index built over values), else they are refused:

* a path or URI: read whole by :func:`settopk.shards.inputs.read_corpus` /
  :func:`settopk.shards.inputs.read_queries`, the job's own readers (text, Parquet, a query
  directory; local or any store PyArrow opens);
* a :class:`pyarrow.Table` or :class:`pyarrow.RecordBatch` with ``tokens`` (a list of integers,
  strings or binary) and optionally ``doc_id`` / ``query_id``, checked record batch by record batch by the Parquet
  reader's own check, as if it were one Parquet file; a pandas DataFrame, or any other data frame
  that exports an Arrow stream (Polars, ...), is read as the Arrow table it converts to
  (:func:`frame_table`);
* a :class:`settopk.kernels.SetBatch`, checked for ascending, distinct ids;
* a sequence (or any iterable) of sets, each an iterable of ints, or of ``str`` / ``bytes`` (a
  Python ``set``, a list, a NumPy array), sorted and de-duplicated.

Nothing here imports Ray, CuPy or Numba.
"""

from __future__ import annotations

import itertools
import os
import sys

import numpy as np
import pyarrow as pa

from settopk.kernels.sets import SetBatch
from settopk.shards.inputs import InputError, SetLimits, read_corpus, read_queries
from settopk.shards.inputs.canonical import canonical, concat_sets, csr_offsets
from settopk.shards.inputs.errors import REMAP_FIX, Rejects
from settopk.shards.inputs.vocabulary import WideSets, dedup_values, kind_of_type, values_of
# The Parquet reader's schema and per-batch checks, reused so that an in-memory table obeys exactly the
# rules (and gets exactly the messages) of a Parquet file holding it.
from settopk.shards.inputs.parquet import check_schema, validate_batch, duplicate_error, mixed_types_error

__all__ = ["TABLE", "SETS", "checked_query_ids", "frame_table", "read_doc_sets", "read_query_sets"]

TABLE = "<arrow table>"
"""How errors name an Arrow table input (in place of a file path)."""
SETS = "<sets>"
"""How errors name a sequence of sets or a SetBatch input."""

_BATCH_ROWS = 1 << 17  # rows of an Arrow table checked at a time (bounds the temporary arrays)
# An index over token ids decided so from its docs: a query token outside their range is refused.
_IDS_FIX = REMAP_FIX + " (this index was built over token ids, its docs' all in [0, vocab_size): a query takes ids in that range)"


def frame_table(value):
    """A data frame as the :class:`pyarrow.Table` it converts to; anything else as it is.

    A pandas DataFrame goes through ``pyarrow.Table.from_pandas(df, preserve_index=False)`` (its
    index is not a column); another object that exports an Arrow C stream of a table
    (``__arrow_c_stream__``: a Polars DataFrame) through :func:`pyarrow.table`, its string views
    read as strings; a stream of anything else (a Series of lists) is left to be read as a
    sequence of sets. Neither module is imported here: a pandas frame is recognised only where the
    caller has imported pandas.

    Raises
    ------
    TypeError
        If the frame cannot be converted (e.g. a pandas ``tokens`` column of ints and strings).
    """
    if isinstance(value, (pa.Table, pa.RecordBatch, str, os.PathLike, SetBatch)):
        return value
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(value, pandas.DataFrame):
        try:
            return pa.Table.from_pandas(value, preserve_index=False)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise TypeError(f"a pandas DataFrame is read as pyarrow.Table.from_pandas(df, preserve_index=False), which "
                            f"failed: {e}; give 'tokens' as lists (or sets) of ints, or of str or bytes, and 'doc_id' / "
                            "'query_id' as ints (or strings for query_id)") from None
    if hasattr(type(value), "__arrow_c_stream__") and not isinstance(value, (pa.Array, pa.ChunkedArray)):
        try:
            table = pa.table(value)
        except (pa.ArrowException, TypeError, ValueError):
            return value  # a stream of another type than a table (a Series of lists): a sequence of sets
        try:
            return table.cast(pa.schema([f.with_type(_without_views(f.type)) for f in table.schema]))
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise TypeError(f"{type(value).__module__}.{type(value).__name__} converts to an Arrow table whose "
                            f"string views cannot be read as strings ({e}); give 'tokens' as a list column") from None
    return value


def _without_views(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` with string and binary views (Polars exports them) as the plain types the
    Parquet reader's checks take, inside lists too."""
    if arrow_type == pa.string_view():
        return pa.string()
    if arrow_type == pa.binary_view():
        return pa.binary()
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        make = pa.list_ if pa.types.is_list(arrow_type) else pa.large_list
        return make(arrow_type.value_field.with_type(_without_views(arrow_type.value_type)))
    return arrow_type


def read_doc_sets(docs, limits: SetLimits, doc_ids=None) -> tuple[np.ndarray, SetBatch | WideSets]:
    """The docs of ``docs``, validated, as ``(doc_ids, sets)`` sorted by doc id.

    Parameters
    ----------
    docs : str, os.PathLike, pyarrow.Table, pyarrow.RecordBatch, data frame, SetBatch or iterable of sets
        See :meth:`settopk.Index.build`.
    limits : SetLimits
        Bounds on ids and set sizes.
    doc_ids : array_like of int, shape (n_docs,), optional
        Ids of the docs of a SetBatch or a sequence of sets (default: their positions).

    Returns
    -------
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing.
    sets : SetBatch or WideSets
        In ``doc_ids`` order: a SetBatch where every token is an integer in ``[0, vocab_size)``,
        else a WideSets of the token values (integers of any sign up to 64 bits, strings or bytes).

    Raises
    ------
    InputError
        For a bad set or id (naming the file and line, or the row), or a missing or unreadable file.
    TypeError
        If ``docs`` is none of the kinds above, or ``doc_ids`` is given with a path or a table.
    """
    docs = frame_table(docs)
    if _is_path(docs) or isinstance(docs, (pa.Table, pa.RecordBatch)):
        if doc_ids is not None:
            raise TypeError("doc_ids= is for a SetBatch or a sequence of sets; a path or an Arrow table brings its "
                            "own 'doc_id' (a table without one numbers its rows from 0)")
        if _is_path(docs):
            corpus = read_corpus(docs, limits)
            return corpus.doc_ids, corpus.docs
        ids, sets, where = _table_sets(docs, "doc_id", limits, True)
        return _sorted_by_id(ids, sets, where)
    sets = _plain_sets(docs, limits, True)
    if doc_ids is None:
        return np.arange(sets.n_sets, dtype=np.int64), sets
    ids = _checked_doc_ids(doc_ids, sets.n_sets)
    return _sorted_by_id(ids, sets, [(SETS, 0, sets.n_sets)])


def read_query_sets(queries, limits: SetLimits, take_values: bool = False) -> tuple[list[str] | None, SetBatch | WideSets]:
    """The queries of ``queries``, validated, in input order.

    Parameters
    ----------
    queries : str, os.PathLike, pyarrow.Table, pyarrow.RecordBatch, data frame, SetBatch or iterable of sets
        See :meth:`settopk.Index.search`.
    limits : SetLimits
        The index's bounds: ids below its ``vocab_size``, at most its ``max_len`` ids.
    take_values : bool, default False
        Return sets holding other tokens as a WideSets of their values (an index built over token
        values maps them); else such a token raises.

    Returns
    -------
    query_ids : list of str or None
        The ids a file or a table with ``query_id`` names its queries by; None for inputs without
        ids (their rows are numbered from 0).
    sets : SetBatch or WideSets

    Raises
    ------
    InputError
        For a bad set or a repeated query id (naming the file and line, or the row), or a missing
        or unreadable file.
    TypeError
        If ``queries`` is none of the kinds above.
    """
    queries = frame_table(queries)
    if _is_path(queries):
        read = read_queries(queries, limits)
        if not take_values:
            _require_small(read.queries, queries, limits)
        return read.query_ids, read.queries
    if isinstance(queries, (pa.Table, pa.RecordBatch)):
        has_ids = "query_id" in queries.schema.names
        ids, sets, where = _table_sets(queries, "query_id", limits, take_values)
        if not has_ids:
            return None, sets
        seen: dict[str, int] = {}
        for index, query_id in enumerate(ids):
            first = seen.setdefault(query_id, index)
            if first != index:
                raise duplicate_error(where, "query_id", query_id, first, index)
        return ids, sets
    return None, _plain_sets(queries, limits, take_values)


def _require_small(sets, source, limits: SetLimits, rows=None, lines: bool = False) -> None:
    """Refuse query sets read as token values (:class:`settopk.shards.inputs.vocabulary.WideSets`)
    for an index built over token ids: it takes ids in ``[0, vocab_size)`` as they are.

    ``rows`` gives each set's row (or 0-based line where ``lines``) in ``source`` for the message.
    """
    if not isinstance(sets, WideSets):
        return
    values = sets.tokens.to_numpy(zero_copy_only=False)
    if values.dtype.kind in "iu":
        bad = (values >= limits.vocab_size) if values.dtype.kind == "u" else ((values < 0) | (values >= limits.vocab_size))
    else:
        bad = np.ones(len(values), dtype=bool)
    position = int(np.flatnonzero(bad)[0])
    index = int(np.searchsorted(sets.offsets, position, side="right")) - 1
    at = int(rows[index]) if rows is not None else index
    where = {"line": at + 1} if lines else {"row": at}
    raise InputError(source, f"token ids in [0, {limits.vocab_size})", f"{values[position]!r} at id #{position - int(sets.offsets[index]) + 1}",
                     _IDS_FIX, **where)


def _is_path(value) -> bool:
    return isinstance(value, (str, os.PathLike))


def _table_sets(table, id_column: str, limits: SetLimits, take_values: bool):
    """Ids (int64 array, or list of str for ``query_id``), sets and record-batch locations of an
    Arrow table or record batch, checked as the Parquet reader checks a file."""
    if id_column not in table.schema.names:  # rows numbered from 0, as the text format numbers lines
        ids = pa.array(np.arange(table.num_rows, dtype=np.int64))
        table = table.append_column(id_column, ids) if isinstance(table, pa.Table) else pa.RecordBatch.from_arrays(
            [*table.columns, ids], names=[*table.schema.names, id_column])
    check_schema(TABLE, table.schema, id_column, "integer" if id_column == "doc_id" else "string or integer")
    if isinstance(table, pa.Table):
        batches = table.select([id_column, "tokens"]).to_batches(max_chunksize=_BATCH_ROWS)
    else:
        batches = [table.select([id_column, "tokens"])]
    rejects = Rejects("error")  # the first bad row raises, as the job's default on_invalid
    ids, lengths, tokens, where, row_base = [], [], [], [], 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        batch_ids, (batch_lengths, batch_tokens, _), _ = validate_batch(TABLE, batch, id_column, row_base, limits, rejects)
        if not take_values:
            _require_small(SetBatch(csr_offsets(batch_lengths), batch_tokens) if isinstance(batch_tokens, np.ndarray)
                           else WideSets(csr_offsets(batch_lengths), batch_tokens), TABLE, limits, np.arange(row_base, row_base + batch.num_rows))
        ids.append(batch_ids)
        lengths.append(batch_lengths)
        tokens.append(batch_tokens)
        where.append((TABLE, row_base, batch.num_rows))
        row_base += batch.num_rows
    # Blocks are uint16, or uint32 where ids reach 65536 (vocab_size above it): joined, the widest;
    # a block of token values makes them all values.
    try:
        sets = concat_sets(lengths, tokens)
    except ValueError:
        raise mixed_types_error([(TABLE, t) for t in tokens]) from None
    if id_column == "doc_id":
        return (np.concatenate(ids) if ids else np.zeros(0, np.int64)), sets, where
    return [q for batch_ids in ids for q in batch_ids], sets, where


def _sorted_by_id(ids: np.ndarray, sets: SetBatch, where) -> tuple[np.ndarray, SetBatch]:
    """Docs sorted by id; a repeated id raises, naming the first repeat in input order and its original."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    again = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
    if len(again):
        repeats = order[1:][again]
        index = int(repeats.min())  # the first repeat in input order
        first = int(order[np.searchsorted(sorted_ids, ids[index])])  # stable sort: the earliest row with that id
        raise duplicate_error(where, "doc_id", int(ids[index]), first, index)
    if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():
        return sorted_ids, sets.take(order)
    return ids, sets


def _checked_doc_ids(doc_ids, n_docs: int) -> np.ndarray:
    """``doc_ids`` as int64, checked: one per doc, integers in ``[0, 2**63)``."""
    array = np.asarray(doc_ids)
    if array.shape != (n_docs,):
        raise ValueError(f"doc_ids must have shape ({n_docs},), one id per doc, found shape {array.shape}")
    if n_docs and array.dtype.kind not in "iu":
        raise TypeError(f"doc_ids must be integers, found dtype {array.dtype}")
    if array.dtype == np.uint64 and n_docs and (array > np.iinfo(np.int64).max).any():
        row = int(np.flatnonzero(array > np.iinfo(np.int64).max)[0])
        raise InputError(SETS, "doc_id values in [0, 2**63)", f"{int(array[row])}", "renumber the docs", row=row)
    array = array.astype(np.int64)
    if n_docs and (array < 0).any():
        row = int(np.flatnonzero(array < 0)[0])
        raise InputError(SETS, "non-negative doc_id values", f"{int(array[row])}", "renumber the docs with ids >= 0", row=row)
    return array


def _plain_sets(sets, limits: SetLimits, take_values: bool) -> SetBatch | WideSets:
    """A SetBatch, checked, or an iterable of sets made one (each sorted and de-duplicated), checked;
    with ``take_values``, sets holding other tokens than ids in ``[0, vocab_size)`` as a WideSets."""
    if isinstance(sets, SetBatch):
        return _checked_set_batch(sets, limits, take_values)
    if isinstance(sets, (bytes, bytearray, dict)) or not _iterable(sets):
        raise TypeError(f"expected a path or URI, an Arrow table, a SetBatch or a sequence of sets; found {type(sets).__name__}")
    rows = list(sets)
    counts = np.zeros(len(rows), dtype=np.int64)
    for i, row in enumerate(rows):
        if isinstance(row, (str, bytes, dict)) or not _iterable(row):
            raise InputError(SETS, "each set an iterable of integer token ids (a set, list or array)",
                             f"{type(row).__name__} {_show(row)}", "pass a sequence of sets, e.g. [[1, 2], [3]]", row=i)
        if not hasattr(row, "__len__"):
            rows[i] = row = list(row)
        counts[i] = len(row)
    if rows and all(isinstance(r, np.ndarray) and r.ndim == 1 and r.dtype.kind in "iu" and r.dtype != np.uint64
                    for r in rows):  # integer arrays: joined without a Python object per id
        values, flat = np.concatenate([r.astype(np.int64, copy=False) for r in rows]), None
    else:
        flat = list(itertools.chain.from_iterable(rows))
        try:
            values = np.array(flat) if flat else np.zeros(0, dtype=np.int64)
        except (OverflowError, ValueError):
            values = np.array(flat, dtype=object)
    if values.dtype.kind not in "iu" or values.ndim != 1:
        if take_values:
            return _value_sets(_token_values(flat, counts), counts, limits)
        position = _first_non_integer(flat)
        row, number = _row_of(counts, position)
        raise InputError(SETS, "integer token ids", f"{_show(flat[position])} at id #{number}",
                         "pass ints (no floats, strings or nested lists)", row=row)
    bad = (values >= limits.vocab_size) if values.dtype.kind == "u" else ((values < 0) | (values >= limits.vocab_size))
    if bad.any() and take_values:
        return _value_sets(values_of(pa.array(values)), counts, limits)
    if bad.any():
        position = int(np.flatnonzero(bad)[0])
        row, number = _row_of(counts, position)
        raise InputError(SETS, f"token ids in [0, {limits.vocab_size})", f"{int(values[position])} at id #{number}", REMAP_FIX, row=row)
    dense = np.uint32 if len(values) and int(values.max()) >= 65536 else np.uint16  # uint16 wherever it holds the ids
    lengths, tokens, _ = canonical(values.astype(dense), counts)
    _check_lengths(lengths, limits)
    return SetBatch(csr_offsets(lengths), tokens)


def _checked_set_batch(sets: SetBatch, limits: SetLimits, take_values: bool) -> SetBatch | WideSets:
    """``sets`` itself, once every set is found ascending and repeat-free with ids below
    ``vocab_size`` and at most ``max_len`` of them (a SetBatch's constructor checks none of it);
    with ``take_values``, ids of ``vocab_size`` and more make it a WideSets of those values."""
    lengths = sets.lengths
    if len(lengths) and lengths.min() < 0:
        raise InputError(SETS, "non-decreasing SetBatch.offsets", f"a set of length {int(lengths.min())}",
                         "build the SetBatch with SetBatch.from_lists", row=int(np.argmin(lengths)))
    tokens = sets.tokens
    if len(tokens) > 1:
        increasing = tokens[1:] > tokens[:-1]
        starts = sets.offsets[1:-1]
        starts = starts[(starts > 0) & (starts < len(tokens))]
        increasing[starts - 1] = True  # a set may start below where the one before ends
        if not increasing.all():
            position = int(np.flatnonzero(~increasing)[0]) + 1
            row, number = _row_of(lengths, position)
            raise InputError(SETS, "ids ascending and distinct within each set of a SetBatch",
                             f"{int(tokens[position])} after {int(tokens[position - 1])} at id #{number}",
                             "build the SetBatch with SetBatch.from_lists, which sorts and de-duplicates", row=row)
    if len(tokens) and (sets.wide or limits.vocab_size < 65536) and int(tokens.max()) >= limits.vocab_size:
        if take_values:
            _check_lengths(lengths, limits)
            return WideSets(sets.offsets, pa.array(tokens.astype(np.int64)))
        position = int(np.flatnonzero(tokens >= limits.vocab_size)[0])
        row, number = _row_of(lengths, position)
        raise InputError(SETS, f"token ids in [0, {limits.vocab_size})", f"{int(tokens[position])} at id #{number}", REMAP_FIX, row=row)
    _check_lengths(lengths, limits)
    return sets


def _value_sets(values: pa.Array, counts: np.ndarray, limits: SetLimits) -> WideSets:
    """Sets of canonical token values (:func:`values_of`), each de-duplicated, lengths checked."""
    lengths, tokens, _ = dedup_values(values, counts)
    _check_lengths(lengths, limits)
    return WideSets(csr_offsets(lengths), tokens)


def _token_values(flat: list, counts: np.ndarray) -> pa.Array:
    """The tokens of ``flat`` as canonical values: integers of one signedness up to 64 bits, or
    ``str`` and ``bytes`` (a string is its UTF-8 bytes, as the readers take a string column).

    Raises
    ------
    InputError
        For a token of no such kind (a float, a bool, None, a nested list), integers beside
        strings, or integers no 64-bit type holds together; naming its row.
    """
    try:
        array = pa.array(flat)
    except OverflowError:  # ids of 2**63 and more: uint64, where every id is an integer >= 0
        exact = all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in flat)
        try:
            array = pa.array(np.array(flat, dtype=np.uint64)) if exact else None
        except (OverflowError, TypeError, ValueError):
            array = None
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        array = None
    if array is not None and kind_of_type(array.type) is not None and array.null_count == 0:
        return values_of(array)
    position, found, fix = _first_non_token(flat)
    row, number = _row_of(counts, position)
    raise InputError(SETS, "tokens of one kind: integers (up to 64 bits, all signed or all unsigned), or str and bytes",
                     f"{found} at id #{number}", fix, row=row)


def _first_non_token(values: list) -> tuple[int, str, str]:
    """``(position, found, fix)`` of the first token that makes ``values`` no one kind of token."""
    def kind(value):
        if isinstance(value, (bool, np.bool_)):
            return None
        if isinstance(value, (int, np.integer)):
            return "integer"
        return "text" if isinstance(value, (str, bytes)) else None

    kinds = [kind(v) for v in values]
    for i, k in enumerate(kinds):
        if k is None:
            return i, f"{type(values[i]).__name__} {_show(values[i])}", "pass ints, or strs and bytes (no floats, bools, None or nested lists)"
    for i, k in enumerate(kinds):
        if k != kinds[0]:
            return i, f"{k} token {_show(values[i])} after {kinds[0]} token {_show(values[0])}", "pass every token as an int, or every one as a str or bytes"
    huge = next((i for i, v in enumerate(values) if not -(2**63) <= int(v) < 2**64), None)
    if huge is not None:
        return huge, f"{values[huge]} (beyond 64 bits)", "pass integers in [-2**63, 2**64)"
    big = next((i for i, v in enumerate(values) if int(v) >= 2**63), 0)
    return big, f"{values[big]} beside negative ids", "pass all ids as signed (below 2**63) or all as unsigned (none negative)"


def _check_lengths(lengths: np.ndarray, limits: SetLimits) -> None:
    if len(lengths) and lengths.max() > limits.max_len:
        row = int(np.flatnonzero(lengths > limits.max_len)[0])
        raise InputError(SETS, f"at most {limits.max_len} distinct ids per set", f"{int(lengths[row])} distinct ids",
                         f"shorten this set, or build the Index with max_len >= {int(lengths.max())}", row=row)


def _iterable(value) -> bool:
    try:
        iter(value)
    except TypeError:
        return False
    return True


def _row_of(counts: np.ndarray, position: int) -> tuple[int, int]:
    """The set holding flat value ``position`` and the value's 1-based number within it."""
    ends = np.cumsum(counts)
    row = int(np.searchsorted(ends, position, side="right"))
    return row, int(position - (ends[row] - counts[row]) + 1)


def _first_non_integer(values: list) -> int:
    for i, value in enumerate(values):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            return i
    # Every value an int, yet no integer array: some lie beyond int64 (and uint64, or mixed with negatives).
    return next((i for i, value in enumerate(values) if not -(2**63) <= int(value) < 2**63), 0)


def _show(value, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def checked_query_ids(query_ids, n_queries: int) -> tuple[str, ...]:
    """``query_ids`` (a sequence of str, or an Arrow Array or ChunkedArray of strings) as a tuple of
    ``n_queries`` unique str; anything else raises ValueError naming the position at fault."""
    if isinstance(query_ids, (pa.Array, pa.ChunkedArray)):
        kind = query_ids.type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
            raise ValueError(f"query_ids must be strings (the result's query_id column), found an Arrow array of type {kind}")
    ids = tuple(query_ids.to_pylist() if isinstance(query_ids, (pa.Array, pa.ChunkedArray)) else query_ids)
    if len(ids) != n_queries:
        raise ValueError(f"query_ids must name each of the {n_queries} queries, found {len(ids)} ids")
    wrong = next((i for i, q in enumerate(ids) if not isinstance(q, str)), None)
    if wrong is not None:
        q = ids[wrong]
        raise ValueError(f"query_ids must be strings (the result's query_id column), found {type(q).__name__} {q!r} "
                         f"at position {wrong} (0-based)")
    if len(set(ids)) != len(ids):
        seen: dict[str, int] = {}
        for i, q in enumerate(ids):
            if q in seen:
                raise ValueError(f"query_ids must be unique, found {q!r} at rows {seen[q]} and {i} (0-based)")
            seen[q] = i
    return ids
