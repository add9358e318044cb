"""The compiled emit of the ``cpu`` join: directed group pairs written as set pairs, grouped by
query row, each query's best first (imports Numba; load it lazily).

Every member of a query group holds the same set, so its pairs are one list (the self-join's
member rule aside): each group's list is ordered once (score key descending, the members of the
targets of one key by position), then every query row copies its group's list. Four stages, the
middle three over ranges that threads take (``nogil``), so a join of millions of pairs writes them
on every core:

1. :func:`emit_plan` (one call): the directed pairs bucketed by query group, each group's list
   length;
2. :func:`emit_lists` (groups ``lo .. hi - 1``): the ordered lists;
3. :func:`emit_counts` (groups ``lo .. hi - 1``): the pairs each of their rows keeps (its least
   doc length, the member rule, ``k``);
4. :func:`emit_rows` (rows ``lo .. hi - 1``): the rows' pairs, once the counts are summed.

The directed group pairs (arrays of shape (n_directed,)) are ``dq``, ``dt`` (int32: query group,
target group), ``dov`` (int32: their overlap) and ``dfilt`` (int8: 0, every target member; 1,
the target members above the query member, as a self-join between sets of one length or inside a
group; 2, at or above, ``include_self`` inside a group).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..numba_heaps import first_at_least, score_key

__all__ = ["emit_counts", "emit_lists", "emit_plan", "emit_rows"]

_JIT = {"cache": True, "nogil": True}
_SMALL = 24  # lists this short are ordered by insertion sort


@njit(**_JIT)
def emit_plan(dq, dt, n_groups, t_goff):
    """The directed pairs by query group, and the extent of each group's list.

    Parameters
    ----------
    dq, dt : int32 (n_directed,)
        Query group and target group of each directed pair.
    n_groups : int
        Query groups.
    t_goff : int64 (n_targets + 1,)
        Target groups' member offsets.

    Returns
    -------
    starts : int64 (n_groups + 1,)
        Group ``g``'s directed pairs are ``order[starts[g]:starts[g + 1]]``.
    order : int64 (n_directed,)
    list_len : int64 (n_groups + 1,)
        Group ``g``'s list is ``list_len[g]:list_len[g + 1]`` of the list arrays.
    """
    starts = np.zeros(n_groups + 1, np.int64)
    for p in range(len(dq)):
        starts[dq[p] + 1] += 1
    for g in range(n_groups):
        starts[g + 1] += starts[g]
    fill = starts[:-1].copy()
    order = np.empty(len(dq), np.int64)
    list_len = np.zeros(n_groups + 1, np.int64)
    for p in range(len(dq)):
        order[fill[dq[p]]] = p
        fill[dq[p]] += 1
        list_len[dq[p] + 1] += t_goff[dt[p] + 1] - t_goff[dt[p]]
    for g in range(n_groups):
        list_len[g + 1] += list_len[g]
    return starts, order, list_len


@njit(**_JIT)
def emit_lists(lo, hi, starts, order, dt, dov, dfilt, q_glen, t_goff, t_members, t_glen, score, scale, cosine_keys,
               list_len, list_pos, list_pair, kind):
    """The ordered lists of query groups ``lo .. hi - 1``, written in place.

    Parameters
    ----------
    lo, hi : int
        Query groups of this call.
    starts, order, list_len
        :func:`emit_plan`'s.
    dt, dov, dfilt
        The directed pairs (module docstring).
    q_glen : int32 (n_groups,)
        Query groups' set length.
    t_goff, t_members, t_glen : int64, int64, int32
        Target groups: members (doc positions, ascending) and length.
    score, scale, cosine_keys
        :func:`settopk.kernels.numba_heaps.score_key`'s arguments.
    list_pos : int32 (list_len[-1],)
        Out: each list entry's doc position (a shard holds fewer than ``2**31`` docs).
    list_pair : int64 (list_len[-1],)
        Out: each list entry's directed pair.
    kind : int8 (n_groups,)
        Out: 0, no pair of the group's list needs the member rule; 2, the list is one target
        group's members (by position) under the member rule (a group paired with itself, or one
        pair of groups of one length): a row keeps a suffix of it; 1, else.
    """
    top = np.int64(1) << 32
    most = 0
    for g in range(lo, hi):
        most = max(most, starts[g + 1] - starts[g])
    keys = np.empty(most, np.int64)  # scratch for every group of the call: no allocation per group
    by_key = np.empty(most, np.int64)
    for g in range(lo, hi):
        s, e = starts[g], starts[g + 1]
        kind[g] = 0
        if s == e:
            continue
        for r in range(s, e):
            if dfilt[order[r]] != 0:
                kind[g] = 2 if e - s == 1 else 1
                break
        lq = np.int64(q_glen[g])
        for r in range(s, e):
            p = order[r]
            keys[r - s] = top - score_key(score, scale, cosine_keys, np.int64(dov[p]), lq, np.int64(t_glen[dt[p]]))
        if e - s <= _SMALL:
            _order_small(keys, e - s, by_key)
        else:
            by_key[:e - s] = np.argsort(keys[:e - s], kind="mergesort")
        filled = list_len[g]
        i = 0
        while i < e - s:
            first = filled
            j = i
            while j < e - s and keys[by_key[j]] == keys[by_key[i]]:
                p = order[s + by_key[j]]
                t = dt[p]
                for b in range(t_goff[t], t_goff[t + 1]):
                    list_pos[filled] = t_members[b]
                    list_pair[filled] = p
                    filled += 1
                j += 1
            if j - i > 1:  # targets of one key: their members merged by position
                if filled - first <= _SMALL:
                    _sort_small_pairs(list_pos, list_pair, first, filled)
                else:
                    o = np.argsort(list_pos[first:filled])
                    list_pos[first:filled] = list_pos[first:filled][o]
                    list_pair[first:filled] = list_pair[first:filled][o]
            i = j


@njit(**_JIT)
def emit_counts(lo, hi, q_goff, q_members, kind, floor, k, list_len, list_pos, list_pair, dt, dfilt, t_glen, counts):
    """``counts[a + 1]``: the pairs row ``a`` keeps, for the member rows of query groups ``lo .. hi - 1``.

    By group, not by row: a group with an empty list is passed over (its rows keep the zero
    ``counts`` holds on entry), and the group's list is read once for all its rows (a row's
    group is anywhere in the group arrays: read by row, each row would cost a cache miss, also
    the many rows that pair with nothing).

    Parameters
    ----------
    lo, hi : int
        Query groups of this call.
    q_goff, q_members : int64 (n_groups + 1,), int64 (n_queries,)
        Query groups' members (query rows).
    kind, list_pos, list_pair
        :func:`emit_lists`'s.
    floor : int64 (n_queries,)
        Per query row, the least doc length (0: all).
    k : int
        Pairs kept per row, best first (0: all).
    list_len
        :func:`emit_plan`'s.
    dt, dfilt, t_glen
        As :func:`emit_lists`.
    counts : int64 (n_queries + 1,)
        Zero on entry; out.
    """
    for g in range(lo, hi):
        s, e = list_len[g], list_len[g + 1]
        if s == e:
            continue
        kg = kind[g]
        for m in range(q_goff[g], q_goff[g + 1]):
            a = q_members[m]
            if kg != 1 and floor[a] <= 0:  # every pair of the list is the row's, or those of a suffix
                c = e - _first_kept(kg, a, s, e, list_pos, list_pair, dfilt)
                counts[a + 1] = c if k == 0 or c < k else k
                continue
            c = 0
            for x in range(s, e):
                p = list_pair[x]
                if _kept(dfilt[p], a, list_pos[x], t_glen[dt[p]], floor[a]):
                    c += 1
                    if c == k:
                        break
            counts[a + 1] = c


@njit(**_JIT)
def emit_rows(lo, hi, group_of, kind, floor, list_len, list_pos, list_pair, dt, dov, dfilt, t_glen, doc_ids, offsets,
              base, doc_id, overlap, doc_len):
    """Rows ``lo .. hi - 1``'s pairs, written at ``offsets[a] - base : offsets[a + 1] - base`` (the
    summed counts; ``base`` the first written row's offset where the out arrays hold a range of rows).

    Parameters
    ----------
    lo, hi, group_of, kind, floor, list_len, list_pos, list_pair, dt, dfilt, t_glen
        As :func:`emit_counts`.
    dov : int32 (n_directed,)
        The directed pairs' overlap.
    doc_ids : int64 (n_docs,)
        Doc id by position (ascending).
    offsets : int64 (n_queries + 1,)
        Each row's first pair.
    base : int64
        Subtracted from ``offsets``: the out arrays' first pair.
    doc_id : int64 (n_pairs,)
    overlap, doc_len : int32 (n_pairs,)
        Out.
    """
    for a in range(lo, hi):
        out = offsets[a] - base
        end = offsets[a + 1] - base
        if out == end:  # most rows where most sets pair with nothing: their group is not read
            continue
        g = group_of[a]
        if kind[g] == 2 and floor[a] <= 0:  # a suffix of one target group's members: one overlap and length
            x = _first_kept(2, a, list_len[g], list_len[g + 1], list_pos, list_pair, dfilt)
            p = list_pair[x]
            ov, dl = dov[p], t_glen[dt[p]]
            for i in range(end - out):
                doc_id[out + i] = doc_ids[list_pos[x + i]]
                overlap[out + i] = ov
                doc_len[out + i] = dl
            continue
        if kind[g] == 0 and floor[a] <= 0:
            x = list_len[g]
            last, ov, dl = -1, 0, 0
            while out < end:
                p = list_pair[x]
                if p != last:  # a target group's members come in a run: its overlap and length read once
                    last, ov, dl = p, dov[p], t_glen[dt[p]]
                doc_id[out] = doc_ids[list_pos[x]]
                overlap[out] = ov
                doc_len[out] = dl
                out += 1
                x += 1
            continue
        for x in range(list_len[g], list_len[g + 1]):
            if out == end:
                break
            p = list_pair[x]
            t = dt[p]
            if _kept(dfilt[p], a, list_pos[x], t_glen[t], floor[a]):
                doc_id[out] = doc_ids[list_pos[x]]
                overlap[out] = dov[p]
                doc_len[out] = t_glen[t]
                out += 1


@njit(**_JIT)
def _first_kept(kind, a, lo, hi, list_pos, list_pair, dfilt):
    """The first entry of a list of kind 0 or 2 (:func:`emit_lists`) that row ``a`` keeps: ``lo``
    (kind 0), or the first member above ``a`` (at or above under ``include_self``), by binary search."""
    if kind == 0 or lo == hi:
        return lo
    return first_at_least(list_pos, lo, hi, a + 1 if dfilt[list_pair[lo]] == 1 else a)


@njit(**_JIT)
def _kept(filt, a, b, t_len, floor_a):
    """Whether target member ``b`` is a pair of query member ``a``: the self-join's member rule
    (``filt`` 1: ``b > a``; 2: ``b >= a``) and the query's least doc length."""
    if t_len < floor_a:
        return False
    if filt == 1:
        return b > a
    if filt == 2:
        return b >= a
    return True


@njit(**_JIT)
def _order_small(keys, n, o):
    """A stable argsort of ``keys[:n]`` into ``o[:n]`` (insertion sort: no merge buffers)."""
    for i in range(n):
        v = keys[i]
        j = i - 1
        while j >= 0 and keys[o[j]] > v:
            o[j + 1] = o[j]
            j -= 1
        o[j + 1] = i


@njit(**_JIT)
def _sort_small_pairs(pos, pair, lo, hi):
    """Sort ``pos[lo:hi]`` ascending in place, ``pair[lo:hi]`` along (insertion sort; the positions are distinct)."""
    for i in range(lo + 1, hi):
        p, q = pos[i], pair[i]
        j = i - 1
        while j >= lo and pos[j] > p:
            pos[j + 1] = pos[j]
            pair[j + 1] = pair[j]
            j -= 1
        pos[j + 1] = p
        pair[j + 1] = q
