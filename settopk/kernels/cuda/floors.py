"""Threshold tables of a score floor: the least overlap per (query, doc length) that the count
kernel compares its counters with, made on the host side of the search (in CuPy, or NumPy in tests).

Array-module generic (``xp``), so importing this module needs no CuPy.
"""

from __future__ import annotations

from ..keys import DEFAULT_SCORE, least_overlap

__all__ = ["NEVER_LEN", "floor_tables"]

NEVER_LEN = 255  # kNeverLen in common.cuh: least overlaps are clamped to this (uint8 tables, 8 counter planes)


def floor_tables(xp, floor, query_len, n_len: int, max_len: int, score: str = DEFAULT_SCORE):
    """Threshold tables of the bound ``(T, P) = (floor, 2**31 - 1)``, as ``select_topk`` writes them.

    :func:`settopk.kernels.min_overlap_above` clamped to ``kNeverLen``, as
    ``need_overlap`` in ``common.cuh`` computes it, so the count kernel
    emits exactly the docs with ``key >= floor``. Clamping matters only where
    the least overlap exceeds 255, which a floor ``<= max_key`` never asks of a
    reachable (query, length) pair; floors above what the shard can reach are
    skipped before this.

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

    Returns
    -------
    (thr_ge, thr_gt) : arrays of uint8, shape (n_q, n_len), C-contiguous
        Least overlap for ``key >= floor`` and for ``key > floor`` per (query,
        doc length), clamped to 255.
    """
    t = xp.asarray(floor, dtype=xp.int64)[:, None]
    q = xp.asarray(query_len, dtype=xp.int64)[:, None]
    lengths = xp.arange(n_len, dtype=xp.int64)[None, :]

    def need_overlap(t):  # least overlap with key > t
        need = least_overlap(xp, t, q, lengths, max_len, score)
        return xp.ascontiguousarray(xp.minimum(need, NEVER_LEN).astype(xp.uint8))

    return need_overlap(t - 1), need_overlap(t)
