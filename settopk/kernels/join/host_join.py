"""The ``cpu`` backend's join: the prepared doc side, the R-S probe and the self-join (imports Numba).

A :class:`DocSide` is built once per corpus (or shard), threshold and score: the docs in frequency
order, grouped when identical (:mod:`settopk.kernels.join.prepare`), their prefixes in postings sized
for any query length. :meth:`DocSide.probe` answers a batch of queries, grouped the same way; the
self-join (:func:`self_join`) indexes each group only against the groups no longer than itself, so
each unordered pair of groups is met once. The compiled kernels are in
:mod:`settopk.kernels.join.numba_join`.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from ..keys import SCORES, check_score, cosine_key_table, key_scale
from ..sets import SetBatch
from ..threshold import ThresholdPairs, self_join_pairs
from .numba_emit import emit_counts, emit_lists, emit_plan, emit_rows
from .numba_join import build_postings, probe_groups, self_join_bounds
from .prefixes import (JoinTooLarge, check_pairs, checked_floor, group_join_threshold, inside_groups, length_plan,
                       positive_threshold, probe_bounds)
from .prepare import JoinSets, extended_rank, frequency_order, prepare_sets

__all__ = ["DocSide", "SelfJoin", "SelfJoinTooLarge", "group_pairs", "self_join"]

_RANGES_PER_THREAD = 2  # probe ranges per thread, of about equal tokens probed, taken as threads free up (a range's
# first visit of each token costs a binary search: more ranges cost more where groups of one cost are many)
_ENTRIES_PER_THREAD = 1 << 15  # a probe thread per this many probe entries at most: each costs its scratch and a hand-off
_PARALLEL_PAIRS = 1 << 16  # an emit stage of less work (list entries, pairs) runs on the calling thread: a pool's hand-offs would cost more


class DocSide:
    """A corpus prepared for threshold joins at one threshold and score (host memory).

    Parameters
    ----------
    docs : SetBatch
        ``n_docs`` sets.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing ids (position order is id order).
    threshold : value taken by :func:`settopk.kernels.parse_threshold`
        ``T > 0``.
    score : str
        One of :data:`settopk.kernels.SCORES`.
    max_len : int
        Bound on set sizes: the index prefixes serve queries of any length up to it.
    threads : int, optional
        Threads of :meth:`probe` (default: the CPUs of this process).

    Raises
    ------
    ValueError
        If ``T == 0`` (every pair passes: no prefix filter applies; use a scan) or the threshold
        or score is invalid.
    """

    def __init__(self, docs: SetBatch, doc_ids, threshold, score: str, max_len: int, threads: int | None = None):
        self.score = check_score(score)
        key_scale(max_len, score)
        self.threshold = positive_threshold(threshold, score)
        self.max_len = max_len
        self.threads = threads or len(os.sched_getaffinity(0))
        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        self.n_ids = docs.id_bound
        self.rank = frequency_order(docs.tokens, self.n_ids)
        self.sets = prepare_sets(docs, self.rank)
        self._groups = _group_sets(self.sets)
        plan = length_plan(self.threshold, score, max_len, np.arange(max_len + 1), self.sets.lengths, ordered=False)
        self.index_prefix = plan.index_prefix
        g_tokens, g_offsets, g_len, _ = self._groups
        self.postings = build_postings(g_tokens, g_offsets, g_len, plan.index_prefix[g_len], self.n_ids)
        self._workers = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_workers": None}  # threads do not pickle; made again at the next probe

    @property
    def n_docs(self) -> int:
        """Docs of the corpus."""
        return self.sets.n_sets

    def probe(self, queries: SetBatch, k: int | None = None, min_doc_len=None) -> ThresholdPairs:
        """Every (query, doc) pair whose score reaches the threshold, exactly, best first.

        Parameters
        ----------
        queries : SetBatch
            ``n_queries`` sets in the docs' id space (an id no doc holds matches nothing).
        k : int, optional
            Keep each query's ``k`` best pairs; None keeps all.
        min_doc_len : array_like of int, shape (n_queries,), optional
            Per query, only docs at least this long.

        Returns
        -------
        ThresholdPairs
            As :meth:`settopk.kernels.NumpyShardIndex.threshold_search`.
        """
        n_q = queries.n_sets
        q_sets = prepare_sets(queries, extended_rank(self.rank, queries.id_bound))
        q_tokens, q_offsets, q_len, q_sig = _group_sets(q_sets)
        floor = checked_floor(min_doc_len, n_q)
        plan = length_plan(self.threshold, self.score, self.max_len, q_sets.lengths, self.sets.lengths, ordered=False)
        bounds = probe_bounds(plan, q_len, self._groups[2], q_sets.group_of, floor)
        first, end = (b.astype(np.int32) for b in bounds)
        prefix = np.where(first < end, plan.probe_prefix[q_len], 0).astype(np.int32)
        if self._workers is None:
            self._workers = _Workers(self.threads, self._groups[1], self.n_ids)
        pair_q, pair_i, pair_ov = _probe_all(self._workers, (q_tokens, q_offsets, q_len, q_sig, prefix, first, end), self._groups,
                                             plan.need, self.postings)
        filt = np.zeros(len(pair_q), np.int8)
        floor_rows = floor if floor is not None else np.zeros(n_q, np.int64)
        return _emit(self._workers, n_q, (pair_q, pair_i, pair_ov, filt), q_sets, self.sets, floor_rows, k, self.doc_ids,
                     self.max_len, self.score)


def self_join(sets: SetBatch, doc_ids, threshold, score: str, max_len: int, *, include_self: bool = False,
              k: int | None = None, threads: int | None = None, prepared: JoinSets | None = None,
              max_pairs: int | None = None) -> ThresholdPairs:
    """The threshold self-join of a corpus on the ``cpu`` backend (see :func:`settopk.kernels.join.self_join`);
    :class:`JoinTooLarge` past ``max_pairs`` pairs, counted before any is written."""
    score = check_score(score)
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    if score == "containment":  # not symmetric: every ordered pair, through the R-S probe
        pairs = DocSide(sets, doc_ids, threshold, score, max_len, threads).probe(sets)
        return self_join_pairs(pairs, doc_ids, sets.lengths, score, include_self, k)
    join = SelfJoin(sets, doc_ids, threshold, score, max_len, include_self=include_self, k=k, threads=threads,
                    prepared=prepared)
    try:
        check_pairs(int(join.offsets[-1]), max_pairs)
        return join.rows(0, join.n_queries)
    finally:
        join.close()


SelfJoinTooLarge = JoinTooLarge
"""A :class:`SelfJoin` would hold more than its ``max_entries``: its caller probes batch by batch instead."""


class SelfJoin:
    """The threshold self-join of a corpus, found once and written out by query range (host memory).

    The probe finds the passing pairs of groups of identical sets, and each query group's list of
    target groups is ordered best first (:mod:`settopk.kernels.join.numba_emit`); :meth:`rows` then
    writes any range of queries' pairs. What is held is the group pairs and the lists (about 12
    bytes per list entry: one per target group member of each query group, far fewer than the
    pairs where sets repeat), never the pairs themselves, so a caller that takes the rows range
    by range holds one range's pairs at a time (the job's shard actors: one batch's).

    Parameters
    ----------
    sets : SetBatch
        ``n_docs`` sets; each is also a query.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing ids.
    threshold, score, max_len
        As :class:`DocSide`; the score symmetric (not ``containment``).
    include_self : bool
        Also each doc's pair with itself (where its own score reaches ``T``).
    k : int, optional
        Keep each query's ``k`` best pairs; None keeps all.
    threads : int, optional
        Threads of the probe and the writing (default: the CPUs of this process).
    prepared : JoinSets, optional
        The corpus in frequency order, grouped (:func:`settopk.kernels.join.prepare_corpus`).
    max_entries : int, optional
        Refuse (:class:`SelfJoinTooLarge`) a self-join of more than this many group pairs or list
        entries, as soon as the probe or the lists' sizes show it (the probe stops there): what is
        held is then bounded by it. None: no bound.
    found : (LengthPlan, (numpy.ndarray, numpy.ndarray, numpy.ndarray)), optional
        The length plan of the self-join (``ordered``) and its passing pairs of distinct groups of
        ``prepared`` (probe group, index group no longer and before it, overlap; int32, shape
        (n_group_pairs,) each), found elsewhere (the ``cupy`` array join): the probe is skipped.

    Attributes
    ----------
    offsets : numpy.ndarray of int64, shape (n_queries + 1,)
        Query ``i``'s pairs are rows ``offsets[i]:offsets[i + 1]`` of the whole result.
    groups : JoinSets
        The corpus in frequency order, its identical sets grouped.
    group_pairs : (numpy.ndarray of int32, numpy.ndarray of int32), each of shape (n_group_pairs,)
        The passing pairs of distinct groups, each unordered pair once (indexes into ``groups``):
        what :func:`settopk.shards.components.group_components` joins groups by.

    Raises
    ------
    ValueError
        If ``T == 0``, the score is ``containment`` or unknown, or ``k < 1``.
    SelfJoinTooLarge
        Past ``max_entries``.

    Notes
    -----
    Pairs follow the self-join rule (:func:`settopk.kernels.self_join_keep`): each unordered pair
    once, under its shorter doc, or the lower id of two of one length.
    """

    def __init__(self, sets: SetBatch, doc_ids, threshold, score: str, max_len: int, *, include_self: bool = False,
                 k: int | None = None, threads: int | None = None, prepared: JoinSets | None = None,
                 max_entries: int | None = None, found=None):
        score, t = group_join_threshold(threshold, score)
        threads = threads or len(os.sched_getaffinity(0))
        n_ids = sets.id_bound  # a pass over the tokens: once
        js = prepared if prepared is not None else prepare_sets(sets, frequency_order(sets.tokens, n_ids))
        self._workers = _Workers(threads, js.group_token_offsets[:-1], n_ids) if prepared is None else \
            _kept_workers(js, threads, n_ids)
        try:
            plan, (pair_q, pair_i, pair_ov) = found if found is not None else \
                _probe_groups(self._workers, js, t, score, max_len, n_ids, max_entries)
        except SelfJoinTooLarge:
            self.close()
            raise
        self.groups, self.group_pairs = js, (pair_q, pair_i)
        g_len = js.group_len
        # Directed by the self-join rule: the shorter group's members are the queries. Between two
        # groups of one length: from the lower set's to the higher's where each holds one set; else
        # both ways, each member keeping the higher positions; inside a group likewise.
        shorter = g_len[pair_i] < g_len[pair_q]
        size = js.group_size
        single = ~shorter & (size[pair_i] == 1) & (size[pair_q] == 1)
        flip = single & (js.group_rep[pair_q] < js.group_rep[pair_i])
        both = ~shorter & ~single
        inside = inside_groups(plan, g_len, size, include_self).astype(np.int32)
        dq = np.concatenate([np.where(flip, pair_q, pair_i), pair_q[both], inside])
        dt = np.concatenate([np.where(flip, pair_i, pair_q), pair_i[both], inside])
        dov = np.concatenate([pair_ov, pair_ov[both], g_len[inside]])
        dfilt = np.concatenate([both, np.ones(int(both.sum()), bool), np.full(len(inside), 2 if include_self else 1)])
        try:
            self._lists = _emit_lists(self._workers, js.n_sets, (dq, dt, dov, dfilt.astype(np.int8)), js, js,
                                      np.zeros(js.n_sets, np.int64), k, np.asarray(doc_ids, dtype=np.int64), max_len, score,
                                      max_entries)
        except SelfJoinTooLarge:
            self.close()
            raise
        self.offsets = self._lists.offsets

    @property
    def n_queries(self) -> int:
        """Queries (the corpus's docs)."""
        return len(self.offsets) - 1

    def rows(self, lo: int, hi: int) -> ThresholdPairs:
        """Queries ``lo .. hi - 1``'s pairs (``0 <= lo <= hi <= n_queries``), each query's best first.

        Returns
        -------
        ThresholdPairs
            ``n_queries = hi - lo`` (its query ``i`` is the corpus's ``lo + i``).
        """
        if not 0 <= lo <= hi <= self.n_queries:
            raise ValueError(f"query range {lo}..{hi} is not within 0..{self.n_queries}")
        return _emit_rows(self._workers, self._lists, lo, hi)

    def close(self) -> None:
        """Stop the threads (the rows already written stay valid; those kept with a ``prepared``
        corpus serve its next join)."""
        if not self._workers.kept:
            self._workers.close()


def group_pairs(prepared: JoinSets, id_bound: int, threshold, score: str, max_len: int,
                threads: int | None = None, max_pairs: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The passing pairs of distinct groups of identical sets of a prepared corpus (``cpu``
    backend): each unordered pair of groups once, verified, its members' pairs never listed.

    Parameters
    ----------
    prepared : JoinSets
        :func:`settopk.kernels.join.prepare_corpus` of the corpus.
    id_bound : int
        The corpus's ``SetBatch.id_bound``: its ranks lie below it.
    threshold, score, max_len
        As :class:`SelfJoin`; ``T > 0``, the score symmetric (not ``containment``).
    threads : int, optional
        Probe threads (default: the CPUs of this process).
    max_pairs : int, optional
        Refuse more pairs than this (the probe stops there); None: no bound.

    Returns
    -------
    (numpy.ndarray of int64, numpy.ndarray of int64), each of shape (n_pairs,)
        The two groups of each pair (indexes into ``prepared``'s groups), in no set order.

    Raises
    ------
    ValueError
        As :class:`SelfJoin`.
    settopk.kernels.join.prefixes.JoinTooLarge
        Past ``max_pairs``.
    """
    score, t = group_join_threshold(threshold, score)
    workers = _kept_workers(prepared, threads or len(os.sched_getaffinity(0)), id_bound)
    _, (pair_q, pair_i, _) = _probe_groups(workers, prepared, t, score, max_len, id_bound, max_pairs)
    return pair_q.astype(np.int64), pair_i.astype(np.int64)


def _probe_groups(workers: "_Workers", js: JoinSets, t, score: str, max_len: int, n_ranks: int, max_entries: int | None):
    """``(length plan, (pair_q, pair_i, overlap))``: each group probes the groups before it (its own
    identical sets are paired by the caller, not probed), every unordered pair of distinct groups
    met once. Raises :class:`SelfJoinTooLarge` past ``max_entries`` group pairs (None: no bound)."""
    groups = _group_sets(js)
    g_tokens, g_offsets, g_len, g_sig = groups
    present = np.flatnonzero(np.bincount(g_len))  # one count over the groups, not over the sets, per call
    plan = length_plan(t, score, max_len, present, present, ordered=True)
    postings = build_postings(g_tokens, g_offsets, g_len, plan.index_prefix[g_len], n_ranks)
    first_l, end_l = probe_bounds(plan, np.arange(len(plan.lo)), g_len)
    first, end, prefix = self_join_bounds(g_len, first_l, end_l, plan.probe_prefix)
    found = _probe_all(workers, (g_tokens, g_offsets, g_len, g_sig, prefix, first, end), groups, plan.need, postings,
                       -1 if max_entries is None else max_entries)
    if found is None:
        raise SelfJoinTooLarge(f"the self-join has more than max_entries={max_entries} pairs of groups")
    return plan, found


def _group_sets(js: JoinSets) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The groups' sets in group order: tokens int32, each group's start int64, lengths int32, parity bitmaps uint64."""
    return js.group_tokens, js.group_token_offsets[:-1], js.group_len, js.group_sig


_KEPT: dict = {}  # id of a prepared corpus's group token offsets -> {(threads, n_ranks): _Workers}, while they live
_KEPT_LOCK = threading.Lock()


def _kept_workers(js: JoinSets, threads: int, n_ranks: int) -> "_Workers":
    """The workers of the self-joins of a prepared corpus, kept as long as it is: an index joins
    its corpus again at each call, and threads and scratch made at each call weigh on a join that
    finds little. Threads share them (the scratch goes to one at a time)."""
    with _KEPT_LOCK:
        key = id(js.group_token_offsets)
        if key not in _KEPT:
            _KEPT[key] = {}
            weakref.finalize(js.group_token_offsets, _KEPT.pop, key, None)
        kept = _KEPT[key]
        if (threads, n_ranks) not in kept:
            # A copy of the offsets: a view would keep the corpus's array, and so this entry, alive.
            kept[threads, n_ranks] = _Workers(threads, js.group_token_offsets[:-1].copy(), n_ranks, kept=True)
        return kept[threads, n_ranks]


class _Workers:
    """Threads and their scratch, kept between probes: a job probes the same docs batch after batch,
    and starting threads or allocating scratch per batch would cost more than a small batch's probe.
    The scratch (per index group: state beside its token offset, and touched; per token: list
    start, used and mark) is made by the thread that first needs it, as many as run at once, and
    is left as :func:`probe_groups` found it, so it serves the next probe of the same postings."""

    def __init__(self, threads: int, index_offsets: np.ndarray, n_ranks: int, kept: bool = False):
        self.threads, self.kept = threads, kept
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="settopk-join") if threads > 1 else None
        self.scratch = queue.SimpleQueue()
        self._index_offsets, self._n_ranks = index_offsets, n_ranks

    def take(self):
        """A free scratch, made here where none is free."""
        try:
            return self.scratch.get_nowait()
        except queue.Empty:
            n_index, n_ranks = len(self._index_offsets), self._n_ranks
            state = np.zeros((n_index, 2), np.int64)
            state[:, 1] = self._index_offsets
            return (state, np.zeros(n_index + 1, np.int32), np.full(n_ranks, -1, np.int64), np.zeros(n_ranks, np.int32),
                    np.zeros(n_ranks, np.uint8))

    def map(self, fn, items, width: int | None = None):
        """``[fn(item) for item in items]``, the items taken in turn by at most ``width`` threads."""
        width = min(width or self.threads, len(items))
        if self.pool is None or width <= 1:
            return [fn(item) for item in items]
        if width >= self.threads:
            return list(self.pool.map(fn, items))
        results, lock, turn = [None] * len(items), threading.Lock(), iter(range(len(items)))

        def drain():
            while True:
                with lock:
                    i = next(turn, None)
                if i is None:
                    return
                results[i] = fn(items[i])

        for f in [self.pool.submit(drain) for _ in range(width)]:
            f.result()
        return results

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False)


def _probe_all(workers: _Workers, probe, index, need, postings, limit: int = -1):
    """:func:`probe_groups` over every probe group, in ranges taken by the workers' threads; with a
    ``limit`` (>= 0; -1: none), None once more pairs than it are found (each range stops there)."""
    q_tokens, q_offsets, q_len, q_sig, prefix, first, end = probe
    i_tokens, i_sig = index[0], index[3]
    need = np.ascontiguousarray(need, np.int32)  # rows: every probe length; columns: every index length
    work = np.cumsum(prefix, dtype=np.int64)  # the tokens probed up to each group: the ranges' cost
    total = int(work[-1]) if len(work) else 0
    if not total:
        return np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32)
    width = int(min(workers.threads, max(1, total // _ENTRIES_PER_THREAD)))
    n_ranges = 1 if width == 1 else width * _RANGES_PER_THREAD
    inner = np.searchsorted(work, np.linspace(0, total, n_ranges + 1)[1:-1], side="right")
    cuts = np.unique(np.concatenate([[0], inner, [len(prefix)]]))

    def run(lo_hi):
        buffers = workers.take()
        try:
            return probe_groups(lo_hi[0], lo_hi[1], q_tokens, q_offsets, q_len, q_sig, prefix, first, end, i_tokens,
                                i_sig, need, *postings, *buffers, limit)
        finally:
            workers.scratch.put(buffers)

    found = workers.map(run, list(zip(cuts[:-1].tolist(), cuts[1:].tolist())), width)
    if limit >= 0 and sum(len(f[0]) for f in found) > limit:
        return None
    return tuple(np.concatenate([f[i] for f in found]) for i in range(3))


class _Lists(NamedTuple):
    """What :func:`emit_rows` reads: the query groups' ordered lists and each row's offset."""

    group_of: np.ndarray
    kind: np.ndarray
    floor: np.ndarray
    list_len: np.ndarray
    list_pos: np.ndarray
    list_pair: np.ndarray
    dt: np.ndarray
    dov: np.ndarray
    dfilt: np.ndarray
    t_glen: np.ndarray
    doc_ids: np.ndarray
    offsets: np.ndarray


def _emit(workers: _Workers | None, n_queries, directed, q_sets: JoinSets, t_sets: JoinSets, floor, k, doc_ids,
          max_len: int, score: str):
    """Directed group pairs (query group, target group, overlap, member rule) as :class:`ThresholdPairs`,
    the lists and rows in ranges taken by the workers' threads where there are many pairs."""
    return _emit_rows(workers, _emit_lists(workers, n_queries, directed, q_sets, t_sets, floor, k, doc_ids, max_len, score),
                      0, n_queries)


def _emit_lists(workers: _Workers | None, n_queries, directed, q_sets: JoinSets, t_sets: JoinSets, floor, k, doc_ids,
                max_len: int, score: str, max_entries: int | None = None) -> _Lists:
    """The ordered lists and per-row counts of :func:`_emit`, before any row is written (raising
    :class:`SelfJoinTooLarge` before they are made where they would pass ``max_entries``)."""
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1 (or None for every passing pair), found {k}")
    dq, dt, dov, dfilt = (np.ascontiguousarray(a, dtype) for a, dtype in zip(directed, (np.int32, np.int32, np.int32, np.int8)))
    cosine_keys = cosine_key_table(max_len) if score == "cosine" else np.zeros(1, np.int32)
    q_glen, t_glen = q_sets.group_len, t_sets.group_len
    t_goff, t_members = t_sets.group_offsets, t_sets.group_members
    q_goff, q_members = q_sets.group_offsets, q_sets.group_members
    k = 0 if k is None else k
    starts, order, list_len = emit_plan(dq, dt, len(q_goff) - 1, t_goff)
    group_of = q_sets.group_of
    if max_entries is not None and list_len[-1] > max_entries:
        raise SelfJoinTooLarge(f"the self-join's lists have {int(list_len[-1])} entries, more than max_entries={max_entries}")
    n_groups = len(list_len) - 1
    list_pos = np.empty(list_len[-1], np.int32)
    list_pair = np.empty(list_len[-1], np.int64)
    kind = np.empty(n_groups, np.int8)
    _over(workers, list_len, lambda lo, hi: emit_lists(
        lo, hi, starts, order, dt, dov, dfilt, q_glen, t_goff, t_members, t_glen, SCORES.index(score),
        key_scale(max_len, score), cosine_keys, list_len, list_pos, list_pair, kind))
    counts = np.zeros(n_queries + 1, np.int64)
    # A row of a kind-1 list reads it all; of the others, a binary search at most; of an empty one, nothing.
    group_work = np.zeros(n_groups + 1, np.int64)
    list_size = np.diff(list_len)
    np.cumsum(np.where(kind == 1, list_size, list_size > 0) * np.diff(q_goff), out=group_work[1:])
    _over(workers, group_work, lambda lo, hi: emit_counts(lo, hi, q_goff, q_members, kind, floor, k, list_len, list_pos,
                                                          list_pair, dt, dfilt, t_glen, counts))
    return _Lists(group_of, kind, floor, list_len, list_pos, list_pair, dt, dov, dfilt, t_glen, doc_ids, np.cumsum(counts))


def _emit_rows(workers: _Workers | None, lists: _Lists, lo: int, hi: int) -> ThresholdPairs:
    """Rows ``lo .. hi - 1`` of :func:`_emit_lists`'s lists as :class:`ThresholdPairs`."""
    base = int(lists.offsets[lo])
    offsets = lists.offsets[lo:hi + 1] - base
    n = int(offsets[-1])
    ids, overlap, doc_len = np.empty(n, np.int64), np.empty(n, np.int32), np.empty(n, np.int32)
    _over(workers, offsets, lambda a, b: emit_rows(lo + a, lo + b, lists.group_of, lists.kind, lists.floor, lists.list_len,
                                                   lists.list_pos, lists.list_pair, lists.dt, lists.dov, lists.dfilt,
                                                   lists.t_glen, lists.doc_ids, lists.offsets, base, ids, overlap, doc_len))
    return ThresholdPairs(offsets, ids, overlap, doc_len)


def _over(workers: _Workers | None, work: np.ndarray, fn) -> None:
    """``fn(lo, hi)`` over ``0 .. len(work) - 1`` in ranges of about equal work (``work``: its running
    sum, shape (n + 1,)), taken by the workers' threads; one call where there is little work."""
    n = len(work) - 1
    if workers is None or workers.pool is None or n < 2 or work[-1] < _PARALLEL_PAIRS:
        fn(0, n)
        return
    n_ranges = int(min(workers.threads * 4, work[-1] // _PARALLEL_PAIRS * 2))  # a range of less work costs more to hand off
    cuts = np.unique(np.concatenate([[0], np.searchsorted(work, np.linspace(0, work[-1], n_ranges + 1)), [n]]))
    workers.map(lambda lo_hi: fn(*lo_hi), list(zip(cuts[:-1].tolist(), cuts[1:].tolist())))
