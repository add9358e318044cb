"""The previous CuPy/CUDA backend (chunked scan with running thresholds), kept for comparison.

The kernels live in ``bitset_topk.cu`` beside this file; this module compiles
them once per device (NVRTC, through :class:`cupy.RawModule`), checks inputs and
drives the search. CuPy is imported lazily, inside the functions, so importing
this module needs no CuPy; ``kernels/__init__.py`` does not import it at all.

Algorithm
---------
Braun-Blanquet score ``|q ∩ d| / max(|q|, |d|)`` with the exact integer key of
:func:`kernels.score_key`. The doc layout and the counting kernel follow the
STI2 competition champion's design: docs are stored on the GPU as groups of 8
uint16 ids (one ``uint4`` load), group-major ("swizzled") so the loads of a
warp are coalesced, and a block counts overlaps for 4 queries at once from
their vocabulary bitsets, interleaved word by word in shared memory.

Top-k selection never sorts the whole shard and never builds a score matrix.
The shard is scanned in chunks, in doc order (first chunk as small as the
candidate capacity, then geometrically larger). For each query the host keeps
the current top-k and its k-th best key ``T`` (``-1`` while fewer than k docs
were seen). The kernel emits a doc for a query only if its key is strictly
greater than ``T`` (through the table ``kernels.min_overlap_above``): every doc
of a later chunk has a larger doc id than those already kept, so a doc that
only ties ``T`` can never enter the top-k, and the result stays exact.
Candidates go to a per-query buffer of fixed capacity; after each chunk they
are merged with the current top-k by one sort of 64-bit values
``(key << 32) | ~position``. A query whose buffer overflowed is scanned again
over that chunk, alone or with other such queries, with a buffer as long as
the chunk, so overflow costs time but never exactness.
"""

from __future__ import annotations

import numbers
import pathlib
import threading

import numpy as np

from .keys import key_scale, min_overlap_above
from .sets import SetBatch
from .topk import TopK, empty_topk

__all__ = ["ChunkedShardIndex"]

_SOURCE_PATH = pathlib.Path(__file__).with_name("bitset_topk.cu")
_KERNEL_NAMES = (
    "settopk::build_doc_groups",
    "settopk::build_query_bitsets",
    "settopk::count_and_emit",
    "settopk::recount_overlap",
)
_QUERIES_PER_BLOCK = 4  # kQueriesPerBlock in bitset_topk.cu
_IDS_PER_GROUP = 8  # kIdsPerGroup in bitset_topk.cu
_THREADS = 256  # threads per block of every kernel
_DOCS_PER_THREAD = 16  # docs each thread of count_and_emit scores per tile
_MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y (doc tiles per chunk)
_DEFAULT_SHARED_LIMIT = 48 * 1024  # dynamic shared memory usable without opt-in
_MAX_VOCAB = 65536  # token ids are uint16

_modules: dict[int, object] = {}  # device id -> compiled cupy.RawModule
_modules_lock = threading.Lock()


def _kernels(device_id: int) -> dict:
    """The compiled kernels for ``device_id``, by short name; compiled on first use."""
    import cupy

    with _modules_lock:
        module = _modules.get(device_id)
        if module is None:
            with cupy.cuda.Device(device_id):
                module = cupy.RawModule(
                    code=_SOURCE_PATH.read_text(), options=("-std=c++17",), name_expressions=list(_KERNEL_NAMES)
                )
                module.compile()
            _modules[device_id] = module
    return {name.split("::")[-1]: module.get_function(name) for name in _KERNEL_NAMES}


def _blocks_for(n_items: int) -> int:
    """Grid size for a grid-stride kernel over ``n_items`` items (at least one block)."""
    return max(1, min(-(-n_items // _THREADS), 65535 * 32))


def _check_set_batch(batch, what: str, max_len: int, vocab_size: int) -> None:
    """Raise ValueError unless ``batch`` is a well-formed host SetBatch the kernels can read."""
    if not isinstance(batch, SetBatch):
        raise ValueError(f"{what} must be a kernels.SetBatch, found {type(batch).__name__}")
    for name, array, dtype in (("offsets", batch.offsets, np.int64), ("tokens", batch.tokens, np.uint16)):
        if not isinstance(array, np.ndarray):
            raise ValueError(f"{what}.{name} must be a host numpy array, found {type(array).__name__}")
        if array.dtype != dtype or array.ndim != 1:
            raise ValueError(f"{what}.{name} must be 1-D {np.dtype(dtype)}, found {array.dtype} {array.shape}")
        if not array.flags.c_contiguous:
            raise ValueError(f"{what}.{name} must be C-contiguous")
    lengths = batch.lengths
    if len(lengths) and lengths.max() > max_len:
        raise ValueError(f"a set of {what} has {lengths.max()} ids, more than max_len={max_len}")
    if len(batch.tokens) and int(batch.tokens.max()) >= vocab_size:
        raise ValueError(f"{what} hold id {int(batch.tokens.max())}, not below vocab_size={vocab_size}")


class ChunkedShardIndex:
    """One shard's docs in GPU memory, searched exactly with the bitset kernel.

    Same contract as :class:`kernels.NumpyShardIndex`: ``search`` returns the
    identical :class:`kernels.TopK`.

    Parameters
    ----------
    docs : SetBatch
        The shard's ``n_docs`` docs in host memory, in ``doc_ids`` order:
        ``offsets`` int64 of shape (n_docs + 1,), ``tokens`` uint16, both
        C-contiguous; each set sorted and distinct with at most ``max_len`` ids,
        all below ``vocab_size``.
    doc_ids : numpy.ndarray of integer dtype, shape (n_docs,)
        Global doc ids (host), strictly increasing, so position order is id
        order. Stored as int64.
    max_len : int
        Bound on set sizes, in ``[1, 32767]``; fixes the key scale ``max_len**2``.
    vocab_size : int, default 65536
        Token ids are below this, in ``[1, 65536]``. Each query's bitset holds
        ``vocab_size`` bits; 4 of them (at most 32 KiB) sit in one block's shared
        memory.
    capacity : int, optional
        Candidate buffer slots per query and chunk (default ``2048 + k``). Also
        the length of the first chunk. A tiny value only forces the overflow
        path (tests use that); results stay exact.
    max_chunk : int, default 2**21
        Upper bound on docs scanned per chunk.
    query_batch : int, default 4096
        Queries searched together; bounds the bitsets (``vocab_size / 8`` bytes
        each) and candidate buffers held on the GPU.
    redo_bytes : int, default 2**30
        Approximate GPU memory for re-scanning overflowed queries over a chunk;
        sets how many such queries are re-scanned at once.

    Attributes
    ----------
    n_docs : int
        Number of docs in the shard.
    rescans : int
        (query, chunk) pairs of the last ``search`` whose candidate buffer
        overflowed and were scanned again (a diagnostic; 0 in the common case).

    Raises
    ------
    ValueError
        If an argument has the wrong type, dtype, shape or contiguity, if
        ``doc_ids`` is not strictly increasing, if a doc is longer than
        ``max_len`` or holds an id ``>= vocab_size``, or if the shard has
        ``2**31`` docs or more.

    Notes
    -----
    GPU memory held: the doc layout, ``16 * ceil(L / 8) * n_docs`` bytes where
    ``L`` is the longest doc, plus ``2 * n_docs`` bytes of lengths. The index
    lives on the CUDA device that is current when it is built.
    """

    def __init__(
        self,
        docs: SetBatch,
        doc_ids: np.ndarray,
        max_len: int,
        vocab_size: int = _MAX_VOCAB,
        *,
        capacity: int | None = None,
        max_chunk: int = 1 << 21,
        query_batch: int = 4096,
        redo_bytes: int = 1 << 30,
    ):
        import cupy

        key_scale(max_len)  # validates max_len
        if not 1 <= vocab_size <= _MAX_VOCAB:
            raise ValueError(f"vocab_size must be in [1, {_MAX_VOCAB}], found {vocab_size}")
        for name, value in (("max_chunk", max_chunk), ("query_batch", query_batch), ("redo_bytes", redo_bytes)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, found {value}")
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be >= 1, found {capacity}")
        _check_set_batch(docs, "docs", max_len, vocab_size)
        doc_ids = np.asarray(doc_ids)
        if doc_ids.dtype.kind not in "iu":
            raise ValueError(f"doc_ids must have an integer dtype, found {doc_ids.dtype}")
        if doc_ids.shape != (docs.n_sets,):
            raise ValueError(f"doc_ids must have shape ({docs.n_sets},), found {doc_ids.shape}")
        if docs.n_sets >= 2**31:
            raise ValueError(f"a shard holds at most 2**31 - 1 docs, found {docs.n_sets}; use more shards")
        doc_ids = doc_ids.astype(np.int64)
        if np.any(np.diff(doc_ids) <= 0):
            raise ValueError("doc_ids must be strictly increasing")

        self.doc_ids = doc_ids
        self.doc_len = docs.lengths.astype(np.int16)
        self.max_len = max_len
        self.vocab_size = vocab_size
        self.capacity = capacity
        self.max_chunk = max_chunk
        self.query_batch = query_batch
        self.redo_bytes = redo_bytes
        self._scale = key_scale(max_len)
        self._n_words = -(-vocab_size // 32)
        self._longest = int(self.doc_len.max()) if self.n_docs else 0
        self.rescans = 0  # (query, chunk) pairs re-scanned after an overflow in the last search
        self._device_id = cupy.cuda.Device().id
        self._kernels = _kernels(self._device_id)
        self._upload_docs(docs)

    @property
    def n_docs(self) -> int:
        """Number of docs in the shard."""
        return len(self.doc_ids)

    def _upload_docs(self, docs: SetBatch) -> None:
        """Build the swizzled layout on the GPU: uint4 element ``[g][d]`` at ``g * n_docs_padded + d``."""
        import cupy

        self._n_groups = -(-self._longest // _IDS_PER_GROUP)
        self._n_docs_padded = -(-max(self.n_docs, 1) // 32) * 32  # keeps each group's row 512-byte aligned
        # uint4 elements as 4 uint32 words; at least one element so the pointer is never null.
        n_elements = max(1, self._n_groups * self._n_docs_padded)
        self._doc_groups = cupy.zeros((n_elements, 4), dtype=np.uint32)
        self._doc_len = cupy.asarray(self.doc_len)
        if self._n_groups == 0:
            return
        offsets = cupy.asarray(docs.offsets)
        tokens = cupy.asarray(docs.tokens)
        total = self._n_groups * self._n_docs_padded
        self._kernels["build_doc_groups"](
            (_blocks_for(total),),
            (_THREADS,),
            (
                offsets,
                tokens,
                np.int32(self.n_docs),
                np.int64(self._n_docs_padded),
                np.int32(self._n_groups),
                self._doc_groups,
            ),
        )

    def search(self, queries: SetBatch, k: int) -> TopK:
        """Exact shard-local top-k for each query.

        Parameters
        ----------
        queries : SetBatch
            ``n_queries`` sets in host memory (``offsets`` int64, ``tokens``
            uint16, C-contiguous), each with at most ``max_len`` ids, all below
            ``vocab_size``.
        k : int
            Results per query, ``>= 1``.

        Returns
        -------
        TopK
            Host arrays of shape (n_queries, k): ``doc_ids`` int64, ``overlap``
            and ``doc_len`` int16, ordered by score descending then doc id
            ascending. Identical to :meth:`kernels.NumpyShardIndex.search`,
            including the padding (``doc_ids == -1``, overlap and doc_len 0)
            when the shard has fewer than ``k`` docs.

        Raises
        ------
        ValueError
            If ``queries`` has the wrong type, dtype or contiguity, a query is
            longer than ``max_len`` or holds an id ``>= vocab_size``, or ``k``
            is not an integer ``>= 1``.
        """
        import cupy

        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"k must be an integer >= 1, found {k!r}")
        k = int(k)
        _check_set_batch(queries, "queries", self.max_len, self.vocab_size)
        out = empty_topk(queries.n_sets, k)
        self.rescans = 0
        if self.n_docs == 0 or queries.n_sets == 0:
            return out
        with cupy.cuda.Device(self._device_id):
            for lo in range(0, queries.n_sets, self.query_batch):
                hi = min(lo + self.query_batch, queries.n_sets)
                offsets = queries.offsets[lo : hi + 1] - queries.offsets[lo]
                tokens = queries.tokens[queries.offsets[lo] : queries.offsets[hi]]
                part = self._search_batch(SetBatch(offsets, tokens), k)
                out.doc_ids[lo:hi], out.overlap[lo:hi], out.doc_len[lo:hi] = part
        return out

    # ---- one batch of queries -------------------------------------------------

    def _search_batch(self, queries: SetBatch, k: int) -> TopK:
        """Scan the shard chunk by chunk for one batch of queries (see the module docstring)."""
        import cupy

        n_queries = queries.n_sets
        query_len = queries.lengths
        bits = self._query_bitsets(queries)
        qlen = cupy.asarray(query_len.astype(np.int16))
        capacity = self.capacity if self.capacity is not None else 2048 + k
        slots = np.full(-(-n_queries // _QUERIES_PER_BLOCK) * _QUERIES_PER_BLOCK, -1, dtype=np.int32)
        slots[:n_queries] = np.arange(n_queries, dtype=np.int32)
        slots = cupy.asarray(slots)
        # Current top-k per query as encoded candidates, best first; 0 = empty slot.
        topk = cupy.zeros((n_queries, k), dtype=np.uint64)
        for begin, end in self._chunks(capacity, k):
            min_ov = cupy.asarray(self._min_overlap_table(self._kth_keys(topk), query_len))
            counts, cand = self._count_and_emit(bits, slots, qlen, min_ov, begin, end, capacity)
            counts = counts.get()[:n_queries]
            overflowed = np.flatnonzero(counts > capacity)
            # Re-scan overflowed queries from their pre-chunk top-k (their buffers lost candidates).
            redone = self._rescan(overflowed, topk, bits, qlen, min_ov, begin, end, k) if len(overflowed) else None
            width = int(min(capacity, counts.max()))
            if width:
                topk = _merge(topk, cand[:n_queries, :width], k)
            if redone is not None:
                topk[cupy.asarray(overflowed)] = redone
        return self._finish(topk, bits, n_queries, k)

    def _chunks(self, capacity: int, k: int):
        """Yield ``(begin, end)`` doc ranges covering the shard, in order.

        The first chunk has ``capacity`` docs, so with threshold -1 it cannot
        overflow. Later chunks grow with the docs already seen: if docs came in
        random order, a chunk ``c`` times longer than what was seen would yield
        about ``c * k`` candidates per query, so ``c`` is kept near
        ``capacity / (4 k)`` (between 1 and 4) to leave the buffer room.
        """
        growth = min(4.0, max(1.0, capacity / (4.0 * k)))
        begin, length = 0, min(capacity, self.max_chunk)
        while begin < self.n_docs:
            end = min(self.n_docs, begin + length)
            yield begin, end
            begin = end
            length = max(1, min(self.max_chunk, int(begin * growth)))

    def _kth_keys(self, topk) -> np.ndarray:
        """Host int64 array (n_queries,): key of each query's k-th best, -1 while fewer than k were kept."""
        kth = topk[:, -1].get()
        return np.where(kth == 0, -1, (kth >> np.uint64(32)).astype(np.int64))

    def _min_overlap_table(self, thresholds: np.ndarray, query_len: np.ndarray) -> np.ndarray:
        """Host int32 array (n_queries, longest + 1): least overlap that beats the threshold, by doc length."""
        doc_len = np.arange(self._longest + 1)
        table = min_overlap_above(thresholds[:, None], query_len[:, None], doc_len[None, :], self.max_len)
        return np.ascontiguousarray(table, dtype=np.int32)

    def _query_bitsets(self, queries: SetBatch):
        """Device uint32 array (n_queries, n_words): bit ``id`` of row q is set when query q holds ``id``."""
        import cupy

        bits = cupy.zeros((queries.n_sets, self._n_words), dtype=np.uint32)
        n_tokens = len(queries.tokens)
        if n_tokens:
            owner = np.repeat(np.arange(queries.n_sets, dtype=np.int32), queries.lengths)
            self._kernels["build_query_bitsets"](
                (_blocks_for(n_tokens),),
                (_THREADS,),
                (cupy.asarray(queries.tokens), cupy.asarray(owner), np.int64(n_tokens), np.int32(self._n_words), bits),
            )
        return bits

    def _count_and_emit(self, bits, slots, qlen, min_ov, begin: int, end: int, capacity: int):
        """Run count_and_emit over docs [begin, end) for the queries in ``slots``.

        Returns
        -------
        counts : cupy.ndarray of int32, shape (n_slots,)
            Emissions per slot, also those past ``capacity``.
        cand : cupy.ndarray of uint64, shape (n_slots, capacity)
            Encoded candidates, 0 in unused slots.
        """
        import cupy

        n_slots = len(slots)
        counts = cupy.zeros(n_slots, dtype=np.int32)
        cand = cupy.zeros((n_slots, capacity), dtype=np.uint64)
        length = end - begin
        tile = max(_THREADS * _DOCS_PER_THREAD, -(-length // _MAX_GRID_Y))
        kernel = self._kernels["count_and_emit"]
        shared = self._n_words * _QUERIES_PER_BLOCK * 4
        if shared > _DEFAULT_SHARED_LIMIT:  # never with vocab <= 65536, kept for larger bitsets
            kernel.max_dynamic_shared_size_bytes = shared
        kernel(
            (n_slots // _QUERIES_PER_BLOCK, -(-length // tile)),
            (_THREADS,),
            (
                self._doc_groups,
                np.int64(self._n_docs_padded),
                self._doc_len,
                np.int32(begin),
                np.int32(end),
                np.int32(tile),
                bits,
                np.int32(self._n_words),
                slots,
                qlen,
                min_ov,
                np.int32(min_ov.shape[1]),
                np.int64(self._scale),
                counts,
                cand,
                np.int32(capacity),
            ),
            shared_mem=shared,
        )
        return counts, cand

    def _rescan(self, overflowed: np.ndarray, topk, bits, qlen, min_ov, begin: int, end: int, k: int):
        """New top-k rows (device uint64, (len(overflowed), k)) of queries whose buffer overflowed.

        Each is scanned again over [begin, end) with a buffer as long as the
        chunk (so it cannot overflow), with the same thresholds, starting from
        its pre-chunk top-k rows. Queries go in sub-batches that keep the
        buffers and the merge's copies near ``redo_bytes``.
        """
        import cupy

        self.rescans += len(overflowed)
        length = end - begin
        per_query = 3 * 8 * (length + k)  # candidate buffer, then concatenation and sort copies
        batch = max(1, self.redo_bytes // per_query)
        if batch >= _QUERIES_PER_BLOCK:
            batch -= batch % _QUERIES_PER_BLOCK
        rows = []
        for lo in range(0, len(overflowed), batch):
            queries = overflowed[lo : lo + batch]
            slots = np.full(-(-len(queries) // _QUERIES_PER_BLOCK) * _QUERIES_PER_BLOCK, -1, dtype=np.int32)
            slots[: len(queries)] = queries
            counts, cand = self._count_and_emit(bits, cupy.asarray(slots), qlen, min_ov, begin, end, length)
            width = int(counts.max().get())
            old = topk[cupy.asarray(queries)]
            rows.append(_merge(old, cand[: len(queries), :width], k) if width else old)
        return cupy.concatenate(rows)

    def _finish(self, topk, bits, n_queries: int, k: int) -> TopK:
        """Decode the device top-k into host arrays, recounting each entry's overlap."""
        import cupy

        overlap = cupy.zeros((n_queries, k), dtype=np.int16)
        self._kernels["recount_overlap"](
            (_blocks_for(n_queries * k),),
            (_THREADS,),
            (
                topk,
                np.int32(n_queries),
                np.int32(k),
                self._doc_groups,
                np.int64(self._n_docs_padded),
                self._doc_len,
                bits,
                np.int32(self._n_words),
                overlap,
            ),
        )
        vals = topk.get()
        valid = vals != 0
        position = np.where(valid, ~vals & np.uint64(0xFFFFFFFF), 0).astype(np.int64)
        doc_ids = np.where(valid, self.doc_ids[position], -1)
        doc_len = np.where(valid, self.doc_len[position], 0).astype(np.int16)
        return TopK(doc_ids, overlap.get(), doc_len)


def _merge(topk, cand, k: int):
    """Best ``k`` of each row of ``topk`` (n_rows, k) and ``cand`` (n_rows, width), best first.

    Both hold encoded candidates ``(key << 32) | ~position`` (0 = empty), so one
    ascending sort per row puts the best last.
    """
    import cupy

    merged = cupy.sort(cupy.concatenate([topk, cand], axis=1), axis=1)
    return cupy.ascontiguousarray(merged[:, ::-1][:, :k])
