"""Local ids of a host index over ``uint32`` docs: the docs' distinct ids, most frequent first.

A host index (``numpy``, ``cpu``) looks every doc id up in a table by id. With ``uint16`` ids
the table has 65536 entries and stays in the L2 cache. Ids below ``2**24`` would make it up to
``2**24`` entries (64 MiB of int32 slots), and with the ids spread over that range (a hashed or
permuted vocabulary) nearly every doc id would miss every cache. So an index over ``uint32``
docs renumbers their ids once, at build: the distinct doc ids by descending doc frequency (ties
by id) become ``0 .. n_local - 1``, so the frequent ids share a few hot cache lines at the front
of the table, and the table has one entry per distinct doc id, not per possible id. Each
search maps its queries' ids the same way (one lookup per id, in a table of 4 bytes per id up to
the largest doc id); an id no doc holds becomes ``n_ids + j`` (``j`` its position in its set), as :func:`settopk.kernels.sets.fold_query_ids`
does. Overlaps and lengths, and so every result, are unchanged: the map is one-to-one on the
docs' ids and sends no other id onto one of them. The queries' sets are re-sorted after the map;
the docs' keep their order (no kernel needs a doc's ids ascending; re-sorting them would add a sort
of every doc id to the build).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .sets import SetBatch, fold_query_ids, token_dtype

__all__ = ["LocalIds", "table_queries"]


def _sorted_sets(offsets: np.ndarray, tokens: np.ndarray, dtype) -> SetBatch:
    """The sets ``offsets``/``tokens`` (int64 ids, distinct per set) with each set sorted, as ``dtype``."""
    lengths = np.diff(offsets)
    set_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    key = (set_of << 32) | tokens.astype(np.int64)
    key.sort()
    return SetBatch(offsets, (key & 0xFFFFFFFF).astype(dtype))


@dataclass(frozen=True)
class LocalIds:
    """The renumbering of a host index's ``uint32`` doc ids (see the module docstring).

    Attributes
    ----------
    by_id : numpy.ndarray of int32, shape (largest doc id + 1,)
        The local id + 1 of each id a doc holds, 0 for the others.
    n_ids : int
        ``max(n_local, 1)``: the local docs' id bound; queries' ids no doc holds are mapped at
        or above it, below ``n_ids + max_len``.
    """

    by_id: np.ndarray
    n_ids: int

    @classmethod
    def of(cls, docs: SetBatch) -> tuple["LocalIds | None", SetBatch]:
        """``(local_ids, local_docs)`` for ``docs``; ``(None, docs)`` for ``uint16`` docs (kept as they are).

        ``local_docs`` has ``uint16`` tokens where the docs hold at most 65536 distinct ids, else ``uint32``.
        """
        if not docs.wide:
            return None, docs
        # Counting by id (ids < 2**24) instead of sorting the docs' ids: O(n_tokens), no sort of them.
        freq = np.bincount(docs.tokens, minlength=1)
        ids = np.flatnonzero(freq)
        order = np.lexsort((ids, -freq[ids]))  # most frequent first, ties by id
        local = np.empty(len(ids), dtype=np.int32)  # local ids < 2**24
        local[order] = np.arange(len(ids), dtype=np.int32)
        by_id = np.zeros(len(freq), dtype=np.int32)
        by_id[ids] = local
        # Each doc keeps its ids' order (ascending by id, not by local id): no kernel needs the
        # docs' sets ascending, and re-sorting them would add a sort of every doc id to the build.
        local_docs = SetBatch(docs.offsets, by_id[docs.tokens].astype(token_dtype(len(ids))))
        # Kept for the queries: one lookup per query id (4 bytes per id up to the largest doc id:
        # a binary search in the distinct ids would miss the cache at each of its ~24 steps).
        by_id[ids] = local + 1  # 0: no doc holds the id
        # Tables cover the local ids only (not 65536 for uint16 local docs: they are ids of this index).
        return cls(by_id, max(len(ids), 1)), local_docs

    def queries(self, queries: SetBatch) -> SetBatch:
        """``queries`` in local ids: a doc's id becomes its local id, any other ``n_ids + j``
        (``j`` its position in its set); each set sorted; ``uint16`` where every id fits, else ``uint32``."""
        if len(queries.tokens) == 0:
            return queries
        tokens = queries.tokens
        found = np.zeros(len(tokens), dtype=np.int64)
        inside = tokens < len(self.by_id)
        found[inside] = self.by_id[tokens[inside]]
        position = np.arange(len(tokens), dtype=np.int64) - np.repeat(queries.offsets[:-1], queries.lengths)
        mapped = np.where(found > 0, found - 1, self.n_ids + position)
        return _sorted_sets(queries.offsets, mapped, token_dtype(int(mapped.max()) + 1))

    @property
    def nbytes(self) -> int:
        """Host bytes of the map."""
        return int(self.by_id.nbytes)


def table_queries(queries: SetBatch, local: "LocalIds | None", n_ids: int) -> SetBatch:
    """``queries`` in the ids of a host index's tables: the local ids of its ``uint32`` docs
    (``local``), else its own ids with the ids no doc holds folded (:func:`settopk.kernels.sets.fold_query_ids`,
    ``n_ids``: the largest doc id + 1). Host memory in and out."""
    if local is not None:
        return local.queries(queries)
    return fold_query_ids(queries, n_ids)
