"""The compiled join of the ``cpu`` backend: prefix, length and positional filters over groups of
identical sets, verification that stops as soon as the overlap needed is out of reach (imports
Numba; load it lazily).

One kernel serves the self-join and the R-S join. The *index* side is a list of groups (ordered by
length) whose prefixes are in postings, one list per token, each sorted by group; the *probe* side is
a list of groups probing their own prefixes. A probe group ``x`` reads, for each token of its prefix,
the posting entries of the index groups whose length it can reach (the list is cut at both ends by
a binary search on the groups' lengths, and in a self-join at ``x`` itself, so each unordered pair of
groups is met once). Each candidate group ``y`` keeps a count of the prefix matches and the positions
of the last one; the positional filter (Xiao, Wang, Lin, Yu, "Efficient similarity joins for near
duplicate detection", WWW 2008) drops ``y`` once ``count + 1 + min(|x| - i - 1, |y| - j - 1)`` falls
below the overlap needed. Verification merges the two sets from the positions after the last prefix
match (every common token before them was counted: both sets are in one order), and stops as soon as
the tokens left cannot reach the need. Prefix filtering: Bayardo, Ma, Srikant, WWW 2007 (AllPairs).

Probe groups are cut into ranges taken by threads as they free up (``nogil``); each range gets its
own scratch arrays (count and last positions per index group) from a pool of one per thread.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..numba_heaps import first_at_least, score_key

__all__ = ["build_postings", "emit_by_query", "probe_groups"]

_JIT = {"cache": True, "nogil": True}
_SMALL = 24  # lists this short are ordered by insertion sort


@njit(**_JIT)
def build_postings(tokens, offsets, prefix, n_ranks):
    """Postings of the index groups' prefixes: per token, the (group, position) entries, by group.

    Parameters
    ----------
    tokens, offsets : int32 (n_tokens,), int64 (n_groups,)
        The index groups' sets (ranks, ascending): group ``g``'s starts at ``tokens[offsets[g]]``.
    prefix : int32 (n_groups,)
        Tokens of each group indexed (its first ``prefix[g]``).
    n_ranks : int
        Bound on the ranks.

    Returns
    -------
    p_off : int64 (n_ranks + 1,)
    p_group, p_pos : int32 (n_entries,)
    """
    n_groups = len(prefix)
    p_off = np.zeros(n_ranks + 1, np.int64)
    for g in range(n_groups):
        s = offsets[g]
        for i in range(prefix[g]):
            p_off[tokens[s + i] + 1] += 1
    for r in range(n_ranks):
        p_off[r + 1] += p_off[r]
    fill = p_off[:-1].copy()
    p_group = np.empty(p_off[-1], np.int32)
    p_pos = np.empty(p_off[-1], np.int32)
    for g in range(n_groups):
        s = offsets[g]
        for i in range(prefix[g]):
            t = tokens[s + i]
            p_group[fill[t]] = g
            p_pos[fill[t]] = i
            fill[t] += 1
    return p_off, p_group, p_pos


@njit(**_JIT)
def _grow(a, n):
    b = np.empty(max(2 * len(a), n), a.dtype)
    b[: len(a)] = a
    return b


@njit(**_JIT)
def probe_groups(lo, hi, q_tokens, q_offsets, q_len, q_prefix, q_first, q_end,
                 i_tokens, i_offsets, i_len, need, p_off, p_group, p_pos, state, touched, start, used):
    """Every (probe group, index group) pair of probe groups ``lo .. hi - 1`` whose overlap reaches the need.

    Parameters
    ----------
    lo, hi : int
        The probe groups of this call (ascending by length, as the index groups).
    q_tokens, q_offsets, q_len : int32, int64, int32
        Probe groups' sets (ranks, ascending): each one's start in ``q_tokens`` and its length.
    q_prefix : int32 (n_probe,)
        Tokens of each probe group probed (0: none).
    q_first, q_end : int32 (n_probe,)
        The index groups each probe group may pair with: ``q_first[x] <= y < q_end[x]`` (its
        reachable lengths; in a self-join, ``q_end[x] <= x``).
    i_tokens, i_offsets, i_len : int32, int64, int32
        Index groups' sets, starts and lengths (groups ascending by length).
    need : int32 (max probe length + 1, max index length + 1)
        Least overlap per (probe length, index length); above ``min`` of the two: unreachable.
    p_off, p_group, p_pos
        :func:`build_postings` of the index groups.
    state : int64 (n_index,)
        Scratch, zero on entry and on return: per candidate, ``count << 32 | i << 16 | j`` (its
        prefix matches and the positions of the last one; one word, one cache miss), -1 once pruned.
    touched : int32 (n_index,)
        Scratch.
    start : int64 (n_ranks,)
        Scratch, -1 on entry and on return: per token, where its list's reachable part begins
        (length filtering: the probes come by length, so the start only moves on; AllPairs drops
        the entries too short for every later probe the same way).
    used : int32 (n_ranks,)
        Scratch.

    Returns
    -------
    out_q, out_i : int32 (n_found,)
        Probe and index group of each passing pair.
    out_ov : int32 (n_found,)
        Its overlap.
    """
    cap = 1024
    out_q = np.empty(cap, np.int32)
    out_i = np.empty(cap, np.int32)
    out_ov = np.empty(cap, np.int32)
    n_out = 0
    n_used = 0
    n_ranks = len(p_off) - 1
    for x in range(lo, hi):
        px = q_prefix[x]
        if px <= 0:
            continue
        lx = q_len[x]
        xs = q_offsets[x]
        g_lo = q_first[x]
        g_hi = q_end[x]
        if g_lo >= g_hi:
            continue
        need_x = need[lx]
        n_touched = 0
        for i in range(px):
            t = q_tokens[xs + i]
            if t >= n_ranks:  # an id no index set holds (ranked after theirs)
                continue
            end = p_off[t + 1]
            a = start[t]
            if a < 0:
                a = first_at_least(p_group, p_off[t], end, g_lo)
                used[n_used] = t
                n_used += 1
            elif a > p_off[t] and p_group[a - 1] >= g_lo:  # a probe of a lower floor (R-S with min_doc_len)
                a = first_at_least(p_group, p_off[t], a, g_lo)
            else:
                while a < end and p_group[a] < g_lo:
                    a += 1
            start[t] = a
            while a < end:
                y = p_group[a]
                if y >= g_hi:
                    break
                j = p_pos[a]
                a += 1
                st = state[y]
                if st < 0:
                    continue
                c = st >> 32
                ly = i_len[y]
                alpha = need_x[ly]
                rest = lx - i - 1
                if ly - j - 1 < rest:
                    rest = ly - j - 1
                if st == 0:
                    touched[n_touched] = y
                    n_touched += 1
                if c + 1 + rest < alpha or alpha > ly or alpha > lx:
                    state[y] = -1
                    continue
                state[y] = ((c + 1) << 32) | (np.int64(i) << 16) | j
        for k in range(n_touched):
            y = touched[k]
            st = state[y]
            state[y] = 0
            if st <= 0:
                continue
            ov = st >> 32
            ly = i_len[y]
            alpha = need_x[ly]
            a = ((st >> 16) & 0xFFFF) + 1
            b = (st & 0xFFFF) + 1
            ys = i_offsets[y]
            while a < lx and b < ly:
                rest = lx - a
                if ly - b < rest:
                    rest = ly - b
                if ov + rest < alpha:
                    break
                ta = q_tokens[xs + a]
                tb = i_tokens[ys + b]
                if ta == tb:
                    ov += 1
                    a += 1
                    b += 1
                elif ta < tb:
                    a += 1
                else:
                    b += 1
            if ov >= alpha:
                if n_out == len(out_q):
                    out_q = _grow(out_q, n_out + 1)
                    out_i = _grow(out_i, n_out + 1)
                    out_ov = _grow(out_ov, n_out + 1)
                out_q[n_out] = x
                out_i[n_out] = y
                out_ov[n_out] = ov
                n_out += 1
    for u in range(n_used):
        start[used[u]] = -1
    return out_q[:n_out], out_i[:n_out], out_ov[:n_out]


@njit(**_JIT)
def _order_small(keys):
    """A stable argsort of a short int64 array (insertion sort: no merge buffers)."""
    n = len(keys)
    o = np.empty(n, np.int64)
    for i in range(n):
        v = keys[i]
        j = i - 1
        while j >= 0 and keys[o[j]] > v:
            o[j + 1] = o[j]
            j -= 1
        o[j + 1] = i
    return o


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


@njit(**_JIT)
def _by_query_group(n_groups, dq):
    """Directed group pairs bucketed by query group: (starts int64 (n_groups + 1,), order int64)."""
    starts = np.zeros(n_groups + 1, np.int64)
    for p in range(len(dq)):
        starts[dq[p] + 1] += 1
    for g in range(n_groups):
        starts[g + 1] += starts[g]
    fill = starts[:-1].copy()
    order = np.empty(len(dq), np.int64)
    for p in range(len(dq)):
        order[fill[dq[p]]] = p
        fill[dq[p]] += 1
    return starts, order


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
def emit_by_query(n_queries, dq, dt, dov, dfilt, q_goff, q_members, q_glen, t_goff, t_members, t_glen, doc_ids,
                  floor, k, score, scale, cosine_keys):
    """Directed group pairs written as set pairs, grouped by query row, each query's best first.

    Every member of a query group holds the same set, so its pairs are one list (the self-join's
    member rule aside): each group's list is ordered once (key descending, the members of the
    targets of one key by position), then every query row copies its group's list. One thread
    (``nogil``): a job calls it once per batch of queries, where a parallel region's start costs
    more than it saves.

    Parameters
    ----------
    n_queries : int
        Query rows.
    dq, dt : int32 (n_directed,)
        Query group and target group of each directed group pair.
    dov : int32 (n_directed,)
        Their overlap.
    dfilt : int8 (n_directed,)
        0: every target member; 1: target members above the query member (a self-join between
        sets of one length, or inside a group); 2: at or above (``include_self`` inside a group).
    q_goff, q_members, q_glen : int64, int64, int32
        Query groups: members (query rows, ascending) and length.
    t_goff, t_members, t_glen : int64, int64, int32
        Target groups: members (doc positions, ascending) and length.
    doc_ids : int64 (n_docs,)
        Doc id by position (ascending).
    floor : int64 (n_queries,)
        Per query row, the least doc length (0: all).
    k : int
        Pairs kept per query, best first (0: all).
    score, scale, cosine_keys
        :func:`settopk.kernels.numba_heaps.score_key`'s arguments.

    Returns
    -------
    offsets : int64 (n_queries + 1,)
    doc_id : int64 (n_pairs,)
    overlap, doc_len : int32 (n_pairs,)
    """
    n_groups = len(q_glen)
    starts, order = _by_query_group(n_groups, dq)
    list_len = np.zeros(n_groups + 1, np.int64)
    for g in range(n_groups):
        size = 0
        for r in range(starts[g], starts[g + 1]):
            t = dt[order[r]]
            size += t_goff[t + 1] - t_goff[t]
        list_len[g + 1] = size
    for g in range(n_groups):
        list_len[g + 1] += list_len[g]
    list_pos = np.empty(list_len[-1], np.int32)  # doc positions: a shard holds fewer than 2**31 docs
    list_pair = np.empty(list_len[-1], np.int64)
    top = np.int64(1) << 32
    plain = np.ones(n_groups, np.bool_)  # no pair of the group's list needs the member rule
    for g in range(n_groups):
        s, e = starts[g], starts[g + 1]
        if s == e:
            continue
        for r in range(s, e):
            if dfilt[order[r]] != 0:
                plain[g] = False
                break
        lq = np.int64(q_glen[g])
        keys = np.empty(e - s, np.int64)
        for r in range(s, e):
            p = order[r]
            keys[r - s] = top - score_key(score, scale, cosine_keys, np.int64(dov[p]), lq, np.int64(t_glen[dt[p]]))
        by_key = _order_small(keys) if e - s <= _SMALL else np.argsort(keys, kind="mergesort")
        filled = list_len[g]
        i = 0
        while i < e - s:
            lo = filled
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
                if filled - lo <= _SMALL:
                    _sort_small_pairs(list_pos, list_pair, lo, filled)
                else:
                    o = np.argsort(list_pos[lo:filled])
                    list_pos[lo:filled] = list_pos[lo:filled][o]
                    list_pair[lo:filled] = list_pair[lo:filled][o]
            i = j
    group_of = np.empty(n_queries, np.int64)
    for g in range(n_groups):
        for m in range(q_goff[g], q_goff[g + 1]):
            group_of[q_members[m]] = g
    counts = np.zeros(n_queries + 1, np.int64)
    for a in range(n_queries):
        g = group_of[a]
        if plain[g] and floor[a] <= 0:  # every pair of the list is the row's
            c = list_len[g + 1] - list_len[g]
            counts[a + 1] = c if k == 0 or c < k else k
            continue
        c = 0
        for x in range(list_len[g], list_len[g + 1]):
            p = list_pair[x]
            if _kept(dfilt[p], a, list_pos[x], t_glen[dt[p]], floor[a]):
                c += 1
                if c == k:
                    break
        counts[a + 1] = c
    for a in range(n_queries):
        counts[a + 1] += counts[a]
    n = counts[-1]
    doc_id = np.empty(n, np.int64)
    overlap = np.empty(n, np.int32)
    doc_len = np.empty(n, np.int32)
    for a in range(n_queries):
        g = group_of[a]
        out = counts[a]
        end = counts[a + 1]
        if plain[g] and floor[a] <= 0:
            x = list_len[g]
            while out < end:
                p = list_pair[x]
                doc_id[out] = doc_ids[list_pos[x]]
                overlap[out] = dov[p]
                doc_len[out] = t_glen[dt[p]]
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
    return counts, doc_id, overlap, doc_len
