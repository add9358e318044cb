"""Whole-array steps of the array join (:mod:`settopk.kernels.join.arrays`), written once over an array
module ``xp`` (NumPy or CuPy): segment ids, stable sorts, slice cuts, run starts, popcounts and the
copy back to the host. CuPy is imported only where ``xp`` is CuPy.
"""

from __future__ import annotations

import numpy as np

__all__ = ["array_module", "first_above", "host_segments", "marked_segments", "popcount", "run_starts", "segment_ids",
           "slice_cuts", "stable_argsort", "to_host"]


def array_module(backend: str):
    """The array module of ``backend``: :mod:`numpy` for ``"numpy"``, :mod:`cupy` for ``"cupy"``.

    Raises
    ------
    ValueError
        If ``backend`` is neither.
    """
    if backend == "numpy":
        return np
    if backend == "cupy":
        import cupy

        return cupy
    raise ValueError(f"backend must be 'numpy' or 'cupy' for the array join, found {backend!r}")


def host_segments(counts: np.ndarray):
    """For segments of ``counts`` (int64, host): each element's segment and its place in it."""
    counts = np.asarray(counts, dtype=np.int64)
    seg = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    return seg, np.arange(len(seg), dtype=np.int64) - starts[seg]


def segment_ids(xp, counts):
    """For segments of ``counts`` (int64, in ``xp``): each element's segment and its place in it,
    both int64 of shape (counts.sum(),). NumPy repeats; CuPy marks the starts of the non-empty
    segments and takes a running sum (``cupy.repeat`` takes no device array of repeats)."""
    if xp is np:
        return host_segments(counts)
    return marked_segments(xp, counts)


def marked_segments(xp, counts):
    """:func:`segment_ids` by marking segment starts (any ``xp``; the path CuPy takes)."""
    counts = counts.astype(xp.int64)
    ends = xp.cumsum(counts)
    total = int(ends[-1]) if len(counts) else 0
    if total == 0:
        return xp.zeros(0, xp.int64), xp.zeros(0, xp.int64)
    nonempty = xp.flatnonzero(counts > 0)
    starts = (ends - counts)[nonempty]
    mark = xp.zeros(total, xp.int64)
    mark[starts[1:]] = 1
    seg = nonempty[xp.cumsum(mark)]
    return seg, xp.arange(total, dtype=xp.int64) - (ends - counts)[seg]


def stable_argsort(xp, a):
    """Indices sorting ``a`` stably (CuPy's sort is always stable and takes no ``kind``)."""
    return np.argsort(a, kind="stable") if xp is np else xp.argsort(a)


def slice_cuts(xp, ends, boundary, total: int, cap: int) -> tuple[list[int], bool]:
    """Slice bounds over ``[0, total)`` of at most ``cap`` each, at ``boundary`` ends where they fall
    well (``ends[boundary]``: where a probe group's entries end), and whether one cut lies elsewhere."""
    snapped = np.zeros(0, np.int64)
    if total > cap:
        at = ends[boundary]
        targets = xp.arange(1, -(-total // cap), dtype=xp.int64) * cap
        pick = xp.searchsorted(at, targets, side="right") - 1
        snapped = to_host(xp, xp.where(pick >= 0, at[xp.maximum(pick, 0)], 0))
    bounds = np.unique(np.concatenate([[0, total], snapped]))
    cuts, inside = [0], False
    for hi in bounds[1:].tolist():
        while hi - cuts[-1] > cap:
            cuts.append(cuts[-1] + cap)
            inside = True
        cuts.append(hi)
    return cuts, inside


def first_above(xp, ends, v: int) -> int:
    """The first index of the ascending ``ends`` whose value exceeds ``v`` (a host int)."""
    return int(xp.searchsorted(ends, xp.asarray(np.array([v], np.int64)), side="right")[0])


def run_starts(xp, key):
    """Where each run of equal values of the non-empty ``key`` starts (int64 indices)."""
    return xp.flatnonzero(xp.concatenate([xp.ones(1, bool), key[1:] != key[:-1]]))


def to_host(xp, a) -> np.ndarray:
    """``a`` in host memory: itself for NumPy, a staged copy for CuPy (:mod:`settopk.kernels.cuda.copies`)."""
    if xp is np:
        return a
    from ..cuda.copies import to_host as staged_copy

    return staged_copy(a)


def popcount(xp, v):
    """Set bits of each uint64 of ``v``, int64 of its shape (the SWAR count: any NumPy or CuPy)."""
    u = xp.uint64
    v = v - ((v >> u(1)) & u(0x5555555555555555))
    v = (v & u(0x3333333333333333)) + ((v >> u(2)) & u(0x3333333333333333))
    v = (v + (v >> u(4))) & u(0x0F0F0F0F0F0F0F0F)
    return ((v * u(0x0101010101010101)) >> u(56)).astype(xp.int64)
