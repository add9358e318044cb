"""Threshold tables of a score floor: the least overlap per (query, doc length) that the count
kernel compares its counters with, made on the host side of the search (in CuPy, or NumPy in tests).

Array-module generic (``xp``), so importing this module needs no CuPy.
"""

from __future__ import annotations

import numpy as np

from ..keys import DEFAULT_SCORE, least_overlap

__all__ = ["NEVER_LEN", "floor_tables", "threshold_table_type"]

NEVER_LEN = 255  # kNeverLen in common.cuh: least overlaps are clamped to this (uint8 tables, 8 counter planes)
_NEVER_LEN_13 = 2**13 - 1  # Planes<13>::kNever in bitslice_topk.cu (uint16 tables, 13 planes, max_len <= 4096)


def threshold_table_type(max_len: int) -> tuple[np.dtype, int]:
    """The threshold tables' dtype and clamp (the least overlap no counter reaches) for sets of up to
    ``max_len`` ids: uint8 and 255 for 8 counter planes (``max_len <= 255``), uint16 and 8191 for 13.
    The clamp is the counters' largest value, ``2**planes - 1``."""
    return (np.dtype(np.uint8), NEVER_LEN) if max_len <= NEVER_LEN else (np.dtype(np.uint16), _NEVER_LEN_13)


def floor_tables(xp, floor, query_len, n_len: int, max_len: int, score: str = DEFAULT_SCORE, cosine_keys=None):
    """Threshold tables of the bound ``(T, P) = (floor, 2**31 - 1)``, as ``select_topk`` writes them.

    :func:`settopk.kernels.min_overlap_above` clamped as ``need_overlap`` in
    ``common.cuh`` clamps it (:func:`threshold_table_type`), so the count
    kernel emits exactly the docs with ``key >= floor``. The clamp exceeds
    ``max_len``, so it only marks (query, length) pairs no doc can reach.

    Parameters
    ----------
    xp : module
        ``numpy`` or ``cupy``: where the arrays live and the tables are made.
    floor : array of int64, shape (n_q,)
        Key floor per query, in ``[-1, S]``; ``-1`` gives all-zero tables
        (every doc), like the bound ``T = -1``.
    query_len : array of int, shape (n_q,)
        ``|q|`` per query.
    n_len : int
        Doc lengths ``0 .. n_len - 1`` (the shard's longest doc + 1).
    max_len : int
        Bound on set sizes; fixes the key scale.
    score : str
        One of :data:`settopk.kernels.SCORES`.
    cosine_keys : array of int32, optional
        :func:`settopk.kernels.cosine_key_table` in ``xp``'s memory, for score ``cosine`` (None:
        copied there on each call).

    Returns
    -------
    (thr_ge, thr_gt) : arrays of uint8 (uint16 where ``max_len > 255``), shape (n_q, n_len), C-contiguous
        Least overlap for ``key >= floor`` and for ``key > floor`` per (query,
        doc length), clamped to 255 (8191).
    """
    t = xp.asarray(floor, dtype=xp.int64)[:, None]
    q = xp.asarray(query_len, dtype=xp.int64)[:, None]
    lengths = xp.arange(n_len, dtype=xp.int64)[None, :]
    dtype, never = threshold_table_type(max_len)

    def need_overlap(t):  # least overlap with key > t
        need = least_overlap(xp, t, q, lengths, max_len, score, cosine_keys)
        return xp.ascontiguousarray(xp.minimum(need, never).astype(dtype))

    return need_overlap(t - 1), need_overlap(t)
