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
from numba import njit, prange

from ..numba_heaps import score_key

__all__ = ["build_postings", "expand_pairs", "order_by_query", "probe_groups", "sort_rows"]

_JIT = {"cache": True, "nogil": True}


@njit(**_JIT)
def build_postings(tokens, offsets, prefix, n_ranks):
    """Postings of the index groups' prefixes: per token, the (group, position) entries, by group.

    Parameters
    ----------
    tokens, offsets : int32 (n_tokens,), int64 (n_groups + 1,)
        The index groups' sets (ranks, ascending), CSR.
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
def _first_at_least(p_group, lo, hi, g):
    """First position in ``p_group[lo:hi]`` (ascending) holding a group ``>= g``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if p_group[mid] < g:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(**_JIT)
def _grow(a, n):
    b = np.empty(max(2 * len(a), n), a.dtype)
    b[: len(a)] = a
    return b


@njit(**_JIT)
def probe_groups(lo, hi, q_tokens, q_offsets, q_len, q_prefix, q_first, q_end,
                 i_tokens, i_offsets, i_len, need, p_off, p_group, p_pos, count, last_i, last_j, touched):
    """Every (probe group, index group) pair of probe groups ``lo .. hi - 1`` whose overlap reaches the need.

    Parameters
    ----------
    lo, hi : int
        The probe groups of this call.
    q_tokens, q_offsets, q_len : int32, int64, int32
        Probe groups' sets (ranks, ascending) and lengths.
    q_prefix : int32 (n_probe,)
        Tokens of each probe group probed (0: none).
    q_first, q_end : int32 (n_probe,)
        The index groups each probe group may pair with: ``q_first[x] <= y < q_end[x]`` (its
        reachable lengths; in a self-join, ``q_end[x] <= x``).
    i_tokens, i_offsets, i_len : int32, int64, int32
        Index groups' sets and lengths (groups ascending by length).
    need : int32 (max probe length + 1, max index length + 1)
        Least overlap per (probe length, index length); above ``min`` of the two: unreachable.
    p_off, p_group, p_pos
        :func:`build_postings` of the index groups.
    count, last_i, last_j : int32 (n_index,)
        Scratch, zero on entry and on return.
    touched : int32 (n_index,)
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
        n_touched = 0
        n_ranks = len(p_off) - 1
        for i in range(px):
            t = q_tokens[xs + i]
            if t >= n_ranks:  # an id no index set holds (ranked after theirs)
                continue
            a = _first_at_least(p_group, p_off[t], p_off[t + 1], g_lo)
            end = p_off[t + 1]
            while a < end:
                y = p_group[a]
                if y >= g_hi:
                    break
                j = p_pos[a]
                a += 1
                c = count[y]
                if c < 0:
                    continue
                ly = i_len[y]
                alpha = need[lx, ly]
                rest = lx - i - 1
                if ly - j - 1 < rest:
                    rest = ly - j - 1
                if c + 1 + rest < alpha or alpha > ly or alpha > lx:
                    if c == 0:
                        touched[n_touched] = y
                        n_touched += 1
                    count[y] = -1
                    continue
                if c == 0:
                    touched[n_touched] = y
                    n_touched += 1
                count[y] = c + 1
                last_i[y] = i
                last_j[y] = j
        for k in range(n_touched):
            y = touched[k]
            c = count[y]
            count[y] = 0
            if c <= 0:
                continue
            ly = i_len[y]
            alpha = need[lx, ly]
            ov = c
            a = last_i[y] + 1
            b = last_j[y] + 1
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
    return out_q[:n_out], out_i[:n_out], out_ov[:n_out]


@njit(cache=True, parallel=True)
def expand_pairs(pair_q, pair_i, pair_ov, mode, starts, q_goff, q_members, i_goff, i_members):
    """Group pairs expanded into set pairs, in parallel.

    Parameters
    ----------
    pair_q, pair_i, pair_ov : int32 (n_group_pairs,)
        Probe group, index group, overlap.
    starts : int64 (n_group_pairs + 1,)
        Output position of each group pair's first set pair (prefix sums of the pair counts).
    q_goff, q_members, i_goff, i_members : int64
        Each side's groups' members (CSR); in a self-join both sides are the same arrays.
    mode : int8 (n_group_pairs,)
        Which set of a pair is the query: 0 the probe member, 1 the index member (a self-join
        whose index group is the shorter), 2 the lower set index (a self-join between groups of
        one length); 3: a group paired with itself (a self-join's identical sets), its
        ``s (s - 1) / 2`` unordered pairs of distinct members, the lower index the query.

    Returns
    -------
    query, doc : int64 (n_pairs,)
        Set indices (rows of the probe and index sides).
    overlap : int32 (n_pairs,)
    """
    n_pairs = starts[-1]
    query = np.empty(n_pairs, np.int64)
    doc = np.empty(n_pairs, np.int64)
    overlap = np.empty(n_pairs, np.int32)
    for p in prange(len(pair_q)):
        out = starts[p]
        xs, xe = q_goff[pair_q[p]], q_goff[pair_q[p] + 1]
        ys, ye = i_goff[pair_i[p]], i_goff[pair_i[p] + 1]
        ov = pair_ov[p]
        m = mode[p]
        if m == 3:
            for a in range(xs, xe):
                for b in range(a + 1, xe):
                    query[out] = q_members[a]  # members ascending: the lower index is the query
                    doc[out] = q_members[b]
                    overlap[out] = ov
                    out += 1
            continue
        for a in range(xs, xe):
            ma = q_members[a]
            for b in range(ys, ye):
                mb = i_members[b]
                if m == 0 or (m == 2 and ma < mb):
                    query[out] = ma
                    doc[out] = mb
                else:
                    query[out] = mb
                    doc[out] = ma
                overlap[out] = ov
                out += 1
    return query, doc, overlap


@njit(cache=True, parallel=True)
def order_by_query(n_queries, query, doc, overlap, query_len, doc_len, score, scale, cosine_keys, n_docs):
    """Pairs grouped by query (CSR), each query's best first: score descending, then doc ascending.

    Parameters
    ----------
    n_queries : int
    query, doc : int64 (n_pairs,)
        Query row and doc position (positions ascend with doc ids).
    overlap : int32 (n_pairs,)
    query_len, doc_len : int32 (n_queries,), (n_docs,)
        Lengths by query row and doc position.
    score, scale, cosine_keys
        The score's code, key scale and cosine key table (:func:`settopk.kernels.numba_heaps.score_key`:
        the exact integer key, below ``2**32``).
    n_docs : int
        Bound on the positions; ``2**32 * n_docs`` must fit in int64 (checked by the caller).

    Returns
    -------
    offsets : int64 (n_queries + 1,)
    doc_out : int64 (n_pairs,)
    overlap_out : int32 (n_pairs,)
    """
    n = len(query)
    offsets = np.zeros(n_queries + 1, np.int64)
    for p in range(n):
        offsets[query[p] + 1] += 1
    for q in range(n_queries):
        offsets[q + 1] += offsets[q]
    fill = offsets[:-1].copy()
    src = np.empty(n, np.int64)
    for p in range(n):
        q = query[p]
        src[fill[q]] = p
        fill[q] += 1
    doc_out = np.empty(n, np.int64)
    overlap_out = np.empty(n, np.int32)
    top = np.int64(1) << 32
    for q in prange(n_queries):
        s, e = offsets[q], offsets[q + 1]
        if e - s == 1:
            doc_out[s] = doc[src[s]]
            overlap_out[s] = overlap[src[s]]
        elif e > s:
            rank_key = np.empty(e - s, np.int64)
            ql = query_len[q]
            for r in range(e - s):
                p = src[s + r]
                key = score_key(score, scale, cosine_keys, np.int64(overlap[p]), np.int64(ql), np.int64(doc_len[doc[p]]))
                rank_key[r] = (top - key) * n_docs + doc[p]
            order = np.argsort(rank_key)
            for r in range(e - s):
                p = src[s + order[r]]
                doc_out[s + r] = doc[p]
                overlap_out[s + r] = overlap[p]
    return offsets, doc_out, overlap_out


@njit(cache=True, parallel=True)
def sort_rows(offsets, values):
    """Each CSR row of ``values`` sorted ascending, in place (rows are short: insertion sort, else ``np.sort``)."""
    for r in prange(len(offsets) - 1):
        s, e = offsets[r], offsets[r + 1]
        if e - s > 32:
            values[s:e] = np.sort(values[s:e])
            continue
        for i in range(s + 1, e):
            v = values[i]
            j = i - 1
            while j >= s and values[j] > v:
                values[j + 1] = values[j]
                j -= 1
            values[j + 1] = v
