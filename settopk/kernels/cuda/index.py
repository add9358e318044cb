"""CuPy/CUDA backend: exact shard-local top-k with bit-sliced counters and fused count thresholds.

The kernels live in ``bitslice_topk.cu`` beside this file (its header explains
the layout and the counting); :mod:`settopk.kernels.cuda.modules` compiles them once per
device. This module checks inputs, builds the length-sorted chunked layout on the
GPU and splits a search into batches; :mod:`settopk.kernels.cuda.levels` searches a batch
through the sampling levels (its docstring gives the algorithm). CuPy is imported
inside the functions, so importing this module needs no CuPy.

References: positional population count with carry-save adders (Klarqvist,
Mula, Lemire, "Efficient computation of positional population counts using
SIMD instructions", 2021; Mula, Kurz, Lemire, "Faster population counts using
AVX2 instructions", 2018); count thresholds per doc length as a size filter
(as in exact set-similarity joins, e.g. Mann, Augsten, Bouros, VLDB 2016).
"""

from __future__ import annotations

import contextlib
import numbers
import threading
from typing import NamedTuple

import numpy as np

from ..cost import DOC_OVERHEAD_SLOTS, WIDE_PASS_S_PER_SLOT, cupy_route_mask
from ..keys import (DEFAULT_SCORE, SCORES, best_key_in_range, check_floor_key, cosine_key_fractions, cosine_key_table,
                    key_scale)
from ..postings import check_routing
from ..sets import MAX_VOCAB, NARROW_VOCAB, SetBatch
from ..topk import TopK, empty_topk
from .floors import threshold_table_type
from .levels import CHUNK_SLOTS, DEFAULT_SHARED_LIMIT, SORT_MAX, LevelSearch
from .loading import bitslice_kernels, check_set_batch, upload_sets
from .postings import GpuPostings
from .threshold import ThresholdSearch
from .wide import WideLayout, WidePostings, split_by_distinct

__all__ = ["CupyShardIndex", "warm_up"]

_MAX_LEN_LIMIT = 4096  # 13 counter planes count to 8191; the job's configs allow at most 4096
_SPREAD_MAX_LEN = 255  # kSpreadMaxLen: positions of a doc build_layout spreads over banks at once
_POSTINGS_MAX_LEN = 255  # the GPU postings count overlaps in bytes
_WINDOW_LENS = 512  # doc lengths whose threshold planes a 13-plane count block holds at once
_IDS_PER_GROUP = 8  # kIdsPerGroup
_BUILD_WARPS = 4  # kBuildWarps in bitslice_topk.cu: warps (chunks) per block of build_layout


class _Run(NamedTuple):
    """One batch of a chunk of queries, as ``CupyShardIndex._runs`` cuts it."""

    rows: np.ndarray  # host int64, ascending: the batch's rows among the searched queries
    batch: SetBatch  # those queries (host)
    routed: np.ndarray | None  # host bool per row: sent to the postings (built for them); None: the batch routes
    tokens: object  # the batch's ids on the device, or None: the batch uploads them


def warm_up(routing: str = "scan") -> None:
    """Create the CUDA context on the current device and load every kernel a build and a search
    with ``routing`` use.

    All of it happens on first use anyway; a shard actor calls this in a thread while the
    corpus is read and its docs arrive, so the index build does not wait for it. Besides this
    module's kernels, a tiny index is built and searched once, which loads CuPy's own kernels
    (casts, reductions, sorts, scans) into the process; where ``routing`` is not ``"scan"``, a
    second one holds postings and sends its queries to them, which loads theirs. Compiled
    kernels are cached on disk by CuPy, so only the first process on a machine compiles.

    Raises
    ------
    ValueError
        If ``routing`` is not one of :data:`settopk.kernels.postings.ROUTINGS`.
    """
    import cupy

    check_routing(routing)
    bitslice_kernels(cupy.cuda.Device().id)
    docs = SetBatch(np.array([0, 3, 5, 5], dtype=np.int64), np.array([1, 2, 3, 2, 7], dtype=np.uint16))
    queries = SetBatch(np.array([0, 2], dtype=np.int64), np.array([2, 3], dtype=np.uint16))
    for path in ("scan",) if routing == "scan" else ("scan", "postings"):
        CupyShardIndex(docs, np.arange(3), max_len=8, routing=path).search(queries, 2)


class CupyShardIndex(LevelSearch, ThresholdSearch):
    """One shard's docs in GPU memory, searched exactly with the bit-sliced kernel.

    Implements :class:`settopk.kernels.ShardIndex` (``build_index("cupy", ...)``):
    ``search`` returns the :class:`settopk.kernels.TopK` of :class:`settopk.kernels.NumpyShardIndex`,
    identical. The search of each batch is :class:`settopk.kernels.cuda.levels.LevelSearch`'s;
    ``threshold_search`` (:class:`settopk.kernels.cuda.threshold.ThresholdSearch`) returns its
    :class:`settopk.kernels.ThresholdPairs`, identical too.

    Parameters
    ----------
    docs : SetBatch or sequence of SetBatch
        The shard's ``n_docs`` docs in host memory, in ``doc_ids`` order:
        ``offsets`` int64 of shape (n_docs + 1,), ``tokens`` uint16 (or uint32
        where ``vocab_size`` exceeds 65536), both C-contiguous; each set sorted and distinct with at most ``max_len`` ids,
        all below ``vocab_size``. A sequence of batches (the pieces a shard
        takes from the corpus readers) is concatenated on the GPU, in order,
        which saves the host a copy of every id.
    doc_ids : numpy.ndarray of integer dtype, shape (n_docs,)
        Global doc ids (host), strictly increasing, so position order is id
        order. Stored as int64.
    max_len : int
        Bound on set sizes, in ``[1, 4096]`` for every score; fixes
        the key scale (:func:`settopk.kernels.key_scale`). Up to 255,
        overlaps are counted in 8 bit planes against uint8 threshold tables;
        above, in 13 planes against uint16 tables, and
        ``routing`` is ``"scan"`` or ``"auto"`` (which then scans: the postings
        count overlaps in bytes).
    vocab_size : int, default 65536
        Token ids are below this, in ``[1, 16777216]``. Above 65536 the shard
        is *wide* (:mod:`settopk.kernels.cuda.wide`): its layout takes 3 bytes
        per id plus a 2-byte working copy searched in each query batch's own
        dense ids, batches are cut where their queries hold more distinct ids
        than the count kernel's table fits, and its postings (4 bytes per id
        of the vocabulary between searches) are built for each chunk of
        queries from the layout, over the ids of the queries routed to them.
    capacity : int, optional
        Candidate slots per query and sampling level, in ``[1, 16384]``
        (default: the smallest power of two ``>= max(4096, 8 k)``, capped at
        16384). Small values only force the overflow path (tests use that);
        results stay exact.
    tile_docs : int, default 65536
        Docs one block scans for one query group (a tile), on average: above
        255 ids per set the tiles are cut where they hold equal numbers of ids,
        so a tile of long docs holds fewer. Smaller tiles spread small shards over more blocks;
        each block builds its query table once, so larger tiles amortise that.
    query_batch : int, default 4096
        Queries searched together; bounds candidate buffers (``8 * capacity``
        bytes per query) and threshold tables on the GPU.
    redo_bytes : int, default 2**30
        GPU memory for candidate buffers of re-scanned queries (those whose
        last-level buffer overflowed); sets how many are re-scanned at once.
    sample_ratio : int, optional
        Ratio ``R`` between sampling levels, ``>= 2`` (default:
        ``capacity // (2.5 k)`` clipped to [2, 32], so a level expects about
        ``2.5`` times fewer candidates than it has room for).
    score : str, default "braun_blanquet"
        What :meth:`search` ranks by, one of :data:`settopk.kernels.SCORES`.
    routing : str, default "scan"
        ``"scan"``: every query scans the shard. ``"auto"``: an inverted index
        is built too (:class:`settopk.kernels.cuda.postings.GpuPostings`,
        ``2 n_tokens + 8 n_words ceil(n_docs / 65536)`` bytes of GPU memory;
        on a wide shard, built per chunk of queries) and a query runs its
        levels through its ids' postings where the cost model
        (:func:`settopk.kernels.cost.cupy_route_mask`) says that is cheaper;
        one that shares ids with fewer than k docs ends its top-k with the
        first other docs by position (key 0). ``"postings"``: every query goes
        to the postings. Results are identical in every mode.

    Attributes
    ----------
    n_docs : int
        Number of docs in the shard.
    last_routing : dict
        The last ``search``'s routing, summed over its batches: ``scan`` and
        ``postings`` (queries per path of the last level), ``filled``
        (routed to the postings, with fewer than k docs sharing an id: the
        rest of their top-k is the first other docs by position, key 0, and
        they have no last level), ``scan_s`` and ``postings_s`` (GPU seconds
        of each path's levels with their selections, CUDA events).
    postings_bytes : int
        GPU bytes of the postings (0 with ``routing="scan"``).
    device_bytes : int
        GPU bytes the index holds between searches, postings included.
    rescans : int
        Queries of the last ``search`` whose last-level buffer overflowed and
        were scanned again (a diagnostic; 0 in the common case).
    last_skipped : int
        Queries of the last ``search`` that their floor skipped (not sent to
        the GPU; 0 without floors).
    queries_per_block : int
        32, or 16 when a 32-bit table over the shard's ids would not fit in
        shared memory (ids above about 54,000).

    Raises
    ------
    ValueError
        If an argument has the wrong type, dtype, shape, contiguity or range
        (an unknown ``score`` included),
        if ``doc_ids`` is not strictly increasing, if ``docs.offsets`` is not
        non-decreasing, if a doc is longer than ``max_len`` or holds an id
        ``>= vocab_size``, or if the shard has ``2**31`` docs or more.

    Notes
    -----
    GPU memory held: the layout (16 bytes per 8 ids, rounded up per doc and
    per 32 docs of similar length; about ``2.2 * n_tokens`` bytes), plus 16
    bytes per doc (slot length and position, length by position, doc id) and
    8 bytes per 32 docs. During the build, the CSR arrays are on the GPU too
    (``8 * n_docs + 2 * n_tokens`` bytes). The index lives on the CUDA device
    that is current when it is built.
    """

    def __init__(
        self,
        docs,
        doc_ids: np.ndarray,
        max_len: int,
        vocab_size: int = NARROW_VOCAB,
        *,
        capacity: int | None = None,
        tile_docs: int = 1 << 16,
        query_batch: int = 4096,
        redo_bytes: int = 1 << 30,
        sample_ratio: int | None = None,
        score: str = DEFAULT_SCORE,
        routing: str = "scan",
    ):
        import cupy

        check_routing(routing)
        key_scale(max_len, score)  # an unknown score fails here
        if not 1 <= max_len <= _MAX_LEN_LIMIT:
            raise ValueError(f"max_len must be in [1, {_MAX_LEN_LIMIT}] for the GPU backend, found {max_len}")
        if not 1 <= vocab_size <= MAX_VOCAB:
            raise ValueError(f"vocab_size must be in [1, {MAX_VOCAB}], found {vocab_size}")
        if max_len > _POSTINGS_MAX_LEN and routing == "postings":
            raise ValueError(f"routing 'postings' counts overlaps in bytes on the GPU (max_len <= {_POSTINGS_MAX_LEN}), "
                             f"found max_len={max_len}; use routing 'scan' or 'auto' (which scans such a shard)")
        for name, value in (("tile_docs", tile_docs), ("query_batch", query_batch), ("redo_bytes", redo_bytes)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, found {value}")
        if capacity is not None and not 1 <= capacity <= SORT_MAX:
            raise ValueError(f"capacity must be in [1, {SORT_MAX}], found {capacity}")
        if sample_ratio is not None and sample_ratio < 2:
            raise ValueError(f"sample_ratio must be >= 2, found {sample_ratio}")
        pieces = [docs] if isinstance(docs, SetBatch) else list(docs)
        for piece in pieces:
            check_set_batch(piece, "docs", max_len, vocab_size)
        n_sets = sum(piece.n_sets for piece in pieces)
        doc_ids = np.asarray(doc_ids)
        if doc_ids.dtype.kind not in "iu":
            raise ValueError(f"doc_ids must have an integer dtype, found {doc_ids.dtype}")
        if doc_ids.shape != (n_sets,):
            raise ValueError(f"doc_ids must have shape ({n_sets},), found {doc_ids.shape}")
        if n_sets >= 2**31:
            raise ValueError(f"a shard holds at most 2**31 - 1 docs, found {n_sets}; use more shards")
        doc_ids = doc_ids.astype(np.int64, copy=False)
        if len(doc_ids) > 1 and not (doc_ids[1:] > doc_ids[:-1]).all():
            raise ValueError("doc_ids must be strictly increasing")

        self.doc_ids = doc_ids
        self.max_len = max_len
        self.vocab_size = vocab_size
        self.capacity = capacity
        self.tile_docs = tile_docs
        self.query_batch = query_batch
        self.redo_bytes = redo_bytes
        self.sample_ratio = sample_ratio
        self.score = score
        self.routing = routing
        self.rescans = 0
        self.last_skipped = 0
        self.last_routing = self._fresh_routing()
        self.postings_bytes = 0
        self._postings = None
        self._wide = None  # a WideLayout where vocab_size > 65536
        self._join_pieces, self._join_side = pieces, None  # the threshold join's host docs, its side per threshold
        # A wide shard's remapped layout and table size are the index's own, set for one batch at a
        # time; a GPU actor runs two searches at once, so its batches take turns (_batch_turn).
        self._wide_turn = threading.Lock()
        self._scale = key_scale(max_len, score)
        self._score_code = SCORES.index(score)  # the kernels' Score enum follows settopk.kernels.SCORES
        # Cosine's keys, then the fraction of each key (4 bytes per (overlap, length) pair and per key: 64 MB at
        # max_len 4096; common.cuh); the kernels take a pointer for every score and only cosine reads it.
        self._cosine_keys = cupy.asarray(np.concatenate([cosine_key_table(max_len), cosine_key_fractions(max_len)])
                                         if score == "cosine" else np.zeros(1, np.int32))
        # uint8 tables and 8 counter planes (overlaps up to 255), or uint16 and 13 (up to 8191).
        self._thr_dtype, never = threshold_table_type(max_len)
        self._planes = int(never).bit_length()
        device = cupy.cuda.Device()
        self._device_id = device.id
        self._n_sm = int(device.attributes["MultiProcessorCount"])
        self._kernels = bitslice_kernels(self._device_id)
        # Dynamic shared memory a count kernel may take: the device's opt-in limit less its static arrays.
        static = max(int(kernel.shared_size_bytes) for name, kernel in self._kernels.items() if name.startswith("count"))
        optin = int(device.attributes.get("MaxSharedMemoryPerBlockOptin", DEFAULT_SHARED_LIMIT))
        self._shared_budget = optin - static
        self._build(pieces)

    @property
    def n_docs(self) -> int:
        """Number of docs in the shard."""
        return len(self.doc_ids)

    @property
    def device_bytes(self) -> int:
        """GPU bytes the index holds between searches: the layout (on a wide shard its low bits, high
        bytes, working copy and id map), the per-slot and per-doc arrays, and the postings."""
        arrays = (self._slot_len, self._slot_pos, self._chunk_start, self._len_by_pos, self._doc_ids)
        layout = self._wide.nbytes if self._wide is not None else int(self._groups.nbytes)
        return layout + sum(int(a.nbytes) for a in arrays) + self.postings_bytes

    # ---- build ----------------------------------------------------------------

    def _build(self, pieces: list) -> None:
        """Upload the CSR arrays, validate them on the GPU, and build the length-sorted chunked layout."""
        import cupy

        n = self.n_docs
        wide = self.vocab_size > NARROW_VOCAB
        offsets, tokens = upload_sets(pieces, np.uint32 if wide else np.uint16)
        lengths = offsets[1:] - offsets[:-1]
        stats = cupy.asarray(np.array([0, 0, -1], dtype=np.int64))  # min length, max length, max id: one transfer
        if n:
            stats[0] = lengths.min()
            stats[1] = lengths.max()
        if len(tokens):
            stats[2] = tokens.max()
        lo, hi, top = (int(v) for v in stats.get())
        hi = max(hi, 0)
        if lo < 0:
            raise ValueError("docs.offsets must be non-decreasing")
        if hi > self.max_len:
            raise ValueError(f"a set of docs has {hi} ids, more than max_len={self.max_len}")
        if top >= self.vocab_size:
            raise ValueError(f"docs hold id {top}, not below vocab_size={self.vocab_size}")
        self._tile_bounds = {}  # the count kernel's tiles per level shape (LevelSearch._tiles)
        self._shortest = max(lo, 0)  # with hi: the length range the floors are checked against
        self._longest = hi
        self._n_words = max(1, top + 1)  # ids above the largest doc id can match no doc
        self._len_by_pos = lengths.astype(np.uint16)
        if self.routing != "scan" and n and not wide and self._planes == 8:
            self._postings = GpuPostings(offsets, tokens, self._n_words)
            self.postings_bytes = self._postings.nbytes
        self._doc_ids = cupy.asarray(self.doc_ids) if n else cupy.zeros(1, dtype=np.int64)  # decoded on the GPU

        # Slots: docs sorted by (length, position); the key is unique, so any sort is stable here.
        order = cupy.sort((lengths << 32) | cupy.arange(n, dtype=np.int64))
        self._slot_len = (order >> 32).astype(np.uint16)
        self._slot_pos = (order & 0xFFFFFFFF).astype(np.int32)
        del order
        n_chunks = -(-n // CHUNK_SLOTS)
        last = cupy.minimum(cupy.arange(1, n_chunks + 1, dtype=np.int64) * CHUNK_SLOTS, n) - 1
        chunk_len = self._slot_len[last].astype(np.int32)  # each chunk's longest doc
        chunk_groups = ((chunk_len + _IDS_PER_GROUP - 1) // _IDS_PER_GROUP).astype(np.int32)
        sizes = chunk_groups.astype(np.int64) * CHUNK_SLOTS
        self._chunk_start = cupy.cumsum(sizes) - sizes  # in uint4 elements
        total = int(sizes.sum()) if n_chunks else 0
        self._scan_slots = total * _IDS_PER_GROUP + DOC_OVERHEAD_SLOTS * n  # the cost model's scan size
        # Never a null pointer, and never unwritten (a wide shard's remap reads every element); a wide one's low bits.
        self._groups = (cupy.empty if total else cupy.zeros)((max(1, total), 4), dtype=np.uint32)
        high = cupy.zeros((max(1, total), 2), dtype=np.uint32) if wide else self._groups
        if total:
            longest = min(int(chunk_len[-1]), _SPREAD_MAX_LEN)  # chunks are length-sorted
            stride = longest + (longest & 1)  # ids per lane in the build's shared memory (even: aligned cursors)
            shared = _BUILD_WARPS * 32 * (tokens.itemsize * stride + 64)
            kernel = self._kernels[f"build_layout_{tokens.dtype.name}"]
            if shared > DEFAULT_SHARED_LIMIT:
                kernel.max_dynamic_shared_size_bytes = shared
            kernel((max(1, min(-(-n_chunks // _BUILD_WARPS), 65535 * 32)),), (_BUILD_WARPS * 32,),
                   (offsets, tokens, self._slot_pos, self._chunk_start, chunk_groups, np.int64(n_chunks),
                    np.int64(n), np.int32(stride), self._groups, high), shared_mem=shared)
        if n == 0:  # keep every device pointer valid
            self._slot_len = cupy.zeros(1, dtype=np.uint16)
            self._slot_pos = cupy.zeros(1, dtype=np.int32)
            self._chunk_start = cupy.zeros(1, dtype=np.int64)
            self._len_by_pos = cupy.zeros(1, dtype=np.uint16)

        n_len = self._longest + 1
        # Threshold planes of a window of doc lengths in the count kernel's shared memory: every length
        # with 8 planes; with 13 (4097 lengths would take 443 KiB), at most _WINDOW_LENS, and no more
        # than a table of 16-bit words over 65,536 ids leaves (devices with less shared memory).
        per_len = (2 * self._planes + 1) * 4  # ge and gt planes and the reach mask of one doc length
        if self._planes == 8:
            self._n_win = n_len
        else:
            table = -(-min(self._n_words, NARROW_VOCAB) * 2 // 16) * 16
            self._n_win = max(1, min(n_len, _WINDOW_LENS, (self._shared_budget - table) // per_len))
        self._thresholds_shared = per_len * self._n_win
        if wide:
            # A batch's ids get table words 1..n: as many as a 32-query table fits (cut batches keep n below).
            self._batch_ids = min(NARROW_VOCAB - 1, (self._shared_budget - self._thresholds_shared) // 16 * 4 - 1)
            self._wide = WideLayout(self._groups, high, self._n_words, self._kernels["remap_layout"])
            self._groups = self._wide.groups
            self._n_words = self._batch_ids + 1
            if self.routing != "scan" and n and self._planes == 8:
                self._postings = WidePostings(self._wide, tokens, (self._chunk_start, self._slot_len, self._slot_pos),
                                              n, self._kernels["layout_postings"], self._n_sm)
                self.postings_bytes = self._postings.nbytes
        self._set_table(self._n_words)
        cupy.cuda.get_current_stream().synchronize()  # the build's time includes its GPU work

    def _set_table(self, n_words: int) -> None:
        """Pick the count kernel (32 queries a block with 32-bit table words, or 16 with 16-bit ones) for
        a table of ``n_words`` ids and the shard's threshold planes in shared memory."""
        for queries, word_bytes in ((32, 4), (16, 2)):
            shared = -(-n_words * word_bytes // 16) * 16 + self._thresholds_shared
            if shared <= self._shared_budget:
                break
        else:  # unreachable for ids < 65536 on any GPU with >= 148 KiB per block
            raise ValueError(f"the count kernel needs {shared} bytes of shared memory, the device offers {self._shared_budget}")
        self._n_words = n_words
        self.queries_per_block = queries
        self._count_shared = shared
        any_score = self.score != "braun_blanquet" or self._planes != 8
        self._count = self._kernels[f"count{queries}" + ("_any" if any_score else "") + f"_{self._planes}"]

    # ---- search ---------------------------------------------------------------

    def search(self, queries: SetBatch, k: int, floor_key=None) -> TopK:
        """Exact shard-local top-k for each query by the index's score, optionally above a per-query floor.

        Parameters
        ----------
        queries : SetBatch
            ``n_queries`` sets in host memory (``offsets`` int64, ``tokens``
            uint16, C-contiguous), each with at most ``max_len`` ids, all below
            ``vocab_size``.
        k : int
            Results per query, ``>= 1``.
        floor_key : numpy.ndarray of int, shape (n_queries,), optional
            Host array of per-query floors on the score key
            (:func:`settopk.kernels.score_key`): only docs with ``key >= floor_key[q]``
            are returned for query ``q`` (ties at the floor are kept); ``-1``
            means no floor. A query whose floor exceeds
            :func:`settopk.kernels.best_key_in_range` over the shard's doc lengths is
            not sent to the GPU (its row is all padding). None (default): no
            floor for any query.

        Returns
        -------
        TopK
            Host arrays of shape (n_queries, k): ``doc_ids`` int64, ``overlap``
            and ``doc_len`` int16, ordered by score descending then doc id
            ascending; ``-1`` ids (overlap and doc_len 0) pad rows where fewer
            than ``k`` docs of the shard reach the query's floor. Identical to
            :meth:`settopk.kernels.NumpyShardIndex.search`.

        Raises
        ------
        ValueError
            If ``queries`` has the wrong type, dtype or contiguity, a query is
            longer than ``max_len`` or holds an id ``>= vocab_size``, ``k``
            is not an integer ``>= 1``, or ``floor_key`` is not an integer
            array of shape ``(n_queries,)`` with values ``>= -1``.

        Notes
        -----
        Sets ``rescans`` and ``last_skipped`` (the queries the floors skipped).
        """
        import cupy

        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"k must be an integer >= 1, found {k!r}")
        k = int(k)
        self._check_queries(queries)
        lengths = queries.lengths
        floor = check_floor_key(floor_key, queries.n_sets, self.max_len, self.score)
        self.rescans = 0
        self.last_skipped = 0
        self.last_routing = self._fresh_routing()
        if self.n_docs == 0 or queries.n_sets == 0:
            return empty_topk(queries.n_sets, k)
        if floor is None:
            active = np.arange(queries.n_sets)
        else:
            reachable = best_key_in_range(lengths, self._shortest, self._longest, self.max_len, self.score)
            active = np.flatnonzero(floor <= reachable)
            self.last_skipped = queries.n_sets - len(active)
        # Rows of searched queries are written once, straight from the GPU; only skipped rows are padded.
        out = TopK(np.empty((queries.n_sets, k), np.int64), np.empty((queries.n_sets, k), np.int16),
                   np.empty((queries.n_sets, k), np.int16))
        if len(active) < queries.n_sets:
            skipped = np.setdiff1d(np.arange(queries.n_sets), active)
            out.doc_ids[skipped], out.overlap[skipped], out.doc_len[skipped] = -1, 0, 0
        with cupy.cuda.Device(self._device_id):
            for chunk in self._chunks(active):
                with self._batch_turn():
                    left = self._search_runs(self._runs(queries, chunk), k, floor, out)
                    if len(left):  # a batch the postings could not finish and that has no table numbers
                        self._search_runs(self._runs(queries, left, eligible=np.zeros(len(left), bool)), k, floor, out)
        return out

    def _search_runs(self, runs: list, k: int, floor: np.ndarray | None, out: TopK) -> np.ndarray:
        """Search each :class:`_Run` into its rows of ``out``; returns the rows (host int64, ascending) left for a
        scan in a batch of their own (see ``LevelSearch._search_batch``)."""
        left = []
        for run in runs:
            rows = run.rows
            contiguous = rows[-1] - rows[0] == len(rows) - 1
            # The common case, contiguous rows: decode into the output rows themselves.
            part = TopK(*(a[rows[0] : rows[-1] + 1] for a in out)) if contiguous else empty_topk(len(rows), k)
            unscanned = self._search_batch(run.batch, k, None if floor is None else floor[rows], part, run.routed,
                                           run.tokens)
            if not contiguous:
                out.doc_ids[rows], out.overlap[rows], out.doc_len[rows] = part
            left.append(rows[unscanned])
        return np.sort(np.concatenate(left)) if left else np.zeros(0, np.int64)

    def _batch_turn(self):
        """What a chunk of queries holds from its routing to its results: on a wide shard, the lock of its
        remapped layout and postings (another thread's batch would renumber them under this one's
        kernels, as two searches share one stream); on a narrow shard, nothing (its batches share no state)."""
        return self._wide_turn if self._wide is not None else contextlib.nullcontext()

    def _chunks(self, rows: np.ndarray):
        """``rows`` in chunks of ``query_batch``, searched one at a time."""
        return [rows[lo : lo + self.query_batch] for lo in range(0, len(rows), self.query_batch)]

    def _runs(self, queries: SetBatch, rows: np.ndarray, eligible: np.ndarray | None = None) -> list[_Run]:
        """The batches a chunk of query rows (host int, ascending) is searched in, as :class:`_Run` s.

        A narrow shard searches the chunk as one batch, routed by the batch. A wide one uploads the
        chunk's ids once, routes the whole chunk by the cost model (among the ``eligible`` rows, host
        bool per row; None: all) and builds the postings of the routed queries' ids once for its
        batches. Where every query goes to the postings, no count kernel runs and the chunk is one
        batch; else it is cut where its queries hold more distinct ids than the count kernel's table
        (:func:`settopk.kernels.cuda.wide.split_by_distinct`)."""
        import cupy

        batch = queries if len(rows) == queries.n_sets else queries.take(rows)
        if self._wide is None:
            return [_Run(rows, batch, None, None)]
        tokens = cupy.asarray(batch.tokens)
        routed = np.zeros(len(rows), dtype=bool)
        if self._postings is not None:
            entries = self._postings.query_entries(batch.offsets, tokens)
            routed = cupy_route_mask(self.routing, entries, self._postings.n_tiles, self._scan_slots,
                                     self.queries_per_block,
                                     WIDE_PASS_S_PER_SLOT * self._postings.build_passes * self._scan_slots)
            if eligible is not None:
                routed &= eligible
            if routed.any():
                self._postings.build(tokens[cupy.asarray(np.repeat(routed, batch.lengths))])
        if routed.all():
            return [_Run(rows, batch, routed, tokens)]
        offsets = batch.offsets
        return [_Run(rows[lo:hi], batch.slice(lo, hi), routed[lo:hi], tokens[int(offsets[lo]) : int(offsets[hi])])
                for lo, hi in split_by_distinct(offsets, tokens, self._batch_ids, cupy)]

    def _query_tokens(self, batch: SetBatch, tokens=None, routed: np.ndarray | None = None) -> tuple:
        """A batch's query ids on the device: ``(tokens, qtok)``, as the docs hold them (``tokens``; uploaded
        from ``batch`` where None) and as the count kernel reads them (``qtok``).

        On a narrow shard they are one array. On a wide one, ``qtok`` holds the batch's own numbers
        (the layout the count kernel reads is rewritten into them before the batch's first scan, in
        ``_count_emit``), or is None where every query goes to the postings (``routed``, host bool, all
        true): no count kernel runs on such a batch, and ``_runs`` does not cut it for the table."""
        import cupy

        if tokens is None:
            tokens = cupy.asarray(batch.tokens) if len(batch.tokens) else cupy.zeros(1, dtype=batch.tokens.dtype)
        if self._wide is None:
            return tokens, tokens
        if routed is not None and routed.all():
            return tokens, None
        qtok, n_words = self._wide.number(tokens)
        self._set_table(n_words)
        return tokens, qtok

    def _check_queries(self, queries: SetBatch) -> None:
        """Raise ValueError unless ``queries`` is a host SetBatch of sets of at most ``max_len`` ids below ``vocab_size``."""
        check_set_batch(queries, "queries", self.max_len, self.vocab_size)
        lengths = queries.lengths
        if len(lengths) and (lengths.min() < 0 or lengths.max() > self.max_len):
            raise ValueError(f"a set of queries has {lengths.max()} ids, more than max_len={self.max_len}")
        if len(queries.tokens) and int(queries.tokens.max()) >= self.vocab_size:
            raise ValueError(f"queries hold id {int(queries.tokens.max())}, not below vocab_size={self.vocab_size}")
