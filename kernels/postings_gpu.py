"""GPU postings for :class:`kernels.cuda.CupyShardIndex`: the tiled inverted index, the cost model, the launcher.

The kernel is ``postings_topk.cu`` beside this file (its header explains the
layout and the counting); it is compiled once per device together with
``bitslice_topk.cu`` (one NVRTC program, :class:`cupy.RawModule` with
``name_expressions``), so both paths encode candidates with the same code.
CuPy is imported inside the functions.

How a query is routed (``CupyShardIndex(routing="auto")``): every query goes
through the sampling levels as before, which give it a bound ``(T, P)``. Its
last level, the whole shard, is then either the scan (``count_emit``) or
ScanCount over the postings of its ids (``postings_emit``), by the cost model
:func:`route_mask`; a query is only sent to the postings when ``T >= 1`` (no
doc outside the postings qualifies). Both paths emit the same set of docs into
the same candidate buffers, which ``select_topk`` sorts, so the results are
identical. References: ScanCount (Sarawagi, Kirpal, SIGMOD 2004; Li, Lu, Lu,
ICDE 2008); prefix filtering, which :mod:`kernels.postings` implements on the
CPU, in the survey of Mann, Augsten, Bouros (VLDB 2016).
"""

from __future__ import annotations

import pathlib
import threading

import numpy as np

__all__ = ["GpuPostings", "route_mask", "TILE_DOCS"]

_SOURCES = [pathlib.Path(__file__).with_name(n) for n in ("bitslice_topk.cu", "postings_topk.cu")]
_KERNEL = "settopk::postings_emit"
TILE_DOCS = 1 << 16  # kPostTile
_THREADS = 512  # kPostThreads
_SHARED = TILE_DOCS  # byte counters
_MAX_GRID_Y = 65535
# Cost model, seconds per query, fitted on one H200 (jobs.bench sti2-uniform and sti2-zipf, 7.85 M docs):
# scan, its share of the last level's count kernel (14.8 ms for 1980 queries over 689 M id slots:
# 1.1e-14 s per slot); postings, per postings entry (a 2-byte load and a shared-memory atomic: 7.2 ms for
# 2000 uniform queries of about 665,000 entries each) and per tile block (clearing 64 KiB of counters).
# Routing a batch costs about 1 ms more (the bounds are read back to the host, a second kernel runs after
# the scan): a batch is routed only where the modelled saving exceeds that.
SCAN_S_PER_SLOT = 1.1e-14
POSTINGS_S_PER_ENTRY = 5.5e-12
POSTINGS_S_PER_TILE = 1.0e-8
ROUTING_BATCH_S = 1.0e-3

_modules: dict[int, object] = {}
_lock = threading.Lock()


def _kernel(device_id: int):
    import cupy

    with _lock:
        module = _modules.get(device_id)
        if module is None:
            with cupy.cuda.Device(device_id):
                code = "\n".join(p.read_text() for p in _SOURCES)
                module = cupy.RawModule(code=code, options=("-std=c++17",), name_expressions=[_KERNEL])
                module.compile()
            _modules[device_id] = module
    return module.get_function(_KERNEL)


class GpuPostings:
    """The tiled postings of one shard on the current GPU.

    Parameters
    ----------
    offsets : cupy.ndarray of int64, shape (n_docs + 1,)
        Device CSR offsets of the shard's docs (position order).
    tokens : cupy.ndarray of uint16, shape (n_tokens,)
        Device ids, each doc's ascending and distinct, all below ``n_words``.
    n_words : int
        Largest doc id + 1 (at least 1).

    Attributes
    ----------
    post : cupy.ndarray of uint16, shape (n_tokens,)
        Positions inside their tile, by (token, tile, position).
    seg_start : cupy.ndarray of int64, shape (n_words * n_tiles + 1,)
        Start of segment ``token * n_tiles + tile`` in ``post``.
    doc_freq : numpy.ndarray of int64, shape (n_words,)
        Docs per token (host), for the cost model.
    n_tiles : int
    nbytes : int
        Device bytes held: ``2 n_tokens + 8 (n_words n_tiles + 1)``.

    Raises
    ------
    ValueError
        If an array has the wrong dtype or shape, or the shard has ``65535 * 65536`` docs or more.
    """

    def __init__(self, offsets, tokens, n_words: int):
        import cupy

        if offsets.dtype != np.int64 or offsets.ndim != 1 or tokens.dtype != np.uint16 or tokens.ndim != 1:
            raise ValueError(f"offsets must be 1-D int64 and tokens 1-D uint16, found {offsets.dtype}, {tokens.dtype}")
        n_docs = len(offsets) - 1
        self.n_tiles = max(1, -(-n_docs // TILE_DOCS))
        if self.n_tiles > _MAX_GRID_Y:
            raise ValueError(f"the postings path holds fewer than {_MAX_GRID_Y * TILE_DOCS} docs, found {n_docs}")
        self.n_docs = n_docs
        self.n_words = max(1, int(n_words))
        n_tok = len(tokens)
        if n_tok:
            pos = cupy.searchsorted(offsets[1:], cupy.arange(n_tok, dtype=np.int64), side="right")
            key = cupy.sort((tokens.astype(np.int64) << 32) | pos)
            del pos
            self.post = (key & (TILE_DOCS - 1)).astype(np.uint16)
            seg = (key >> 32) * self.n_tiles + ((key & 0xFFFFFFFF) >> 16)
            del key
            self.seg_start = cupy.searchsorted(seg, cupy.arange(self.n_words * self.n_tiles + 1, dtype=np.int64))
            del seg
            self.doc_freq = cupy.bincount(tokens, minlength=self.n_words)[: self.n_words].astype(np.int64).get()
        else:
            self.post = cupy.zeros(1, dtype=np.uint16)
            self.seg_start = cupy.zeros(self.n_words * self.n_tiles + 1, dtype=np.int64)
            self.doc_freq = np.zeros(self.n_words, dtype=np.int64)
        self.nbytes = int(2 * n_tok + self.seg_start.nbytes)
        self._kernel = _kernel(cupy.cuda.Device().id)

    def emit(self, rows, qoff, qtok, qlen, thr_ge, max_doc_len: int, bound_key, tie_pos, len_by_pos, scale: int,
             score_code: int, count, cand_base, cand_cap, cand) -> None:
        """Launch ``postings_emit`` for the queries ``rows`` (device int32, C-contiguous, indices into the
        query arrays); every routed query must have ``bound_key >= 1``. Arrays as in ``count_emit``.

        Raises
        ------
        ValueError
            If ``rows`` or a query array has the wrong dtype or is not C-contiguous, or
            ``thr_ge`` is not of shape (n_queries, max_doc_len + 1).
        """
        for name, a, dtype in (("rows", rows, np.int32), ("qoff", qoff, np.int64), ("qtok", qtok, np.uint16),
                               ("qlen", qlen, np.int32), ("thr_ge", thr_ge, np.uint8), ("bound_key", bound_key, np.int64),
                               ("tie_pos", tie_pos, np.int32), ("count", count, np.int32), ("cand", cand, np.uint64)):
            if a.dtype != dtype or not a.flags.c_contiguous:
                raise ValueError(f"{name} must be C-contiguous {np.dtype(dtype)}, found {a.dtype}")
        if thr_ge.shape != (len(qlen), max_doc_len + 1):
            raise ValueError(f"thr_ge must have shape ({len(qlen)}, {max_doc_len + 1}), found {thr_ge.shape}")
        if len(rows) == 0:
            return
        self._kernel.max_dynamic_shared_size_bytes = _SHARED
        self._kernel(
            (len(rows), self.n_tiles),
            (_THREADS,),
            (self.post, self.seg_start, np.int32(self.n_tiles), np.int32(self.n_words), np.int64(self.n_docs), rows,
             qoff, qtok, qlen, thr_ge, np.int32(max_doc_len), bound_key, tie_pos, len_by_pos, np.int64(scale),
             np.int32(score_code), count, cand_base, cand_cap, cand),
            shared_mem=_SHARED,
        )


def route_mask(routing: str, queries, doc_freq: np.ndarray, n_tiles: int, scan_slots: int) -> np.ndarray:
    """Which queries the cost model sends to the postings (host bool array of shape (n_queries,)).

    ``queries`` is a host SetBatch; ``doc_freq`` int64 of shape (n_words,) (ids at or above it have
    no postings); ``scan_slots`` the id slots the scan reads per query group (the layout's size).
    ``"scan"``: none; ``"postings"``: all; ``"auto"``: where the modelled postings time is below the scan's,
    provided the batch's modelled saving exceeds ``ROUTING_BATCH_S`` (else none).
    """
    n = queries.n_sets
    if routing == "scan" or n == 0:
        return np.zeros(n, dtype=bool)
    if routing == "postings":
        return np.ones(n, dtype=bool)
    freq = np.concatenate([doc_freq, [0]])[np.minimum(queries.tokens, len(doc_freq))]
    entries = np.zeros(n, dtype=np.int64)
    nonempty = np.flatnonzero(queries.lengths > 0)
    if len(freq):
        entries[nonempty] = np.add.reduceat(freq, queries.offsets[nonempty])
    postings_s = POSTINGS_S_PER_ENTRY * entries + POSTINGS_S_PER_TILE * n_tiles
    saving = SCAN_S_PER_SLOT * scan_slots - postings_s
    routed = saving > 0
    if saving[routed].sum() <= ROUTING_BATCH_S:
        routed[:] = False
    return routed
