"""Benchmark baselines: what one would write instead of settopk, each exact.

Each baseline has the shard-index contract: the constructor is its build (host
CSR docs to its layout), ``search(queries, k)`` returns a :class:`settopk.kernels.TopK`
identical to :meth:`settopk.kernels.NumpyShardIndex.search` (for ``sparse_dot_topn``:
identical up to which docs tied at the k-th score are kept). The GPU ones and
scipy rank with the exact 64-bit sort value ``(key << 32) | ~position`` (key from
:func:`settopk.kernels.score_key`), so ties go to the lower doc id as everywhere else.

* :class:`SpmmBaseline` (GPU): the corpus as a CSR matrix (CuPy, cuSPARSE)
  times a dense 0/1 query matrix, a chunk of queries at a time, then
  ``torch.topk`` per query.
* :class:`Popc4Baseline` (GPU): the STI2 champion's design as its write-up
  describes it (``popc4.cu``): 4 queries' bitsets interleaved in shared memory,
  one ``uint4`` shared load per doc token, ``__popc`` per query, every score
  materialised, then ``torch.topk``.
* :class:`ScipyBaseline` (CPU): a ``scipy.sparse`` CSR product with a dense 0/1
  query matrix, then ``numpy.argpartition`` per query; any score.
* :class:`SparseDotTopnBaseline` (CPU): ``sparse_dot_topn.sp_matmul_topn``, a
  multi-threaded C++ sparse product keeping the top n per row; scores ``overlap``
  and ``cosine`` only, and its ties at the k-th score are its own (see the class).
* :class:`NumpyIndexBaseline` (CPU): settopk's NumPy index, what the compiled
  ``cpu`` backend replaced.

:data:`BASELINES` says, for each name, its device, the scores it ranks by and
whether its ids must equal the reference's.

CuPy, PyTorch, SciPy and sparse_dot_topn are imported inside the classes (the GPU
ones need both CuPy and PyTorch; SciPy and sparse_dot_topn come with the ``bench`` extra). ``popc4.cu`` ships
with this module, not with :mod:`kernels`: it is no part of the product.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from settopk.kernels import (DEFAULT_SCORE, SCORES, NumpyShardIndex, SetBatch, TopK, check_score, empty_topk, key_scale,
                     order_candidates, score_key)
from settopk.kernels.cuda.modules import load_kernels

__all__ = ["BASELINES", "Baseline", "NumpyIndexBaseline", "Popc4Baseline", "ScipyBaseline", "SparseDotTopnBaseline",
           "SpmmBaseline", "decode_values"]

_POPC4_SOURCE = pathlib.Path(__file__).with_name("popc4.cu")
_POPC4_KERNELS = ("popc4::build_doc_groups", "popc4::build_query_bitsets", "popc4::scores")
_THREADS = 256
_LOW32 = np.int64(0xFFFFFFFF)


def decode_values(values: np.ndarray, query_len: np.ndarray, doc_len: np.ndarray, doc_ids: np.ndarray,
                  max_len: int, k: int) -> TopK:
    """Top-k rows from exact sort values.

    Parameters
    ----------
    values : numpy.ndarray of int64, shape (n_queries, width)
        ``(key << 32) | (~position & 0xFFFFFFFF)`` per row, best first;
        ``width <= k`` (rows are padded when ``width < k``).
    query_len : numpy.ndarray of int, shape (n_queries,)
    doc_len : numpy.ndarray of int, shape (n_docs,)
        Length of the doc at each position.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
    max_len : int
        Fixes the key scale ``S = max_len ** 2``.
    k : int

    Returns
    -------
    TopK
        Shape (n_queries, k). The overlap is recovered from the key exactly:
        ``overlap = ceil(key * m / S)`` with ``m = max(|q|, |d|)`` (keys of
        different overlaps for the same lengths differ by ``S / m >= 1``).
    """
    n_queries, width = values.shape
    out = empty_topk(n_queries, k)
    if width == 0:
        return out
    position = (~values) & _LOW32
    key = values >> 32
    lengths = doc_len[position].astype(np.int64)
    m = np.maximum(np.asarray(query_len, dtype=np.int64)[:, None], lengths)
    scale = key_scale(max_len)
    out.doc_ids[:, :width] = doc_ids[position]
    out.overlap[:, :width] = np.where(m > 0, (key * m + scale - 1) // scale, 0)
    out.doc_len[:, :width] = lengths
    return out


def _owners(queries: SetBatch) -> np.ndarray:
    """Query index of every query token, int32 of shape (n_tokens,)."""
    return np.repeat(np.arange(queries.n_sets, dtype=np.int32), queries.lengths)


def _torch_topk(values, k: int) -> np.ndarray:
    """Host int64 (rows, min(k, n)) of the largest entries of each row of a CuPy int64 array, descending."""
    import torch

    tensor = torch.as_tensor(values, device="cuda")
    best, _ = torch.topk(tensor, min(k, tensor.shape[1]), dim=1, largest=True, sorted=True)
    return best.cpu().numpy()


class SpmmBaseline:
    """CSR corpus times dense 0/1 queries on the GPU (cuSPARSE through CuPy), then ``torch.topk``.

    Parameters
    ----------
    docs : SetBatch
        ``n_docs`` docs in host memory, sorted distinct ids below ``vocab_size``.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing global ids.
    max_len : int
        Bound on set sizes (key scale).
    vocab_size : int
        Columns of the matrix.
    query_chunk : int, default 256
        Queries per product; GPU memory per chunk is ``12 * n_docs *
        query_chunk`` bytes (float32 overlaps and int64 sort values).

    Notes
    -----
    GPU memory held: ``10 * n_tokens + 4 * n_docs`` bytes (float32 data, int32
    indices and row pointers).
    """

    name = "spmm"

    def __init__(self, docs: SetBatch, doc_ids: np.ndarray, max_len: int, vocab_size: int, *, query_chunk: int = 256):
        import cupy
        import cupyx.scipy.sparse as sparse

        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        self.max_len = max_len
        self.vocab_size = vocab_size
        self.query_chunk = query_chunk
        self.n_docs = docs.n_sets
        indptr = cupy.asarray(docs.offsets).astype(np.int32)
        indices = cupy.asarray(docs.tokens).astype(np.int32)
        data = cupy.ones(len(docs.tokens), dtype=np.float32)
        self._matrix = sparse.csr_matrix((data, indices, indptr), shape=(self.n_docs, vocab_size))
        self._doc_len = cupy.asarray(docs.lengths.astype(np.int16))
        self._host_len = docs.lengths
        self._combine = cupy.ElementwiseKernel(
            "raw float32 ov, raw int16 dlen, raw int32 qlen, int64 n_docs, int32 n_q, int64 scale",
            "int64 out",
            """
            const long long q = i / n_docs;
            const long long d = i - q * n_docs;
            const long long o = (long long) ov[d * n_q + q];
            const int m = max(qlen[q], (int) dlen[d]);
            const long long key = m > 0 ? (scale * o) / m : 0;
            out = (key << 32) | (long long) (unsigned int) (~(unsigned int) d);
            """,
            "settopk_spmm_combine",
        )
        cupy.cuda.get_current_stream().synchronize()

    def search(self, queries: SetBatch, k: int) -> TopK:
        """Exact top-k per query: TopK of shape (n_queries, k) (see :func:`decode_values`)."""
        import cupy

        n_q = queries.n_sets
        width = min(k, self.n_docs)
        values = np.zeros((n_q, width), dtype=np.int64)
        for lo in range(0, n_q if self.n_docs else 0, self.query_chunk):
            hi = min(lo + self.query_chunk, n_q)
            part = queries.take(np.arange(lo, hi))
            dense = cupy.zeros((self.vocab_size, hi - lo), dtype=np.float32)
            dense[cupy.asarray(part.tokens.astype(np.int64)), cupy.asarray(_owners(part))] = 1.0
            overlap = cupy.ascontiguousarray(self._matrix @ dense)  # (n_docs, chunk) float32, exact small integers
            del dense
            keys = cupy.empty((hi - lo, self.n_docs), dtype=np.int64)
            qlen = cupy.asarray(part.lengths.astype(np.int32))
            self._combine(overlap, self._doc_len, qlen, np.int64(self.n_docs), np.int32(hi - lo),
                          np.int64(key_scale(self.max_len)), keys)
            del overlap
            values[lo:hi] = _torch_topk(keys, width)
            del keys
        return decode_values(values, queries.lengths, self._host_len, self.doc_ids, self.max_len, k)


class Popc4Baseline:
    """The STI2 champion's counting design with materialised scores (``popc4.cu``), then ``torch.topk``.

    Parameters
    ----------
    docs, doc_ids, max_len, vocab_size
        As :class:`SpmmBaseline`.
    query_chunk : int, default 128
        Queries scored per pass (a multiple of 4); GPU memory per chunk is
        ``8 * n_docs * query_chunk`` bytes of sort values.

    Notes
    -----
    GPU memory held: the swizzled layout, ``16 * ceil(L / 8) * n_docs`` bytes
    with ``L`` the longest doc, plus ``2 * n_docs`` bytes of lengths.
    """

    name = "popc4"

    def __init__(self, docs: SetBatch, doc_ids: np.ndarray, max_len: int, vocab_size: int, *, query_chunk: int = 128):
        import cupy

        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        self.max_len = max_len
        self.query_chunk = max(4, query_chunk - query_chunk % 4)
        self.n_docs = docs.n_sets
        self._n_words = -(-vocab_size // 32)
        self._host_len = docs.lengths
        kernels = load_kernels(_POPC4_SOURCE, _POPC4_KERNELS, cupy.cuda.Device().id)
        self._k = {name.split("::")[-1]: kernel for name, kernel in kernels.items()}
        longest = int(self._host_len.max()) if self.n_docs else 0
        self._n_groups = -(-longest // 8)
        self._n_padded = -(-max(self.n_docs, 1) // 32) * 32
        self._groups = cupy.zeros((max(1, self._n_groups * self._n_padded), 4), dtype=np.uint32)
        self._doc_len = cupy.asarray(self._host_len.astype(np.int16))
        if self._n_groups:
            total = self._n_groups * self._n_padded
            self._k["build_doc_groups"](
                (max(1, min(-(-total // _THREADS), 65535 * 32)),),
                (_THREADS,),
                (cupy.asarray(docs.offsets), cupy.asarray(docs.tokens), np.int32(self.n_docs),
                 np.int64(self._n_padded), np.int32(self._n_groups), self._groups),
            )
        cupy.cuda.get_current_stream().synchronize()

    def search(self, queries: SetBatch, k: int) -> TopK:
        """Exact top-k per query: TopK of shape (n_queries, k) (see :func:`decode_values`)."""
        import cupy

        n_q = queries.n_sets
        width = min(k, self.n_docs)
        values = np.zeros((n_q, width), dtype=np.int64)
        tile = max(4096, -(-self.n_docs // 65535))
        for lo in range(0, n_q if self.n_docs else 0, self.query_chunk):
            hi = min(lo + self.query_chunk, n_q)
            part = queries.take(np.arange(lo, hi))
            bits = cupy.zeros((hi - lo, self._n_words), dtype=np.uint32)
            n_tokens = len(part.tokens)
            if n_tokens:
                self._k["build_query_bitsets"](
                    (max(1, -(-n_tokens // _THREADS)),),
                    (_THREADS,),
                    (cupy.asarray(part.tokens), cupy.asarray(_owners(part)), np.int64(n_tokens),
                     np.int32(self._n_words), bits),
                )
            scores = cupy.empty((hi - lo, self.n_docs), dtype=np.int64)
            self._k["scores"](
                (-(-(hi - lo) // 4), -(-self.n_docs // tile)),
                (_THREADS,),
                (self._groups, np.int64(self._n_padded), self._doc_len, np.int32(self.n_docs), np.int32(tile), bits,
                 np.int32(self._n_words), cupy.asarray(part.lengths.astype(np.int32)), np.int32(hi - lo),
                 np.int64(key_scale(self.max_len)), scores),
                shared_mem=self._n_words * 16,
            )
            values[lo:hi] = _torch_topk(scores, width)
            del scores
        return decode_values(values, queries.lengths, self._host_len, self.doc_ids, self.max_len, k)


class ScipyBaseline:
    """CSR corpus times dense 0/1 queries with ``scipy.sparse`` on the CPU, then ``numpy.argpartition``.

    Parameters
    ----------
    docs, doc_ids, max_len, vocab_size
        As :class:`SpmmBaseline`.
    score : str, default braun_blanquet
        Any of :data:`settopk.kernels.SCORES`: the product gives the overlaps, :func:`settopk.kernels.score_key`
        the keys.
    query_chunk : int, default 64
        Queries per product; host memory per chunk is about ``20 * n_docs *
        query_chunk`` bytes (float32 overlaps, int64 overlaps and sort values).
    """

    name = "scipy"

    def __init__(self, docs: SetBatch, doc_ids: np.ndarray, max_len: int, vocab_size: int, *,
                 score: str = DEFAULT_SCORE, query_chunk: int = 64):
        import scipy.sparse

        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        self.max_len = max_len
        self.vocab_size = vocab_size
        self.score = check_score(score)
        self.query_chunk = query_chunk
        self.n_docs = docs.n_sets
        self._doc_len = docs.lengths
        data = np.ones(len(docs.tokens), dtype=np.float32)
        self._matrix = scipy.sparse.csr_matrix((data, docs.tokens.astype(np.int32), docs.offsets),
                                               shape=(self.n_docs, vocab_size))
        self._low = ~np.arange(self.n_docs, dtype=np.int64) & _LOW32

    def search(self, queries: SetBatch, k: int) -> TopK:
        """Exact top-k per query: TopK of shape (n_queries, k), ties to the lower doc id."""
        n_q, n = queries.n_sets, self.n_docs
        width = min(k, n)
        out = empty_topk(n_q, k)
        rows = np.arange(self.query_chunk)[:, None]
        for lo in range(0, n_q if n else 0, self.query_chunk):
            hi = min(lo + self.query_chunk, n_q)
            part = queries.take(np.arange(lo, hi))
            dense = np.zeros((self.vocab_size, hi - lo), dtype=np.float32)
            dense[part.tokens.astype(np.int64), _owners(part)] = 1.0
            overlap = (self._matrix @ dense).T.astype(np.int64)  # (chunk, n_docs)
            keys = score_key(overlap, part.lengths[:, None], self._doc_len[None, :], self.max_len, self.score)
            values = keys.astype(np.int64) << 32 | self._low[None, :]
            if width < n:
                best = np.argpartition(values, n - width, axis=1)[:, n - width:]
            else:
                best = np.broadcast_to(np.arange(n), (hi - lo, n))
            order = np.argsort(-values[rows[: hi - lo], best], axis=1, kind="stable")
            position = best[rows[: hi - lo], order]  # best first
            out.doc_ids[lo:hi, :width] = self.doc_ids[position]
            out.overlap[lo:hi, :width] = overlap[rows[: hi - lo], position]
            out.doc_len[lo:hi, :width] = self._doc_len[position]
        return out


class SparseDotTopnBaseline:
    """``sparse_dot_topn.sp_matmul_topn`` (C++ sparse product keeping the top n per row), multi-threaded.

    The queries (CSR) times the transposed corpus (CSR), keeping the ``k`` largest products per
    query: with 0/1 rows the product is the overlap (score ``overlap``); with L2-normalised rows
    it is the cosine. The library breaks ties its own way, so among docs of exactly the k-th best
    score its choice may differ from settopk's lower doc id: the benchmark checks the multiset
    of scores per query for this baseline, not the ids.

    Parameters
    ----------
    docs, doc_ids, max_len, vocab_size
        As :class:`SpmmBaseline`.
    score : {"overlap", "cosine"}
        The two scores a sparse product ranks by directly.
    threads : int, default 1
        ``n_threads`` of ``sp_matmul_topn`` (1: its sequential path).

    Notes
    -----
    Cosine products are float64: distinct cosines of sets of up to 255 ids differ by at least
    ``1 / (2 L**4)`` (about 2e-9 at L = 128), far above float64 rounding, so the library's order is
    the exact order up to ties; float32 (6e-8 relative) would merge distinct scores. Overlaps are
    float32 (exact small integers). The overlap of every returned doc is recovered exactly by
    rounding (``round(cos * sqrt(|q| |d|))``); the rows are then put in settopk's order
    (:func:`settopk.kernels.order_candidates`), padded with the lowest doc ids of score 0 where the
    product has fewer than ``k`` nonzero entries.
    """

    name = "sparse_dot_topn"
    SCORES = ("overlap", "cosine")

    def __init__(self, docs: SetBatch, doc_ids: np.ndarray, max_len: int, vocab_size: int, *,
                 score: str = "overlap", threads: int = 1):
        import scipy.sparse

        if score not in self.SCORES:
            raise ValueError(f"sparse_dot_topn ranks by {' or '.join(self.SCORES)}, found score {score!r}")
        if threads < 1:
            raise ValueError(f"threads must be >= 1, found {threads}")
        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        self.max_len = max_len
        self.vocab_size = vocab_size
        self.score = score
        self.threads = int(threads)
        self.n_docs = docs.n_sets
        self._doc_len = docs.lengths
        self._dtype = np.float64 if score == "cosine" else np.float32
        data = self._row_values(docs.lengths)
        corpus = scipy.sparse.csr_matrix((data, docs.tokens.astype(np.int32), docs.offsets),
                                         shape=(self.n_docs, vocab_size))
        self._corpus_t = corpus.T.tocsr()  # (vocab_size, n_docs): the right-hand side, built once

    def _row_values(self, lengths: np.ndarray) -> np.ndarray:
        """The nonzero value of every id of every set: 1, or ``1 / sqrt(len)`` for cosine."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if self.score == "cosine":
            per_set = 1.0 / np.sqrt(np.maximum(lengths, 1).astype(np.float64))
            return np.repeat(per_set, lengths).astype(self._dtype)
        return np.ones(int(lengths.sum()), dtype=self._dtype)

    def search(self, queries: SetBatch, k: int) -> TopK:
        """Top-k per query: TopK of shape (n_queries, k), the exact scores; ids may differ from
        settopk's only among docs tied at the k-th best score."""
        import scipy.sparse
        from sparse_dot_topn import sp_matmul_topn

        n_q, n = queries.n_sets, self.n_docs
        width = min(k, n)
        if width == 0 or n_q == 0:
            return empty_topk(n_q, k)
        matrix = scipy.sparse.csr_matrix((self._row_values(queries.lengths), queries.tokens.astype(np.int32),
                                          queries.offsets), shape=(n_q, self.vocab_size))
        product = sp_matmul_topn(matrix, self._corpus_t, top_n=width, sort=True,
                                 n_threads=self.threads if self.threads > 1 else None)
        counts = np.diff(product.indptr)
        # Candidates: the product's docs, then, for a row with fewer than ``width`` of them, the
        # first ``width`` positions not among them as score-0 filler (every doc the product leaves
        # out has overlap 0, and settopk ranks those by the lower doc id).
        cand = np.full((n_q, 2 * width), -1, dtype=np.int64)
        slot = np.arange(width)[None, :]
        has = slot < counts[:, None]
        starts = product.indptr[:-1, None]
        picked = np.where(has, starts + slot, 0)
        cand[:, :width] = np.where(has, product.indices[picked] if product.nnz else -1, -1)
        filler = np.broadcast_to(np.arange(width, dtype=np.int64), (n_q, width)).copy()
        short = np.flatnonzero(counts < width)
        for r in short.tolist():  # rows with fewer than ``width`` nonzero products
            filler[r, np.isin(filler[r], cand[r, : counts[r]])] = -1
        full = counts >= width
        filler[full] = -1
        cand[:, width:] = filler
        valid = cand >= 0
        position = np.where(valid, cand, 0)
        doc_len = self._doc_len[position].astype(np.int64)
        qlen = queries.lengths.astype(np.int64)[:, None]
        overlap = np.zeros(cand.shape, dtype=np.int64)
        value = np.where(has, product.data[picked] if product.nnz else 0.0, 0.0).astype(np.float64)
        if self.score == "cosine":
            value = value * np.sqrt((qlen * doc_len[:, :width]).astype(np.float64))
        overlap[:, :width] = np.rint(value)
        ids = np.where(valid, self.doc_ids[position], -1)
        return order_candidates(ids, overlap, doc_len, queries.lengths, k, self.max_len, self.score)


class NumpyIndexBaseline:
    """settopk's own NumPy index (:class:`settopk.kernels.NumpyShardIndex`) as a baseline: vectorised NumPy,
    the backend the compiled ``cpu`` index replaced.

    Parameters
    ----------
    docs, doc_ids, max_len, vocab_size
        As :class:`SpmmBaseline` (``vocab_size`` unused).
    score : str, default braun_blanquet
        Any of :data:`settopk.kernels.SCORES`.
    routing : str, default scan
        The index's routing (:data:`settopk.kernels.postings.ROUTINGS`); the benchmark passes its config's.
    """

    name = "numpy"

    def __init__(self, docs: SetBatch, doc_ids: np.ndarray, max_len: int, vocab_size: int, *,
                 score: str = DEFAULT_SCORE, routing: str = "scan"):
        self._index = NumpyShardIndex(docs, doc_ids, max_len, score, routing=routing)

    def search(self, queries: SetBatch, k: int) -> TopK:
        """Exact top-k per query, as :meth:`settopk.kernels.NumpyShardIndex.search`."""
        return self._index.search(queries, k)


@dataclass(frozen=True)
class Baseline:
    """A baseline the benchmark can run.

    Attributes
    ----------
    factory : callable
        ``factory(docs, doc_ids, max_len, vocab_size, score=, threads=, routing=)``: the build.
    device : str
        ``"gpu"`` or ``"cpu"``.
    scores : tuple of str
        The scores it ranks by.
    exact_ids : bool
        Whether its ties go to the lower doc id as settopk's (then its lists must equal the
        reference's); otherwise the multiset of scores per query must.
    """

    factory: Callable
    device: str
    scores: tuple
    exact_ids: bool = True


def _gpu(cls):
    return lambda docs, doc_ids, max_len, vocab_size, *, score, threads, routing: cls(docs, doc_ids, max_len, vocab_size)


def _scipy(docs, doc_ids, max_len, vocab_size, *, score, threads, routing):
    return ScipyBaseline(docs, doc_ids, max_len, vocab_size, score=score)


def _numpy(docs, doc_ids, max_len, vocab_size, *, score, threads, routing):
    return NumpyIndexBaseline(docs, doc_ids, max_len, vocab_size, score=score, routing=routing)


def _sparse_dot_topn(fixed_threads: int | None):
    def build(docs, doc_ids, max_len, vocab_size, *, score, threads, routing):
        return SparseDotTopnBaseline(docs, doc_ids, max_len, vocab_size, score=score,
                                     threads=fixed_threads or threads)
    return build


#: Baseline classes by name, and where each runs.
#: ``sparse_dot_topn`` runs on the threads the shard's actor reserves (``cpus_per_shard``),
#: ``sparse_dot_topn_1t`` on one.
BASELINES = {
    "spmm": Baseline(_gpu(SpmmBaseline), "gpu", (DEFAULT_SCORE,)),
    "popc4": Baseline(_gpu(Popc4Baseline), "gpu", (DEFAULT_SCORE,)),
    "scipy": Baseline(_scipy, "cpu", SCORES),
    "numpy": Baseline(_numpy, "cpu", SCORES),
    "sparse_dot_topn": Baseline(_sparse_dot_topn(None), "cpu", SparseDotTopnBaseline.SCORES, exact_ids=False),
    "sparse_dot_topn_1t": Baseline(_sparse_dot_topn(1), "cpu", SparseDotTopnBaseline.SCORES, exact_ids=False),
}
