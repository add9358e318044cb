"""The sets of a join, prepared once: tokens in one global frequency order, identical sets grouped.

**Frequency order.** Every token id is renumbered by its frequency among the docs, rarest first
(ties by the id), and each set is sorted in that order. A set's *prefix*, its first few tokens in
this order, then holds its rarest tokens: the prefix filter probes short posting lists, and a
token held by half the sets is almost never probed (Bayardo, Ma, Srikant, "Scaling up all pairs
similarity search", WWW 2007; Mann, Augsten, Bouros, "An Empirical Evaluation of Set Similarity
Join Techniques", PVLDB 2016). Ids held by no doc come first (frequency 0): they match nothing.

**Identical sets.** Real set data repeats whole sets (RETAIL: 88,162 baskets, 83,490 distinct; the
pairs inside groups of identical sets are 563,005 of the 609,104 pairs at Jaccard 0.7). Sets equal
in length and tokens form one *group*; the join probes and verifies each group once, through its
first member, and expands group pairs into set pairs at the end (GroupJoin: Bouros, Ge,
Mamoulis, "Spatio-textual similarity joins", PVLDB 2012). A 64-bit hash of each set only buckets
the sets; every member of a group is checked equal to the group's first member token by token, so
a hash collision can split a group (two groups with equal sets still join, verified) but never
merge different sets.

Nothing here imports Numba or CuPy: the arrays are host NumPy arrays, vectorised.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..sets import SetBatch

__all__ = ["JoinSets", "extended_rank", "frequency_order", "parity_bitmaps", "prepare_sets"]

_HASH_SEED = 0x5E77_09C  # fixed: groups are a function of the sets alone
_BUCKET_ROWS = 32  # a length held by fewer sets is sorted with the other rare ones (one key sort, not a matrix each)
_CHUNK_TOKENS = 1 << 22  # per-token temporaries (int64 positions, words) are made this many tokens at a time: a
# corpus of 10**8 ids would otherwise hold several 8-byte arrays of its size at once (6.2 GB at 103 M ids)


class JoinSets(NamedTuple):
    """Sets renumbered by a frequency order and grouped when identical (host memory).

    Attributes
    ----------
    tokens : numpy.ndarray of int32, shape (n_tokens,)
        Each set's tokens as ranks of :func:`frequency_order`, ascending within each set.
    offsets : numpy.ndarray of int64, shape (n_sets + 1,)
        Set ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``.
    lengths : numpy.ndarray of int32, shape (n_sets,)
        ``|s|`` per set.
    group_of : numpy.ndarray of int64, shape (n_sets,)
        The group of each set.
    group_offsets : numpy.ndarray of int64, shape (n_groups + 1,)
        Group ``g``'s members are ``group_members[group_offsets[g]:group_offsets[g + 1]]``.
    group_members : numpy.ndarray of int64, shape (n_sets,)
        Set indices, ascending within each group.
    group_rep : numpy.ndarray of int64, shape (n_groups,)
        Each group's first member (its lowest set index), the set that stands for it.
    group_tokens : numpy.ndarray of int32, shape (n_group_tokens,)
        Each group's set (its first member's tokens), the groups one after another in group
        order: a join reads the groups in this order, so their sets lie in it too.
    group_token_offsets : numpy.ndarray of int64, shape (n_groups + 1,)
        Group ``g``'s set is ``group_tokens[group_token_offsets[g]:group_token_offsets[g + 1]]``.
    group_len : numpy.ndarray of int32, shape (n_groups,)
        ``|s|`` of each group's sets.
    group_sig : numpy.ndarray of uint64, shape (n_groups,)
        Each group's parity bitmap: bit ``r % 64`` flipped for each rank ``r`` of its set
        (:func:`parity_bitmaps`).
    """

    tokens: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    group_of: np.ndarray
    group_offsets: np.ndarray
    group_members: np.ndarray
    group_rep: np.ndarray
    group_tokens: np.ndarray
    group_token_offsets: np.ndarray
    group_len: np.ndarray
    group_sig: np.ndarray

    @property
    def n_sets(self) -> int:
        """Sets prepared."""
        return len(self.lengths)

    @property
    def n_groups(self) -> int:
        """Groups of identical sets."""
        return len(self.group_rep)

    @property
    def group_size(self) -> np.ndarray:
        """Members per group, int64 of shape (n_groups,)."""
        return np.diff(self.group_offsets)


def frequency_order(tokens: np.ndarray, n_ids: int) -> np.ndarray:
    """The rank of every id in ``[0, n_ids)`` by its frequency in ``tokens``, rarest first.

    Parameters
    ----------
    tokens : numpy.ndarray of unsigned int, shape (n_tokens,)
        The docs' token ids (each set's ids distinct, so a count is a document frequency).
    n_ids : int
        Bound on the ids ranked (ids of queries too: an id no doc holds ranks first).

    Returns
    -------
    numpy.ndarray of int32, shape (n_ids,)
        ``rank[id]``: a permutation of ``0 .. n_ids - 1``; lower frequency first, then lower id.

    Raises
    ------
    ValueError
        If a token is ``>= n_ids``.
    """
    tokens = np.asarray(tokens)
    if len(tokens) and int(tokens.max()) >= n_ids:
        raise ValueError(f"token ids must be below n_ids = {n_ids}, found {int(tokens.max())}")
    counts = np.zeros(n_ids, np.int64)
    step = max(_CHUNK_TOKENS, n_ids)  # bincount counts in int64 positions: a chunk's, not the corpus's
    for lo in range(0, len(tokens), step):
        counts += np.bincount(tokens[lo:lo + step], minlength=n_ids)
    order = np.argsort(counts, kind="stable")  # stable: equal counts keep id order
    rank = np.empty(n_ids, np.int32)
    rank[order] = np.arange(n_ids, dtype=np.int32)
    return rank


def extended_rank(rank: np.ndarray, id_bound: int) -> np.ndarray:
    """``rank`` extended to ids in ``[len(rank), id_bound)``, which no doc holds: ranked after every
    doc id, in id order (they match nothing; any one order serves both sides of a join)."""
    if id_bound <= len(rank):
        return rank
    return np.concatenate([rank, np.arange(len(rank), id_bound, dtype=np.int32)])


def prepare_sets(sets: SetBatch, rank: np.ndarray) -> JoinSets:
    """``sets`` renumbered by ``rank``, sorted within each set, and grouped when identical.

    Vectorised per length: the sets of one length form an (n_rows, length) matrix, sorted along
    its rows, ordered by a 64-bit hash of each row (the wrapping sum of one random word per rank)
    and compared row against row exactly; the few sets of lengths held by fewer than
    ``_BUCKET_ROWS`` sets are sorted together by one key sort.

    Parameters
    ----------
    sets : SetBatch
        ``n_sets`` sets of distinct ids, each id below ``len(rank)``.
    rank : numpy.ndarray of int32, shape (n_ids,)
        A frequency order (:func:`frequency_order`).

    Returns
    -------
    JoinSets
        Groups ordered by (length, first member); members ascending.

    Raises
    ------
    ValueError
        If a token is ``>= len(rank)``.
    """
    n = sets.n_sets
    offsets = sets.offsets
    lengths = np.diff(offsets).astype(np.int32)
    if len(sets.tokens) and int(sets.tokens.max()) >= len(rank):
        raise ValueError(f"token ids must be below len(rank) = {len(rank)}, found {int(sets.tokens.max())}")
    ranked = rank[sets.tokens].astype(np.int32, copy=False)
    tokens = np.empty(len(ranked), np.int32)
    top = int(lengths.max()) if n else 0
    # Stable by length (a radix sort on 16-bit keys): each length's sets ascending by index.
    by_len = np.argsort(lengths.astype(np.uint16) if top < 65536 else lengths, kind="stable")
    cuts = np.flatnonzero(np.diff(lengths[by_len])) + 1
    starts = np.concatenate([[0], cuts]).astype(np.int64) if n else np.zeros(0, np.int64)
    ends = np.append(cuts, n).astype(np.int64)
    words = np.random.default_rng(_HASH_SEED).integers(0, 2**63, max(len(rank), 1), dtype=np.int64).view(np.uint64)
    # Every token in order of its set's length (one gather): each length's sets are one matrix.
    size_by = lengths[by_len].astype(np.int64)
    flat_start = np.zeros(n + 1, np.int64)
    np.cumsum(size_by, out=flat_start[1:])
    gathered = np.empty(len(ranked), np.int32)
    for first, at in _run_positions(offsets[by_len], size_by):
        gathered[first:first + len(at)] = ranked[at]
    by = np.empty(n, np.int64)  # sets by (length, hash, index): identical sets adjacent
    same = np.zeros(n, bool)  # same[i]: set by[i] equals set by[i - 1]
    rare = []
    for a, b in zip(starts.tolist(), ends.tolist()):
        rows = by_len[a:b]
        size = int(size_by[a])
        if size == 0:
            by[a:b] = rows
            same[a + 1:b] = True
        elif b - a < _BUCKET_ROWS and size > 1:
            rare.append((a, b))
        else:
            m = gathered[flat_start[a]:flat_start[b]].reshape(b - a, size)
            m.sort(axis=1)
            o = _hash_order(m[:, 0].astype(np.uint64) << np.uint64(32) if size == 1 else words[m].sum(axis=1))
            m = m[o]
            by[a:b] = rows[o]
            same[a + 1:b] = (m[1:] == m[:-1]).all(axis=1)
    for first, at in _run_positions(offsets[by_len], size_by):
        tokens[at] = gathered[first:first + len(at)]
    if rare:
        _prepare_rare(rare, by_len, offsets, lengths, ranked, words, tokens, by, same)
    del ranked, gathered  # 8 bytes an id, freed before the groups are made
    return _groups(tokens, offsets, lengths, by, same, by_len)


def parity_bitmaps(tokens: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each set's parity bitmap: bit ``t % 64`` flipped once for each token ``t``.

    Tokens two sets share cancel in the XOR of their bitmaps, and each other token flips one bit,
    so ``popcount(b(x) ^ b(y)) <= |x Δ y|`` and ``|x ∩ y| <= (|x| + |y| - popcount(b(x) ^ b(y))) / 2``:
    an upper bound on the overlap from two words (the bitmap filter: Sandes, Teodoro, Melo,
    "Bitmap filter: speeding up exact set similarity joins with bitwise operations",
    Information Systems 2020). Sets of a few dozen tokens or fewer get it close to exact.

    Parameters
    ----------
    tokens : numpy.ndarray of int, shape (n_tokens,)
        The sets one after another (distinct within each set).
    offsets : numpy.ndarray of int64, shape (n_sets + 1,)
        Set ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``.

    Returns
    -------
    numpy.ndarray of uint64, shape (n_sets,)
    """
    offsets = np.asarray(offsets, np.int64)
    tokens = np.asarray(tokens)
    n = len(offsets) - 1
    sig = np.zeros(n, np.uint64)
    lo = 0
    while lo < n:  # sets lo .. hi - 1: about _CHUNK_TOKENS tokens (one set at least), so the words stay bounded
        hi = min(max(int(np.searchsorted(offsets, offsets[lo] + _CHUNK_TOKENS, side="right")) - 1, lo + 1), n)
        part = offsets[lo:hi + 1]
        filled = np.flatnonzero(np.diff(part) > 0)
        if len(filled):
            bits = np.left_shift(np.uint64(1), (tokens[part[0]:part[-1]] & 63).astype(np.uint64))
            sig[lo + filled] = np.bitwise_xor.reduceat(bits, part[filled] - part[0])
        lo = hi
    return sig


def _prepare_rare(rare, by_len, offsets, lengths, ranked, words, tokens, by, same) -> None:
    """The sets of the lengths held by few sets, sorted by one key sort and grouped, into ``tokens``,
    ``by`` and ``same`` (their slices ``a:b`` of ``by``)."""
    rows = np.concatenate([by_len[a:b] for a, b in rare])
    size = lengths[rows].astype(np.int64)
    pos = np.repeat(offsets[rows] - np.cumsum(size) + size, size) + np.arange(int(size.sum()))
    local = np.repeat(np.arange(len(rows), dtype=np.int64), size)
    n_ranks = max(int(ranked.max()) + 1, 1)
    m = (np.sort(local * n_ranks + ranked[pos]) - local * n_ranks).astype(np.int32)
    tokens[pos] = m
    sums = np.zeros(len(rows), np.uint64)
    sums[:] = np.add.reduceat(words[m], np.cumsum(size) - size)
    first = 0
    for a, b in rare:
        part = rows[first:first + b - a]
        o = _hash_order(sums[first:first + b - a])
        by[a:b] = part[o]
        if b - a > 1:
            same[a + 1:b] = _equal_sets(tokens, offsets, by[a:b - 1], by[a + 1:b])
        first += b - a


def _hash_order(keys: np.ndarray) -> np.ndarray:
    """The order of ``keys`` (uint64, shape (n,)) by their high bits, ties by position: one
    unstable sort of (high bits, position) words, which are distinct. int64 (n,)."""
    bits = max(int(len(keys) - 1).bit_length(), 1)
    low = np.uint64((1 << bits) - 1)
    return (np.sort((keys & ~low) | np.arange(len(keys), dtype=np.uint64)) & low).astype(np.int64)


def _groups(tokens, offsets, lengths, by, same, by_len) -> JoinSets:
    """The groups of identical sets from ``by`` (sets by length, identical ones adjacent, each run
    ascending by index), ``same`` and ``by_len`` (sets by length, then index)."""
    n = len(by)
    run_start = np.flatnonzero(~same)
    run_size = np.diff(np.append(run_start, n))
    reps = by[run_start]  # each run's first member, its least index
    # Groups by (length, first member): the reps in order of (length, index), a stable radix sort.
    is_rep = np.zeros(n, bool)
    is_rep[reps] = True
    group_rep = by_len[is_rep[by_len]]
    group_at = np.empty(n, np.int64)
    group_at[group_rep] = np.arange(len(group_rep))
    new_id = group_at[reps]  # run -> group
    run_of_group = np.empty(len(reps), np.int64)
    run_of_group[new_id] = np.arange(len(reps))
    group_of = np.empty(n, np.int64)
    group_of[by] = np.repeat(new_id, run_size)
    sizes = run_size[run_of_group]
    group_offsets = np.zeros(len(reps) + 1, np.int64)
    np.cumsum(sizes, out=group_offsets[1:])
    group_members = by[np.repeat(run_start[run_of_group] - group_offsets[:-1], sizes) + np.arange(n)]
    glen = lengths[group_rep].astype(np.int64)
    group_token_offsets = np.zeros(len(group_rep) + 1, np.int64)
    np.cumsum(glen, out=group_token_offsets[1:])
    group_tokens = np.empty(int(group_token_offsets[-1]), tokens.dtype)
    for first, at in _run_positions(offsets[group_rep], glen):
        group_tokens[first:first + len(at)] = tokens[at]
    return JoinSets(tokens, offsets, lengths, group_of, group_offsets, group_members, group_rep, group_tokens,
                    group_token_offsets, glen.astype(np.int32), parity_bitmaps(group_tokens, group_token_offsets))


def _run_positions(starts: np.ndarray, sizes: np.ndarray):
    """Runs of positions laid one after another (run ``i``: ``starts[i] .. starts[i] + sizes[i] - 1``),
    yielded as ``(first, at)``: ``at`` (int64) the positions of output places ``first ..
    first + len(at) - 1``, about ``_CHUNK_TOKENS`` at a time (whole runs), never the whole index."""
    sizes = np.asarray(sizes, np.int64)
    ends = np.cumsum(sizes)
    i, n = 0, len(sizes)
    while i < n:
        first = int(ends[i] - sizes[i])
        j = max(int(np.searchsorted(ends, first + _CHUNK_TOKENS, side="right")), i + 1)
        size = sizes[i:j]
        at = np.repeat(starts[i:j] - (ends[i:j] - size), size)
        at += np.arange(first, int(ends[j - 1]), dtype=np.int64)
        yield first, at
        i = j


def _equal_sets(tokens: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether sets ``a[i]`` and ``b[i]`` (of equal length) hold the same tokens, bool (len(a),)."""
    size = (offsets[a + 1] - offsets[a]).astype(np.int64)
    equal = np.ones(len(a), bool)
    if not size.sum():
        return equal
    pair = np.repeat(np.arange(len(a)), size)
    step = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
    differ = tokens[offsets[a][pair] + step] != tokens[offsets[b][pair] + step]
    equal[np.unique(pair[differ])] = False
    return equal
