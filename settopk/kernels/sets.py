"""Compressed sparse row (CSR) storage for a batch of token-id sets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

__all__ = ["MAX_VOCAB", "NARROW_VOCAB", "SetBatch", "check_shard_docs", "fold_query_ids", "index_ids", "token_dtype"]

#: Dense ids a ``uint16`` token holds: every id below it is stored in 2 bytes (the GPU kernel's limit).
NARROW_VOCAB = 65536
#: Largest ``vocab_size`` of the host backends (``numpy``, ``cpu``): ids up to ``2**24 - 1``, as ``uint32``.
MAX_VOCAB = 1 << 24
_TOKEN_DTYPES = (np.dtype(np.uint16), np.dtype(np.uint32))


def token_dtype(vocab_size: int) -> np.dtype:
    """The token dtype of sets with ids below ``vocab_size``: ``uint16`` up to 65536 ids, else ``uint32``."""
    return np.dtype(np.uint16) if vocab_size <= NARROW_VOCAB else np.dtype(np.uint32)


@dataclass(frozen=True)
class SetBatch:
    """A batch of sorted, duplicate-free token-id sets in CSR layout (host memory).

    Attributes
    ----------
    offsets : numpy.ndarray of int64, shape (n_sets + 1,)
        Set ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``; ``offsets[0] == 0``.
    tokens : numpy.ndarray of uint16 or uint32, shape (n_tokens,)
        Token ids, ascending and distinct within each set: ``uint16`` where every id is below
        65536 (the usual case, and the only width the ``cupy`` backend takes), ``uint32`` otherwise
        (ids below :data:`MAX_VOCAB`, for the ``numpy`` and ``cpu`` backends).
    """

    offsets: np.ndarray
    tokens: np.ndarray

    def __post_init__(self) -> None:
        if self.offsets.dtype != np.int64 or self.offsets.ndim != 1 or len(self.offsets) == 0:
            raise ValueError(f"offsets must be a non-empty 1-D int64 array, found {self.offsets.dtype} {self.offsets.shape}")
        if self.tokens.dtype not in _TOKEN_DTYPES or self.tokens.ndim != 1:
            raise ValueError(f"tokens must be a 1-D uint16 array (ids below 65536) or uint32 array (wider ids), "
                             f"found {self.tokens.dtype} {self.tokens.shape}")
        if self.offsets[0] != 0 or self.offsets[-1] != len(self.tokens):
            raise ValueError("offsets must start at 0 and end at len(tokens)")

    @property
    def n_sets(self) -> int:
        """Number of sets."""
        return len(self.offsets) - 1

    @property
    def wide(self) -> bool:
        """Whether the tokens are ``uint32`` (ids may reach 65536 and beyond)."""
        return self.tokens.dtype == np.uint32

    @property
    def id_bound(self) -> int:
        """One more than the largest id held (0 for no token): the size a lookup table by id needs."""
        return int(self.tokens.max()) + 1 if len(self.tokens) else 0

    @property
    def lengths(self) -> np.ndarray:
        """Set sizes, int64 array of shape ``(n_sets,)``."""
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return self.n_sets

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def take(self, rows: np.ndarray) -> "SetBatch":
        """Sets ``rows`` (int array of shape ``(n_rows,)``) as a new batch, in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.offsets[rows + 1] - self.offsets[rows]  # not self.lengths: O(rows), not O(n_sets)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # Gather every token position of the chosen rows in one vectorised step.
        starts = np.repeat(self.offsets[rows] - offsets[:-1], lengths)
        positions = starts + np.arange(offsets[-1], dtype=np.int64)
        return SetBatch(offsets, self.tokens[positions])

    def slice(self, lo: int, hi: int) -> "SetBatch":
        """Sets ``lo .. hi - 1`` as a new batch that shares this one's tokens (no gather, as :meth:`take` does)."""
        start, end = int(self.offsets[lo]), int(self.offsets[hi])
        return SetBatch(self.offsets[lo : hi + 1] - start, self.tokens[start:end])

    @classmethod
    def concat(cls, batches: Sequence["SetBatch"]) -> "SetBatch":
        """The sets of ``batches``, one batch after the other, as one batch (host memory); ``uint32``
        tokens if any batch's are (the ``uint16`` ones are widened), else ``uint16``."""
        batches = list(batches)
        if not batches:
            return cls(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint16))
        dtype = np.uint32 if any(b.wide for b in batches) else np.uint16
        starts = np.cumsum([0] + [len(b.tokens) for b in batches[:-1]])
        offsets = np.concatenate([batches[0].offsets[:1]] + [b.offsets[1:] + s for b, s in zip(batches, starts)])
        return cls(offsets.astype(np.int64), np.concatenate([b.tokens for b in batches]).astype(dtype, copy=False))

    @classmethod
    def from_lists(cls, sets: Iterable[Sequence[int]], dtype=None) -> "SetBatch":
        """Build from Python iterables of ids; each set is sorted and de-duplicated.

        Parameters
        ----------
        sets : iterable of sequences of int
            Ids in ``[0, 2**24)``.
        dtype : numpy dtype, optional
            ``uint16`` or ``uint32``; default: ``uint16`` where every id is below 65536, else ``uint32``.

        Raises
        ------
        ValueError
            If an id is outside ``[0, 2**24)``, or outside ``[0, 65536)`` with ``dtype`` uint16.
        """
        arrays = [np.unique(np.asarray(list(s), dtype=np.int64)) for s in sets]
        top = max((int(a[-1]) for a in arrays if len(a)), default=-1)
        if dtype is None:
            dtype = token_dtype(top + 1)
        dtype = np.dtype(dtype)
        if dtype not in _TOKEN_DTYPES:
            raise ValueError(f"dtype must be uint16 or uint32, found {dtype}")
        limit = NARROW_VOCAB if dtype == np.uint16 else MAX_VOCAB
        for a in arrays:
            if len(a) and (a[0] < 0 or a[-1] >= limit):
                raise ValueError(f"token ids must be in [0, {limit - 1}] for {dtype} tokens, found {a[0]}..{a[-1]}")
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum([len(a) for a in arrays], out=offsets[1:])
        tokens = np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype)
        return cls(offsets, tokens)

    def to_lists(self) -> list[list[int]]:
        """The sets as Python lists of int."""
        return [self[i].tolist() for i in range(self.n_sets)]


def check_shard_docs(docs: SetBatch, doc_ids, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate a shard's docs and ids for a host index (the NumPy and Numba indexes' shared check).

    Parameters
    ----------
    docs : SetBatch
        The shard's docs, in ``doc_ids`` order.
    doc_ids : array_like of int, shape (n_docs,)
        Global doc ids.
    max_len : int
        Bound on set sizes.

    Returns
    -------
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
    lengths : numpy.ndarray of int64, shape (n_docs,)
        ``docs.lengths``.

    Raises
    ------
    ValueError
        If ``doc_ids`` and ``docs`` differ in length, the shard has ``2**31``
        docs or more, ``doc_ids`` is not strictly increasing, a doc is
        longer than ``max_len``, or a ``uint32`` id is ``2**24`` or more.
    """
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    if len(doc_ids) != docs.n_sets:
        raise ValueError(f"{len(doc_ids)} doc ids for {docs.n_sets} docs")
    if len(doc_ids) >= 2**31:
        raise ValueError(f"a shard holds at most 2**31 - 1 docs, found {len(doc_ids)}; use more shards")
    if np.any(np.diff(doc_ids) <= 0):
        raise ValueError("doc_ids must be strictly increasing")
    if docs.wide and docs.id_bound > MAX_VOCAB:
        raise ValueError(f"a host index takes ids below {MAX_VOCAB} (2**24), found {docs.id_bound - 1}; "
                         "map the tokens to dense ids first (the job's token map does)")
    lengths = docs.lengths
    if len(lengths) and lengths.max() > max_len:
        raise ValueError(f"a doc has {lengths.max()} ids, more than max_len={max_len}")
    return doc_ids, lengths


def index_ids(docs: SetBatch) -> int:
    """The ids a host index's lookup tables cover for ``docs``: 65536 for ``uint16`` docs (today's
    fixed tables), else one more than the largest doc id (a table by id is sized by the ids present,
    not by ``vocab_size``: a 2**24-entry table zeroed per query group would cost more than the search)."""
    return NARROW_VOCAB if not docs.wide else max(docs.id_bound, 1)


def fold_query_ids(queries: SetBatch, n_ids: int) -> SetBatch:
    """``queries`` with every id ``>= n_ids`` (an id no doc of the index holds) replaced by
    ``n_ids + j``, ``j`` its position in its set: the sets stay sorted and distinct, lengths are kept,
    no overlap changes, and every id is below ``n_ids + max_len`` (so tables sized by the docs' ids,
    plus ``max_len``, cover the queries). Returns ``queries`` itself where no id reaches ``n_ids``.

    Parameters
    ----------
    queries : SetBatch
    n_ids : int
        The index's id bound (:func:`index_ids`).

    Returns
    -------
    SetBatch
        ``uint32`` tokens where a folded id is 65536 or more, else the input's dtype.
    """
    if queries.id_bound <= n_ids:
        return queries
    position = np.arange(len(queries.tokens), dtype=np.int64) - np.repeat(queries.offsets[:-1], queries.lengths)
    tokens = np.where(queries.tokens >= n_ids, n_ids + position, queries.tokens)
    dtype = token_dtype(int(tokens.max()) + 1)
    if queries.wide:
        dtype = np.dtype(np.uint32)
    return SetBatch(queries.offsets, tokens.astype(dtype))
