"""Step 5 of the array join (:mod:`settopk.kernels.join.arrays`): the overlap of two sets'
remainders past their candidate positions, vectorised in NumPy or CuPy, by a binary search of each
token of the shorter remainder inside the other set's row (Bayardo, Ma, Srikant, WWW 2007: the
verification of AllPairs; Xiao et al., WWW 2008: from the positions the prefixes met at)."""

from __future__ import annotations

from .array_ops import first_above, segment_ids, slice_cuts

__all__ = ["member", "remainder_overlaps"]


def remainder_overlaps(xp, probe, index, cand, cap: int):
    """Step 5: ``|x[i:] ∩ y[j:]|`` per candidate, int64 (n_cand,), the shorter remainder looked up
    in the other side's sets; in pieces of at most ``cap`` looked-up tokens.

    Parameters
    ----------
    xp : module
        ``numpy`` or ``cupy``: where the arrays are.
    probe, index : settopk.kernels.join.arrays._Groups
        The two sides' group sets (``tokens``, ``offsets``, ``steps``).
    cand : tuple of int64 arrays of shape (n_cand,)
        ``(x, y, i, j, lx, ly)``: the probe group, the index group, the positions from which their
        remainders start, and their lengths.
    cap : int
        Looked-up tokens per piece, at least 1.

    Returns
    -------
    int64 array of shape (n_cand,), in ``xp``
    """
    x, y, i, j, lx, ly = cand
    rx, ry = lx - i, ly - j
    from_probe = rx <= ry
    work = xp.minimum(rx, ry)
    out = xp.zeros(len(x), xp.int64)
    ends = xp.cumsum(work)
    total = int(ends[-1]) if len(work) else 0
    cuts, _ = slice_cuts(xp, ends, xp.arange(len(work)), total, cap)
    for s, e in zip(cuts[:-1], cuts[1:]):
        a = first_above(xp, ends, s)
        b = first_above(xp, ends, e - 1) + 1
        rows = xp.arange(a, b)
        for side in (True, False):
            r = rows[from_probe[a:b] == side]
            if len(r) == 0:
                continue
            if side:
                src, start, dst, dst_row = probe, probe.offsets[x[r]] + i[r], index, y[r]
            else:
                src, start, dst, dst_row = index, index.offsets[y[r]] + j[r], probe, x[r]
            seg, within = segment_ids(xp, work[r])
            hit = member(xp, dst, dst_row[seg], src.tokens[start[seg] + within])
            sums = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(hit.astype(xp.int64))])
            stop = xp.cumsum(work[r])
            out[r] = sums[stop] - sums[stop - work[r]]
    return out


def member(xp, groups, row, token):
    """Whether ``token`` (int32, ``xp``) is in group ``row``'s set, bool of token's shape: a binary
    search inside each row at once, ``bit_length(longest set)`` vectorised steps (a search confined
    to the row touches a few cache lines, where one over every token of the side would not)."""
    last = len(groups.tokens) - 1
    if last < 0:
        return xp.zeros(len(token), bool)
    lo = groups.offsets[row]
    stop = hi = groups.offsets[row + 1]
    for _ in range(groups.steps):
        mid = (lo + hi) >> 1
        less = groups.tokens[xp.minimum(mid, last)] < token
        active = lo < hi
        lo = xp.where(active & less, mid + 1, lo)
        hi = xp.where(active & ~less, mid, hi)
    return (lo < stop) & (groups.tokens[xp.minimum(lo, last)] == token)
