"""The Parquet format: an id column (``doc_id`` or ``query_id``) and ``tokens``, a list of integers.

A file is decoded in record batches, row group by row group, in parallel threads (Arrow and NumPy
release the GIL); record batches are consumed in file order, so the first bad row in file order is
the one reported. Rows are checked vectorised; under quarantine a row flagged bad is checked again
alone, to write its message.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..location import Location
from .canonical import canonical, concat_sets, in_length_range, select_sets
from .errors import InputError, Rejects, SetLimits
from .files import file_stat, parquet_files, parquet_source, as_location
from .vocabulary import dedup_values, kind_of_type, values_of

__all__ = ["duplicate_error", "open_parquet", "read_parquet_sets", "validated_batches"]

_TOKEN_TYPES = "list<integer>, list<string> or list<binary> (large_list, large_string and large_binary too)"
_PARQUET_BATCH_ROWS = 1 << 17  # rows per record batch decoded at a time
_MAX_READ_THREADS = 16  # row groups decoded at once


def open_parquet(file) -> pq.ParquetFile:
    """Open ``file`` as Parquet (reads its footer only).

    Raises
    ------
    InputError
        If the file cannot be read as Parquet (truncated, corrupt or another format), or a
        store refuses access to it (a URI).
    """
    file = as_location(file)
    if not file.local:
        file_stat(file)  # a missing object or refused access, named as such rather than as bad data
    try:
        return pq.ParquetFile(**parquet_source(file))
    except (pa.ArrowException, OSError) as e:
        raise InputError(file, "a readable Parquet file", f"unreadable data ({e})", "re-write the file (it may be truncated, corrupt or not Parquet at all)") from e


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def check_schema(file: Location, schema: pa.Schema, id_column: str, id_kinds: str) -> None:
    for column, wanted in ((id_column, id_kinds), ("tokens", _TOKEN_TYPES)):
        index = schema.get_field_index(column)
        if index < 0:
            raise InputError(file, f"a column '{column}' of type {wanted}", f"columns {schema.names}", f"add or rename the column to '{column}'")
        kind = schema.field(index).type
        if column == "tokens":
            ok = (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and kind_of_type(kind.value_type) is not None
        elif id_kinds == "integer":
            ok = pa.types.is_integer(kind)
        else:
            ok = pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)
        if not ok:
            raise InputError(file, f"column '{column}' of type {wanted}", f"type {kind}", f"write column '{column}' as {wanted}")


def _null_row(file: Location, array: pa.Array, column: str, row_base: int, what: str) -> None:
    if array.null_count:
        row = _first(array.is_null().to_numpy(zero_copy_only=False))
        raise InputError(file, f"a {what} in column '{column}'", "null", f"fill in or drop the row's '{column}'", row=row_base + row)


def _parquet_batch_sets(file: Location, tokens: pa.Array, row_base: int, limits: SetLimits):
    """Validate one record batch's ``tokens`` column; return ``(lengths, tokens, repeated)`` as :func:`canonical`."""
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
    if pa.types.is_integer(flat.type):
        values = flat.to_numpy(zero_copy_only=False)
        small = (values < limits.vocab_size).all() if values.dtype.kind == "u" else ((values >= 0) & (values < limits.vocab_size)).all()
    else:
        small = False
    if small:  # every id fits the kernels as it is (today's form): uint16, or uint32 for ids of 65536 and more
        dense = np.uint32 if len(values) and int(values.max()) >= 65536 else np.uint16
        lengths, set_tokens, repeated = canonical(values.astype(dense, copy=False), counts)
    else:  # wide: any integer, string or binary token (settopk.shards.inputs.vocabulary)
        lengths, set_tokens, repeated = dedup_values(values_of(flat), counts)
    too_long = lengths > limits.max_len
    if too_long.any():
        row = _first(too_long)
        raise InputError(file, f"at most {limits.max_len} distinct ids per set", f"{int(lengths[row])} distinct ids", "shorten this set, or raise max_len", row=row_base + row)
    return lengths, set_tokens, repeated


def _query_ids_arrow(ids: pa.Array) -> pa.Array:
    """``query_id`` values as an Arrow string array: integers as their decimal text, as ``str`` writes them."""
    return ids if pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type) else pc.cast(ids, pa.string())


def _parquet_ids(file: Location, ids: pa.Array, id_column: str, row_base: int, arrow_ids: bool = False):
    """Validate one record batch's id column: int64 NumPy array for ``doc_id``, list of str for ``query_id``
    (an Arrow string array where ``arrow_ids``)."""
    _null_row(file, ids, id_column, row_base, "value")
    if id_column == "query_id":
        return _query_ids_arrow(ids) if arrow_ids else [str(x) for x in ids.to_pylist()]
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
    """Bool mask of the rows of a record batch that break a rule (vectorised; used only to quarantine)."""
    ids, tokens = batch.column(id_column), batch.column("tokens")
    bad = ids.is_null().to_numpy(zero_copy_only=False) | tokens.is_null().to_numpy(zero_copy_only=False)
    if id_column == "doc_id":
        values = pc.fill_null(ids, 0).to_numpy(zero_copy_only=False)
        bad |= (values > np.iinfo(np.int64).max) if values.dtype == np.uint64 else (values < 0)
    flat = pc.list_flatten(tokens)
    parents = pc.list_parent_indices(tokens).to_numpy(zero_copy_only=False)
    nulls = flat.is_null().to_numpy(zero_copy_only=False)
    bad[parents[nulls]] = True  # every non-null value of a token type is a valid token
    counts = pc.fill_null(pc.list_value_length(tokens), 0).to_numpy(zero_copy_only=False)
    for row in np.flatnonzero((counts > limits.max_len) & ~bad):  # may still fit after de-duplication
        bad[row] = len(set(tokens[int(row)].as_py())) > limits.max_len
    return bad


def validate_batch(file: Location, batch: pa.RecordBatch, id_column: str, row_base: int, limits: SetLimits, rejects: Rejects,
                    arrow_ids: bool = False):
    """Validate one Parquet record batch: ``(ids, (lengths, tokens, repeated), good)``.

    ``ids`` covers every row (``-1`` or None where a row was set aside); the sets and ``good`` (row
    indices within the record batch) cover the valid rows only. Without quarantine the first bad row raises.
    With ``arrow_ids``, ``query_id`` values come as one Arrow string array over every row (a row
    set aside keeps its value, or null).
    """
    if not rejects.quarantine:
        ids = _parquet_ids(file, batch.column(id_column), id_column, row_base, arrow_ids)
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
    elif arrow_ids:
        ids = _query_ids_arrow(batch.column(id_column))
    else:
        ids = [None] * batch.num_rows
        for i, query_id in zip(good.tolist(), good_ids):
            ids[i] = query_id
    return ids, sets, good


def validated_batches(file, id_column: str, limits: SetLimits, rejects: Rejects, row_groups=None, max_threads: int = _MAX_READ_THREADS,
                      arrow_ids: bool = False, batch_rows: int = _PARQUET_BATCH_ROWS):
    """Decode and validate one Parquet file (or its ``row_groups`` only) record batch by record batch.

    Row groups are decoded and validated in up to ``max_threads`` parallel threads, at most that
    many ahead of the consumer, and yielded in row order.

    Parameters
    ----------
    file : str
    id_column : {"doc_id", "query_id"}
        ``doc_id`` must be an integer column, ``query_id`` a string or integer one.
    limits : SetLimits
    rejects : Rejects
        Where bad rows go: raised at once (the first in file order), or set aside.
    row_groups : sequence of int, optional
        Read only these row groups; row numbers stay those of the whole file.
    max_threads : int
    arrow_ids : bool
        ``query_id`` values as an Arrow string array instead of a list of str (no Python object
        per row: :class:`settopk.shards.inputs.QueryStream` reads millions of queries a second so).
    batch_rows : int
        Rows per record batch: Arrow's peak memory while decoding grows with it.

    Yields
    ------
    (ids, (lengths, tokens, repeated), good, row_base, n_rows)
        Per record batch: ids of every row (int64 array for ``doc_id``, ``-1`` where a row was set
        aside; list of str for ``query_id``, None where set aside, or with ``arrow_ids`` an Arrow
        string array), the valid rows' sets as
        :func:`settopk.shards.inputs.canonical.canonical` returns them, the valid rows' indices within the
        record batch (int64), the record batch's first row within the file, and its number of rows.

    Raises
    ------
    InputError
        For an unreadable file, a missing or mistyped column, or (unless quarantining) the first bad row.
    ValueError
        If ``row_groups`` names a row group the file does not have.
    """
    file = as_location(file)
    parquet = open_parquet(file)
    check_schema(file, parquet.schema_arrow, id_column, "integer" if id_column == "doc_id" else "string or integer")
    n_groups = parquet.metadata.num_row_groups
    groups = list(range(n_groups)) if row_groups is None else [int(g) for g in row_groups]
    if any(not 0 <= g < n_groups for g in groups):
        raise ValueError(f"{file} has {n_groups} row groups; asked for {groups}")
    group_rows = [parquet.metadata.row_group(g).num_rows for g in range(n_groups)]
    group_base = np.concatenate([[0], np.cumsum(group_rows)]).astype(np.int64)

    def one_group(g: int):
        local = Rejects("quarantine" if rejects.quarantine else "error")
        out, row_base = [], int(group_base[g])
        # Each thread opens the file itself; the footer read once above is reused (for an object
        # store, one request fewer per row group).
        batches = pq.ParquetFile(**parquet_source(file), metadata=parquet.metadata).iter_batches(
            batch_size=batch_rows, row_groups=[g], columns=[id_column, "tokens"])
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowException, OSError) as e:
                raise InputError(file, "a readable Parquet file", f"unreadable data after row {row_base} ({e})", "re-write the file (it may be truncated or corrupt)") from e
            if batch is None:
                return out, local.records
            out.append((*validate_batch(file, batch, id_column, row_base, limits, local, arrow_ids), row_base, batch.num_rows))
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


def read_parquet_sets(path, id_column: str, limits: SetLimits, length_range=None, rejects: Rejects | None = None, row_groups=None):
    """Read every Parquet file at ``path`` (only ``row_groups`` of it when given: ``path`` is then one file).

    Parameters
    ----------
    path : str
        A Parquet file or a directory of them (:func:`settopk.shards.inputs.files.parquet_files`).
    id_column : {"doc_id", "query_id"}
    limits : SetLimits
    length_range : (int, int) or None
        ``(lo, hi)``, inclusive: keep only sets whose de-duplicated length lies in it.
    rejects : Rejects, optional
        Where bad rows go; by default the first one raises.
    row_groups : sequence of int, optional

    Returns
    -------
    files : list of str
    ids : list of per-record-batch id arrays (int64) or lists (str), for every row
    where : list of (file, first_row, n_rows) per record batch, to locate a row from its global index
    kept : numpy.ndarray of int64, global indices of the valid rows kept by ``length_range``
    batch : SetBatch of the kept rows, in input order
    n_with_repeats : int

    Raises
    ------
    InputError
        As :func:`validated_batches`, or for a directory holding other entries.
    """
    rejects = rejects or Rejects("error")
    files = parquet_files(path)
    ids, where, kept, kept_lengths, kept_tokens = [], [], [], [], []
    n_with_repeats = 0
    n_rows = 0
    for file in files:
        batches = validated_batches(file, id_column, limits, rejects, row_groups)
        for batch_ids, (lengths, tokens, repeated), good, row_base, n_batch_rows in batches:
            ids.append(batch_ids)
            n_with_repeats += int(repeated.sum())
            keep = in_length_range(lengths, length_range)
            lengths, tokens = select_sets(lengths, tokens, keep)
            kept.append(n_rows + good[keep])
            kept_lengths.append(lengths)
            kept_tokens.append(tokens)
            where.append((file, row_base, n_batch_rows))
            n_rows += n_batch_rows
    kept_rows = np.concatenate(kept).astype(np.int64) if kept else np.zeros(0, dtype=np.int64)
    try:
        sets = concat_sets(kept_lengths, kept_tokens)
    except ValueError:
        raise mixed_types_error([(where[i][0], t) for i, t in enumerate(kept_tokens)]) from None
    return files, ids, where, kept_rows, sets, n_with_repeats


def mixed_types_error(located) -> InputError:
    """The error for tokens of kinds no one type holds, naming a file of each.

    Parameters
    ----------
    located : list of (str, tokens)
        Each block's file and tokens (a ``uint16`` array, or Arrow values).
    """
    def describe(tokens):
        if isinstance(tokens, np.ndarray):
            return "integer"
        if pa.types.is_large_binary(tokens.type):
            return "string/binary"
        return "unsigned (>= 2**63)" if pa.types.is_uint64(tokens.type) else ("negative integer" if len(tokens) and pc.min(tokens).as_py() < 0 else "integer")

    kinds = {}
    for file, tokens in located:
        if len(tokens):
            kinds.setdefault(describe(tokens), file)
    (first_kind, first_file), *rest = list(kinds.items()) or [("?", "?")]
    other_kind, other_file = rest[-1] if rest else ("?", "?")
    return InputError(other_file, f"tokens of one type across the input (found {first_kind} tokens in {first_file})",
                      f"{other_kind} tokens", "write every file's tokens with one type: integers or strings, and integer ids all signed or all unsigned")


def _locate(where, index: int) -> tuple[str, int]:
    """(file, row within it) of the row with global index ``index``."""
    starts = np.cumsum([0] + [n for _, _, n in where])
    batch = int(np.searchsorted(starts, index, side="right")) - 1
    file, first_row, _ = where[batch]
    return file, first_row + index - int(starts[batch])


def duplicate_error(where, column: str, value, first: int, again: int) -> InputError:
    """The error for a row repeating an earlier row's id, naming both rows.

    Parameters
    ----------
    where : list of (str, int, int)
        ``(file, first_row, n_rows)`` per record batch in read order, as :func:`read_parquet_sets`
        returns it; locates a row from its global index (0-based over all rows of all files).
    column : {"doc_id", "query_id"}
    value : int or str
        The repeated id.
    first, again : int
        Global indices of the first row with the id and of the repeat.

    Returns
    -------
    InputError
        Located at the repeat's file and row.
    """
    file, row = _locate(where, again)
    first_file, first_row = _locate(where, first)
    return InputError(file, f"unique {column} values", f"{column} {value!r} again (first at {first_file} row {first_row})", f"give every row its own {column}, or drop the repeated row", row=row)

