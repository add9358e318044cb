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

Exact: an id that no query of the batch holds can add to no overlap of the batch, and lengths come
from the layout's slot lengths, not from the ids. A batch whose queries hold more distinct ids than
the table fits is cut into smaller ones (:func:`split_by_distinct`). The remap reads the whole
layout once per batch (24 bytes and 8 gathers per 8 ids), which the kernel's pass per group of 32
queries amortises.

CuPy is imported inside the functions.
"""

from __future__ import annotations

import numpy as np

from ..sets import SetBatch

__all__ = ["WideLayout", "batch_dense_ids", "split_by_distinct"]

_THREADS = 256  # remap_layout


def batch_dense_ids(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ids of a batch's queries and each token's number among them.

    Parameters
    ----------
    tokens : numpy.ndarray of uint16 or uint32, shape (n_tokens,)
        The batch's query ids (host).

    Returns
    -------
    distinct : numpy.ndarray, shape (n_distinct,)
        The distinct ids, ascending, of ``tokens``' dtype.
    dense : numpy.ndarray of uint16, shape (n_tokens,)
        ``1 + index of tokens[i] in distinct``; 0 is left for the ids no query holds.

    Raises
    ------
    ValueError
        If there are 65,536 distinct ids or more (cut the batch first: :func:`split_by_distinct`).
    """
    distinct, inverse = np.unique(tokens, return_inverse=True)
    if len(distinct) >= 1 << 16:
        raise ValueError(f"a batch's queries may hold at most 65535 distinct ids, found {len(distinct)}")
    return distinct, (inverse.reshape(-1) + 1).astype(np.uint16)


def split_by_distinct(queries: SetBatch, rows: np.ndarray, limit: int) -> list[np.ndarray]:
    """Cut ``rows`` of ``queries``, in order, into runs whose sets hold at most ``limit`` distinct ids.

    Each run is as long as halving allows: a run that holds too many ids is halved until it fits
    (a single set always fits, ``limit`` being at least ``max_len``).

    Parameters
    ----------
    queries : SetBatch
        Host sets.
    rows : numpy.ndarray of int, shape (n_rows,)
        Row numbers of ``queries``.
    limit : int
        Most distinct ids per run, ``>= 1``.

    Returns
    -------
    list of numpy.ndarray
        Consecutive slices of ``rows`` covering it.
    """
    runs, lo = [], 0
    while lo < len(rows):
        n = len(rows) - lo
        while n > 1 and len(np.unique(queries.take(rows[lo : lo + n]).tokens)) > limit:
            n = -(-n // 2)
        runs.append(rows[lo : lo + n])
        lo += n
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

    def remap(self, tokens: np.ndarray):
        """Renumber the layout for a batch whose query ids are ``tokens``.

        Parameters
        ----------
        tokens : numpy.ndarray of uint16 or uint32, shape (n_tokens,)
            The batch's query ids (host), at most 65,535 distinct.

        Returns
        -------
        qtok : cupy.ndarray of uint16, shape (max(1, n_tokens),)
            The queries' ids in the batch's numbers (device), to pass to the kernels for ``tokens``.
        n_words : int
            Table words the count kernel needs: distinct ids + 1.
        """
        import cupy

        distinct, dense = batch_dense_ids(tokens)
        # Ascending, so the ids some doc may hold are a prefix of `distinct`, numbered 1.. as in `dense`.
        held = distinct[distinct < len(self._dense)]
        self._dense.fill(0)
        if len(held):
            self._dense[cupy.asarray(held.astype(np.int64))] = cupy.arange(1, len(held) + 1, dtype=np.uint16)
        n = len(self.low)
        self._kernel((max(1, min(-(-n // _THREADS), 65535 * 32)),), (_THREADS,),
                     (self.low, self.high, np.int64(n), self._dense, self.groups))
        qtok = cupy.asarray(dense) if len(dense) else cupy.zeros(1, dtype=np.uint16)
        return qtok, len(distinct) + 1
