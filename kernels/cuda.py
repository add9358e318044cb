"""CuPy/CUDA backend: exact shard-local top-k with bit-sliced counters and fused count thresholds.

The kernels live in ``bitslice_topk.cu`` beside this file (its header explains
the layout and the counting); this module compiles them once per device (NVRTC,
through :class:`cupy.RawModule`), checks inputs and drives the search. CuPy is
imported inside the functions, so importing this module needs no CuPy.

Algorithm
---------
Scores and ties follow :func:`kernels.score_key` for the index's score (any of
:data:`kernels.SCORES`, passed to the kernels at run time; see the source's
header): a doc ``d`` is better than ``e`` for a query when its key is larger,
or equal with a lower position (doc id). The *eligible* docs of a query are all the shard's docs, or, with a
per-query floor ``F`` (``search(..., floor_key=...)``, taken from another
shard's results), those with ``key >= F``; the answer is the exact top-k of
the eligible docs. No score matrix is written. Each query carries a *bound*
``(T, P)``, a (key, position) pair; the counting kernel emits only the docs at
least as good as the bound (``key > T``, or ``key == T`` and
``position <= P``), through least-overlap tables per (query, doc length)
that are compared with bit-sliced counters inside the kernel. The bound starts
at ``(-1, -1)`` (tables all 0), which emits every doc, or at
``(F, 2**31 - 1)``, which emits exactly the docs with ``key >= F`` (tables
from :func:`_floor_tables`: the integer math of the kernels' ``need_overlap``,
in CuPy array operations before the first level). Later bounds are only ever
the k-th best of emitted candidates, so two invariants hold: every emitted doc
is eligible, and every eligible doc at least as good as the true k-th best is
emitted. The exact top-k of the
emitted set is therefore the answer; where fewer than ``k`` docs are eligible,
the bound never moves and the row is padded. A query whose floor exceeds
:func:`kernels.best_key_in_range` over the shard's doc lengths has no eligible
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

Measured on one H200 (``python -m jobs.bench --config sti2-zipf``: 7.85 M docs,
2000 queries, k = 100): about 15 ms for the last level's count kernel, 2 ms
for the three sampling levels, 1.3 ms for the four selections, 20 ms in all
from host queries to host results (the README's Benchmark section has the
tables).

A per-query counter counts every emission; where the candidate buffer of an
intermediate level overflows, the candidates it kept still give a valid bound.
Where the last level overflows, the query is scanned again with a buffer as
long as its exact count, in batches bounded by ``redo_bytes``; overflow costs
time, never exactness.

References: positional population count with carry-save adders (Klarqvist,
Mula, Lemire, "Efficient computation of positional population counts using
SIMD instructions", 2021; Mula, Kurz, Lemire, "Faster population counts using
AVX2 instructions", 2018); count thresholds per doc length as a size filter
(as in exact set-similarity joins, e.g. Mann, Augsten, Bouros, VLDB 2016).
"""

from __future__ import annotations

import logging
import numbers
import pathlib
import threading
from typing import NamedTuple

import numpy as np

from .keys import DEFAULT_SCORE, SCORES, _least_overlap, best_key_in_range, check_floor_key, key_scale
from .postings import check_routing
from .sets import SetBatch
from .topk import TopK, empty_topk

__all__ = ["CupyShardIndex", "search_cost_per_doc", "warm_up"]

_SOURCE_PATH = pathlib.Path(__file__).with_name("bitslice_topk.cu")
# (queries per block, any score): Braun-Blanquet has a kernel of its own (see count_emit's kAnyScore).
_COUNT_KERNELS = {
    (32, False): "settopk::count_emit<32, unsigned int, false>",
    (16, False): "settopk::count_emit<16, unsigned short, false>",
    (32, True): "settopk::count_emit<32, unsigned int, true>",
    (16, True): "settopk::count_emit<16, unsigned short, true>",
}
_OTHER_KERNELS = ("settopk::build_layout", "settopk::select_topk", "settopk::decode_topk")
_MAX_LEN_LIMIT = 255  # 8 counter planes; the job's configs allow at most 255 too
_MAX_VOCAB = 65536  # token ids are uint16
_CHUNK_SLOTS = 32  # kChunkSlots in bitslice_topk.cu
_IDS_PER_GROUP = 8  # kIdsPerGroup
_DOC_OVERHEAD_SLOTS = 16  # per-doc search work in id slots (see search_cost_per_doc)
_PLANE_WORDS_PER_LEN = 2 * 8 + 1  # ge and gt planes plus the reach mask, per doc length
_NEVER_LEN = 255  # kNeverLen: least overlaps are clamped to this (uint8 tables, 8 counter planes)
_LAST_POSITION = 2**31 - 1  # tie position that admits every doc of key T (positions are int32)
_COUNT_THREADS = 1024  # __launch_bounds__ of count_emit
_SELECT_THREADS = 1024
_THREADS = 256  # decode kernel
_BUILD_WARPS = 4  # kBuildWarps in bitslice_topk.cu: warps (chunks) per block of build_layout
_SORT_MAX = 16384  # largest per-query sort in shared memory (128 KiB of uint64)
_MAX_GRID_Y = 65535
_DEFAULT_SHARED_LIMIT = 48 * 1024  # dynamic shared memory usable without opt-in

_log = logging.getLogger("settopk.kernels")
_modules: dict[int, object] = {}  # device id -> compiled cupy.RawModule
_modules_lock = threading.Lock()


def search_cost_per_doc(max_len: int) -> np.ndarray:
    """Count-kernel work of one doc of each length, in id slots: the length rounded up to a multiple
    of 8 (one 16-byte group per 8 ids) plus a per-doc overhead (its slot length and position, the
    threshold compare across the counter planes, the emission check) worth about 16 slots. The
    overhead is a fit to per-shard search times on 4 H200s (STI2 length histogram: the shard of
    lengths 0..67 holds twice the docs of the others and searched 25% longer at equal ids). The
    shard planner balances this (``shards.plan_shards_from_counts(doc_cost=...)``).

    Returns
    -------
    numpy.ndarray of int64, shape (max_len + 1,)
    """
    lengths = np.arange(max_len + 1, dtype=np.int64)
    return -(-lengths // _IDS_PER_GROUP) * _IDS_PER_GROUP + _DOC_OVERHEAD_SLOTS


def warm_up() -> None:
    """Create the CUDA context on the current device and load every kernel a build and a search use.

    All of it happens on first use anyway; a shard actor calls this in a thread while its
    docs arrive, so the index build does not wait for it. Besides this module's kernels,
    a tiny index is built and searched once, which loads CuPy's own kernels (casts,
    reductions, sorts, scans) into the process. Compiled kernels are cached on disk by
    CuPy, so only the first process on a machine compiles.
    """
    import cupy

    _kernels(cupy.cuda.Device().id)
    docs = SetBatch(np.array([0, 3, 5, 5], dtype=np.int64), np.array([1, 2, 3, 2, 7], dtype=np.uint16))
    index = CupyShardIndex(docs, np.arange(3), max_len=8)
    index.search(SetBatch(np.array([0, 2], dtype=np.int64), np.array([2, 3], dtype=np.uint16)), 2)


def _kernels(device_id: int) -> dict:
    """The compiled kernels for ``device_id`` (short name, or ``count32``/``count16`` for Braun-Blanquet
    and ``count32_any``/``count16_any`` for any score)."""
    import cupy

    names = list(_COUNT_KERNELS.values()) + list(_OTHER_KERNELS)
    with _modules_lock:
        module = _modules.get(device_id)
        if module is None:
            with cupy.cuda.Device(device_id):
                module = cupy.RawModule(code=_SOURCE_PATH.read_text(), options=("-std=c++17",), name_expressions=names)
                module.compile()
            _modules[device_id] = module
    out = {name.split("::")[-1]: module.get_function(name) for name in _OTHER_KERNELS}
    for (queries, any_score), name in _COUNT_KERNELS.items():
        out[f"count{queries}" + ("_any" if any_score else "")] = module.get_function(name)
    return out


class _Batch(NamedTuple):
    """The device arrays one batch's levels share (see ``_search_batch``)."""

    query_arrays: tuple  # qoff, qtok, qlen, thr_ge, thr_gt, tie_pos
    bound_key: object
    count: object
    cand_base: object
    cand_cap: object
    cand: object
    top: object
    k: int
    sort_size: int


def _no_routing() -> dict:
    return {"scan": 0, "postings": 0, "fallback": 0, "scan_s": 0.0, "postings_s": 0.0}


def _blocks_for(n_items: int) -> int:
    """Grid size of a grid-stride kernel over ``n_items`` items with ``_THREADS`` threads (at least 1)."""
    return max(1, min(-(-n_items // _THREADS), 65535 * 32))


def _pow2_at_least(n: int) -> int:
    return 1 << max(1, (max(n, 1) - 1).bit_length())


def _floor_tables(xp, floor, query_len, n_len: int, max_len: int, score: str = DEFAULT_SCORE):
    """Threshold tables of the bound ``(T, P) = (floor, 2**31 - 1)``, as ``select_topk`` writes them.

    :func:`kernels.min_overlap_above` clamped to ``kNeverLen``, as
    ``need_overlap`` in ``bitslice_topk.cu`` computes it, so the count kernel
    emits exactly the docs with ``key >= floor``. Clamping matters only where
    the least overlap exceeds 255, which a floor ``<= max_key`` never asks of a
    reachable (query, length) pair; floors above what the shard can reach are
    skipped before this.

    Parameters
    ----------
    xp : module
        ``numpy`` or ``cupy``: where the arrays live and the tables are made.
    floor : array of int64, shape (n_q,)
        Key floor per query, in ``[-1, S]``; ``-1`` gives all-zero tables
        (every doc), like the bound ``T = -1``.
    query_len : array of int, shape (n_q,)
        ``|q|`` per query.
    n_len : int
        Doc lengths ``0 .. n_len - 1`` (the shard's longest doc + 1).
    max_len : int
        Bound on set sizes; fixes the key scale.
    score : str
        One of :data:`kernels.SCORES`.

    Returns
    -------
    (thr_ge, thr_gt) : arrays of uint8, shape (n_q, n_len), C-contiguous
        Least overlap for ``key >= floor`` and for ``key > floor`` per (query,
        doc length), clamped to 255.
    """
    t = xp.asarray(floor, dtype=xp.int64)[:, None]
    q = xp.asarray(query_len, dtype=xp.int64)[:, None]
    lengths = xp.arange(n_len, dtype=xp.int64)[None, :]

    def need_overlap(t):  # least overlap with key > t
        need = _least_overlap(xp, t, q, lengths, max_len, score)
        return xp.ascontiguousarray(xp.minimum(need, _NEVER_LEN).astype(xp.uint8))

    return need_overlap(t - 1), need_overlap(t)


def _upload(pieces: list):
    """Device CSR arrays ``(offsets int64, tokens uint16)`` of the concatenation of host SetBatches.

    Each piece's ids go straight into their place in one device array; the offsets are shifted
    on the host (8 bytes per doc)."""
    import cupy

    n_tokens = sum(len(p.tokens) for p in pieces)
    tokens = cupy.empty(n_tokens, dtype=np.uint16)
    host_offsets = [np.zeros(1, dtype=np.int64)]
    position = 0
    for piece in pieces:
        if len(piece.tokens):
            tokens[position : position + len(piece.tokens)].set(piece.tokens)
        host_offsets.append(piece.offsets[1:] + position)
        position += len(piece.tokens)
    return cupy.asarray(np.concatenate(host_offsets)), tokens


def _check_set_batch(batch, what: str, max_len: int) -> None:
    """Raise ValueError unless ``batch`` is a host SetBatch with C-contiguous arrays and sets of <= max_len ids.

    Id ranges are checked on the GPU after the upload (a host pass over the
    ids would cost more than the whole build).
    """
    if not isinstance(batch, SetBatch):
        raise ValueError(f"{what} must be a kernels.SetBatch, found {type(batch).__name__}")
    for name, array, dtype in (("offsets", batch.offsets, np.int64), ("tokens", batch.tokens, np.uint16)):
        if not isinstance(array, np.ndarray):
            raise ValueError(f"{what}.{name} must be a host numpy array, found {type(array).__name__}")
        if array.dtype != dtype or array.ndim != 1:
            raise ValueError(f"{what}.{name} must be 1-D {np.dtype(dtype)}, found {array.dtype} {array.shape}")
        if not array.flags.c_contiguous:
            raise ValueError(f"{what}.{name} must be C-contiguous")


class CupyShardIndex:
    """One shard's docs in GPU memory, searched exactly with the bit-sliced kernel.

    Same contract as :class:`kernels.NumpyShardIndex`: ``search`` returns the
    identical :class:`kernels.TopK`.

    Parameters
    ----------
    docs : SetBatch or sequence of SetBatch
        The shard's ``n_docs`` docs in host memory, in ``doc_ids`` order:
        ``offsets`` int64 of shape (n_docs + 1,), ``tokens`` uint16, both
        C-contiguous; each set sorted and distinct with at most ``max_len`` ids,
        all below ``vocab_size``. A sequence of batches (the pieces a shard
        takes from the corpus readers) is concatenated on the GPU, in order,
        which saves the host a copy of every id.
    doc_ids : numpy.ndarray of integer dtype, shape (n_docs,)
        Global doc ids (host), strictly increasing, so position order is id
        order. Stored as int64.
    max_len : int
        Bound on set sizes, in ``[1, 255]`` (overlaps are counted in 8 bit
        planes); fixes the key scale (:func:`kernels.key_scale`).
    vocab_size : int, default 65536
        Token ids are below this, in ``[1, 65536]``.
    capacity : int, optional
        Candidate slots per query and sampling level, in ``[1, 16384]``
        (default: the smallest power of two ``>= max(4096, 8 k)``, capped at
        16384). Small values only force the overflow path (tests use that);
        results stay exact.
    tile_docs : int, default 65536
        Most docs one block scans for one query group (a tile). Smaller tiles
        spread small shards over more blocks; each block builds its query
        table once, so larger tiles amortise that.
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
        What :meth:`search` ranks by, one of :data:`kernels.SCORES`.
    routing : str, default "scan"
        ``"scan"``: every query scans the shard. ``"auto"``: an inverted index
        is built too (:class:`kernels.postings_gpu.GpuPostings`,
        ``2 n_tokens + 8 n_words ceil(n_docs / 65536)`` bytes of GPU memory)
        and a query runs its levels through its ids' postings where the cost
        model (:func:`kernels.postings_gpu.route_mask`) says that is cheaper;
        its last level is scanned all the same if its bound from the sampling
        levels is below key 1. ``"postings"``: every query goes to the
        postings. Results are identical in every mode.

    Attributes
    ----------
    n_docs : int
        Number of docs in the shard.
    last_routing : dict
        The last ``search``'s routing, summed over its batches: ``scan`` and
        ``postings`` (queries per path of the last level), ``fallback``
        (routed to the postings but scanned, their bound being below key 1),
        ``scan_s`` and ``postings_s`` (GPU seconds of each path's levels with
        their selections, CUDA events; a fallback's scan counts in
        ``postings_s``).
    postings_bytes : int
        GPU bytes of the postings (0 with ``routing="scan"``).
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
    per 32 docs of similar length; about ``2.2 * n_tokens`` bytes), plus 14
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
        vocab_size: int = _MAX_VOCAB,
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
        if not 1 <= vocab_size <= _MAX_VOCAB:
            raise ValueError(f"vocab_size must be in [1, {_MAX_VOCAB}], found {vocab_size}")
        for name, value in (("tile_docs", tile_docs), ("query_batch", query_batch), ("redo_bytes", redo_bytes)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, found {value}")
        if capacity is not None and not 1 <= capacity <= _SORT_MAX:
            raise ValueError(f"capacity must be in [1, {_SORT_MAX}], found {capacity}")
        if sample_ratio is not None and sample_ratio < 2:
            raise ValueError(f"sample_ratio must be >= 2, found {sample_ratio}")
        pieces = [docs] if isinstance(docs, SetBatch) else list(docs)
        for piece in pieces:
            _check_set_batch(piece, "docs", max_len)
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
        self.last_routing = _no_routing()
        self.postings_bytes = 0
        self._postings = None
        self._scale = key_scale(max_len, score)
        self._score_code = SCORES.index(score)  # the kernels' Score enum follows kernels.SCORES
        device = cupy.cuda.Device()
        self._device_id = device.id
        self._n_sm = int(device.attributes["MultiProcessorCount"])
        self._shared_optin = int(device.attributes.get("MaxSharedMemoryPerBlockOptin", _DEFAULT_SHARED_LIMIT))
        self._kernels = _kernels(self._device_id)
        self._build(pieces)

    @property
    def n_docs(self) -> int:
        """Number of docs in the shard."""
        return len(self.doc_ids)

    # ---- build ----------------------------------------------------------------

    def _build(self, pieces: list) -> None:
        """Upload the CSR arrays, validate them on the GPU, and build the length-sorted chunked layout."""
        import cupy

        n = self.n_docs
        offsets, tokens = _upload(pieces)
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
        self._shortest = max(lo, 0)  # with hi: the length range the floors are checked against
        self._longest = hi
        self._n_words = max(1, top + 1)  # ids above the largest doc id can match no doc
        self._len_by_pos = lengths.astype(np.uint8)
        if self.routing != "scan" and n:
            from .postings_gpu import GpuPostings

            self._postings = GpuPostings(offsets, tokens, self._n_words)
            self.postings_bytes = self._postings.nbytes
        self._doc_ids = cupy.asarray(self.doc_ids) if n else cupy.zeros(1, dtype=np.int64)  # decoded on the GPU

        # Slots: docs sorted by (length, position); the key is unique, so any sort is stable here.
        order = cupy.sort((lengths << 32) | cupy.arange(n, dtype=np.int64))
        self._slot_len = (order >> 32).astype(np.uint8)
        self._slot_pos = (order & 0xFFFFFFFF).astype(np.int32)
        del order
        n_chunks = -(-n // _CHUNK_SLOTS)
        last = cupy.minimum(cupy.arange(1, n_chunks + 1, dtype=np.int64) * _CHUNK_SLOTS, n) - 1
        chunk_groups = ((self._slot_len[last].astype(np.int32) + _IDS_PER_GROUP - 1) // _IDS_PER_GROUP).astype(np.int32)
        sizes = chunk_groups.astype(np.int64) * _CHUNK_SLOTS
        self._chunk_start = cupy.cumsum(sizes) - sizes  # in uint4 elements
        total = int(sizes.sum()) if n_chunks else 0
        self._scan_slots = total * _IDS_PER_GROUP + _DOC_OVERHEAD_SLOTS * n  # the cost model's scan size
        self._groups = cupy.empty((max(1, total), 4), dtype=np.uint32)  # never a null pointer
        if total:
            stride = hi + (hi & 1)  # ids per lane in the build's shared memory (even keeps the cursors aligned)
            shared = _BUILD_WARPS * 32 * (2 * stride + 64)
            kernel = self._kernels["build_layout"]
            if shared > _DEFAULT_SHARED_LIMIT:
                kernel.max_dynamic_shared_size_bytes = shared
            kernel(
                (max(1, min(-(-n_chunks // _BUILD_WARPS), 65535 * 32)),),
                (_BUILD_WARPS * 32,),
                (
                    offsets,
                    tokens,
                    self._slot_pos,
                    self._chunk_start,
                    chunk_groups,
                    np.int64(n_chunks),
                    np.int64(n),
                    np.int32(stride),
                    self._groups,
                ),
                shared_mem=shared,
            )
        if n == 0:  # keep every device pointer valid
            self._slot_len = cupy.zeros(1, dtype=np.uint8)
            self._slot_pos = cupy.zeros(1, dtype=np.int32)
            self._chunk_start = cupy.zeros(1, dtype=np.int64)
            self._len_by_pos = cupy.zeros(1, dtype=np.uint8)

        n_len = self._longest + 1
        thresholds = _PLANE_WORDS_PER_LEN * n_len * 4
        for queries, word_bytes in ((32, 4), (16, 2)):
            shared = -(-self._n_words * word_bytes // 16) * 16 + thresholds
            if shared <= self._shared_optin:
                break
        else:  # unreachable for max_len <= 255 and ids < 65536 on any GPU with >= 148 KiB per block
            raise ValueError(f"the count kernel needs {shared} bytes of shared memory, the device offers {self._shared_optin}")
        self.queries_per_block = queries
        self._count_shared = shared
        self._count = self._kernels[f"count{queries}" + ("" if self.score == "braun_blanquet" else "_any")]
        cupy.cuda.get_current_stream().synchronize()  # the build's time includes its GPU work

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
            (:func:`kernels.score_key`): only docs with ``key >= floor_key[q]``
            are returned for query ``q`` (ties at the floor are kept); ``-1``
            means no floor. A query whose floor exceeds
            :func:`kernels.best_key_in_range` over the shard's doc lengths is
            not sent to the GPU (its row is all padding). None (default): no
            floor for any query.

        Returns
        -------
        TopK
            Host arrays of shape (n_queries, k): ``doc_ids`` int64, ``overlap``
            and ``doc_len`` int16, ordered by score descending then doc id
            ascending; ``-1`` ids (overlap and doc_len 0) pad rows where fewer
            than ``k`` docs of the shard reach the query's floor. Identical to
            :meth:`kernels.NumpyShardIndex.search`.

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
        _check_set_batch(queries, "queries", self.max_len)
        lengths = queries.lengths
        if len(lengths) and (lengths.min() < 0 or lengths.max() > self.max_len):
            raise ValueError(f"a set of queries has {lengths.max()} ids, more than max_len={self.max_len}")
        if len(queries.tokens) and int(queries.tokens.max()) >= self.vocab_size:
            raise ValueError(f"queries hold id {int(queries.tokens.max())}, not below vocab_size={self.vocab_size}")
        floor = check_floor_key(floor_key, queries.n_sets, self.max_len, self.score)
        self.rescans = 0
        self.last_skipped = 0
        self.last_routing = _no_routing()
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
            for lo in range(0, len(active), self.query_batch):
                rows = active[lo : lo + self.query_batch]
                contiguous = rows[-1] - rows[0] == len(rows) - 1
                batch = queries if len(rows) == queries.n_sets else queries.take(rows)
                if contiguous:  # the common case: decode into the output rows themselves
                    part = TopK(*(a[rows[0] : rows[-1] + 1] for a in out))
                    self._search_batch(batch, k, None if floor is None else floor[rows], part)
                else:
                    part = empty_topk(len(rows), k)
                    self._search_batch(batch, k, floor[rows], part)
                    out.doc_ids[rows], out.overlap[rows], out.doc_len[rows] = part
        return out

    def _capacity(self, k: int) -> int:
        if self.capacity is not None:
            return self.capacity
        return min(_SORT_MAX, _pow2_at_least(max(4096, 8 * k)))

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
        n_chunks = -(-n // _CHUNK_SLOTS)
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
        n_chunks = -(-n // _CHUNK_SLOTS)
        size = -(-n_chunks // stride) * _CHUNK_SLOTS
        if (n_chunks - 1) % stride == 0:
            size -= n_chunks * _CHUNK_SLOTS - n
        return size

    def _tile(self, n_sample: int, n_groups: int) -> int:
        """Sample indices per block: enough tiles for ~4 blocks per SM, within tile_docs and the grid limit."""
        want_tiles = -(-4 * self._n_sm // n_groups)
        tile = min(self.tile_docs, max(_COUNT_THREADS, -(-n_sample // want_tiles)))
        return max(tile, -(-n_sample // _MAX_GRID_Y), 1)

    def _search_batch(self, queries: SetBatch, k: int, floor: np.ndarray | None, out: TopK) -> None:
        """Search one batch of queries through the sampling levels (see the module docstring).

        ``floor``: None, or host int64 of shape (n_queries,) with values in
        ``[-1, S]`` (``-1``: no floor), every query able to reach its floor.
        ``out``: C-contiguous host arrays of shape (n_queries, k), filled in place.
        """
        import cupy

        n_q = queries.n_sets
        # Query rows sorted by length: a group's size filter is then as tight as its members'. The rows
        # point into the batch's own ids (qoff: each row's start), so the ids are uploaded as they are.
        lengths = queries.lengths
        order = np.argsort(lengths, kind="stable")
        qoff = cupy.asarray(queries.offsets[:-1][order])
        qtok = cupy.asarray(queries.tokens) if len(queries.tokens) else cupy.zeros(1, dtype=np.uint16)
        qlen = cupy.asarray(lengths[order].astype(np.int32))
        capacity = self._capacity(k)
        n_len = self._longest + 1
        cand = cupy.empty(n_q * capacity, dtype=np.uint64)
        count = cupy.zeros(n_q, dtype=np.int32)
        cand_base = cupy.arange(n_q, dtype=np.int64) * capacity
        cand_cap = cupy.full(n_q, capacity, dtype=np.int32)
        if floor is None or not (floor >= 0).any():
            thr_ge = cupy.zeros((n_q, n_len), dtype=np.uint8)  # bound T = -1 admits every doc
            thr_gt = cupy.zeros((n_q, n_len), dtype=np.uint8)
            bound_key = cupy.full(n_q, -1, dtype=np.int64)
            tie_pos = cupy.full(n_q, -1, dtype=np.int32)
        else:
            # Bound (F, last position): exactly the docs with key >= F; F = -1 gives the bound above.
            floor = floor[order]
            bound_key = cupy.asarray(floor.astype(np.int64))
            tie_pos = cupy.asarray(np.where(floor >= 0, _LAST_POSITION, -1).astype(np.int32))
            thr_ge, thr_gt = _floor_tables(cupy, bound_key, qlen, n_len, self.max_len, self.score)
        top = cupy.zeros((n_q, k), dtype=np.uint64)

        levels = self._levels(k, capacity)
        query_arrays = (qoff, qtok, qlen, thr_ge, thr_gt, tie_pos)
        batch = _Batch(query_arrays, bound_key, count, cand_base, cand_cap, cand, top, k, _pow2_at_least(capacity))
        routed = np.zeros(n_q, dtype=bool)
        if self._postings is not None:
            from .postings_gpu import route_mask

            routed = route_mask(self.routing, self._postings.entries(qoff, qtok, qlen), self._postings.n_tiles,
                                self._scan_slots, self.queries_per_block)
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
            _log.debug("routing %s: %d of %d queries to the postings (%d of them scanned at the last level); "
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
            if len(scanned):
                self._rescan(scanned, counts, query_arrays, bound_key, k, top)
            if len(posted):  # the same path again, so the same candidates
                self._rescan(posted, counts, query_arrays, bound_key, k, top,
                             emit=lambda members, cnt, base, cap, buf: self._emit_postings(
                                 members, self.n_docs, query_arrays, bound_key, cnt, base, cap, buf))

        doc_ids = cupy.empty((n_q, k), dtype=np.int64)
        overlap = cupy.empty((n_q, k), dtype=np.int16)
        doc_len = cupy.empty((n_q, k), dtype=np.int16)
        self._kernels["decode_topk"](
            (_blocks_for(n_q * k),),
            (_THREADS,),
            (top, np.int64(n_q * k), np.int32(k), qlen, cupy.asarray(order.astype(np.int32)), self._len_by_pos,
             np.int64(self._scale), np.int32(self.max_len), np.int32(self._score_code), self._doc_ids, doc_ids,
             overlap, doc_len),
        )
        doc_ids.get(out=out.doc_ids)
        overlap.get(out=out.overlap)
        doc_len.get(out=out.doc_len)

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

    def _scan_levels(self, rows: np.ndarray, levels, batch, *, last_only: bool = False) -> None:
        """Every level (only the last with ``last_only``) for the queries ``rows`` (host, sorted order)
        through the count kernel, each followed by its selection."""
        import cupy

        group_query, n_groups = self._groups_of(rows)
        rows_dev = cupy.asarray(rows.astype(np.int32))
        for stride, n_sample in levels[-1:] if last_only else levels:
            last = stride == 1
            self._reset_counts(batch, rows_dev)
            self._count_emit(group_query, n_groups, batch.query_arrays, stride, n_sample, batch.count,
                             batch.cand_base, batch.cand_cap, batch.cand)
            self._select_level(batch, rows_dev, update=not last)
        self.last_routing["scan"] += len(rows)

    def _postings_levels(self, rows: np.ndarray, levels, batch):
        """Every level for the queries ``rows`` (host, sorted order) through the postings: the sampling
        levels over the first ``n_sample`` positions, the last over the whole shard for the queries whose
        bound reached key 1 (the others are scanned: docs outside the postings may qualify for them, and
        are counted in ``last_routing["fallback"]``). Returns the rows whose last level ran through the
        postings (host), or None."""
        import cupy

        from .postings_gpu import TILE_DOCS

        rows_dev = cupy.asarray(rows.astype(np.int32))

        def emit(members, limit):
            self._emit_postings(members, limit, batch.query_arrays, batch.bound_key, batch.count, batch.cand_base,
                                batch.cand_cap, batch.cand)

        # A level costs at least one tile of postings: of the sampling levels within one tile, the largest
        # alone is kept (it gives the best bound for that cost).
        sampling = [n for _stride, n in levels[:-1]]
        sampling = [n for n in sampling if n <= TILE_DOCS][-1:] + [n for n in sampling if n > TILE_DOCS]
        for n_sample in sampling:
            self._reset_counts(batch, rows_dev)
            emit(rows_dev, n_sample)
            self._select_level(batch, rows_dev, update=True)
        eligible = batch.bound_key[rows_dev].get() >= 1
        fallback = rows[~eligible]
        if len(fallback):
            self.last_routing["fallback"] += len(fallback)
            self._scan_levels(fallback, levels, batch, last_only=True)
        posted = rows[eligible]
        if not len(posted):
            return None
        posted_dev = cupy.asarray(posted.astype(np.int32))
        self._reset_counts(batch, posted_dev)
        emit(posted_dev, self.n_docs)
        self._select_level(batch, posted_dev, update=False)
        self.last_routing["postings"] += len(posted)
        return posted

    def _emit_postings(self, members, limit: int, query_arrays, bound_key, count, cand_base, cand_cap, cand) -> None:
        """Launch the postings kernel for ``members`` (device int32 query indices) over positions below ``limit``."""
        qoff, qtok, qlen, thr_ge, _thr_gt, tie_pos = query_arrays
        self._postings.emit(members, limit, qoff, qtok, qlen, thr_ge, self._longest, bound_key, tie_pos,
                            self._len_by_pos, self._scale, self._score_code, count, cand_base, cand_cap, cand)

    def _select_level(self, batch, rows_dev, *, update: bool) -> None:
        _qoff, _qtok, qlen, thr_ge, thr_gt, tie_pos = batch.query_arrays
        self._select(batch.cand, batch.cand_base, batch.cand_cap, batch.count, rows_dev, len(rows_dev), batch.k,
                     batch.sort_size, batch.top, update=update, bound_key=batch.bound_key, tie_pos=tie_pos, qlen=qlen,
                     thr_ge=thr_ge, thr_gt=thr_gt)

    def _count_emit(self, group_query, n_groups, query_arrays, stride, n_sample, count, cand_base, cand_cap, cand):
        """Launch count_emit over sample indices [0, n_sample) (slot = index * stride) for ``n_groups`` groups."""
        qoff, qtok, qlen, thr_ge, thr_gt, tie_pos = query_arrays
        tile = self._tile(n_sample, n_groups)
        if self._count_shared > _DEFAULT_SHARED_LIMIT:  # per launch: indexes of other shapes share the function
            self._count.max_dynamic_shared_size_bytes = self._count_shared
        self._count(
            (n_groups, -(-n_sample // tile)),
            (_COUNT_THREADS,),
            (
                self._groups,
                self._chunk_start,
                self._slot_len,
                self._slot_pos,
                np.int64(n_sample),
                np.int64(stride),
                np.int64(tile),
                group_query,
                qoff,
                qtok,
                qlen,
                thr_ge,
                thr_gt,
                tie_pos,
                np.int32(self._longest),
                np.int32(self._n_words),
                np.int64(self._scale),
                np.int32(self._score_code),
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
        kernel = self._kernels["select_topk"]
        shared = 8 * sort_size
        if shared > _DEFAULT_SHARED_LIMIT:
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
                thr_ge,
                thr_gt,
            ),
            shared_mem=shared,
        )

    def _rescan(self, overflowed, counts, query_arrays, bound_key, k, top, emit=None):
        """Scan the whole shard again for the overflowed queries with exact-size buffers, then select.

        The thresholds are those of the last level, so the kernel emits the
        same docs again: exactly ``counts[q]`` of them, which is checked.
        ``emit(members, count, cand_base, cand_cap, cand)`` (members: device
        int32 query indices) replaces the scan for queries whose last level
        ran through the postings.
        """
        import cupy

        qlen, tie_pos, thr_ge, thr_gt = query_arrays[2], query_arrays[5], query_arrays[3], query_arrays[4]
        n_q = len(counts)
        budget = max(1, self.redo_bytes // 8)
        batch: list[int] = []
        used = 0
        batches = []
        for q in overflowed.tolist():
            if batch and used + counts[q] > budget:
                batches.append(batch)
                batch, used = [], 0
            batch.append(q)
            used += int(counts[q])
        batches.append(batch)
        for batch in batches:
            members = np.asarray(batch, dtype=np.int64)
            sizes = counts[members].astype(np.int64)
            bases = np.cumsum(sizes) - sizes
            cand_base = np.zeros(n_q, dtype=np.int64)
            cand_cap = np.zeros(n_q, dtype=np.int32)
            cand_base[members] = bases
            cand_cap[members] = sizes
            cand_base, cand_cap = cupy.asarray(cand_base), cupy.asarray(cand_cap)
            cand = cupy.empty(max(1, int(sizes.sum())), dtype=np.uint64)
            count = cupy.zeros(n_q, dtype=np.int32)
            if emit is None:
                group_query, n_groups = self._groups_of(members)
                self._count_emit(group_query, n_groups, query_arrays, 1, self.n_docs, count, cand_base, cand_cap, cand)
            else:
                emit(cupy.asarray(members.astype(np.int32)), count, cand_base, cand_cap, cand)
            again = count.get()[members]
            if not np.array_equal(again, sizes):
                raise RuntimeError(
                    f"re-scan emitted {again.tolist()} candidates where the first scan counted {sizes.tolist()}; "
                    "the GPU results are not reproducible (a kernel bug or a hardware fault)"
                )
            small = members[sizes <= _SORT_MAX]
            if len(small):
                sort_size = _pow2_at_least(int(sizes[sizes <= _SORT_MAX].max()))
                self._select(cand, cand_base, cand_cap, count, cupy.asarray(small.astype(np.int32)), len(small), k,
                             sort_size, top, update=False, bound_key=bound_key, tie_pos=tie_pos, qlen=qlen,
                             thr_ge=thr_ge, thr_gt=thr_gt)
            for q, base, size in zip(members.tolist(), bases.tolist(), sizes.tolist()):
                if size <= _SORT_MAX:
                    continue
                best = cupy.sort(cand[base : base + size])[::-1][:k]  # too long for the shared-memory sort
                top[q] = 0
                top[q, : len(best)] = best
