"""Per length, what a join's filters allow: the least overlap, the prefix lengths, the lengths reachable.

Everything follows from the exact need table (:func:`settopk.kernels.threshold.need_table`): a
pair of lengths ``(|q|, |d|)`` can pass only where ``need <= min(|q|, |d|)`` (length filter), and a
pair whose overlap reaches ``a`` shares a token between the first ``|q| - a + 1`` tokens of ``q``
and the first ``|d| - a + 1`` of ``d`` in one global order (prefix filter: Chaudhuri, Ganti,
Kaushik, ICDE 2006). A probe set takes ``a`` as its least need over the lengths it can reach, an
indexed set its least need over the probe lengths that can reach it. Host NumPy, no Numba.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..threshold import need_table

__all__ = ["JoinTooLarge", "LengthPlan", "check_pairs", "checked_floor", "group_join_threshold", "inside_groups", "join_applies",
           "length_bounds", "length_plan", "positive_threshold", "probe_bounds", "self_passing"]


class JoinTooLarge(RuntimeError):
    """A join through groups would hold more than its caller's bound (``max_entries`` pairs of
    groups, or list entries): the caller takes the exact path that holds less (a shard probes its
    own docs batch by batch, ``--dedup`` reads the pairs back)."""


def check_pairs(n_pairs: int, max_pairs: int | None) -> None:
    """Raise :class:`JoinTooLarge` where ``n_pairs`` (a count, or a bound of it) passes
    ``max_pairs`` (None: no bound); the message gives the count."""
    if max_pairs is not None and n_pairs > max_pairs:
        raise JoinTooLarge(f"the self-join has {n_pairs} pairs, more than max_pairs={max_pairs}")


class LengthPlan(NamedTuple):
    """The filters per length (host memory).

    Attributes
    ----------
    need : numpy.ndarray of int32, shape (n_probe_lengths, n_index_lengths)
        Least overlap per (probe length, index length) where both are present; ``max_len + 1``
        (above ``min`` of the two: unreachable) where either is absent or no overlap reaches ``T``.
    probe_prefix : numpy.ndarray of int32, shape (n_probe_lengths,)
        Tokens a probe set of each length probes (0: it reaches no length).
    index_prefix : numpy.ndarray of int32, shape (n_index_lengths,)
        Tokens an index set of each length puts in the postings (0: no probe reaches it).
    lo, hi : numpy.ndarray of int64, shape (n_probe_lengths,)
        The least and greatest index length each probe length reaches (``lo > hi``: none).
    """

    need: np.ndarray
    probe_prefix: np.ndarray
    index_prefix: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def join_applies(threshold) -> bool:
    """Whether prefix filtering can find every passing pair: only where ``T > 0`` (at ``T == 0``
    every pair passes, disjoint ones too, and the need is 0)."""
    return threshold > 0


def length_plan(threshold, score: str, max_len: int, probe_lengths, index_lengths, *, ordered: bool) -> LengthPlan:
    """The filters of a join between sets of the given lengths.

    Parameters
    ----------
    threshold : fractions.Fraction
        ``T > 0``.
    score : str
        One of :data:`settopk.kernels.SCORES`.
    max_len : int
        Bound on set sizes (the key scale).
    probe_lengths : array_like of int
        Lengths present among the probe sets (the index prefixes are sized for them).
    index_lengths : array_like of int
        Lengths present among the index sets.
    ordered : bool
        A self-join over one corpus of groups of identical sets
        (:mod:`settopk.kernels.join.prepare`): a probe pairs only with index groups no longer
        than itself, and none of its own length where that length needs all its tokens (two sets
        of one length sharing all their tokens are identical, one group; at high thresholds most
        short sets, which then probe nothing and are indexed for no probe).

    Returns
    -------
    LengthPlan
        Indexed by length: rows ``0 .. max(probe_lengths)``, columns ``0 .. max(index_lengths)``.
    """
    present_p = _present(probe_lengths)
    present_i = _present(index_lengths)
    n_p, n_i = len(present_p), len(present_i)
    # Every step runs over the present lengths only (rows x cols): long sets have thousands of
    # possible lengths, of which a corpus holds a few hundred, and a dense (max + 1)**2 pass per
    # step cost more than the probe at high thresholds. Only `need` is laid out densely, for the
    # probes to read by length.
    rows, cols = np.flatnonzero(present_p), np.flatnonzero(present_i)
    need_c = need_table(threshold, rows, max_len, score, doc_lens=cols)
    lp, li = rows.reshape(-1, 1), cols.reshape(1, -1)
    reach = need_c <= np.minimum(lp, li)
    if ordered:
        reach &= (li < lp) | (li == lp) & (need_c < lp)
    big = np.iinfo(np.int32).max
    held = np.where(reach, need_c, big)
    least_p = held.min(axis=1, initial=big)
    least_i = held.min(axis=0, initial=big)
    probe_prefix = np.zeros(n_p, np.int32)
    probe_prefix[rows] = np.where(least_p < big, rows - least_p + 1, 0)
    index_prefix = np.zeros(n_i, np.int32)
    index_prefix[cols] = np.where(least_i < big, cols - least_i + 1, 0)
    any_p = reach.any(axis=1)
    lo = np.full(n_p, n_i, np.int64)
    hi = np.full(n_p, -1, np.int64)
    if len(cols):
        lo[rows] = np.where(any_p, cols[reach.argmax(axis=1)], n_i)
        hi[rows] = np.where(any_p, cols[len(cols) - 1 - reach[:, ::-1].argmax(axis=1)], -1)
    need = np.full((n_p, n_i), max_len + 1, np.int32)  # unreachable: absent lengths never pair
    need[np.ix_(rows, cols)] = need_c
    return LengthPlan(need, probe_prefix, index_prefix, lo, hi)


def length_bounds(sorted_len, lo, hi, xp=np) -> tuple[np.ndarray, np.ndarray]:
    """Where the sets of lengths ``lo[i] .. hi[i]`` lie among sets sorted by length.

    Parameters
    ----------
    sorted_len : array of int, shape (n,)
        Set lengths, ascending.
    lo, hi : array of int, shape (m,)
        Least and greatest length wanted (``lo > hi``: none).
    xp : module, default numpy
        The array module of the arrays (``cupy``: device memory in, device memory out).

    Returns
    -------
    first, end : array of int64, shape (m,)
        ``sorted_len[first[i]:end[i]]`` are the lengths in ``[lo[i], hi[i]]`` (``first >= end``:
        none). A count per length and a gather, not a binary search per row.
    """
    sorted_len = xp.asarray(sorted_len).reshape(-1)
    if not len(sorted_len):
        none = xp.zeros(len(lo), xp.int64)
        return none, none.copy()
    top = int(sorted_len[-1]) + 1
    below = xp.zeros(top + 2, xp.int64)  # below[l]: sets shorter than l, for l in 0 .. top + 1
    below[1:] = xp.cumsum(xp.bincount(sorted_len, minlength=top + 1)[:top + 1])
    first = below[xp.clip(xp.asarray(lo, xp.int64), 0, top + 1)]
    end = below[xp.clip(xp.asarray(hi, xp.int64) + 1, 0, top + 1)]
    return first, end


def checked_floor(min_doc_len, n_queries: int):
    """``min_doc_len`` as int64 of shape (n_queries,), or None where it is None.

    Raises
    ------
    ValueError
        If it does not have one entry per query.
    """
    if min_doc_len is None:
        return None
    floor = np.asarray(min_doc_len, dtype=np.int64)
    if floor.shape != (n_queries,):
        raise ValueError(f"min_doc_len must have shape ({n_queries},) (one per query), found {floor.shape}")
    return floor


def probe_bounds(plan: LengthPlan, q_len, d_len, group_of=None, floor=None, xp=np) -> tuple[np.ndarray, np.ndarray]:
    """Per probe group, the index groups its lengths reach: :func:`length_bounds` of ``plan``.

    Parameters
    ----------
    plan : LengthPlan
    q_len : array of int, shape (n_probe_groups,)
        Probe groups' lengths.
    d_len : array of int, shape (n_index_groups,)
        Index groups' lengths, ascending.
    group_of : numpy.ndarray of int64, shape (n_queries,), optional
        Each query's probe group (with ``floor``).
    floor : numpy.ndarray of int64, shape (n_queries,), optional
        Per query, the least doc length: a group starts at its members' least (each member's own
        floor is applied to its pairs after). Host arrays (``xp`` numpy) only.
    xp : module, default numpy
        The array module of ``q_len``, ``d_len`` and the bounds (as :func:`length_bounds`).

    Returns
    -------
    first, end : array of int64, shape (n_probe_groups,)
    """
    lo = xp.asarray(plan.lo)[q_len]
    if floor is not None:
        group_floor = np.full(len(q_len), np.iinfo(np.int64).max)
        np.minimum.at(group_floor, group_of, floor)
        lo = np.maximum(lo, group_floor)
    return length_bounds(d_len, lo, xp.asarray(plan.hi)[q_len], xp)


def inside_groups(plan: LengthPlan, g_len, sizes, include_self: bool, xp=np):
    """The groups of a self-join whose members pair with each other: a set of their length passes
    with an identical set (``need[l, l] <= l``), and they hold more than one member (or one, with
    ``include_self``: each member's pair with itself).

    Parameters
    ----------
    plan : LengthPlan
        Of the self-join (``ordered``), probe and index lengths alike.
    g_len, sizes : array of int, shape (n_groups,)
        Each group's set length and members, in ``xp``.
    include_self : bool
    xp : module, default numpy

    Returns
    -------
    array of int64, shape (n_inside,)
        The groups, ascending, in ``xp``.
    """
    diagonal = np.diagonal(plan.need)
    whole = diagonal <= np.arange(len(diagonal))
    return xp.flatnonzero((sizes > (0 if include_self else 1)) & xp.asarray(whole)[g_len])


def self_passing(threshold, score: str, max_len: int, group_len) -> np.ndarray:
    """Whether each group's identical sets pass with each other: ``need(L, L) <= L`` at its length
    ``L`` (an empty set, or an overlap of ``L`` below ``T``, fails). Host bool of ``group_len``'s shape."""
    group_len = np.asarray(group_len, dtype=np.int64)
    lens = np.unique(group_len)
    passes = need_table(threshold, lens, max_len, score)[np.arange(len(lens)), lens] <= lens
    return passes[np.searchsorted(lens, group_len)]


def group_join_threshold(threshold, score: str):
    """``(score, T)`` of a join through the groups of identical sets (a symmetric self-join, its
    pairs of groups): refused for containment (not symmetric: its self-join is every ordered pair,
    an R-S probe) and for ``T == 0`` (every pair passes: no prefix filter applies).

    Raises
    ------
    ValueError
        For those two, or a bad threshold or score.
    """
    from ..keys import check_score

    score = check_score(score)
    if score == "containment":
        raise ValueError("containment is not symmetric: its self-join is every ordered pair, an R-S probe")
    return score, positive_threshold(threshold, score)


def positive_threshold(threshold, score: str):
    """``T`` (:func:`settopk.kernels.parse_threshold`) of a prefix-filtered join: refused at ``T == 0``.

    Raises
    ------
    ValueError
        At ``T == 0`` (every pair passes: no prefix filter applies; scan instead), or for a bad
        threshold or score.
    """
    from ..threshold import parse_threshold

    t = parse_threshold(threshold, score)
    if not join_applies(t):
        raise ValueError("T == 0 passes every pair: the prefix-filtered join does not apply; scan instead")
    return t


def _present(lengths) -> np.ndarray:
    """bool (max length + 1,) (at least (1,)): which lengths occur (a count, not a sort: no ``np.unique``)."""
    lengths = np.asarray(lengths).reshape(-1)
    return np.bincount(lengths, minlength=1) > 0 if len(lengths) else np.zeros(1, bool)
