"""Compiled CPU search: :class:`NumbaShardIndex`, the contract of :class:`settopk.kernels.NumpyShardIndex` at native speed.

Two paths, both exact, both compiled with Numba (:mod:`settopk.kernels.numba_kernels`,
imported on first use, so ``import settopk.kernels`` works without Numba):

* **scan**: groups of up to 512 queries are counted against every doc with
  bit-sliced counters (one bit per query, 512-bit vectors, Harley-Seal
  carry-save adders, as the GPU kernel ``settopk/kernels/cuda/bitslice_topk.cu`` does).
  Each query keeps a heap of its best docs so far and, per doc length, the
  least overlap a doc needs to enter it; one bit-sliced comparison per doc
  finds the few queries a doc can enter. Docs are scanned in position order,
  so a doc that only ties the current k-th best never enters (ties go to the
  lower doc id).
* **postings** (ScanCount): the query's postings lists are counted, a block of
  docs at a time, into counters that stay in the L1 cache; every doc with
  overlap >= 1 is found exactly and the rest have key 0
  (:mod:`settopk.kernels.postings` describes the method). The postings list docs in
  length order, so blocks whose lengths cannot reach the k-th best key so far
  are not counted (length filtering).

The work is split over ``threads`` threads. The scan runs groups side by side,
a thread each, while there are as many groups as threads; a group left alone
runs in rounds on every thread: the threads count consecutive parts of the
docs and record the (doc, query) pairs that pass the tables, then each thread
offers the pairs of the queries it owns to their heaps, in doc order, and
refreshes their tables. A query thus keeps one heap over all the docs, not one
per thread. The postings split the queries into a few parts per thread, taken
as threads free up. The compiled functions release the GIL.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .keys import DEFAULT_SCORE, SCORES, best_key_in_range, check_floor_key, cosine_key_table, key_scale, max_key
from .postings import build_postings, check_routing, postings_cost
from .dense import LocalIds, table_queries
from .join.kept import KeptSelfJoins
from .join.prefixes import join_applies
from .sets import SetBatch, check_shard_docs, index_ids
from .topk import TopK, empty_topk

__all__ = ["NumbaShardIndex", "warm_up"]

_log = logging.getLogger("settopk.kernels")
_GROUP = 512  # queries per scan group: one bit each in 8 uint64 words (settopk.kernels.numba_simd.WORDS)
_REFRESH_AFTER = 16  # docs a stale threshold may admit in vain before its tables are rebuilt
_POSTINGS_BLOCK = 16384  # docs ScanCount counts at a time: 16 or 32 KiB of counters, in the L1 cache
_ROUND_FIRST = 64  # docs a thread counts in the first round of a scan on several threads (_scan_rounds)
_ROUND_SHARE = 4  # rounds double until each thread counts this fraction of its docs in one
_HIT_SLOTS = 1 << 18  # (doc, lane) pairs a thread records in a round; a round that would need more is cut short
_PARTS_PER_THREAD = 4  # ScanCount's queries are split into this many parts per thread, taken as threads free up
# The kernels' cosine_keys argument for the other scores (never read): read-only int32 like
# cosine_key_table's, so every score calls the same compiled functions.
_NO_COSINE_KEYS = np.zeros(1, dtype=np.int32)
_NO_COSINE_KEYS.flags.writeable = False
# CPU cost model (seconds of one thread), fitted on an AMD EPYC core (200,000 docs of the STI2 length
# histogram, Zipf and uniform ids, 16 to 500 queries): a scan group of n queries costs about
# (_SCAN_S_PER_ID + n * _SCAN_S_PER_ID_QUERY) per doc id (the table outgrows the caches and more
# queries find candidates as n grows); ScanCount costs about _POSTINGS_S_PER_ENTRY per postings entry,
# _POSTINGS_S_PER_DOC per doc it reaches (at most one per entry, at most n_docs) and
# _POSTINGS_S_PER_QUERY per query.
_SCAN_S_PER_ID = 2e-9
_SCAN_S_PER_ID_QUERY = 0.008e-9
_POSTINGS_S_PER_ENTRY = 1.1e-9
_POSTINGS_S_PER_DOC = 4.5e-9
_POSTINGS_S_PER_QUERY = 2e-6


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class NumbaShardIndex(KeptSelfJoins):
    """One shard's docs in host memory, searched by compiled, multi-threaded kernels.

    Same contract as :class:`settopk.kernels.NumpyShardIndex`: :meth:`search` returns
    the identical :class:`settopk.kernels.TopK` (every score, floors, ties to the lower
    doc id, padding), and the attributes ``last_skipped``, ``last_routing`` and
    ``postings_bytes`` mean the same.

    Parameters
    ----------
    docs : SetBatch
        The shard's docs (``n_docs`` sets), in ``doc_ids`` order.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Global doc ids, strictly increasing (so position order is id order).
    max_len : int
        Bound on set sizes, in ``[1, 32767]`` (``[1, 4096]`` for cosine).
    score : str, default "braun_blanquet"
        What :meth:`search` ranks by: one of :data:`settopk.kernels.SCORES`.
    routing : str, default "scan"
        ``"scan"``: every query is counted against every doc (bit-sliced).
        ``"auto"``: the postings (:mod:`settopk.kernels.postings`, about
        ``4 n_tokens + 8 n_ids + 6 n_docs`` more host bytes, ``n_ids`` 65536 for ``uint16``
        docs, else the number of distinct doc ids) are built too,
        and the queries whose postings are short (uniform ids) go through them
        when the cost model (module constants) says that is cheaper than the
        scan they would share. ``"postings"``: every query goes through the
        postings. Results are identical in every mode.
    threads : int, optional
        Threads a search uses (the CPUs its actor reserves); default: the CPUs
        this process may run on.

    Attributes
    ----------
    last_skipped : int
        Queries of the last ``search`` that their floor skipped.
    last_routing : dict
        Queries of the last ``search`` per path: ``scan``, ``postings``, and of
        those ``scancount`` (every postings query) and ``prefix`` (always 0).
    postings : settopk.kernels.postings.Postings or None
        The inverted index (None with ``routing="scan"``). Its positions are
        ranks: the docs in order of length, then position.
    postings_bytes : int
        Host bytes of the postings and the rank order (0 with ``routing="scan"``).

    Raises
    ------
    ValueError
        If ``doc_ids`` is not strictly increasing, its length differs from
        ``docs``, a doc is longer than ``max_len``, the shard has ``2**31`` docs
        or more, ``score`` is unknown or does not allow ``max_len``
        (:func:`settopk.kernels.key_scale`), ``routing`` is not one of
        :data:`settopk.kernels.postings.ROUTINGS`, or ``threads < 1``.
    ImportError
        If Numba is not installed.
    """

    def __init__(self, docs: SetBatch, doc_ids: np.ndarray, max_len: int, score: str = DEFAULT_SCORE,
                 routing: str = "scan", threads: int | None = None):
        check_routing(routing)
        self._scale = key_scale(max_len, score)  # an unknown score, or a max_len too wide for its keys, fails here
        doc_ids, lengths = check_shard_docs(docs, doc_ids, max_len)
        # uint32 docs are renumbered to local ids, most frequent first (settopk.kernels.dense).
        self._local, docs = LocalIds.of(docs)
        threads = _usable_cpus() if threads is None else int(threads)
        if threads < 1:
            raise ValueError(f"threads must be >= 1, found {threads}")
        from . import numba_kernels  # Numba is needed from here on; `import settopk.kernels` does not need it

        self._nk = numba_kernels
        self.doc_ids = doc_ids
        self.doc_len = lengths.astype(np.int16)
        self.max_len = max_len
        self.score = score
        self.routing = routing
        self.threads = threads
        self.last_skipped = 0
        self.last_routing = _no_routing()
        self._score_code = SCORES.index(score)
        self._top = max_key(max_len, score)
        self._cosine_keys = cosine_key_table(max_len) if score == "cosine" else _NO_COSINE_KEYS
        self._n_planes = max(3, (max_len + 1).bit_length())
        self._tokens = np.ascontiguousarray(docs.tokens)
        # Tables by id cover the docs' ids (65536 for uint16 docs, else their local ids); queries'
        # ids are mapped below n_ids + max_len (settopk.kernels.dense.table_queries).
        self._n_ids = index_ids(docs) if self._local is None else self._local.n_ids
        self._offsets = np.ascontiguousarray(docs.offsets)
        self._doc_len64 = lengths.astype(np.int64)
        self._lengths, self._len_index = np.unique(self._doc_len64, return_inverse=True)
        self._len_index = self._len_index.astype(np.int64).ravel()
        self._shortest = int(lengths.min()) if len(lengths) else 0
        self._longest = int(lengths.max()) if len(lengths) else 0
        self.postings = None
        if routing != "scan":
            # The postings list docs by rank: ranks order the docs by length (then position), so a block
            # of ranks holds few lengths and ScanCount can pass over the blocks no doc of which can enter.
            # Overlap and containment keys do not depend on |d|: their ranks stay the positions, so that
            # ties with the k-th best are settled by position block by block instead.
            self._ordered = score in ("overlap", "containment")
            order = np.arange(self.n_docs) if self._ordered else np.argsort(self._doc_len64, kind="stable")
            self._rank_pos = order.astype(np.int32)
            self._rank_len = self.doc_len[self._rank_pos]  # int16: compact, the candidates look it up
            self.postings = build_postings(docs if self._ordered else docs.take(self._rank_pos),
                                           self._n_ids + max_len + 1)
            # ScanCount counts blocks of ranks at a time; the least and largest length of each block.
            self._block = min(_POSTINGS_BLOCK, max(self.n_docs, 1))
            lens, starts = self._rank_len.astype(np.int64), np.arange(0, self.n_docs, self._block)
            self._blocks = ((np.minimum.reduceat(lens, starts), np.maximum.reduceat(lens, starts)) if self.n_docs
                            else (lens, lens))
        self.postings_bytes = 0 if self.postings is None else (
            self.postings.nbytes + self._rank_pos.nbytes + self._rank_len.nbytes)
        self._pool = None
        self._join_side = None  # the threshold join's prepared docs (settopk.kernels.join), per threshold
        self._self_join = None  # (threshold, include_self, k) and the shard's SelfJoin, kept for batch after batch

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_nk"] = state["_pool"] = None  # a module and a thread pool do not pickle
        state["_self_join"] = None  # holds a thread pool; found again at the next call
        return state

    def __setstate__(self, state: dict) -> None:
        from . import numba_kernels

        self.__dict__.update(state, _nk=numba_kernels)

    @property
    def n_docs(self) -> int:
        """Number of docs in the shard."""
        return len(self.doc_ids)

    def search(self, queries: SetBatch, k: int, floor_key=None) -> TopK:
        """Exact shard-local top-k for each query by the index's score, optionally above a per-query floor.

        Parameters
        ----------
        queries : SetBatch
            ``n_queries`` sets (``uint16`` or ``uint32`` ids) of at most ``max_len`` ids.
        k : int
            Results per query, ``>= 1``.
        floor_key : numpy.ndarray of int, shape (n_queries,), optional
            Per-query floors on the score key (:func:`settopk.kernels.score_key`): only
            docs with ``key >= floor_key[q]`` are returned for query ``q``;
            ``-1`` means no floor. A query whose floor exceeds
            :func:`settopk.kernels.best_key_in_range` over the shard's doc lengths is
            skipped without scoring. None (default): no floor.

        Returns
        -------
        TopK
            Shape ``(n_queries, k)``, identical to
            :meth:`settopk.kernels.NumpyShardIndex.search`: best first (key descending,
            then doc id ascending), ``-1`` ids (overlap and doc_len 0) padding
            rows where fewer than ``k`` docs qualify.

        Raises
        ------
        ValueError
            If ``k < 1``, or ``floor_key`` is not an integer array of shape
            ``(n_queries,)`` with values ``>= -1``.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, found {k}")
        queries = table_queries(queries, self._local, self._n_ids)
        floor = check_floor_key(floor_key, queries.n_sets, self.max_len, self.score)
        out = empty_topk(queries.n_sets, k)
        self.last_skipped = 0
        self.last_routing = _no_routing()
        if self.n_docs == 0 or queries.n_sets == 0:
            return out
        if floor is None:
            floor = np.full(queries.n_sets, -1, dtype=np.int64)
            active = np.arange(queries.n_sets)
        else:
            reachable = best_key_in_range(queries.lengths, self._shortest, self._longest, self.max_len, self.score)
            active = np.flatnonzero(floor <= reachable)
            self.last_skipped = queries.n_sets - len(active)
            if len(active) == 0:
                return out
        routed = self._route(queries, active)
        if self.routing != "scan":
            _log.debug("routing %s: %d of %d queries to the postings", self.routing, len(routed), len(active))
        if len(routed):
            self._postings_search(queries.take(routed), floor[routed], k, routed, out)
            self.last_routing.update(postings=len(routed), scancount=len(routed))
            active = np.setdiff1d(active, routed)
        if len(active):
            self.last_routing["scan"] = len(active)
            # Queries of similar length share a group: their thresholds rule out the same doc lengths.
            active = active[np.argsort(queries.lengths[active], kind="stable")]
            groups = np.array_split(active, -(-len(active) // _GROUP))  # of equal size, at most 512 queries
            for first in range(0, len(groups), self.threads):
                self._scan_groups(queries, floor, k, groups[first:first + self.threads], out)
        return out

    def threshold_search(self, queries: SetBatch, threshold, k: int | None = None, *, min_doc_len=None):
        """Every doc whose score with a query reaches ``threshold`` (inclusive), exactly, best first.

        Same contract and result as :meth:`settopk.kernels.NumpyShardIndex.threshold_search`
        (:class:`settopk.kernels.ThresholdPairs`, CSR by query, unbounded unless ``k`` is given;
        ``min_doc_len`` leaves out each query's shorter docs),
        run on ``threads`` threads. Where ``T > 0``: the join of :mod:`settopk.kernels.join`
        (frequency order, identical docs grouped, prefix, length and positional filters), its doc
        side prepared at the first search of a threshold and kept; at ``T == 0`` (every pair
        passes) the compiled scan of :mod:`settopk.kernels.numba_threshold`.

        Raises
        ------
        ValueError
            If ``threshold`` is not a number in ``[0, 1]`` (``>= 0`` for overlap), ``k < 1``, or
            ``min_doc_len`` does not have one entry per query.
        """
        from .threshold import parse_threshold

        tables = table_queries(queries, self._local, self._n_ids)
        t = parse_threshold(threshold, self.score)
        if self.n_docs and join_applies(t):
            side = self._join_side
            if side is None or side.threshold != t:
                # Built at the first search of a threshold (a job or a self-join keeps one threshold).
                from .join import prepare_docs

                side = self._join_side = prepare_docs(SetBatch(self._offsets, self._tokens), self.doc_ids, t, self.score,
                                                      self.max_len, backend="cpu", threads=self.threads)
            self.last_skipped = 0
            self.last_routing = {**_no_routing(), "postings": queries.n_sets, "prefix": queries.n_sets}
            return side.probe(tables, k, min_doc_len)
        from .numba_threshold import numba_threshold_search

        return numba_threshold_search(self, tables, threshold, k, min_doc_len)

    def _found_self_join(self, t, include_self: bool, k: int | None, max_entries: int | None):
        """The shard's self-join for :class:`settopk.kernels.join.kept.KeptSelfJoins`: a
        :class:`settopk.kernels.join.host_join.SelfJoin` on the shard's threads, ``max_entries``
        bounding its group pairs and list entries."""
        from .join.host_join import SelfJoin

        return SelfJoin(SetBatch(self._offsets, self._tokens), self.doc_ids, t, self.score, self.max_len,
                        include_self=include_self, k=k, threads=self.threads, max_entries=max_entries)

    def _route(self, queries: SetBatch, active: np.ndarray) -> np.ndarray:
        """The queries of ``active`` (int array) that go through the postings under ``self.routing``."""
        if self.routing == "scan" or len(active) == 0:
            return active[:0]
        if self.routing == "postings":
            return active
        entries = postings_cost(queries.take(active), self.postings)
        cost = (_POSTINGS_S_PER_ENTRY * entries + _POSTINGS_S_PER_DOC * np.minimum(entries, self.n_docs)
                + _POSTINGS_S_PER_QUERY)
        order = np.argsort(cost, kind="stable")
        # Route the m cheapest through the postings and scan the rest; each scan group has a fixed cost.
        n = len(active)
        posted = np.concatenate([[0.0], np.cumsum(cost[order])])
        scanned = n - np.arange(n + 1)
        groups = -(-scanned // _GROUP)
        ids = len(self._tokens)
        best = int(np.argmin(posted + ids * (groups * _SCAN_S_PER_ID + scanned * _SCAN_S_PER_ID_QUERY)))
        return np.sort(active[order[:best]])

    def _map(self, fn, jobs):
        """``[fn(*job) for job in jobs]``, on the index's threads when there are several."""
        if self.threads == 1 or len(jobs) == 1:
            return [fn(*job) for job in jobs]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="settopk-numba")
        return list(self._pool.map(lambda job: fn(*job), jobs))

    def _scan_groups(self, queries: SetBatch, floor: np.ndarray, k: int, groups: list, out: TopK) -> None:
        """The bit-sliced scan of up to ``threads`` groups (each a row array of at most 512 queries of
        ``queries``), written into ``out``: side by side, a thread each, when there are ``threads`` of them,
        else one after the other, each on every thread (:meth:`_scan_rounds`)."""
        if len(groups) < self.threads:
            for rows in groups:
                self._scan_rounds(queries, floor, k, rows, out)
            return
        nk = self._nk

        def scan(rows):
            group = queries.take(rows)
            slot_of, bits = self._slot_table(group)
            slot_of, table = nk.build_group_table(group.tokens, group.offsets, slot_of, bits)
            return nk.scan_range(self._tokens, self._offsets, self._doc_len64, self._len_index, self._lengths, 0,
                                 self.n_docs, slot_of, bits, table, group.lengths.astype(np.int64),
                                 np.ascontiguousarray(floor[rows], dtype=np.int64), self._score_code, self._scale,
                                 self._top, self.max_len, self._cosine_keys, self._n_planes, min(k, self.n_docs),
                                 _REFRESH_AFTER)

        for rows, heaps in zip(groups, self._map(scan, [(rows,) for rows in groups])):
            self._write_heaps(*heaps, k, rows, out)

    def _scan_rounds(self, queries: SetBatch, floor: np.ndarray, k: int, rows: np.ndarray, out: TopK) -> None:
        """The bit-sliced scan of one group (rows ``rows`` of ``queries``) on every thread, in rounds.

        Each round, the threads count consecutive parts of the docs (:func:`settopk.kernels.numba_kernels.scan_hits`),
        then each thread takes the pairs of the lanes it owns, whole words of them, in position order
        (``offer_hits``), and refreshes their tables (``refresh_needs``). Every query thus keeps one heap
        over all the docs: split by docs instead, each thread would keep a heap per query over its part,
        and most of that work comes early, while the k-th best is low, so a half of the docs costs most
        of what all of them cost. The rounds double in length (the tables are refreshed between rounds
        only), from ``_ROUND_FIRST`` docs a thread to a ``_ROUND_SHARE``-th of each thread's docs.
        """
        nk = self._nk
        group = queries.take(rows)
        n_group, threads = group.n_sets, self.threads
        slot_of, bits = self._slot_table(group)
        slot_of, table = nk.build_group_table(group.tokens, group.offsets, slot_of, bits)
        q_len = group.lengths.astype(np.int64)
        floor_t, need, planes, _, valid = nk.scan_tables(q_len, np.ascontiguousarray(floor[rows], dtype=np.int64),
                                                         self._lengths, self._score_code, self._scale, self._top,
                                                         self.max_len, self._cosine_keys, self._n_planes)
        t_true, t_used = floor_t.copy(), floor_t.copy()
        cap = min(k, self.n_docs)
        heap, heap_ov = nk.new_heaps(n_group, cap)
        size = np.zeros(n_group, dtype=np.int64)
        # Lanes are owned by whole words: no two threads write one word of the tables.
        words = -(-n_group // 64)
        cuts = np.linspace(0, words, min(threads, words) + 1).astype(np.int64) * 64
        lanes = [(int(a), int(min(b, n_group))) for a, b in zip(cuts[:-1], cuts[1:])]
        fits = need <= np.minimum(q_len[:, None], self._lengths[None, :])
        reach = np.stack([fits[a:b].sum(axis=0) for a, b in lanes]).astype(np.int64)
        hit_doc = np.empty((threads, _HIT_SLOTS), np.int32)  # row t: the pairs of the round's part t
        hit_lane, hit_ov = np.empty((threads, _HIT_SLOTS), np.int16), np.empty((threads, _HIT_SLOTS), np.int16)
        part, longest = _ROUND_FIRST, max(_ROUND_FIRST, -(-self.n_docs // (_ROUND_SHARE * threads)))
        start = 0
        while start < self.n_docs:
            bounds = np.minimum(start + part * np.arange(threads + 1), self.n_docs)
            reach_all = reach.sum(axis=0)

            def count(t):
                return nk.scan_hits(self._tokens, self._offsets, self._len_index, int(bounds[t]), int(bounds[t + 1]),
                                    slot_of, bits, table, planes, reach_all, valid, self._n_planes, self.max_len,
                                    hit_doc[t], hit_lane[t], hit_ov[t])

            taken = np.zeros(threads, dtype=np.int64)  # pairs of each part that the owners take
            start = int(bounds[-1])
            for t, (next_doc, n_hits) in enumerate(self._map(count, [(t,) for t in range(threads)
                                                                        if bounds[t + 1] > bounds[t]])):
                taken[t] = n_hits
                if next_doc < bounds[t + 1]:  # its pairs filled the buffers: the rest is counted next round
                    start = next_doc
                    break

            def offer(o):
                lo, hi = lanes[o]
                nk.offer_hits(hit_doc, hit_lane, hit_ov, taken, lo, hi, self._doc_len64, q_len, self._score_code,
                              self._scale, self._cosine_keys, cap, floor_t, t_true, heap, heap_ov, size)
                nk.refresh_needs(lo, hi, t_true, t_used, q_len, self._lengths, need, planes, reach[o],
                                 self._score_code, self._scale, self._top, self.max_len, self._cosine_keys)

            self._map(offer, [(o,) for o in range(len(lanes))])
            part = min(2 * part, longest)
        self._write_heaps(heap[:, :cap], heap_ov[:, :cap], size, k, rows, out)

    def _slot_table(self, group: SetBatch) -> tuple[np.ndarray, np.ndarray]:
        """A zeroed int32 ``slot_of`` for :func:`settopk.kernels.numba_kernels.build_group_table`, one entry
        per id of the docs and of ``group``, and its ``bits``: a bit per id where the docs' ids are
        local (``uint32`` docs: a slot table of up to 2**24 entries outgrows the caches, the bits do
        not), else empty (65536 slots stay in the L2 cache; the scan is as before)."""
        size = max(self._n_ids, group.id_bound)
        bits = np.zeros((size + 63) // 64 if self._local is not None else 0, np.uint64)
        return np.zeros(size, np.int32), bits

    def _write_heaps(self, heap: np.ndarray, heap_ov: np.ndarray, size: np.ndarray, k: int, rows: np.ndarray,
                     out: TopK) -> None:
        """Write one group's heaps (values, overlaps and sizes, as :func:`settopk.kernels.numba_kernels.scan_range`
        returns them), best first, into ``out`` at ``rows``."""
        pos = np.empty((len(rows), k), dtype=np.int64)
        ov = np.empty((len(rows), k), dtype=np.int64)
        self._nk.sort_heaps(heap, heap_ov, size, pos, ov)
        self._write(out, rows, pos, ov)

    def _postings_search(self, sub: SetBatch, floor: np.ndarray, k: int, rows: np.ndarray, out: TopK) -> None:
        """ScanCount of the queries ``sub`` (rows ``rows`` of the batch), split over the threads."""
        nk = self._nk
        pos = np.empty((sub.n_sets, k), dtype=np.int64)
        ov = np.empty((sub.n_sets, k), dtype=np.int64)
        floor = np.ascontiguousarray(floor, dtype=np.int64)
        # Queries cost unevenly (near-duplicates reach more docs): a few parts per thread keep the threads busy.
        n_parts = 1 if self.threads == 1 else min(_PARTS_PER_THREAD * self.threads, sub.n_sets)
        cuts = np.linspace(0, sub.n_sets, n_parts + 1).astype(np.int64)
        block_lo, block_hi = self._blocks

        def count(lo, hi):
            part = sub.take(np.arange(lo, hi))
            counts = np.zeros(self._block, dtype=np.uint8 if self.max_len <= 255 else np.uint16)
            nk.scancount_queries(self.postings.offsets, self.postings.positions, self._rank_pos, self._rank_len,
                                 block_lo, block_hi, self._ordered, counts, part.tokens, part.offsets, floor[lo:hi],
                                 k, self._score_code, self._scale, self._top, self.max_len, self._cosine_keys,
                                 pos[lo:hi], ov[lo:hi])

        self._map(count, [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a])
        self._write(out, rows, pos, ov)

    def _write(self, out: TopK, rows: np.ndarray, pos: np.ndarray, ov: np.ndarray) -> None:
        """Store positions ``pos`` (``-1`` padding) and overlaps ``ov`` of shape (len(rows), k) into ``out``."""
        real = pos >= 0
        safe = np.where(real, pos, 0)
        out.doc_ids[rows] = np.where(real, self.doc_ids[safe] if self.n_docs else -1, -1)
        out.overlap[rows] = np.where(real, ov, 0)
        out.doc_len[rows] = np.where(real, self.doc_len[safe], 0)


def warm_up(max_len: int, routing: str = "scan") -> None:
    """Load the compiled kernels a build and a search with ``max_len`` and ``routing`` use.

    Numba loads each compiled function from its disk cache (or compiles it) on its first call,
    about half a second in all (the threshold join's kernels too); a shard actor calls this in a thread while its docs arrive, so
    that the first search of the job does not pay it. Tiny indexes are built and searched on
    one thread and on two (where a lone scan group goes in rounds), with and without floors, on
    each path ``routing`` can take (the counters' width, and so the functions' types, depend on
    ``max_len``).

    Raises
    ------
    ValueError
        If ``max_len`` or ``routing`` is invalid.
    """
    docs = SetBatch(np.array([0, 3, 5, 5], dtype=np.int64), np.array([1, 2, 3, 2, 7], dtype=np.uint16))
    queries = SetBatch(np.array([0, 2, 3], dtype=np.int64), np.array([2, 3, 7], dtype=np.uint16))
    floor = np.array([1, -1], dtype=np.int64)
    for path in ("scan",) if routing == "scan" else ("scan", "postings"):
        for score in ("overlap", DEFAULT_SCORE):  # position-ranked and length-ranked postings
            for threads in (1, 2):
                index = NumbaShardIndex(docs, np.arange(3), max_len, score, routing=path, threads=threads)
                index.search(queries, 2)
                index.search(queries, 2, floor_key=floor)
    # The threshold join's kernels (settopk.kernels.join): one self-join and one probe.
    from .join import prepare_docs, self_join

    self_join(docs, np.arange(3), "0.5", DEFAULT_SCORE, max_len, threads=2)
    prepare_docs(docs, np.arange(3), "0.5", DEFAULT_SCORE, max_len, threads=1).probe(queries)


def _no_routing() -> dict:
    return {"scan": 0, "postings": 0, "scancount": 0, "prefix": 0}
