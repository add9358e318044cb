"""The launcher of ``join.cu``: the threshold join's positional and bitmap filters, its one-entry-per-pair
rule and its verification, one GPU thread per candidate entry (the kernel's comment gives the method;
:mod:`settopk.kernels.join.arrays` the join around it). CuPy is imported inside the function.
"""

from __future__ import annotations

import numpy as np

from .modules import load_kernels

__all__ = ["CANDIDATES_PER_SLOT", "LAUNCH_ENTRIES", "MIN_CAPACITY", "verified_pairs"]

#: Candidate entries per launch (threads of one grid): keeps the grid within CUDA's limits.
LAUNCH_ENTRIES = 1 << 30
#: The first launch's output slots: one per this many candidate entries, and at least MIN_CAPACITY.
CANDIDATES_PER_SLOT = 4
MIN_CAPACITY = 1 << 16
_BLOCK = 256
_NAME = "settopk::join_verify"


def verified_pairs(candidates, probe, index, need: np.ndarray, *, capacity: int | None = None, limit: int | None = None):
    """Every (probe group, index group) pair whose overlap reaches the need, exactly, each once.

    Parameters
    ----------
    candidates : tuple of cupy.ndarray
        ``(ends, probe_group, probe_pos, first_posting, posting_group, posting_pos)``: per probe
        entry (a probe group's prefix token with postings in its index range; shape (n_live,)),
        the inclusive running sum of its posting counts (int64, ascending), its group (int32),
        the token's position in the group's set (int32) and its first posting (int64); per
        posting (shape (n_postings,)), the index group (int32) and the token's position in its
        set (int32). Device memory, C-contiguous.
    probe, index : settopk.kernels.join.arrays._Groups
        The two sides' group sets on the device: ``tokens`` int32, ``offsets`` int64, ``lengths``
        int32, ``sig`` uint64 (parity bitmaps).
    need : numpy.ndarray of int32, shape (n_probe_lengths, n_index_lengths)
        Least overlap per pair of lengths (host memory; above their minimum where unreachable).
    capacity : int, optional
        Output slots of the first launch (default: one per :data:`CANDIDATES_PER_SLOT` candidate
        entries, at least :data:`MIN_CAPACITY`);
        a second launch with room for every pair follows where it was short.
    limit : int, optional
        Refuse more pairs than this: the slots never exceed it, and a launch that finds more
        raises instead of a second launch. None: no bound.

    Returns
    -------
    x, y, overlap : cupy.ndarray of int64, shape (n_pairs,)
        Device memory, in no particular order.

    Raises
    ------
    TypeError
        If an array has the wrong dtype or is not contiguous.
    settopk.kernels.join.prefixes.JoinTooLarge
        Past ``limit``.
    """
    import cupy

    ends, probe_group, probe_pos, first_posting, posting_group, posting_pos = candidates
    n_live = len(ends)
    total = int(ends[-1]) if n_live else 0
    if total == 0:
        empty = cupy.zeros(0, cupy.int64)
        return empty, empty, empty
    args = (ends, probe_group, probe_pos, first_posting, posting_group, posting_pos,
            probe.tokens, probe.offsets, probe.lengths, probe.sig, index.tokens, index.offsets, index.lengths, index.sig)
    _check(args, (np.int64, np.int32, np.int32, np.int64, np.int32, np.int32) + (np.int32, np.int64, np.int32, np.uint64) * 2)
    need_d = cupy.asarray(np.ascontiguousarray(need, dtype=np.int32))
    kernel = load_kernels("join.cu", [_NAME], cupy.cuda.Device().id)[_NAME]
    cap = int(capacity) if capacity is not None else max(MIN_CAPACITY, total // CANDIDATES_PER_SLOT)
    if limit is not None:
        cap = min(cap, int(limit))
    while True:
        out = [cupy.empty(max(cap, 1), cupy.int32) for _ in range(3)]
        out_n = cupy.zeros(1, cupy.uint64)
        for begin in range(0, total, LAUNCH_ENTRIES):
            stop = min(begin + LAUNCH_ENTRIES, total)
            grid = -(-(stop - begin) // _BLOCK)
            kernel((grid,), (_BLOCK,), args[:1] + (np.int64(n_live),) + args[1:] + (
                need_d, np.int32(need.shape[1]), np.int64(begin), np.int64(stop), *out, out_n, np.uint64(cap)))
        found = int(out_n[0])
        if found <= cap:
            return tuple(o[:found].astype(cupy.int64) for o in out)
        if limit is not None and found > limit:
            from ..join.prefixes import JoinTooLarge

            raise JoinTooLarge(f"the join has more than {limit} pairs of groups")
        cap = found


def _check(arrays, dtypes) -> None:
    for k, (a, dtype) in enumerate(zip(arrays, dtypes)):
        if a.dtype != dtype or not a.flags.c_contiguous:
            raise TypeError(f"join_verify argument {k}: expected a C-contiguous {np.dtype(dtype)} array, "
                            f"found {a.dtype} (contiguous: {a.flags.c_contiguous})")
