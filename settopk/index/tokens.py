"""The exact token dictionary of a :class:`settopk.Index` built over token values.

Docs read as token values (strings, bytes, 64-bit or negative integers: a
:class:`settopk.shards.inputs.vocabulary.WideSets`) are searched through a dictionary of their
distinct values, sorted, each value's dense id its position ``0 .. n_tokens - 1``. A query token
found in the dictionary takes its dense id; one that no doc holds takes ``n_tokens + j``, ``j``
its position in its set (:func:`settopk.kernels.sets.fold_query_ids`): distinct within the set,
held by no doc, so it never adds to an overlap yet counts in ``|q|``. Scores depend on
``|q ∩ d|``, ``|q|`` and ``|d|`` only, so the results are those of the values themselves, as the
job's token map (:class:`settopk.shards.inputs.vocabulary.TokenMap`) gives them. Every dense id is
below ``n_tokens + max_len`` (:attr:`TokenDictionary.vocab_size`).

Nothing here imports Ray, CuPy or Numba.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from settopk.kernels.sets import MAX_VOCAB, NARROW_VOCAB, SetBatch, fold_query_ids
from settopk.shards.inputs import InputError
from settopk.shards.inputs.canonical import canonical
from settopk.shards.inputs.vocabulary import BYTES, INT, WideSets, kind_of_type

__all__ = ["TokenDictionary"]

_INT64_MAX = np.iinfo(np.int64).max
_KINDS = {INT: "integer", BYTES: "string or bytes"}  # how a message names each kind of token


@dataclass(frozen=True, eq=False)
class TokenDictionary:
    """The docs' distinct token values, sorted; a value's dense id is its position.

    Attributes
    ----------
    values : pyarrow.Array
        ``int64``, ``uint64`` (ids of ``2**63`` and more) or ``large_binary`` (strings and bytes),
        the readers' canonical types (:func:`settopk.shards.inputs.vocabulary.values_of`), sorted
        ascending (bytes by their bytes), distinct. Host memory: 8 bytes a value, plus its bytes for
        ``large_binary``.
    vocab_size : int
        The kernels' dense ids lie in ``[0, vocab_size)``: ``len(values) + max_len``, room for
        a query's tokens that no doc holds.
    """

    values: pa.Array
    vocab_size: int

    @property
    def kind(self) -> str:
        """``"integer"`` or ``"bytes"`` (:data:`settopk.shards.inputs.vocabulary.INT` / ``BYTES``)."""
        return kind_of_type(self.values.type)

    @property
    def n_tokens(self) -> int:
        """Distinct doc tokens."""
        return len(self.values)

    @classmethod
    def build(cls, docs: WideSets, max_len: int, source: str) -> tuple["TokenDictionary", SetBatch]:
        """The dictionary of ``docs``' values and the docs as its dense ids.

        Parameters
        ----------
        docs : WideSets
            The docs' token values, each set de-duplicated.
        max_len : int
            The index's ``max_len``: the room kept above the docs' ids for query-only tokens.
        source : str
            The docs' file or kind of input, for the error.

        Returns
        -------
        dictionary : TokenDictionary
        sets : SetBatch
            ``docs``, ids ascending within each set; ``uint16`` where every id is below 65536,
            else ``uint32``.

        Raises
        ------
        InputError
            If ``n_tokens + max_len`` exceeds ``2**24``, the kernels' largest dense id space.
        """
        # One hash pass: the values' dictionary (first-appearance order) and each token's index in it,
        # then the dictionary sorted and the indices renumbered by rank.
        encoded = pc.dictionary_encode(docs.tokens)
        distinct = encoded.dictionary
        n = len(distinct)
        if n + max_len > MAX_VOCAB:
            raise InputError(source, f"at most {MAX_VOCAB - max_len} distinct doc tokens (2**24 dense ids less "
                             f"max_len {max_len}, kept for query tokens no doc holds)", f"{n} distinct tokens",
                             "split the docs into several indexes, merge rare tokens, or lower max_len")
        order = pc.array_sort_indices(distinct).to_numpy(zero_copy_only=False).astype(np.int64)
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n, dtype=np.int64)
        dense = rank[encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)]
        dtype = np.uint16 if n <= NARROW_VOCAB else np.uint32
        lengths, tokens, _ = canonical(dense.astype(dtype), docs.lengths)
        return cls(distinct.take(pa.array(order)), n + max_len), SetBatch(docs.offsets, tokens)

    def queries(self, sets, source: str, names=None) -> SetBatch:
        """Query sets as dense ids of this dictionary, lengths kept.

        Parameters
        ----------
        sets : SetBatch or WideSets
            The queries: a SetBatch's ids are taken as integer token values.
        source : str
            The queries' file or kind of input, for the error.
        names : list of str, optional
            The queries' ids (the error names the query by it; else by its 0-based row).

        Returns
        -------
        SetBatch
            Ids ascending within each set, below :attr:`vocab_size`; ``uint16`` where every id
            is below 65536, else ``uint32``.

        Raises
        ------
        InputError
            For tokens of another kind than the docs' (strings against integers, or the reverse),
            or negative ids with ids of ``2**63`` and more across the docs and the queries.
        """
        lengths, n = sets.lengths, self.n_tokens
        if isinstance(sets, SetBatch):
            values = sets.tokens.astype(np.int64)
            kind = INT
        else:
            values, kind = sets.tokens, kind_of_type(sets.tokens.type)
        if len(values) and kind != self.kind:
            self._refuse(sets, 0, source, names, f"{_KINDS[self.kind]} tokens, as the index's docs hold",
                         f"{_KINDS[kind]} tokens", f"give the queries {_KINDS[self.kind]} tokens, as the docs, "
                         "or build the index over docs with the queries' kind of token")
        if kind == BYTES:
            index = pc.index_in(values, value_set=self.values)  # a hash of the dictionary, built per call
            found = index.is_valid().to_numpy(zero_copy_only=False)
            dense = pc.fill_null(index, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            dense, found = self._int_lookup(values, sets, source, names)
        dense = np.where(found, dense, n).astype(np.uint32)  # n: a placeholder that fold_query_ids numbers
        folded = fold_query_ids(SetBatch(sets.offsets, dense), n)
        top = int(folded.tokens.max()) if len(folded.tokens) else 0
        dtype = np.uint16 if top < NARROW_VOCAB else np.uint32
        lengths, tokens, _ = canonical(folded.tokens.astype(dtype), lengths)
        return SetBatch(sets.offsets, tokens)

    def _int_lookup(self, values, sets, source: str, names) -> tuple[np.ndarray, np.ndarray]:
        """``(position, found)`` of integer query values in the (sorted) integer dictionary."""
        keys = self.values.to_numpy(zero_copy_only=False)
        if not isinstance(values, np.ndarray):
            values = values.to_numpy(zero_copy_only=False)
        found = np.ones(len(values), dtype=bool)
        if len(values) and values.dtype != keys.dtype:
            # int64 against uint64: one side holds ids of 2**63 and more; the job refuses negative
            # ids beside them (no one type holds both), and so does the index.
            signed, unsigned = (values, keys) if values.dtype == np.int64 else (keys, values)
            if len(keys) and len(signed) and signed.min() < 0:
                at = int(np.argmax(values < 0)) if values is signed else int(np.argmax(values > _INT64_MAX))
                self._refuse(sets, at, source, names,
                             "integer ids all signed or all unsigned across the docs and the queries",
                             f"{int(values[at])} beside "
                             + ("ids of 2**63 and more in the docs" if values is signed else "negative ids in the docs"),
                             "write all ids as signed or all as unsigned 64-bit integers")
            if values.dtype == np.uint64:  # int64 keys: values above them are no doc's
                found = values <= _INT64_MAX
                values = np.where(found, values, 0).astype(np.int64)
            else:  # uint64 keys, values all >= 0 (checked above)
                values = values.astype(np.uint64)
        if len(keys) == 0:
            return np.zeros(len(values), dtype=np.int64), np.zeros(len(values), dtype=bool)
        position = np.minimum(np.searchsorted(keys, values), len(keys) - 1)
        found &= keys[position] == values
        return position.astype(np.int64), found

    @staticmethod
    def _refuse(sets, position: int, source: str, names, expected: str, found: str, fix: str) -> None:
        """Raise the InputError for the token at flat ``position`` (its query named or rowed)."""
        row = int(np.searchsorted(sets.offsets, position, side="right")) - 1
        if names is not None:
            raise InputError(source, expected, f"{found} in query {names[row]!r}", fix)
        raise InputError(source, expected, found, fix, row=row)
