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

__all__ = ["JoinSets", "frequency_order", "prepare_sets"]

_HASH_SEED = 0x5E77_09C  # fixed: groups are a function of the sets alone


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
    """

    tokens: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    group_of: np.ndarray
    group_offsets: np.ndarray
    group_members: np.ndarray
    group_rep: np.ndarray

    @property
    def n_sets(self) -> int:
        """Sets prepared."""
        return len(self.lengths)

    @property
    def n_groups(self) -> int:
        """Groups of identical sets."""
        return len(self.group_rep)

    @property
    def group_len(self) -> np.ndarray:
        """``|s|`` of each group's sets, int32 of shape (n_groups,)."""
        return self.lengths[self.group_rep]

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
    counts = np.bincount(tokens, minlength=n_ids)
    order = np.argsort(counts, kind="stable")  # stable: equal counts keep id order
    rank = np.empty(n_ids, np.int32)
    rank[order] = np.arange(n_ids, dtype=np.int32)
    return rank


def prepare_sets(sets: SetBatch, rank: np.ndarray, *, rank_rows=None) -> JoinSets:
    """``sets`` renumbered by ``rank``, sorted within each set, and grouped when identical.

    Parameters
    ----------
    sets : SetBatch
        ``n_sets`` sets of distinct ids, each id below ``len(rank)``.
    rank : numpy.ndarray of int32, shape (n_ids,)
        A frequency order (:func:`frequency_order`).
    rank_rows : callable, optional
        ``rank_rows(offsets, tokens, rank, words) -> (ranked, sums)``: each row's ranks sorted and
        its hash, compiled (:func:`settopk.kernels.join.numba_join.rank_rows`); None: NumPy sorts
        and sums, the same arrays.

    Returns
    -------
    JoinSets
        Groups ordered by (length, first member); members ascending.
    """
    n = sets.n_sets
    offsets = sets.offsets
    lengths = np.diff(offsets).astype(np.int32)
    # A set's hash: the sum of one random 64-bit word per token (order-free, wraps mod 2**64).
    words = np.random.default_rng(_HASH_SEED).integers(0, 2**63, len(rank), dtype=np.int64).view(np.uint64)
    if rank_rows is not None:
        tokens, sums = rank_rows(offsets, sets.tokens, rank, words)
    else:
        row = np.repeat(np.arange(n, dtype=np.int64), lengths)
        tokens = (np.sort(row * len(rank) + rank[sets.tokens]) - row * len(rank)).astype(np.int32)
        sums = _segment_sums(np.zeros(n, np.uint64), words[tokens], offsets, lengths)
    # Sets by (length, hash), stable (index order within a tie): 24 bits of length, 39 of hash.
    by = np.argsort((lengths.astype(np.int64) << 39) | (sums >> np.uint64(25)).astype(np.int64), kind="stable")
    same = np.zeros(n, bool)  # same[i]: set by[i] equals set by[i - 1]
    if n > 1:
        maybe = np.flatnonzero((lengths[by[1:]] == lengths[by[:-1]]) & (sums[by[1:]] == sums[by[:-1]])) + 1
        same[maybe[_equal_sets(tokens, offsets, by[maybe - 1], by[maybe])]] = True
    starts = np.flatnonzero(~same)  # runs of equal sets in `by`, each ascending by set index
    sizes = np.diff(np.append(starts, n))
    group_rep = by[starts]
    group_order = np.argsort(lengths[group_rep].astype(np.int64) * max(n, 1) + group_rep, kind="stable")
    new_id = np.empty(len(starts), np.int64)
    new_id[group_order] = np.arange(len(starts))
    group_of = np.empty(n, np.int64)
    group_of[by] = new_id[np.cumsum(~same) - 1]
    group_offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(sizes[group_order], out=group_offsets[1:])
    step = np.arange(n, dtype=np.int64) - np.repeat(group_offsets[:-1], sizes[group_order])
    group_members = by[np.repeat(starts[group_order], sizes[group_order]) + step]
    return JoinSets(tokens, offsets, lengths, group_of, group_offsets, group_members, group_rep[group_order])


def _segment_sums(out: np.ndarray, values: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per-set wrapping sums of ``values`` (uint64), empty sets 0, into ``out``."""
    nonempty = lengths > 0
    if nonempty.any():
        out[nonempty] = np.add.reduceat(values, offsets[:-1][nonempty])
    return out


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
