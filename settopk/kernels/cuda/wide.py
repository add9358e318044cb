"""Wide vocabularies on the GPU: doc ids up to ``2**24`` for :class:`settopk.kernels.cuda.CupyShardIndex`.

The count kernel looks each doc id up in a shared-memory table with one word per id, which holds
at most about 54,000 ids (32-bit words, 32 queries per block). A wide shard keeps its layout as
16 + 8 bits per id (``build_layout<unsigned int>`` in ``bitslice_topk.cu``: the plain uint16
layout of the low bits, and one byte per id of bits 16..23 beside it) and is searched one query
batch at a time through the batch's own dense ids:

* the distinct ids of the batch's queries are numbered ``1..n`` in ascending order
  (:func:`batch_dense_ids`); an id that no query of the batch holds is ``0``;
* before the batch's first scan, ``remap_layout`` writes the shard's layout in those numbers into
  a plain uint16 layout (a device map of ``2 (largest doc id + 1)`` bytes gives each id its
  number), and the count kernel runs on it with a table of ``n + 1`` words, as on any narrow shard;
* the cost model routes a whole chunk of queries (``query_batch`` of them) before it is cut into
  batches, and ``layout_postings`` builds the postings of the routed queries' ids from the layout
  once for them (:class:`WidePostings`, in numbers of its own); ``postings_emit`` runs on them as
  on a narrow shard. A batch whose queries all go to the postings skips the remap; a chunk whose
  queries all go there is one batch, neither cut nor numbered (no count kernel runs on it; the rare
  query the postings cannot finish is scanned afterwards, in a batch of its own).

The remapped layout and the chunk's postings are one per shard: where two searches run at once (a
GPU actor runs two calls), their chunks take turns from the routing to the results
(``CupyShardIndex._batch_turn``); without that, one batch's kernels read the layout in the other's
numbers.

Exact: an id that no query of the batch holds can add to no overlap of the batch, and lengths come
from the layout's slot lengths, not from the ids. A batch whose queries hold more distinct ids than
the table fits is cut into smaller ones (:func:`split_by_distinct`). Both steps run on the GPU
(``cupy.unique``): on the host they cost more than the search. The remap reads the whole
layout once per batch (24 bytes and 8 gathers per 8 ids), which the kernel's pass per group of 32
queries amortises.

CuPy is imported inside the functions.
"""

from __future__ import annotations

import numpy as np

from .levels import CHUNK_SLOTS
from .postings import GpuPostings

__all__ = ["TILE_COUNTS_BYTES_PER_DOC", "WideLayout", "WidePostings", "batch_dense_ids", "split_by_distinct"]

_THREADS = 256  # remap_layout
_FILTER_LOG2 = 20  # layout_postings' Bloom filter in shared memory: 2**20 bits (kFilterBits)
_FILTER_BITS = 1 << _FILTER_LOG2
_PASS_THREADS = 1024  # layout_postings (kLayoutPostingsThreads), one block per SM
# Device bytes per doc a wide shard may spend on its postings' counts per (id, tile), which spare each
# chunk's build its counting pass: 2 bytes per (id, tile) is 32 per doc at 2**20 ids over full tiles.
TILE_COUNTS_BYTES_PER_DOC = 32
_UINT32_CURSOR_ENTRIES = 1 << 32  # a build's postings entries below which its cursors are uint32


def batch_dense_ids(tokens, xp=np):
    """The distinct ids of a batch's queries and each token's number among them.

    Parameters
    ----------
    tokens : numpy.ndarray or cupy.ndarray of uint16 or uint32, shape (n_tokens,)
        The batch's query ids, in host memory (``xp`` NumPy) or on the GPU (``xp`` CuPy).
    xp : module, default numpy
        The array module of ``tokens``.

    Returns
    -------
    distinct : array, shape (n_distinct,)
        The distinct ids, ascending, of ``tokens``' dtype (same memory as ``tokens``).
    dense : array of uint16, shape (n_tokens,)
        ``1 + index of tokens[i] in distinct``; 0 is left for the ids no query holds.

    Raises
    ------
    ValueError
        If there are 65,536 distinct ids or more (cut the batch first: :func:`split_by_distinct`).
    """
    distinct, inverse = xp.unique(tokens, return_inverse=True)
    if len(distinct) >= 1 << 16:
        raise ValueError(f"a batch's queries may hold at most 65535 distinct ids, found {len(distinct)}")
    return distinct, (inverse.reshape(-1) + 1).astype(np.uint16)


def split_by_distinct(offsets: np.ndarray, tokens, limit: int, xp=np) -> list[tuple[int, int]]:
    """Cut consecutive sets, in order, into the longest runs that hold at most ``limit`` distinct ids.

    Greedy, one ``unique`` per run: among the ids from a run's first token on, the ``limit + 1``-th
    to appear for the first time ends the run before the set that holds it.

    Parameters
    ----------
    offsets : numpy.ndarray of int64, shape (n_sets + 1,)
        Host CSR offsets of the sets into ``tokens``.
    tokens : numpy.ndarray or cupy.ndarray, shape (n_tokens,)
        Their ids, in host memory (``xp`` NumPy) or on the GPU (``xp`` CuPy).
    limit : int
        Most distinct ids per run; at least the longest set.
    xp : module, default numpy
        The array module of ``tokens``.

    Returns
    -------
    list of (int, int)
        ``(start, stop)`` set numbers of each run, covering ``[0, n_sets)`` in order.
    """
    n_sets = len(offsets) - 1
    runs, lo = [], 0
    while lo < n_sets:
        start = int(offsets[lo])
        distinct, first = xp.unique(tokens[start : int(offsets[-1])], return_index=True)
        if len(distinct) <= limit:
            runs.append((lo, n_sets))
            break
        end = start + int(xp.sort(first)[limit])  # the first token past the run's `limit` ids
        hi = max(lo + 1, int(np.searchsorted(offsets, end, side="right")) - 1)
        runs.append((lo, hi))
        lo = hi
    return runs


class WideLayout:
    """A wide shard's layout (low 16 bits and high bytes) and the batch layout remapped from it.

    Parameters
    ----------
    low : cupy.ndarray of uint32, shape (n_elements, 4)
        The layout of the ids' low 16 bits (``build_layout<unsigned int>``'s ``out``).
    high : cupy.ndarray of uint32, shape (n_elements, 2)
        Bits 16..23 of each id, a byte per id (its ``high``).
    n_ids : int
        Largest doc id + 1: the device map's length.

    Attributes
    ----------
    groups : cupy.ndarray of uint32, shape (n_elements, 4)
        The layout in the batch's numbers once :meth:`rewrite` ran for it, read by the count kernel.
    distinct : cupy.ndarray of uint32, shape (n_distinct,)
        The batch's distinct ids, ascending (:meth:`number`); id ``distinct[i]`` is numbered ``i + 1``.
    n_held : int
        How many of them are below ``n_ids`` (a prefix): the others are in no doc.
    nbytes : int
        Device bytes held: ``24 n_elements + 2 n_ids`` (the plain layout's are ``16 n_elements``).
    """

    def __init__(self, low, high, n_ids: int, kernel):
        import cupy

        self.low = low
        self.high = high
        self.groups = cupy.empty_like(low)
        self.n_ids = max(1, n_ids)
        self._dense = cupy.zeros(self.n_ids, dtype=np.uint16)
        self._kernel = kernel
        self.distinct = cupy.zeros(0, dtype=np.uint32)
        self.n_held = 0
        self._rewritten = True
        self.nbytes = int(low.nbytes + high.nbytes + self.groups.nbytes + self._dense.nbytes)

    def number(self, tokens):
        """Number a batch whose query ids are ``tokens``; :meth:`rewrite` then renumbers the layout.

        Parameters
        ----------
        tokens : cupy.ndarray of uint16 or uint32, shape (n_tokens,)
            The batch's query ids (device), at most 65,535 distinct.

        Returns
        -------
        qtok : cupy.ndarray of uint16, shape (max(1, n_tokens),)
            The queries' ids in the batch's numbers (device), to pass to the kernels for ``tokens``.
        n_words : int
            Table words the count kernel needs: distinct ids + 1.
        """
        import cupy

        self._rewritten = False
        if len(tokens) == 0:
            self.distinct, self.n_held = cupy.zeros(0, dtype=np.uint32), 0
            return cupy.zeros(1, dtype=np.uint16), 1
        self.distinct, dense = batch_dense_ids(tokens, cupy)
        # Ascending, so the ids some doc may hold are a prefix of `distinct`, numbered 1.. as in `dense`.
        self.n_held = int(cupy.searchsorted(self.distinct, self.n_ids))
        return dense, len(self.distinct) + 1

    def rewrite(self) -> None:
        """Write the layout in the batch's numbers into :attr:`groups`, once per :meth:`number`."""
        import cupy

        if self._rewritten:
            return
        self._dense.fill(0)
        self._dense[self.distinct[: self.n_held].astype(np.int64)] = cupy.arange(1, self.n_held + 1, dtype=np.uint16)
        n = len(self.low)
        self._kernel((max(1, min(-(-n // _THREADS), 65535 * 32)),), (_THREADS,),
                     (self.low, self.high, np.int64(n), self._dense, self.groups))
        self._rewritten = True


class WidePostings(GpuPostings):
    """The GPU postings of a wide shard, built for each chunk of queries from its layout.

    Postings over ``2**24`` ids would need a segment per (id, tile), so a wide shard keeps each id's
    doc count (for the cost model), and a chunk of queries that routes some to the postings gets
    postings of those queries' ids, numbered ``1..m`` in ascending order, laid out as a narrow
    shard's: ``layout_postings`` counts the entries of each (number, tile) in a pass over the layout,
    then places them in a second pass; after that ``postings_emit`` runs on them with the queries'
    ids in those numbers (:meth:`numbers`). Where the counts of every (id, tile) fit
    :data:`TILE_COUNTS_BYTES_PER_DOC` (up to about ``2**20`` ids), the shard keeps them from its build
    and each chunk runs the second pass alone. Exact: every doc that holds one of those ids is in its
    postings, which is all ScanCount reads for those queries. One build serves every batch the chunk
    is cut into for the count kernel's table.

    Parameters
    ----------
    layout : WideLayout
        The shard's layout.
    tokens : cupy.ndarray of uint32, shape (n_tokens,)
        The shard's doc ids (device), all below ``layout.n_ids``.
    slots : tuple of cupy.ndarray
        ``(chunk_start, slot_len, slot_pos)``: the layout's chunk starts (int64, in uint4 elements),
        slot lengths (uint16) and positions (int32), as ``CupyShardIndex`` builds them.
    n_docs : int
    kernels : dict of numpy.dtype to cupy.RawKernel
        ``layout_postings`` by the dtype of its cursors (uint32, uint64).
    n_sm : int
        The device's multiprocessors (the passes' grid).

    Attributes
    ----------
    build_passes : int
        Passes over the layout a chunk's build takes: 1 with the counts per (id, tile), else 2.
    nbytes : int
        Device bytes held between batches: ``4 n_ids`` (the docs per id), plus ``2 n_ids n_tiles``
        for the counts per (id, tile) where kept (``4 n_ids n_tiles`` if a tile's docs all hold one
        id). A chunk's postings take ``2`` bytes per entry, ``16`` per (number, tile), and, for the
        counting pass, ``4`` per (number, tile) and ``4 n_ids`` for the map while they are built.
    """

    def __init__(self, layout: WideLayout, tokens, slots: tuple, n_docs: int, kernels: dict, n_sm: int):
        import cupy

        self._start(n_docs)
        self._layout = layout
        self._slots = slots
        self._build_kernels = kernels
        self._grid = max(1, n_sm)  # 128 KiB of filter a block
        self._distinct = cupy.zeros(0, dtype=np.uint32)
        self.n_words = 1
        self.post = cupy.zeros(1, dtype=np.uint16)
        self.seg_start = cupy.zeros(self.n_tiles + 1, dtype=np.int64)
        self._tile_counts = None  # (n_ids, n_tiles): entries per (id, tile), where kept
        if 2 * layout.n_ids * self.n_tiles <= TILE_COUNTS_BYTES_PER_DOC * n_docs:
            counts = cupy.zeros((layout.n_ids + 1) * self.n_tiles, dtype=np.int32)  # row d = id + 1: every id
            every = cupy.arange(1, layout.n_ids + 1, dtype=np.uint32)
            self._pass(cupy.full(_FILTER_BITS // 32, 0xFFFFFFFF, dtype=np.uint32), every, counts, None, fill=False)
            counts = counts[self.n_tiles :].reshape(layout.n_ids, self.n_tiles)
            self._docs_per_id = counts.sum(axis=1, dtype=np.int32)  # the rows' sums: one pass fewer
            self._tile_counts = counts.astype(np.uint16) if int(counts.max()) < 1 << 16 else counts
        else:
            self._docs_per_id = cupy.bincount(tokens, minlength=layout.n_ids).astype(np.int32)
        self.build_passes = 2 if self._tile_counts is None else 1
        kept = 0 if self._tile_counts is None else int(self._tile_counts.nbytes)
        self.nbytes = int(self._docs_per_id.nbytes) + kept

    def query_entries(self, offsets: np.ndarray, tokens) -> np.ndarray:
        """Postings entries of each query's ids (ScanCount's reads): host int64 of shape (n_queries,).

        Parameters
        ----------
        offsets : numpy.ndarray of int64, shape (n_queries + 1,)
            Host CSR offsets of the queries into ``tokens``.
        tokens : cupy.ndarray of uint16 or uint32, shape (n_tokens,)
            Their ids (device), as the shard's docs hold them.
        """
        import cupy

        if len(tokens) == 0:
            return np.zeros(len(offsets) - 1, dtype=np.int64)
        held = tokens < len(self._docs_per_id)
        freq = cupy.where(held, self._docs_per_id[cupy.where(held, tokens, 0).astype(np.int64)], 0)
        csum = cupy.concatenate([cupy.zeros(1, np.int64), cupy.cumsum(freq, dtype=np.int64)])
        at = csum[cupy.asarray(offsets)].get()
        return at[1:] - at[:-1]

    def build(self, ids) -> None:
        """Build the postings of ``ids`` (cupy.ndarray of uint32, device; any order, repeats allowed): the
        ids of the queries routed to them, numbered ``1..m`` in ascending order of the distinct ones."""
        import cupy

        distinct = cupy.unique(ids)
        self._distinct = distinct
        self.n_words = len(distinct) + 1
        held = distinct[distinct < self._layout.n_ids].astype(np.int64)  # a prefix: numbers 1..len(held)
        dense = cupy.zeros(self._layout.n_ids, dtype=np.uint32)
        dense[held] = cupy.arange(1, len(held) + 1, dtype=np.uint32)
        bits = cupy.zeros(_FILTER_BITS, dtype=bool)
        bits[held & (_FILTER_BITS - 1)] = True  # filter_bit(id, 0) and (id, 1) in bitslice_topk.cu
        bits[((held * 2654435761) & 0xFFFFFFFF) >> (32 - _FILTER_LOG2)] = True
        filter_words = (bits.reshape(-1, 32).astype(np.uint32) << cupy.arange(32, dtype=np.uint32)).sum(
            axis=1, dtype=np.uint32)
        self.seg_start = cupy.zeros(self.n_words * self.n_tiles + 1, dtype=np.int64)
        self.post = cupy.zeros(1, dtype=np.uint16)
        counts = cupy.zeros(self.n_words * self.n_tiles, dtype=np.int32)
        if self._tile_counts is None:
            self._pass(filter_words, dense, counts, None, fill=False)
        else:  # rows 1..len(held) are the held ids' counts; the other numbers' segments are empty
            counts[self.n_tiles : self.n_tiles * (len(held) + 1)] = self._tile_counts[held].reshape(-1)
        cupy.cumsum(counts, dtype=np.int64, out=self.seg_start[1:])
        del counts
        n_entries = int(self.seg_start[-1])
        self.post = cupy.empty(max(1, n_entries), dtype=np.uint16)
        cursor = self.seg_start[:-1].astype(np.uint32 if n_entries < _UINT32_CURSOR_ENTRIES else np.uint64)
        self._pass(filter_words, dense, None, cursor, fill=True)

    def numbers(self, tokens):
        """``tokens`` (cupy.ndarray of uint16 or uint32, device) in the numbers of the last :meth:`build`: uint32 of
        the same shape, 0 for an id it was not given (whose postings are empty)."""
        import cupy

        if len(tokens) == 0 or len(self._distinct) == 0:
            return cupy.zeros(max(1, len(tokens)), dtype=np.uint32)
        at = cupy.minimum(cupy.searchsorted(self._distinct, tokens), len(self._distinct) - 1)
        return cupy.where(self._distinct[at] == tokens, at + 1, 0).astype(np.uint32)

    def _pass(self, filter_words, dense, counts, cursor, *, fill: bool) -> None:
        """One launch of ``layout_postings``: add the entries of each segment to ``counts`` (device int32), or
        place them in :attr:`post` at ``cursor`` (device uint32 or uint64, each segment's start; advanced)."""
        import cupy

        chunk_start, slot_len, slot_pos = self._slots
        low, high = self._layout.low, self._layout.high
        n_chunks = -(-self.n_docs // CHUNK_SLOTS)
        if cursor is None:
            cursor = cupy.zeros(1, dtype=np.uint32)
        if counts is None:
            counts = cupy.zeros(1, dtype=np.int32)
        kernel = self._build_kernels[cursor.dtype]
        kernel.max_dynamic_shared_size_bytes = _FILTER_BITS // 8
        kernel((self._grid,), (_PASS_THREADS,),
               (low, high, chunk_start, slot_len, slot_pos, np.int64(n_chunks), np.int64(self.n_docs), filter_words,
                dense, np.int32(self.n_tiles), counts, cursor, self.post, np.int32(fill)),
               shared_mem=_FILTER_BITS // 8)
