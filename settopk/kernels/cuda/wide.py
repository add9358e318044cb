"""Wide vocabularies on the GPU: doc ids up to ``2**24`` for :class:`settopk.kernels.cuda.CupyShardIndex`.

The count kernel looks each doc id up in a shared-memory table with one word per id, which holds
at most about 54,000 ids (32-bit words, 32 queries per block). A wide shard keeps its layout as
16 + 8 bits per id (``build_layout<unsigned int>`` in ``bitslice_topk.cu``: the plain uint16
layout of the low bits, and one byte per id of bits 16..23 beside it) and is searched one query
batch at a time through the batch's own dense ids:

* the distinct ids of the batch's queries are numbered ``1..n`` in ascending order
  (:func:`batch_dense_ids`); an id that no query of the batch holds is ``0``;
* ``remap_layout`` writes the shard's layout in those numbers into a plain uint16 layout (a device
  map of ``2 (largest doc id + 1)`` bytes gives each id its number), and the count kernel runs on it
  with a table of ``n + 1`` words, as on any narrow shard.

The remapped layout is one per shard: where two searches run at once (a GPU actor runs two calls),
their batches take turns from the remap to the results (``CupyShardIndex._batch_turn``); without
that, one batch's kernels read the layout in the other's numbers.

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


__all__ = ["WideLayout", "batch_dense_ids", "split_by_distinct"]

_THREADS = 256  # remap_layout


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
        The layout in the last :meth:`remap`'s batch numbers, read by the count kernel.
    nbytes : int
        Device bytes held: ``24 n_elements + 2 n_ids`` (the plain layout's are ``16 n_elements``).
    """

    def __init__(self, low, high, n_ids: int, kernel):
        import cupy

        self.low = low
        self.high = high
        self.groups = cupy.empty_like(low)
        self._dense = cupy.zeros(max(1, n_ids), dtype=np.uint16)
        self._kernel = kernel
        self.nbytes = int(low.nbytes + high.nbytes + self.groups.nbytes + self._dense.nbytes)

    def remap(self, tokens):
        """Renumber the layout for a batch whose query ids are ``tokens``.

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

        if len(tokens) == 0:
            return cupy.zeros(1, dtype=np.uint16), 1
        distinct, dense = batch_dense_ids(tokens, cupy)
        # Ascending, so the ids some doc may hold are a prefix of `distinct`, numbered 1.. as in `dense`.
        n_held = int(cupy.searchsorted(distinct, len(self._dense)))
        self._dense.fill(0)
        self._dense[distinct[:n_held].astype(np.int64)] = cupy.arange(1, n_held + 1, dtype=np.uint16)
        n = len(self.low)
        self._kernel((max(1, min(-(-n // _THREADS), 65535 * 32)),), (_THREADS,),
                     (self.low, self.high, np.int64(n), self._dense, self.groups))
        return dense, len(distinct) + 1
