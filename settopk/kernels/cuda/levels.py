"""Search of one query batch of :class:`settopk.kernels.cuda.CupyShardIndex` through the sampling levels:
the host side of ``count_emit``, ``select_topk`` and ``decode_topk`` (``bitslice_topk.cu``) and of the
postings path (:mod:`settopk.kernels.cuda.postings`). CuPy is imported inside the functions.

Algorithm
---------
Scores and ties follow :func:`settopk.kernels.score_key` for the index's score (any of
:data:`settopk.kernels.SCORES`, passed to the kernels at run time; see ``common.cuh``):
a doc ``d`` is better than ``e`` for a query when its key is larger, or equal
with a lower position (doc id). The *eligible* docs of a query are all the
shard's docs, or, with a per-query floor ``F`` (``search(..., floor_key=...)``, taken from another
shard's results), those with ``key >= F``; the answer is the exact top-k of
the eligible docs. No score matrix is written. Each query carries a *bound*
``(T, P)``, a (key, position) pair; the counting kernel emits only the docs at
least as good as the bound (``key > T``, or ``key == T`` and
``position <= P``), through least-overlap tables per (query, doc length)
that are compared with bit-sliced counters inside the kernel. The bound starts
at ``(-1, -1)`` (tables all 0), which emits every doc, or at
``(F, 2**31 - 1)``, which emits exactly the docs with ``key >= F`` (tables
from :func:`settopk.kernels.cuda.floors.floor_tables`: the integer math of the
kernels' ``need_overlap``, in CuPy array operations before the first level).
Later bounds are only ever the k-th best of emitted candidates, so two
invariants hold: every emitted doc is eligible, and every eligible doc at least
as good as the true k-th best is emitted. The exact top-k of the emitted set is
therefore the answer; where fewer than ``k`` docs are eligible,
the bound never moves and the row is padded. A query whose floor exceeds
:func:`settopk.kernels.best_key_in_range` over the shard's doc lengths has no eligible
doc and is not sent to the GPU at all.

Bounds come from nested samples ("sampling levels"). With a ratio ``R``, level
``l`` holds every ``R**l``-th chunk of 32 slots of the length-sorted layout (a
sample stratified by length, read in whole chunks so its loads stay contiguous;
every level contains the next coarser one). The coarsest level has at least
``k`` docs and emits all its eligible ones. After each level, a query that
kept at least ``k`` candidates moves its bound to its k-th best kept
candidate (the others keep theirs): the kept candidates are eligible docs, so
their k-th best is never better than the true k-th best and never below the
floor, and every doc of the coarser level is also in the finer one. A level
``R`` times larger then emits about ``R k`` docs per query. The last level is
the whole shard.

A per-query counter counts every emission; where the candidate buffer of an
intermediate level overflows, the candidates it kept still give a valid bound.
Where the last level overflows, the query is scanned again with a buffer as
long as its exact count, in batches bounded by ``redo_bytes``; overflow costs
time, never exactness.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np

from ..cost import DOC_OVERHEAD_SLOTS, cupy_route_mask
from ..sets import SetBatch
from ..topk import TopK
from .floors import floor_tables
from .postings import TILE_DOCS
from .reemit import SORT_MAX, Reemission, pow2_at_least

__all__ = ["CHUNK_SLOTS", "DEFAULT_SHARED_LIMIT", "SORT_MAX", "LevelSearch"]

CHUNK_SLOTS = 32  # kChunkSlots in bitslice_topk.cu
DEFAULT_SHARED_LIMIT = 48 * 1024  # dynamic shared memory usable without opt-in
_LAST_POSITION = 2**31 - 1  # tie position that admits every doc of key T (positions are int32)
_COUNT_THREADS = 1024  # __launch_bounds__ of count_emit
_SELECT_THREADS = 1024
_THREADS = 256  # decode kernel
_MAX_GRID_Y = 65535

_log = logging.getLogger("settopk.kernels")


class _Batch(NamedTuple):
    """The device arrays one batch's levels share (see ``_search_batch``)."""

    query_arrays: tuple  # qoff, qtok, qlen, thr_ge, thr_gt, tie_pos
    postings_arrays: tuple  # the same, qtok in the postings' numbers (a wide shard's; else qtok itself)
    bound_key: object
    count: object
    cand_base: object
    cand_cap: object
    cand: object
    top: object
    k: int
    sort_size: int
    deferred: list  # sorted-order rows the postings left for a scan, where the batch has no table numbers


def _blocks_for(n_items: int) -> int:
    """Grid size of a grid-stride kernel over ``n_items`` items with ``_THREADS`` threads (at least 1)."""
    return max(1, min(-(-n_items // _THREADS), 65535 * 32))


class LevelSearch(Reemission):
    """The batch search of :class:`settopk.kernels.cuda.CupyShardIndex`, its base class: the sampling levels,
    their selections, the postings path and the re-scan of overflowed queries.

    The methods read the index's settings (``capacity``, ``sample_ratio``, ``tile_docs``,
    ``redo_bytes``, ``routing``, ``max_len``, ``score``, ``queries_per_block``, ``n_docs``), its
    kernels (``_kernels``, and ``_count`` with its shared memory ``_count_shared``), its counter planes
    and their tables (``_planes``, ``_thr_dtype``, ``_n_win``), its device layout
    (``_groups``, ``_chunk_start``, ``_slot_len``, ``_slot_pos``, ``_len_by_pos``, ``_doc_ids``,
    ``_longest``, ``_n_words``, ``_scan_slots``, and ``_tile_bounds``, an empty dict the tiles are cached
    in), its key constants (``_scale``, ``_score_code``, ``_cosine_keys``: cosine's key table and each
    key's fraction on the device, or one int32 for the other scores), its device's ``_n_sm``, its postings
    (``_postings``, or None) and its wide layout (``_wide``, or None), all set by the index's build, and its
    ``_query_tokens(batch, tokens, routed)``, which gives a batch's device ids and the count kernel's (on
    a wide shard it numbers the batch's ids and sets the table for the batch, after which its layout
    and postings are the batch's, so the caller holds ``_batch_turn()`` around each batch); they add to
    ``last_routing`` and ``rescans``.
    """

    @staticmethod
    def _fresh_routing() -> dict:
        """``last_routing`` before a search: no query on any path yet."""
        return {"scan": 0, "postings": 0, "filled": 0, "scan_s": 0.0, "postings_s": 0.0}

    def _capacity(self, k: int) -> int:
        if self.capacity is not None:
            return self.capacity
        return min(SORT_MAX, pow2_at_least(max(4096, 8 * k)))

    def _levels(self, k: int, capacity: int) -> list[tuple[int, int]]:
        """Sampling levels ``(stride, n_sample)``, coarsest first; the last is ``(1, n_docs)``.

        Level ``stride`` keeps every ``stride``-th chunk of 32 slots (whole
        chunks: see ``sample_slot`` in the kernel source). The coarsest level
        holds at least ``k`` docs (so its k-th best is a bound) and, where the
        ratio allows, at most ``capacity`` (so emitting all its docs fits).
        """
        n = self.n_docs
        if n <= capacity or capacity < k:
            return [(1, n)]
        ratio = self.sample_ratio or int(min(32, max(2, capacity // (2.5 * k))))
        n_chunks = -(-n // CHUNK_SLOTS)
        levels = [(1, n)]
        stride = ratio
        while stride < n_chunks:
            n_sample = self._sample_size(stride)
            if n_sample < k:
                break
            levels.append((stride, n_sample))
            if n_sample <= capacity:
                break
            stride *= ratio
        return levels[::-1]

    def _sample_size(self, stride: int) -> int:
        """Slots in chunks ``0, stride, 2 stride, ...`` (the last chunk of the shard may be short)."""
        n = self.n_docs
        n_chunks = -(-n // CHUNK_SLOTS)
        size = -(-n_chunks // stride) * CHUNK_SLOTS
        if (n_chunks - 1) % stride == 0:
            size -= n_chunks * CHUNK_SLOTS - n
        return size

    def _tile(self, n_sample: int, n_groups: int) -> int:
        """Sample indices per block on average: enough tiles for ~4 blocks per SM, within tile_docs and
        the grid limit."""
        want_tiles = -(-4 * self._n_sm // n_groups)
        tile = min(self.tile_docs, max(_COUNT_THREADS, -(-n_sample // want_tiles)))
        return max(tile, -(-n_sample // _MAX_GRID_Y), 1)

    def _tiles(self, stride: int, n_sample: int, n_groups: int):
        """The count kernel's tiles over sample indices ``[0, n_sample)`` of level ``stride``: device int64
        bounds of shape (n_tiles + 1,) and ``n_tiles``. As many tiles as :meth:`_tile` gives, of equal
        docs on a shard of sets of up to 255 ids; above (13 counter planes), cut where they hold equal
        work (each doc's ids rounded up to groups of 8, plus a per-doc overhead): with long sets, a tile
        of the longest docs would otherwise hold up the whole launch. Which cut suits which shard is
        measured in docs/benchmarks.md ("Long sets on the GPU"). Cached per ``(stride, n_sample,
        n_tiles)``: the layout does not change after the build."""
        tile = self._tile(n_sample, n_groups)
        n_tiles = -(-n_sample // tile)
        key = (stride, n_sample, n_tiles)
        if key not in self._tile_bounds:
            self._tile_bounds[key] = self._tile_cuts(stride, n_sample, n_tiles, tile)
        return self._tile_bounds[key], n_tiles

    def _tile_cuts(self, stride: int, n_sample: int, n_tiles: int, tile: int):
        """:meth:`_tiles`' bounds, computed: every ``tile`` docs, or at equal work on 13 counter planes."""
        import cupy

        if self._planes == 8:
            return cupy.minimum(cupy.arange(n_tiles + 1, dtype=np.int64) * tile, n_sample)
        i = cupy.arange(n_sample, dtype=np.int64)
        slot = (i >> 5) * (stride * CHUNK_SLOTS) + (i & (CHUNK_SLOTS - 1))  # sample_slot in the kernel source
        work = cupy.cumsum((self._slot_len[slot].astype(np.int64) + 7) // 8 * 8 + DOC_OVERHEAD_SLOTS)
        targets = cupy.arange(1, n_tiles, dtype=np.int64) * int(work[-1]) // n_tiles
        return cupy.concatenate([cupy.zeros(1, np.int64), cupy.searchsorted(work, targets, side="right"),
                                 cupy.full(1, n_sample, np.int64)])

    def _search_batch(self, queries: SetBatch, k: int, floor: np.ndarray | None, out: TopK,
                      routed: np.ndarray | None = None, tokens=None) -> np.ndarray:
        """Search one batch of queries through the sampling levels (see the module docstring).

        ``floor``: None, or host int64 of shape (n_queries,) with values in
        ``[-1, S]`` (``-1``: no floor), every query able to reach its floor.
        ``out``: C-contiguous host arrays of shape (n_queries, k), filled in place.
        ``routed``: host bool of shape (n_queries,), the queries sent to the postings (their
        postings built: a wide shard's), or None: chosen here by the cost model.
        ``tokens``: the batch's ids on the device, or None: uploaded here.

        Returns the rows (host int64) whose ``out`` rows are not final: queries of a wide shard's batch
        sent wholly to the postings (no table numbers for the count kernel) that the postings could not
        finish; the caller scans them in a batch of their own. Empty almost always.
        """
        import cupy

        n_q = queries.n_sets
        # Query rows sorted by length: a group's size filter is then as tight as its members'. The rows
        # point into the batch's own ids (qoff: each row's start), so the ids are uploaded as they are.
        lengths = queries.lengths
        order = np.argsort(lengths, kind="stable")
        qoff = cupy.asarray(queries.offsets[:-1][order])
        tokens, qtok = self._query_tokens(queries, tokens, routed)
        qlen = cupy.asarray(lengths[order].astype(np.int32))
        capacity = self._capacity(k)
        n_len = self._longest + 1
        cand = cupy.empty(n_q * capacity, dtype=np.uint64)
        count = cupy.zeros(n_q, dtype=np.int32)
        cand_base = cupy.arange(n_q, dtype=np.int64) * capacity
        cand_cap = cupy.full(n_q, capacity, dtype=np.int32)
        if floor is None or not (floor >= 0).any():
            thr_ge = cupy.zeros((n_q, n_len), dtype=self._thr_dtype)  # bound T = -1 admits every doc
            thr_gt = cupy.zeros((n_q, n_len), dtype=self._thr_dtype)
            bound_key = cupy.full(n_q, -1, dtype=np.int64)
            tie_pos = cupy.full(n_q, -1, dtype=np.int32)
        else:
            # Bound (F, last position): exactly the docs with key >= F; F = -1 gives the bound above.
            floor = floor[order]
            bound_key = cupy.asarray(floor.astype(np.int64))
            tie_pos = cupy.asarray(np.where(floor >= 0, _LAST_POSITION, -1).astype(np.int32))
            thr_ge, thr_gt = floor_tables(cupy, bound_key, qlen, n_len, self.max_len, self.score, self._cosine_keys)
        top = cupy.zeros((n_q, k), dtype=np.uint64)

        levels = self._levels(k, capacity)
        query_arrays = (qoff, qtok, qlen, thr_ge, thr_gt, tie_pos)
        routed = self._route(qoff, qtok, qlen) if routed is None else routed[order]
        post_arrays = self._postings_arrays(query_arrays, tokens) if routed.any() else query_arrays
        batch = _Batch(query_arrays, post_arrays, bound_key, count, cand_base, cand_cap, cand, top, k,
                       pow2_at_least(capacity), [])
        post_rows = None
        marks: list = []
        if not routed.all():
            self._timed(marks, "scan", self._scan_levels, np.flatnonzero(~routed), levels, batch)
        if routed.any():
            post_rows = self._timed(marks, "postings", self._postings_levels, np.flatnonzero(routed), levels, batch)

        counts = count.get()
        times = {path: cupy.cuda.get_elapsed_time(start, end) / 1e3 for path, start, end in marks}
        for path, seconds in times.items():
            self.last_routing[path + "_s"] += seconds
        if self._postings is not None:
            _log.debug("routing %s: %d of %d queries to the postings (%d of them filled or scanned); "
                       "GPU %.2f ms scan, %.2f ms postings", self.routing, int(routed.sum()), n_q,
                       int(routed.sum()) - (0 if post_rows is None else len(post_rows)),
                       times.get("scan", 0.0) * 1e3, times.get("postings", 0.0) * 1e3)
        overflowed = np.flatnonzero(counts > capacity)
        if len(overflowed):
            self.rescans += len(overflowed)
            posted_mask = np.zeros(n_q, dtype=bool)
            if post_rows is not None:
                posted_mask[post_rows] = True
            scanned, posted = overflowed[~posted_mask[overflowed]], overflowed[posted_mask[overflowed]]
            scanned = np.setdiff1d(scanned, batch.deferred)
            if len(scanned):
                self._rescan(scanned, counts, query_arrays, bound_key, k, top)
            if len(posted):  # the same path again, so the same candidates
                self._rescan(posted, counts, query_arrays, bound_key, k, top,
                             emit=self._postings_emitter(post_arrays, bound_key))

        doc_ids = cupy.empty((n_q, k), dtype=np.int64)
        overlap = cupy.empty((n_q, k), dtype=np.int16)
        doc_len = cupy.empty((n_q, k), dtype=np.int16)
        self._kernels["decode_topk"](
            (_blocks_for(n_q * k),),
            (_THREADS,),
            (top, np.int64(n_q * k), np.int32(k), qlen, cupy.asarray(order.astype(np.int32)), self._len_by_pos,
             np.int64(self._scale), np.int32(self.max_len), np.int32(self._score_code), self._cosine_keys,
             self._doc_ids, doc_ids,
             overlap, doc_len),
        )
        doc_ids.get(out=out.doc_ids)
        overlap.get(out=out.overlap)
        doc_len.get(out=out.doc_len)
        return order[np.asarray(batch.deferred, dtype=np.int64)]

    def _timed(self, marks: list, path: str, levels_fn, *args):
        """Run ``levels_fn(*args)`` between two CUDA events appended to ``marks`` as ``(path, start, end)``
        (read once the batch has synchronised, into ``last_routing[path + "_s"]``)."""
        import cupy

        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        out = levels_fn(*args)
        end.record()
        marks.append((path, start, end))
        return out

    def _groups_of(self, rows: np.ndarray):
        """Query groups of the count kernel for ``rows`` (host int array): device int32 of
        ``n_groups * queries_per_block`` query indices (``-1`` pads the last group) and ``n_groups``."""
        import cupy

        per_block = self.queries_per_block
        n_groups = -(-len(rows) // per_block)
        group_query = np.full(max(1, n_groups) * per_block, -1, dtype=np.int32)
        group_query[: len(rows)] = rows
        return cupy.asarray(group_query), n_groups

    def _reset_counts(self, batch, rows_dev) -> None:
        if len(rows_dev) == len(batch.count):
            batch.count.fill(0)
        else:
            batch.count[rows_dev] = 0

    def _scan_levels(self, rows: np.ndarray, levels, batch) -> None:
        """Every level for the queries ``rows`` (host, sorted order) through the count kernel, each followed
        by its selection."""
        import cupy

        group_query, n_groups = self._groups_of(rows)
        rows_dev = cupy.asarray(rows.astype(np.int32))
        for stride, n_sample in levels:
            last = stride == 1
            self._reset_counts(batch, rows_dev)
            self._count_emit(group_query, n_groups, batch.query_arrays, stride, n_sample, batch.count,
                             batch.cand_base, batch.cand_cap, batch.cand)
            self._select_level(batch, rows_dev, update=not last)
        self.last_routing["scan"] += len(rows)

    def _postings_levels(self, rows: np.ndarray, levels, batch):
        """Every level for the queries ``rows`` (host, sorted order) through the postings: the sampling
        levels over the first ``n_sample`` positions, then the whole shard, as one more sampling level for
        the queries whose bound they leave below key 1 and as the last level for the others.

        Where a level over the whole shard kept all its candidates (no overflow), they hold every doc
        that beats the query's bound, so its selection is the query's top-k: with fewer than k of
        them (bound below key 1, every doc sharing an id with the query), the top-k ends with the first
        other docs by position (key 0; counted in ``last_routing["filled"]``); where a capacity below k
        lost some, the query is scanned (or, in a batch without table numbers, left in
        ``batch.deferred``). Returns the rows whose last level ran through the postings (host), or None."""
        import cupy

        rows_dev = cupy.asarray(rows.astype(np.int32))

        def emit(members, limit):
            self._emit_postings(members, limit, batch.postings_arrays, batch.bound_key, batch.count, batch.cand_base,
                                batch.cand_cap, batch.cand)

        def kept(members_dev):  # host bool: no candidate of the last level lost to the buffer's capacity
            return (batch.count[members_dev] <= batch.cand_cap[members_dev]).get()

        # A level costs at least one tile of postings: of the sampling levels within one tile, the largest
        # alone is kept (it gives the best bound for that cost).
        sampling = [n for _stride, n in levels[:-1]]
        sampling = [n for n in sampling if n <= TILE_DOCS][-1:] + [n for n in sampling if n > TILE_DOCS]
        for n_sample in sampling:
            self._reset_counts(batch, rows_dev)
            emit(rows_dev, n_sample)
            self._select_level(batch, rows_dev, update=True)
        done = np.zeros(len(rows), dtype=bool)  # top-k final: the whole shard's candidates all kept
        if sampling and sampling[-1] >= self.n_docs:
            done = kept(rows_dev)
        else:
            below = np.flatnonzero(batch.bound_key[rows_dev].get() < 1)
            if len(below):
                below_dev = rows_dev[cupy.asarray(below)]
                self._reset_counts(batch, below_dev)
                emit(below_dev, self.n_docs)
                self._select_level(batch, below_dev, update=True)
                done[below] = kept(below_dev)
        eligible = batch.bound_key[rows_dev].get() >= 1
        short = done & ~eligible
        if short.any():
            self.last_routing["filled"] += int(short.sum())
            self._fill_key_zero(rows[short], batch)
        unfinished = rows[~done & ~eligible]
        if len(unfinished) and batch.query_arrays[1] is None:  # no table numbers: the caller scans them
            batch.deferred.extend(unfinished.tolist())
        elif len(unfinished):
            self._scan_levels(unfinished, levels, batch)
        self.last_routing["postings"] += int((done & eligible).sum())
        posted = rows[~done & eligible]
        if not len(posted):
            return rows[done & eligible] if (done & eligible).any() else None
        posted_dev = cupy.asarray(posted.astype(np.int32))
        self._reset_counts(batch, posted_dev)
        emit(posted_dev, self.n_docs)
        self._select_level(batch, posted_dev, update=False)
        self.last_routing["postings"] += len(posted)
        return rows[eligible]

    def _fill_key_zero(self, rows: np.ndarray, batch) -> None:
        """Complete the top-k rows of queries ``rows`` (host, sorted order) whose ``c < k`` candidates, already
        in ``batch.top``, are every doc sharing an id with them: entries ``c..k-1`` become the first docs by
        position among the others (key 0, so position order is their order), as far as the shard has them."""
        import cupy

        rows_dev = cupy.asarray(rows.astype(np.int64))
        k = batch.k
        top = batch.top[rows_dev]
        have = cupy.minimum(batch.count[rows_dev], k).astype(np.int64)
        width = min(self.n_docs, k + int(have.max()))  # the first k others lie among the first k + c positions
        taken = cupy.zeros((len(rows), width + 1), dtype=bool)  # column `width`: positions past it
        rank = cupy.arange(k, dtype=np.int64)[None, :]
        position = (~top & 0xFFFFFFFF).astype(np.int64)  # the encoding: (key << 32) | ~position
        held = rank < have[:, None]
        taken[cupy.nonzero(held)[0], cupy.minimum(position[held], width)] = True
        free = ~taken[:, :width]
        order = cupy.cumsum(free, axis=1) - 1  # rank of each free position among its row's
        pick = free & (order < (k - have)[:, None])
        row, pos = cupy.nonzero(pick)
        top[row, have[row] + order[row, pos]] = (~pos.astype(np.uint64)) & np.uint64(0xFFFFFFFF)
        batch.top[rows_dev] = top

    def _emit_postings(self, members, limit: int, query_arrays, bound_key, count, cand_base, cand_cap, cand) -> None:
        """Launch the postings kernel for ``members`` (device int32 query indices) over positions below ``limit``."""
        qoff, qtok, qlen, thr_ge, _thr_gt, tie_pos = query_arrays
        self._postings.emit(members, limit, qoff, qtok, qlen, thr_ge, self._longest, bound_key, tie_pos,
                            self._len_by_pos, self._scale, self._score_code, self._cosine_keys, count, cand_base,
                            cand_cap, cand)

    def _postings_emitter(self, query_arrays, bound_key):
        """``emit(members, count, cand_base, cand_cap, cand)`` of :meth:`_reemit` through the postings
        over the whole shard (members: host int query indices, sorted order)."""
        import cupy

        def emit(members, count, cand_base, cand_cap, cand):
            self._emit_postings(cupy.asarray(np.asarray(members).astype(np.int32)), self.n_docs, query_arrays,
                                bound_key, count, cand_base, cand_cap, cand)

        return emit

    def _select_level(self, batch, rows_dev, *, update: bool) -> None:
        _qoff, _qtok, qlen, thr_ge, thr_gt, tie_pos = batch.query_arrays
        self._select(batch.cand, batch.cand_base, batch.cand_cap, batch.count, rows_dev, len(rows_dev), batch.k,
                     batch.sort_size, batch.top, update=update, bound_key=batch.bound_key, tie_pos=tie_pos, qlen=qlen,
                     thr_ge=thr_ge, thr_gt=thr_gt)

    def _route(self, qoff, qtok, qlen, eligible: np.ndarray | None = None) -> np.ndarray:
        """Which of a narrow shard's batch's queries go to its postings (host bool of shape (n_queries,)): the
        cost model's choice (:func:`settopk.kernels.cost.cupy_route_mask`) among the ``eligible`` ones (host
        bool; None: all), none without postings. A wide shard's batches are routed with their chunk
        (``CupyShardIndex._runs``), which builds the postings for them."""
        routed = np.zeros(len(qlen), dtype=bool)
        if self._postings is None:
            return routed
        routed = cupy_route_mask(self.routing, self._postings.entries(qoff, qtok, qlen), self._postings.n_tiles,
                                 self._scan_slots, self.queries_per_block)
        return routed if eligible is None else routed & eligible

    def _postings_arrays(self, query_arrays: tuple, tokens) -> tuple:
        """``query_arrays`` for the postings kernel: on a wide shard, with the batch's ids (``tokens``, device)
        in its postings' numbers (:meth:`settopk.kernels.cuda.wide.WidePostings.numbers`); else as they are."""
        if self._wide is None:
            return query_arrays
        qoff, _qtok, *rest = query_arrays
        return (qoff, self._postings.numbers(tokens), *rest)

    def _count_emit(self, group_query, n_groups, query_arrays, stride, n_sample, count, cand_base, cand_cap, cand):
        """Launch count_emit over sample indices [0, n_sample) (slot = index * stride) for ``n_groups`` groups."""
        qoff, qtok, qlen, thr_ge, thr_gt, tie_pos = query_arrays
        if self._wide is not None:  # its layout in this batch's numbers, once per batch
            self._wide.rewrite()
        tile_start, n_tiles = self._tiles(stride, n_sample, n_groups)
        if self._count_shared > DEFAULT_SHARED_LIMIT:  # per launch: indexes of other shapes share the function
            self._count.max_dynamic_shared_size_bytes = self._count_shared
        self._count(
            (n_groups, n_tiles),
            (_COUNT_THREADS,),
            (
                self._groups,
                self._chunk_start,
                self._slot_len,
                self._slot_pos,
                np.int64(n_sample),
                np.int64(stride),
                tile_start,
                group_query,
                qoff,
                qtok,
                qlen,
                thr_ge,
                thr_gt,
                tie_pos,
                np.int32(self._longest),
                np.int32(self._n_win),
                np.int32(self._n_words),
                np.int64(self._scale),
                np.int32(self._score_code),
                self._cosine_keys,
                count,
                cand_base,
                cand_cap,
                cand,
            ),
            shared_mem=self._count_shared,
        )

    def _select(self, cand, cand_base, cand_cap, count, rows, n_rows, k, sort_size, top, *, update,
                bound_key, tie_pos, qlen, thr_ge, thr_gt):
        """Launch select_topk for ``n_rows`` rows (query indices in ``rows``)."""
        kernel = self._kernels[f"select_topk_{self._planes}"]
        shared = 8 * sort_size
        if shared > DEFAULT_SHARED_LIMIT:
            kernel.max_dynamic_shared_size_bytes = shared
        kernel(
            (n_rows,),
            (_SELECT_THREADS,),
            (
                cand,
                cand_base,
                cand_cap,
                count,
                rows,
                np.int32(k),
                np.int32(sort_size),
                top,
                np.int32(1 if update else 0),
                bound_key,
                tie_pos,
                qlen,
                np.int32(self._longest),
                np.int64(self._scale),
                np.int32(self.max_len),
                np.int32(self._score_code),
                self._cosine_keys,
                thr_ge,
                thr_gt,
            ),
            shared_mem=shared,
        )
