"""Token types and the exact mapping from the user's tokens to the kernels' dense ids.

The kernels take sets of dense ids below ``vocab_size``: ``uint16`` where ``vocab_size <= 65536``
(every backend), ``uint32`` above (up to ``2**24``, the cpu and numpy backends). Users have 64-bit
ids, negative ids, and string or binary tokens. Readers keep a block of sets in one of two forms:

* *small*: every token an integer in ``[0, min(vocab_size, 65536))``: a ``uint16`` NumPy array, as
  the kernels take it (today's form, kept so a plain corpus reads and searches as before);
* *wide*: anything else: a :class:`WideSets` of token *values* (an Arrow ``int64``, ``uint64``
  or ``large_binary`` array), de-duplicated per set by token identity.

The mapping (:class:`TokenMap`) is exact: scores depend on ``|q ∩ d|``, ``|q|`` and ``|d|``
only, and only a token found in both some query and some doc can add to an overlap. So

* a *shared* token gets its own dense id, ``0 .. S-1`` in token order;
* a token found in docs only gets ``S + r`` where it is the ``r``-th doc-only token of its
  doc: distinct within the doc (``|d|`` is kept), shared by docs that never meet a query on it;
* a token found in queries only gets ``vocab_size - 1 - r`` for its rank ``r`` among its
  query's query-only tokens: never an id that any doc holds.

Where the docs are all small (:attr:`TokenMap.identity`), docs keep their ids and only
queries are mapped: a query token no doc holds gets a free id (one no doc holds), below 65536
while there are such ids (so the queries stay ``uint16`` where they can).

The mapped sets are ``uint32`` where ``vocab_size > 65536`` (:func:`settopk.kernels.sets.token_dtype`),
else ``uint16`` exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from settopk.kernels.sets import NARROW_VOCAB, SetBatch, token_dtype

from .errors import InputError

__all__ = [
    "INT", "BYTES", "TokenMap", "VocabularyError", "WideSets", "common_type", "dedup_values", "kind_of_type",
    "Vocab", "VocabCounter", "build_token_map", "check_types", "has_negative", "merge_vocabs", "present_ids", "token_kind", "token_type", "vocab_of", "unique_values", "values_of",
]

INT = "integer"
BYTES = "bytes"
_INT64_MAX = np.iinfo(np.int64).max


class VocabularyError(InputError):
    """The tokens do not fit the kernels' dense ids ``[0, vocab_size)``.

    Two ways: the shared tokens with the room kept for side-only tokens (as many as the longest
    doc and the longest query hold) exceed ``vocab_size``; or, where the docs keep their own ids
    (:attr:`TokenMap.identity`), too few ids are left free of the docs for the longest query's
    query-only tokens (``doc_ids`` given).

    Attributes
    ----------
    n_shared : int
        Distinct tokens found in both the docs and the queries.
    limit : int
        The most shared tokens this run can map (``vocab_size`` less the room side-only tokens
        need, never below 0); with ``doc_ids``, the most distinct ids the docs may hold.
    """

    def __init__(self, n_shared: int, limit: int, vocab_size: int, room: int, *, doc_ids: int | None = None):
        self.n_shared, self.limit = n_shared, max(limit, 0)
        fix = (f"raise vocab_size to at least {n_shared + room} (up to 16777216; the config's vocab_size key, "
               "--config FILE, or Index.build's vocab_size), split the queries, or merge rare tokens before the run")
        if doc_ids is not None:
            message = (f"the docs hold {doc_ids} distinct ids of [0, {vocab_size}), expected at most {self.limit}: "
                       f"the ids no doc holds ({vocab_size - doc_ids}) take the queries' tokens found in no doc, and the "
                       f"longest query needs {room}; fix: raise vocab_size to at least {doc_ids + room} (up to 16777216), "
                       "or split the queries")
        elif limit < 0:
            message = (f"vocab_size {vocab_size} is smaller than the {room} dense ids kept for tokens found on one side "
                       "only (as many as the longest doc and the longest query hold), before any of the "
                       f"{n_shared} tokens the docs and queries share; fix: raise vocab_size to at least "
                       f"{n_shared + room} (up to 16777216)")
        else:
            message = (f"the docs and queries share {n_shared} distinct tokens, expected at most {limit} "
                       f"(vocab_size {vocab_size} dense ids, less {room} kept for tokens found on one side only, "
                       f"as many as the longest doc and the longest query hold); fix: {fix}")
        super().__init__(message)

    def __reduce__(self):
        return (_vocabulary_error, (self.n_shared, self.limit, self.args[0]))


def _vocabulary_error(n_shared, limit, message):
    error = VocabularyError.__new__(VocabularyError)
    InputError.__init__(error, message)
    error.n_shared, error.limit = n_shared, limit
    return error


def kind_of_type(arrow_type: pa.DataType) -> str | None:
    """:data:`INT` for any integer type, :data:`BYTES` for string, large_string, binary and
    large_binary, None for anything else (not a token type)."""
    if pa.types.is_integer(arrow_type):
        return INT
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return BYTES
    return None


def token_kind(tokens) -> str:
    """The kind of a block's tokens: a ``uint16`` array (small) or an Arrow array (wide)."""
    return INT if isinstance(tokens, np.ndarray) else kind_of_type(tokens.type)


def values_of(flat: pa.Array) -> pa.Array:
    """Token values in their canonical type: ``int64`` for integers (``uint64`` only for a
    ``uint64`` column holding values of ``2**63`` or more), ``large_binary`` for strings and binary.

    Parameters
    ----------
    flat : pyarrow.Array
        Tokens, without nulls, of an integer, string or binary type.
    """
    if kind_of_type(flat.type) == BYTES:
        return flat.cast(pa.large_binary())
    if pa.types.is_uint64(flat.type) and len(flat) and pc.max(flat).as_py() > _INT64_MAX:
        return flat
    return flat.cast(pa.int64())


def common_type(types) -> pa.DataType | None:
    """The canonical type that holds tokens of every one of ``types`` (canonical types, see
    :func:`values_of`), or None if there is none (integers with strings, or negative ids
    with ids of ``2**63`` and more: the callers name the files)."""
    types = set(types)
    if not types:
        return pa.int64()
    if types == {pa.large_binary()}:
        return pa.large_binary()
    if pa.large_binary() in types:
        return None
    return pa.uint64() if pa.uint64() in types else pa.int64()


def as_type(values, to: pa.DataType) -> pa.Array:
    """Wide values (or a small ``uint16`` array) as ``to`` (from :func:`common_type`).

    Raises
    ------
    ValueError
        For a negative id cast to ``uint64`` (the caller names the file).
    """
    if isinstance(values, np.ndarray):
        values = pa.array(values.astype(np.int64))
    if values.type == to:
        return values
    if to == pa.uint64() and len(values) and pc.min(values).as_py() < 0:
        raise ValueError("negative token ids and ids of 2**63 or more in one run")
    return values.cast(to)


@dataclass(frozen=True)
class WideSets:
    """Sets of token values in CSR layout, each de-duplicated (in no particular order).

    Attributes
    ----------
    offsets : numpy.ndarray of int64, shape (n_sets + 1,)
    tokens : pyarrow.Array, length offsets[-1]
        ``int64``, ``uint64`` or ``large_binary`` values (:func:`values_of`).
    """

    offsets: np.ndarray
    tokens: pa.Array

    @property
    def n_sets(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Set sizes, int64, shape (n_sets,)."""
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return self.n_sets

    def take(self, rows) -> "WideSets":
        """Sets ``rows`` (int array) as a new batch, in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[rows]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        positions = np.repeat(self.offsets[rows] - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
        return WideSets(offsets, self.tokens.take(pa.array(positions)))

    def to_lists(self) -> list[list]:
        """Each set as a sorted Python list (ints, or bytes)."""
        values = self.tokens.to_pylist()
        return [sorted(values[self.offsets[i] : self.offsets[i + 1]]) for i in range(self.n_sets)]


def dedup_values(values: pa.Array, counts: np.ndarray) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """De-duplicate each set of a flat CSR array of token values, by token identity.

    Parameters
    ----------
    values : pyarrow.Array
        Canonical token values (:func:`values_of`) of all sets, set after set, no nulls.
    counts : numpy.ndarray of int64, shape (n_sets,)

    Returns
    -------
    lengths : numpy.ndarray of int64, shape (n_sets,)
        Distinct tokens per set.
    tokens : pyarrow.Array
        The sets, each duplicate-free (ordered by first appearance in the block's dictionary).
    repeated : numpy.ndarray of bool, shape (n_sets,)
    """
    n_sets = len(counts)
    encoded = pc.dictionary_encode(values)
    index = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    set_of = np.repeat(np.arange(n_sets, dtype=np.int64), counts)
    key = (set_of << 32) | index
    key.sort()
    new = np.ones(len(key), dtype=bool)
    np.not_equal(key[1:], key[:-1], out=new[1:])
    kept = key[new]
    repeated = np.zeros(n_sets, dtype=bool)
    repeated[key[~new] >> 32] = True
    lengths = np.bincount(kept >> 32, minlength=n_sets).astype(np.int64)
    return lengths, encoded.dictionary.take(pa.array(kept & 0xFFFFFFFF)), repeated


def unique_values(parts) -> pa.Array | None:
    """The distinct values of Arrow arrays of one type (None for no array)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    return pc.unique(pa.chunked_array(parts, type=parts[0].type)) if len(parts) > 1 else pc.unique(parts[0])


def token_type(tokens) -> str:
    """``"small"`` for a ``uint16`` array, else the Arrow type name of wide values."""
    return "small" if isinstance(tokens, np.ndarray) else str(tokens.type)


def has_negative(tokens) -> bool:
    """Whether some token is a negative integer."""
    if isinstance(tokens, np.ndarray) or not pa.types.is_signed_integer(tokens.type) or not len(tokens):
        return False
    return pc.min(tokens).as_py() < 0


def present_ids(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Bool mask, shape (vocab_size,): the ids a small block holds."""
    return np.bincount(tokens, minlength=vocab_size)[:vocab_size] > 0 if len(tokens) else np.zeros(vocab_size, dtype=bool)


def _side_ranks(side: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """For each position, how many side-only tokens come before it in its own set (int64)."""
    before_all = np.concatenate([[0], np.cumsum(side, dtype=np.int64)])
    starts = np.concatenate([[0], np.cumsum(lengths)])[:-1]
    return before_all[:-1] - np.repeat(before_all[starts], lengths)


def _sorted_sets(dense: np.ndarray, lengths: np.ndarray, vocab_size: int) -> SetBatch:
    """A SetBatch of distinct dense ids per set, each set sorted.

    Raises
    ------
    RuntimeError
        If an id falls outside ``[0, vocab_size)`` or repeats in a set (the map's room was not
        checked: :meth:`TokenMap.check_room`).
    """
    if len(dense) and (dense.min() < 0 or dense.max() >= vocab_size):
        raise RuntimeError(f"internal error: the token mapping gave a dense id outside [0, {vocab_size}) (report this)")
    set_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    dtype = token_dtype(vocab_size)
    bits = 8 * dtype.itemsize  # 16, or 32 for uint32 ids: set_of < 2**31 still fits the int64 key
    key = (set_of << bits) | dense
    key.sort()
    if len(key) > 1 and (key[1:] == key[:-1]).any():
        raise RuntimeError("internal error: the token mapping gave one set a dense id twice (report this)")
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return SetBatch(offsets, (key & ((1 << bits) - 1)).astype(dtype))


@dataclass(frozen=True)
class TokenMap:
    """The run's exact mapping from tokens to dense ids (see the module docstring).

    Attributes
    ----------
    vocab_size : int
        The kernels' dense ids are ``[0, vocab_size)``.
    identity : bool
        The docs are all small and keep their ids; ``doc_present`` says which ids they hold.
    shared : pyarrow.Array or None
        Sorted distinct tokens found in both docs and queries (dense id = position), canonical
        type; None where ``identity``.
    doc_present : numpy.ndarray of bool, shape (vocab_size,), or None
        Where ``identity``: the ids some doc holds.
    kind : str or None
        :data:`INT` or :data:`BYTES`: the tokens' kind (None: no token at all).
    n_doc_tokens, n_query_tokens, n_shared : int
        Distinct tokens in the docs, in the queries, in both.
    """

    vocab_size: int
    identity: bool
    shared: pa.Array | None
    doc_present: np.ndarray | None
    kind: str | None
    n_doc_tokens: int
    n_query_tokens: int
    n_shared: int

    @property
    def free_ids(self) -> np.ndarray:
        """Where ``identity``: ids no doc holds (int64), those below 65536 first (highest first, as
        before), then the others ascending: a query's ids stay below 65536 while free ids there last."""
        free = np.flatnonzero(~self.doc_present).astype(np.int64)
        cut = int(np.searchsorted(free, NARROW_VOCAB))
        return np.concatenate([free[:cut][::-1], free[cut:]])

    def check_room(self, longest_doc: int, longest_query: int) -> None:
        """Refuse a mapping whose ids could run out: raises :class:`VocabularyError`.

        ``longest_doc`` and ``longest_query`` bound the side-only tokens of one set.
        """
        if self.identity:
            if self.n_query_tokens > self.n_shared and len(self.free_ids) < longest_query:
                raise VocabularyError(self.n_shared, self.vocab_size - longest_query, self.vocab_size, longest_query,
                                      doc_ids=self.n_doc_tokens)
            return
        room = longest_doc + longest_query
        if self.n_shared + room > self.vocab_size:
            raise VocabularyError(self.n_shared, self.vocab_size - room, self.vocab_size, room)

    def summary(self) -> dict:
        """The counts and the mapping's form, for the manifest."""
        return {"token_kind": self.kind, "dense_ids": "identity" if self.identity else "shared-first",
                "distinct_doc_tokens": self.n_doc_tokens, "distinct_query_tokens": self.n_query_tokens,
                "distinct_shared_tokens": self.n_shared, "vocab_size": self.vocab_size}

    def _lookup(self, values) -> tuple[np.ndarray, np.ndarray]:
        """``(dense, side)``: each token's dense id where shared, and where it is side-only."""
        if self.identity:
            if not isinstance(values, np.ndarray):
                if kind_of_type(values.type) == BYTES:
                    return np.zeros(len(values), dtype=np.int64), np.ones(len(values), dtype=bool)
                values = values.to_numpy(zero_copy_only=False)
            v = values.astype(np.int64) if values.dtype != np.uint64 else np.minimum(values, self.vocab_size).astype(np.int64)
            inside = (v >= 0) & (v < self.vocab_size)
            shared = np.zeros(len(v), dtype=bool)
            shared[inside] = self.doc_present[v[inside]]
            return np.where(shared, v, 0), ~shared
        values = as_type(values, self.shared.type) if isinstance(values, np.ndarray) or values.type != self.shared.type else values
        index = pc.index_in(values, value_set=self.shared)
        side = index.is_null().to_numpy(zero_copy_only=False)
        return pc.fill_null(index, 0).to_numpy(zero_copy_only=False).astype(np.int64), side

    def docs(self, sets) -> SetBatch:
        """Doc sets (a small SetBatch or a :class:`WideSets`) as dense ids, lengths kept."""
        if self.identity and isinstance(sets, SetBatch):
            return sets
        if self.identity:
            raise RuntimeError("internal error: wide docs with an identity token map (report this)")
        dense, side = self._lookup(sets.tokens)
        dense = np.where(side, len(self.shared) + _side_ranks(side, sets.lengths), dense)
        return _sorted_sets(dense, sets.lengths, self.vocab_size)

    def queries(self, sets) -> SetBatch:
        """Query sets (a small SetBatch or a :class:`WideSets`) as dense ids, lengths kept."""
        lengths = sets.lengths
        dense, side = self._lookup(sets.tokens)
        if not side.any() and isinstance(sets, SetBatch) and self.identity:
            return sets
        rank = _side_ranks(side, lengths)
        if self.identity:
            free = self.free_ids
            if side.any() and rank[side].max() >= len(free):
                need = int(rank[side].max()) + 1
                raise VocabularyError(self.n_shared, self.vocab_size - need, self.vocab_size, need, doc_ids=self.n_doc_tokens)
            dense = np.where(side, free[np.minimum(rank, max(len(free) - 1, 0))] if len(free) else 0, dense)
        else:
            dense = np.where(side, self.vocab_size - 1 - rank, dense)
        return _sorted_sets(dense, lengths, self.vocab_size)


@dataclass(frozen=True)
class Vocab:
    """The distinct tokens of some sets (a piece, the queries, or a merge of them).

    Attributes
    ----------
    present : numpy.ndarray of bool, shape (vocab_size,)
        The small ids held (tokens of small blocks).
    values : pyarrow.Array or None
        The distinct tokens of wide blocks, canonical type (may repeat an id of ``present``).
    """

    present: np.ndarray
    values: pa.Array | None

    @property
    def all_small(self) -> bool:
        return self.values is None

    def as_values(self, to: pa.DataType) -> pa.Array:
        """Every distinct token, once, as ``to`` (unsorted)."""
        small = pa.array(np.flatnonzero(self.present).astype(np.int64)).cast(to) if to != pa.large_binary() else None
        if to == pa.large_binary() and self.present.any():
            raise ValueError("integer and string tokens in one run")
        wide = as_type(self.values, to) if self.values is not None else None
        return unique_values([small, wide]) if (small is not None or wide is not None) else pa.array([], to)

    def n_distinct(self, to: pa.DataType | None = None) -> int:
        """How many distinct tokens."""
        if self.values is None:
            return int(self.present.sum())
        return len(self.as_values(to or self.values.type))


def merge_vocabs(vocabs, to: pa.DataType | None = None) -> Vocab:
    """One :class:`Vocab` for several (their union); wide values cast to ``to`` where given.

    Raises
    ------
    ValueError
        For wide values no one type holds (the caller names the files).
    """
    vocabs = list(vocabs)
    present = np.logical_or.reduce([v.present for v in vocabs]) if vocabs else np.zeros(0, dtype=bool)
    wide = [v.values for v in vocabs if v.values is not None]
    if not wide:
        return Vocab(present, None)
    to = to or common_type(w.type for w in wide)
    if to is None:
        raise ValueError("integer and string tokens in one run")
    return Vocab(present, unique_values([as_type(w, to) for w in wide]))


def vocab_of(tokens, vocab_size: int) -> Vocab:
    """The :class:`Vocab` of one block's tokens (a ``uint16`` array, or wide Arrow values)."""
    if isinstance(tokens, np.ndarray):
        return Vocab(present_ids(tokens, vocab_size), None)
    return Vocab(np.zeros(vocab_size, dtype=bool), pc.unique(tokens))


class VocabCounter:
    """Collects the distinct tokens of blocks read one after another (the queries' pass).

    Parameters
    ----------
    vocab_size : int

    Attributes
    ----------
    types : dict of str to str
        Each token type seen (:func:`token_type`; ``"negative"`` for signed ids below 0) and
        the first file it was seen in.
    """

    _COMPACT = 1 << 22  # wide values held before they are de-duplicated together again

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self._present = np.zeros(vocab_size, dtype=bool)
        self._parts: list[pa.Array] = []
        self._held = 0
        self.types: dict[str, str] = {}

    def add(self, tokens, file: str) -> None:
        """Count one block's tokens, read from ``file``.

        Raises
        ------
        InputError
            For tokens no one type holds together with those seen before, naming both files.
        """
        kind = token_type(tokens)
        self.types.setdefault(kind, file)
        if has_negative(tokens):
            self.types.setdefault("negative", file)
        check_types(self.types)
        if isinstance(tokens, np.ndarray):
            if len(tokens):
                self._present |= present_ids(tokens, self.vocab_size)
            return
        self._parts.append(pc.unique(tokens))
        self._held += len(self._parts[-1])
        if self._held > self._COMPACT and len(self._parts) > 1:
            merged = merge_vocabs([Vocab(self._present, p) for p in self._parts]).values
            self._parts, self._held = [merged], len(merged)

    def result(self) -> Vocab:
        """The distinct tokens counted so far."""
        return merge_vocabs([Vocab(self._present, None)] + [Vocab(self._present, p) for p in self._parts])


def check_types(types: dict) -> pa.DataType:
    """The canonical type for tokens of ``types`` (:attr:`VocabCounter.types`: type name -> a
    file holding it).

    Raises
    ------
    InputError
        Integers with strings, or negative ids with ids of ``2**63`` and more, naming a file of each.
    """
    names = set(types) - {"negative"}
    if "large_binary" in names and len(names) > 1:
        other = next(n for n in names if n != "large_binary")
        raise InputError(types["large_binary"], f"tokens of one type across the input (integer tokens in {types[other]})",
                         "string or binary tokens", "write every file's tokens with one type: all integers or all strings")
    if "uint64" in names and "negative" in types:
        raise InputError(types["uint64"], f"integer ids all signed or all unsigned (negative ids in {types['negative']})",
                         "ids of 2**63 or more", "write all ids as signed or all as unsigned 64-bit integers")
    if "large_binary" in names:
        return pa.large_binary()
    return pa.uint64() if "uint64" in names else pa.int64()


def build_token_map(docs: Vocab, queries: Vocab, vocab_size: int, to: pa.DataType) -> TokenMap:
    """The run's :class:`TokenMap` from the docs' and the queries' distinct tokens.

    Parameters
    ----------
    docs, queries : Vocab
    vocab_size : int
        The kernels' dense ids.
    to : pyarrow.DataType
        The tokens' canonical type (:func:`check_types` over both inputs).

    Returns
    -------
    TokenMap
        ``identity`` where every doc token is a small id.
    """
    kind = BYTES if to == pa.large_binary() else INT
    if docs.all_small and kind == INT:
        present = docs.present
        query_small = queries.present & present
        shared = int(query_small.sum())
        if queries.values is not None:
            v = queries.values.to_numpy(zero_copy_only=False)
            inside = v[(v >= 0) & (v < vocab_size)].astype(np.int64)
            extra = np.zeros(vocab_size, dtype=bool)
            extra[inside[present[inside]]] = True
            shared = int((query_small | extra).sum())
        return TokenMap(vocab_size, True, None, present, kind, int(present.sum()), queries.n_distinct(to), shared)
    doc_values = docs.as_values(to)
    query_values = queries.as_values(to)
    shared = query_values.filter(pc.is_in(query_values, value_set=doc_values))
    shared = shared.take(pc.array_sort_indices(shared))
    return TokenMap(vocab_size, False, shared, None, kind, len(doc_values), len(query_values), len(shared))
