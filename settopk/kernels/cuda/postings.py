"""GPU postings for :class:`settopk.kernels.cuda.CupyShardIndex`: the tiled inverted index and its launcher.

The kernel is ``postings_topk.cu`` beside this file (its header explains the
layout and the counting). It includes ``common.cuh``, as the scan's
``bitslice_topk.cu`` does, so both paths encode candidates with the same code;
:mod:`settopk.kernels.cuda.modules` compiles it once per device. CuPy is imported inside
the functions.

How a query is routed (``CupyShardIndex(routing="auto")``): before its first
level, the cost model :func:`settopk.kernels.cost.cupy_route_mask` compares the postings
entries of its ids (counted on the GPU, :meth:`GpuPostings.entries`) with the
scan's work. A query sent to the postings runs every level through them: the
sampling levels count the docs of a prefix of the shard's positions (the sizes
of the scan's levels), which gives it a bound ``(T, P)``; its last level counts
the whole shard if ``T >= 1`` (no doc outside the postings qualifies), and is
scanned otherwise. Both paths emit the same set of docs into the same candidate
buffers, which ``select_topk`` sorts, so the results are identical. References:
ScanCount (Sarawagi, Kirpal, SIGMOD 2004; Li, Lu, Lu, ICDE 2008); prefix
filtering, which :mod:`settopk.kernels.postings` implements on the CPU, in the survey of
Mann, Augsten, Bouros (VLDB 2016).
"""

from __future__ import annotations

import numpy as np

from .modules import load_kernels

__all__ = ["GpuPostings", "TILE_DOCS"]

_SOURCE = "postings_topk.cu"
_EMIT = {np.dtype(np.uint16): "settopk::postings_emit<unsigned short>",
         np.dtype(np.uint32): "settopk::postings_emit<unsigned int>"}  # by the queries' id type
_COST = "settopk::postings_cost"
TILE_DOCS = 1 << 16  # kPostTile
_THREADS = 1024  # kPostThreads
_TILES_PER_BLOCK = 16  # tiles one block counts in turn (its ids, least overlap and emission shared)
_SHARED = TILE_DOCS  # byte counters
_MAX_GRID_Y = 65535


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
        Docs per token (host; on the device too, padded to every uint16 id, for the cost model).
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
        self._start(len(offsets) - 1)
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
            # Docs per id for every uint16 id, so the cost kernel needs no bound check.
            self._freq_by_id = cupy.bincount(tokens, minlength=1 << 16).astype(np.int64)
        else:
            self.post = cupy.zeros(1, dtype=np.uint16)
            self.seg_start = cupy.zeros(self.n_words * self.n_tiles + 1, dtype=np.int64)
            self._freq_by_id = cupy.zeros(1 << 16, dtype=np.int64)
        self.doc_freq = self._freq_by_id[: self.n_words].get()
        self.nbytes = int(2 * n_tok + self.seg_start.nbytes)

    def _start(self, n_docs: int) -> None:
        """Set ``n_docs`` and ``n_tiles`` (ValueError past the grid's tiles) and load the kernels."""
        import cupy

        self.n_tiles = max(1, -(-n_docs // TILE_DOCS))
        if self.n_tiles > _MAX_GRID_Y:
            raise ValueError(f"the postings path holds fewer than {_MAX_GRID_Y * TILE_DOCS} docs, found {n_docs}")
        self.n_docs = n_docs
        kernels = load_kernels(_SOURCE, (*_EMIT.values(), _COST), cupy.cuda.Device().id)
        self._kernels = {dtype: kernels[name] for dtype, name in _EMIT.items()}
        self._cost = kernels[_COST]

    def entries(self, qoff, qtok, qlen) -> np.ndarray:
        """Postings entries of each query's ids (ScanCount's reads): host int64 of shape (n_queries,).

        Query ``q``'s ids are ``qtok[qoff[q] : qoff[q] + qlen[q]]`` (device int64, uint16 and int32
        arrays, as for ``emit``).
        """
        import cupy

        n_q = len(qlen)
        out = cupy.zeros(max(n_q, 1), dtype=np.int64)
        if n_q:
            self._cost((-(-n_q // 256),), (256,), (qoff, qtok, qlen, np.int32(n_q), self._freq_by_id, out))
        return out.get()[:n_q]

    def emit(self, rows, limit: int, qoff, qtok, qlen, thr_ge, max_doc_len: int, bound_key, tie_pos, len_by_pos,
             scale: int, score_code: int, cosine_keys, count, cand_base, cand_cap, cand) -> None:
        """Launch ``postings_emit`` for the queries ``rows`` (device int32, C-contiguous, indices into the
        query arrays; query ``q``'s ids are ``qtok[qoff[q] : qoff[q] + qlen[q]]``, uint16, or uint32 for a
        wide shard's postings, in their numbers: :meth:`settopk.kernels.cuda.wide.WidePostings.numbers`) over
        the docs at positions below ``limit`` (``n_docs``: the whole shard, where every routed query must have
        ``bound_key >= 1``; less: a sampling level). Arrays as in ``count_emit``.

        Raises
        ------
        ValueError
            If ``rows`` or a query array has the wrong dtype or is not C-contiguous,
            ``thr_ge`` is not of shape (n_queries, max_doc_len + 1), or ``limit`` is not in [1, n_docs].
        """
        kernel = self._kernels.get(qtok.dtype)
        if kernel is None:
            raise ValueError(f"qtok must be uint16 or uint32, found {qtok.dtype}")
        for name, a, dtype in (("rows", rows, np.int32), ("qoff", qoff, np.int64), ("qtok", qtok, qtok.dtype),
                               ("qlen", qlen, np.int32), ("thr_ge", thr_ge, np.uint8), ("bound_key", bound_key, np.int64),
                               ("tie_pos", tie_pos, np.int32), ("cosine_keys", cosine_keys, np.int32),
                               ("count", count, np.int32), ("cand", cand, np.uint64)):
            if a.dtype != dtype or not a.flags.c_contiguous:
                raise ValueError(f"{name} must be C-contiguous {np.dtype(dtype)}, found {a.dtype}")
        if thr_ge.shape != (len(qlen), max_doc_len + 1):
            raise ValueError(f"thr_ge must have shape ({len(qlen)}, {max_doc_len + 1}), found {thr_ge.shape}")
        if not 1 <= limit <= self.n_docs:
            raise ValueError(f"limit must be in [1, {self.n_docs}], found {limit}")
        if len(rows) == 0:
            return
        tiles = -(-int(limit) // TILE_DOCS)
        kernel.max_dynamic_shared_size_bytes = _SHARED
        kernel(
            (len(rows), -(-tiles // _TILES_PER_BLOCK)),
            (_THREADS,),
            (self.post, self.seg_start, np.int32(self.n_tiles), np.int32(self.n_words), np.int64(limit), rows,
             qoff, qtok, qlen, thr_ge, np.int32(max_doc_len), bound_key, tie_pos, len_by_pos, np.int64(scale),
             np.int32(score_code), cosine_keys, count, cand_base, cand_cap, cand),
            shared_mem=_SHARED,
        )

