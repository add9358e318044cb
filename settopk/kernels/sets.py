"""Compressed sparse row (CSR) storage for a batch of token-id sets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

__all__ = ["SetBatch", "check_shard_docs"]


@dataclass(frozen=True)
class SetBatch:
    """A batch of sorted, duplicate-free token-id sets in CSR layout (host memory).

    Attributes
    ----------
    offsets : numpy.ndarray of int64, shape (n_sets + 1,)
        Set ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``; ``offsets[0] == 0``.
    tokens : numpy.ndarray of uint16, shape (n_tokens,)
        Token ids, ascending and distinct within each set.
    """

    offsets: np.ndarray
    tokens: np.ndarray

    def __post_init__(self) -> None:
        if self.offsets.dtype != np.int64 or self.offsets.ndim != 1 or len(self.offsets) == 0:
            raise ValueError(f"offsets must be a non-empty 1-D int64 array, found {self.offsets.dtype} {self.offsets.shape}")
        if self.tokens.dtype != np.uint16 or self.tokens.ndim != 1:
            raise ValueError(f"tokens must be a 1-D uint16 array, found {self.tokens.dtype} {self.tokens.shape}")
        if self.offsets[0] != 0 or self.offsets[-1] != len(self.tokens):
            raise ValueError("offsets must start at 0 and end at len(tokens)")

    @property
    def n_sets(self) -> int:
        """Number of sets."""
        return len(self.offsets) - 1

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

    @classmethod
    def concat(cls, batches: Sequence["SetBatch"]) -> "SetBatch":
        """The sets of ``batches``, one batch after the other, as one batch (host memory)."""
        batches = list(batches)
        if not batches:
            return cls(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint16))
        starts = np.cumsum([0] + [len(b.tokens) for b in batches[:-1]])
        offsets = np.concatenate([batches[0].offsets[:1]] + [b.offsets[1:] + s for b, s in zip(batches, starts)])
        return cls(offsets.astype(np.int64), np.concatenate([b.tokens for b in batches]))

    @classmethod
    def from_lists(cls, sets: Iterable[Sequence[int]]) -> "SetBatch":
        """Build from Python iterables of ids; each set is sorted and de-duplicated.

        Raises
        ------
        ValueError
            If an id is outside ``[0, 65535]``.
        """
        arrays = [np.unique(np.asarray(list(s), dtype=np.int64)) for s in sets]
        for a in arrays:
            if len(a) and (a[0] < 0 or a[-1] > 65535):
                raise ValueError(f"token ids must be in [0, 65535], found {a[0]}..{a[-1]}")
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum([len(a) for a in arrays], out=offsets[1:])
        tokens = np.concatenate(arrays).astype(np.uint16) if arrays else np.zeros(0, np.uint16)
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
        docs or more, ``doc_ids`` is not strictly increasing, or a doc is
        longer than ``max_len``.
    """
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    if len(doc_ids) != docs.n_sets:
        raise ValueError(f"{len(doc_ids)} doc ids for {docs.n_sets} docs")
    if len(doc_ids) >= 2**31:
        raise ValueError(f"a shard holds at most 2**31 - 1 docs, found {len(doc_ids)}; use more shards")
    if np.any(np.diff(doc_ids) <= 0):
        raise ValueError("doc_ids must be strictly increasing")
    lengths = docs.lengths
    if len(lengths) and lengths.max() > max_len:
        raise ValueError(f"a doc has {lengths.max()} ids, more than max_len={max_len}")
    return doc_ids, lengths
