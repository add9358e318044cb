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
below the overlap needed. Before ``y``'s count is even read, a posting entry is passed over where
that bound with every earlier token of ``x`` matched, or the bound from the two sets' parity
bitmaps (one word each: :func:`settopk.kernels.join.prepare.parity_bitmaps`; on short sets it is
nearly exact), falls below the need. Verification first bounds the overlap by the count and the
tokens after the prefix that ends at the lower rank, ``x``'s probed one or ``y``'s indexed one:
every common token of a lower rank was counted, as AllPairs' verification starts after the
prefixes. Then it marks the probe's tokens in a byte per rank and counts the candidate's tokens
after the last prefix match (and after its prefix, where that ended first) by lookups, no merge
(every common token before it was counted: both sets are in one order), and stops as soon as the
tokens left cannot reach the need. Prefix filtering and the verification's start: Bayardo, Ma,
Srikant, "Scaling up all pairs similarity search", WWW 2007 (AllPairs).

Probe groups are cut into ranges taken by threads as they free up (``nogil``); each range gets its
own scratch arrays (per index group, its count, length and last match next to its token offset:
one cache line per candidate) from a pool of one per thread.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..numba_heaps import first_at_least

__all__ = ["build_postings", "probe_groups", "self_join_bounds"]

_JIT = {"cache": True, "nogil": True}


@njit(**_JIT)
def build_postings(tokens, offsets, lengths, prefix, n_ranks):
    """Postings of the index groups' prefixes: per token, the (group, position, length) entries, by group.

    Parameters
    ----------
    tokens, offsets, lengths : int32 (n_tokens,), int64 (n_groups,), int32 (n_groups,)
        The index groups' sets (ranks, ascending): group ``g``'s starts at ``tokens[offsets[g]]``;
        lengths below ``2**16`` (sets are at most 4096 tokens).
    prefix : int32 (n_groups,)
        Tokens of each group indexed (its first ``prefix[g]``).
    n_ranks : int
        Bound on the ranks.

    Returns
    -------
    p_off : int64 (n_ranks + 1,)
    p_entry : int64 (n_entries,)
        ``group << 32 | position << 16 | length``: the group, the token's position in it and
        its length, in one word (one write here and one read in the probe, which needs no lookup
        by group while candidates are counted); ordered by group as the words are.
    p_last : int64 (n_groups,)
        ``prefix << 32 | rank``: each group's prefix length and the rank of its last indexed
        token (0 where nothing is indexed), where verification bounds a candidate's overlap.
    """
    n_groups = len(prefix)
    p_off = np.zeros(n_ranks + 1, np.int64)
    p_last = np.zeros(n_groups, np.int64)
    for g in range(n_groups):
        s = offsets[g]
        if prefix[g] > 0:
            p_last[g] = (np.int64(prefix[g]) << 32) | tokens[s + prefix[g] - 1]
        for i in range(prefix[g]):
            p_off[tokens[s + i] + 1] += 1
    for r in range(n_ranks):
        p_off[r + 1] += p_off[r]
    fill = p_off[:-1].copy()
    p_entry = np.empty(p_off[-1], np.int64)
    for g in range(n_groups):
        s = offsets[g]
        word = (np.int64(g) << 32) | np.int64(lengths[g])
        for i in range(prefix[g]):
            t = tokens[s + i]
            p_entry[fill[t]] = word | (np.int64(i) << 16)
            fill[t] += 1
    return p_off, p_entry, p_last


@njit(**_JIT)
def self_join_bounds(g_len, first_l, end_l, probe_prefix):
    """Per group of a self-join, the index groups it probes and the tokens it probes with: the
    groups its length reaches (:func:`settopk.kernels.join.prefixes.length_plan`, ``ordered``),
    those before it only, so that each unordered pair of groups is met once.

    Parameters
    ----------
    g_len : int32 (n_groups,)
        Group lengths, ascending.
    first_l, end_l : int64 (n_lengths,)
        Per length, the first group of the least length it reaches and the end of the groups of
        the greatest (:func:`settopk.kernels.join.prefixes.probe_bounds` of the lengths).
    probe_prefix : int32 (n_lengths,)
        Tokens probed per length.

    Returns
    -------
    first, end, prefix : int32 (n_groups,)
        ``first <= y < end`` the index groups of ``x``; ``prefix`` 0 where there are none.
    """
    n = len(g_len)
    first = np.empty(n, np.int32)
    end = np.empty(n, np.int32)
    prefix = np.empty(n, np.int32)
    for x in range(n):
        length = g_len[x]
        f = first_l[length]
        e = min(end_l[length], x)
        first[x] = f
        end[x] = e
        prefix[x] = probe_prefix[length] if f < e else 0
    return first, end, prefix


@njit(**_JIT)
def _grow(a, n):
    b = np.empty(max(2 * len(a), n), a.dtype)
    b[: len(a)] = a
    return b


@njit(**_JIT)
def _popcount(v):
    """Set bits of a uint64 (the SWAR count; LLVM turns it into one instruction where the CPU has one)."""
    v = v - ((v >> np.uint64(1)) & np.uint64(0x5555555555555555))
    v = (v & np.uint64(0x3333333333333333)) + ((v >> np.uint64(2)) & np.uint64(0x3333333333333333))
    v = (v + (v >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((v * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(**_JIT)
def probe_groups(lo, hi, q_tokens, q_offsets, q_len, q_sig, q_prefix, q_first, q_end,
                 i_tokens, i_sig, need, p_off, p_entry, p_last, state, touched, start, used, mark, limit):
    """Every (probe group, index group) pair of probe groups ``lo .. hi - 1`` whose overlap reaches the need.

    Parameters
    ----------
    lo, hi : int
        The probe groups of this call (ascending by length, as the index groups).
    q_tokens, q_offsets, q_len : int32, int64, int32
        Probe groups' sets (ranks, ascending): each one's start in ``q_tokens`` and its length.
    q_sig, i_sig : uint64 (n_probe,), uint64 (n_index,)
        Both sides' parity bitmaps (:func:`settopk.kernels.join.prepare.parity_bitmaps`): a
        posting entry whose pair's overlap bound from them falls below the need is passed over.
    q_prefix : int32 (n_probe,)
        Tokens of each probe group probed (0: none).
    q_first, q_end : int32 (n_probe,)
        The index groups each probe group may pair with: ``q_first[x] <= y < q_end[x]`` (its
        reachable lengths; in a self-join, ``q_end[x] <= x``).
    i_tokens : int32
        Index groups' sets (groups ascending by length; each one's start is in ``state``).
    need : int32 (max probe length + 1, max index length + 1)
        Least overlap per (probe length, index length); above ``min`` of the two: unreachable.
    p_off, p_entry, p_last
        :func:`build_postings` of the index groups.
    state : int64 (n_index, 2)
        Scratch. Column 0, zero on entry and on return: per candidate, ``count << 32 | |y| << 16 | j``
        (its prefix matches, its length, the position in ``y`` of the last match), -1 once pruned.
        Column 1, read only: each index group's start in ``i_tokens`` (beside column 0: one cache
        line per candidate, counted and verified).
    touched : int32 (n_index + 1,)
        Scratch (one more than the groups: a visit writes its group before knowing it is new).
    start : int64 (n_ranks,)
        Scratch, -1 on entry and on return: per token, where its list's reachable part begins
        (length filtering: the probes come by length, so the start only moves on; AllPairs drops
        the entries too short for every later probe the same way).
    used : int32 (n_ranks,)
        Scratch.
    mark : uint8 (n_ranks,)
        Scratch, zero on entry and on return: the probe group's tokens, while its candidates are verified.
    limit : int
        Stop after the probe group whose pairs bring the count above ``limit`` (-1: no limit); the
        caller sees more than ``limit`` pairs, and the scratch is left clean.

    Returns
    -------
    out_q, out_i : int32 (n_found,)
        Probe and index group of each passing pair.
    out_ov : int32 (n_found,)
        Its overlap.
    """
    out_q = np.empty(1024, np.int32)
    out_i = np.empty(1024, np.int32)
    out_ov = np.empty(1024, np.int32)
    x, n_out, n_used = lo, 0, 0
    while x < hi:
        x, n_out, n_used = _probe_range(x, hi, q_tokens, q_offsets, q_len, q_sig, q_prefix, q_first, q_end, i_tokens,
                                        i_sig, need, p_off, p_entry, p_last, state, touched, start, used, mark,
                                        limit, out_q, out_i, out_ov, n_out, n_used)
        if x < hi:  # group x may find a pair with every index group it reaches
            size = max(2 * len(out_q), n_out + q_end[x] - q_first[x])
            out_q = _grow(out_q, size)
            out_i = _grow(out_i, size)
            out_ov = _grow(out_ov, size)
    for u in range(n_used):
        start[used[u]] = -1
    return out_q[:n_out], out_i[:n_out], out_ov[:n_out]


@njit(**_JIT)
def _probe_range(lo, hi, q_tokens, q_offsets, q_len, q_sig, q_prefix, q_first, q_end, i_tokens, i_sig, need, p_off,
                 p_entry, p_last, state, touched, start, used, mark, limit, out_q, out_i, out_ov, n_out, n_used):
    """:func:`probe_groups` from probe group ``lo``, its pairs written from ``n_out`` on, until ``hi``,
    the limit, or a group that could find more pairs than the out arrays have room for. Returns
    ``(the group to go on from, or hi, n_out, n_used)``: the out arrays are never replaced here,
    so this loop carries no array whose references Numba would count at every group, even at a
    group that probes nothing."""
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
        if n_out + g_hi - g_lo > len(out_q):
            return x, n_out, n_used
        key_lo = np.int64(g_lo) << 32  # the entries of groups g_lo .. g_hi - 1 (build_postings' words)
        key_hi = np.int64(g_hi) << 32
        sx = q_sig[x]
        n_touched = 0
        for i in range(px):
            t = q_tokens[xs + i]
            if t >= n_ranks:  # an id no index set holds (ranked after theirs)
                continue
            end = p_off[t + 1]
            a = start[t]
            if a < 0:
                a = first_at_least(p_entry, p_off[t], end, key_lo)
                used[n_used] = t
                n_used += 1
            elif a > p_off[t] and p_entry[a - 1] >= key_lo:  # a probe of a lower floor (R-S with min_doc_len)
                a = first_at_least(p_entry, p_off[t], a, key_lo)
            else:
                while a < end and p_entry[a] < key_lo:
                    a += 1
            start[t] = a
            rest_x = lx - i - 1
            while a < end:
                e = p_entry[a]
                if e >= key_hi:
                    break
                y = e >> 32
                j = (e >> 16) & 0xFFFF
                ly = e & 0xFFFF
                alpha = need[lx, ly]
                rest = ly - j - 1
                if rest_x < rest:
                    rest = rest_x
                a += 1
                if i + 1 + rest < alpha or lx + ly - _popcount(sx ^ i_sig[y]) < 2 * alpha:
                    # Out of reach whatever the count so far (at most i + 1 matches up to here), or
                    # by the bitmaps' bound on the whole overlap: y's state is not read. Left out, y
                    # is never verified, or verified from a later match with a count too low:
                    # either way it does not pass, as it could not.
                    continue
                st = state[y, 0]
                if st < 0:
                    continue
                touched[n_touched] = y  # kept where y is new (no branch: a new y is anyone's guess)
                n_touched += st == 0
                c = (st >> 32) + 1
                # c + rest bounds the overlap (c <= j + 1 and c <= i + 1): an alpha above either length prunes too
                state[y, 0] = (c << 32) | (np.int64(ly) << 16) | j if c + rest >= alpha else -1
        rx = q_tokens[xs + px - 1]  # the last token x probed with
        if n_touched:
            for a in range(lx):  # x's tokens marked: a candidate's suffix is counted by lookups, no merge
                t = q_tokens[xs + a]
                if t < n_ranks:
                    mark[t] = 1
        for k in range(n_touched):
            y = touched[k]
            st = state[y, 0]
            state[y, 0] = 0
            if st <= 0:  # pruned by the positional filter after its first match (few are: most fail before)
                continue
            ov = st >> 32
            ly = (st >> 16) & 0xFFFF
            alpha = need[lx, ly]
            # Every common token up to the last prefix match is counted (both sets in one order); the
            # ones after it are y's tokens past position j that x holds. Every common token of a rank
            # up to the lower of x's and y's last prefix ranks is counted too (x probed all of its
            # prefix against all of y's): past y's prefix where y's ends first, past x's where x's
            # does. The tokens left on that side bound the overlap before y's tokens are read.
            last = p_last[y]
            py = last >> 32
            b = (st & 0xFFFF) + 1
            if rx >= (last & 0xFFFFFFFF):
                if ov + ly - py < alpha:
                    continue
                b = max(b, py)  # y's prefix tokens after its last match: not x's
            elif ov + lx - px < alpha:
                continue
            ys = state[y, 1]
            # Stop once y's tokens left cannot reach alpha. The tokens a bound of the count so far
            # allows are read in one loop of independent lookups, then the bound is moved on.
            stop = min(ov + ly - alpha + 1, ly)
            while b < stop:
                for c in range(ys + b, ys + stop):
                    ov += mark[i_tokens[c]]
                b = stop
                stop = min(ov + ly - alpha + 1, ly)
            if ov >= alpha:
                out_q[n_out] = x
                out_i[n_out] = y
                out_ov[n_out] = ov
                n_out += 1
        if n_touched:
            for a in range(lx):
                t = q_tokens[xs + a]
                if t < n_ranks:
                    mark[t] = 0
        if 0 <= limit < n_out:  # every scratch but `start` is clean here; the caller resets it
            return hi, n_out, n_used
    return hi, n_out, n_used
