"""The shard index: the one search contract every backend implements, how to build one, and what
its search costs the shard planner.

A *shard index* holds the docs of one shard in a backend's layout and answers exact top-k
searches over them::

    index = build_index("numpy", doc_ids, docs, max_len=64)
    top = index.search(queries, k=10)                   # settopk.kernels.TopK, shape (n_queries, k)
    top = index.search(queries, 10, floor_key=floors)   # only docs with key >= floor, per query

:class:`ShardIndex` documents the contract once; every backend returns the identical
:class:`settopk.kernels.TopK` (that of the brute-force oracle, :func:`settopk.kernels.brute_force_topk`) and differs
only in where the docs live and how fast it is. The product backends (:data:`BACKENDS`):

``"numpy"``
    :class:`settopk.kernels.NumpyShardIndex`, host memory, vectorised NumPy (also the test oracle of the
    other backends).
``"cpu"``
    :class:`settopk.kernels.numba_index.NumbaShardIndex`, host memory, compiled with Numba and run on
    ``threads`` threads. Numba is imported only when such an index is built.
``"cupy"``
    :class:`settopk.kernels.cuda.CupyShardIndex`, memory of the current CUDA device. Its module (and CuPy)
    is imported only when such an index is built, so this module needs no CuPy.

The shard planner balances :func:`search_cost_per_doc` of the job's backend across shards, so
the driver never imports a backend module. :func:`register_backend` is the seam through which a
benchmark or a test adds a stand-in backend; job configs accept the product backends only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from .cost import cupy_search_cost_per_doc, numpy_search_cost_per_doc
from .keys import DEFAULT_SCORE
from .numpy_index import NumpyShardIndex
from .sets import SetBatch
from .topk import TopK

__all__ = [
    "BACKENDS",
    "IndexFactory",
    "ShardIndex",
    "build_index",
    "register_backend",
    "registered_backends",
    "search_cost_per_doc",
    "unregister_backend",
    "warm_up_backend",
]

BACKENDS = ("numpy", "cpu", "cupy")
"""The product backends, always registered (a job config's ``backend`` is one of these or ``"auto"``)."""


@runtime_checkable
class ShardIndex(Protocol):
    """What every backend's index offers: an exact top-k search over one shard's docs, and the
    diagnostics of its last search.

    Attributes
    ----------
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Global doc ids of the shard, strictly increasing (host memory); position order is id order.
    n_docs : int
        Number of docs in the shard.
    max_len : int
        Bound on set sizes; fixes the score key's scale (:func:`settopk.kernels.key_scale`).
    score : str
        What the index ranks by, one of :data:`settopk.kernels.SCORES`.
    routing : str
        One of :data:`settopk.kernels.postings.ROUTINGS`: ``"scan"`` (every query counted against every
        doc), ``"auto"`` (an inverted index too, each query on the path its backend's cost model
        in :mod:`settopk.kernels.cost` says is cheaper) or ``"postings"`` (every query through the inverted
        index). Results are identical in every mode.
    postings_bytes : int
        Memory held by the inverted index, in the backend's memory (0 with ``routing="scan"``).
    last_skipped : int
        Queries of the last :meth:`search` that their floor skipped without scoring (0 without
        floors). A diagnostic: with searches running at once it may count another call's.
    last_routing : dict
        Queries of the last :meth:`search` per path: ``"scan"`` and ``"postings"`` in every
        backend, more keys per backend (NumPy: ``"scancount"``, ``"prefix"``; CuPy:
        ``"fallback"``, ``"scan_s"``, ``"postings_s"``). Reset by each search; a diagnostic, as
        ``last_skipped``.
    """

    doc_ids: np.ndarray
    max_len: int
    score: str
    routing: str
    postings_bytes: int
    last_skipped: int
    last_routing: dict

    @property
    def n_docs(self) -> int: ...

    def search(self, queries: SetBatch, k: int, floor_key: np.ndarray | None = None) -> TopK:
        """Exact shard-local top-k for each query by the index's score, optionally above a per-query floor.

        Parameters
        ----------
        queries : SetBatch
            ``n_queries`` sets in host memory, each with at most ``max_len`` ids.
        k : int
            Results per query, ``>= 1``.
        floor_key : numpy.ndarray of int, shape (n_queries,), optional
            Host array of per-query floors on the score key (:func:`settopk.kernels.score_key`): only docs
            with ``key >= floor_key[q]`` are returned for query ``q`` (ties at the floor are kept);
            ``-1`` means no floor. A query whose floor exceeds :func:`settopk.kernels.best_key_in_range`
            over the shard's doc lengths is skipped without scoring (its row is all padding).
            None (default): no floor for any query.

        Returns
        -------
        TopK
            Host arrays of shape (n_queries, k): ``doc_ids`` int64, ``overlap`` and ``doc_len``
            int16, ordered by key descending then doc id ascending; ``-1`` ids (overlap and
            doc_len 0) pad rows where fewer than ``k`` docs of the shard reach the query's floor.
            The top-k of ``{key >= F}`` is the unrestricted top-k with the entries below ``F``
            removed, so a floor never changes the docs a row does return.

        Raises
        ------
        ValueError
            If ``k < 1``, or ``floor_key`` is not an integer array of shape ``(n_queries,)`` with
            values ``>= -1`` (a backend may check more: see its class).

        Notes
        -----
        Sets ``last_skipped`` and ``last_routing``.
        """
        ...


class IndexFactory(Protocol):
    """Builds a backend's index: the callable :func:`register_backend` takes.

    ``docs`` is a :class:`settopk.kernels.SetBatch` of ``n_docs`` sets in ``doc_ids`` order (a backend may
    also take a list of SetBatch pieces, as ``"cupy"`` does); the keyword arguments are those of
    :func:`build_index`, all passed.
    """

    def __call__(self, doc_ids: np.ndarray, docs, *, max_len: int, vocab_size: int, score: str,
                 routing: str, threads: int | None) -> ShardIndex: ...


class _Backend(NamedTuple):
    factory: IndexFactory
    cost_per_doc: Callable[[int], np.ndarray]
    warm_up: Callable[[int, str], None] | None = None


def _numpy_index(doc_ids, docs, *, max_len, vocab_size, score, routing, threads):
    # vocab_size is not needed: the lookup tables cover the docs' ids (uint16 or uint32); NumPy picks its own threads.
    return NumpyShardIndex(docs, doc_ids, max_len, score, routing=routing)


def _cpu_index(doc_ids, docs, *, max_len, vocab_size, score, routing, threads):
    from .numba_index import NumbaShardIndex  # Numba is needed from here on only

    return NumbaShardIndex(docs, doc_ids, max_len, score, routing=routing, threads=threads)


def _cupy_index(doc_ids, docs, *, max_len, vocab_size, score, routing, threads):
    from .cuda import CupyShardIndex  # CuPy is needed from here on only

    return CupyShardIndex(docs, doc_ids, max_len, vocab_size, score=score, routing=routing)


def _cpu_warm_up(max_len, routing):
    from .numba_index import warm_up as load_compiled

    load_compiled(max_len, routing)


def _cupy_warm_up(max_len, routing):
    from .cuda import warm_up as load_kernels  # the same kernels serve every max_len

    load_kernels(routing)


_lock = threading.Lock()
_backends: dict[str, _Backend] = {
    "numpy": _Backend(_numpy_index, numpy_search_cost_per_doc),
    "cpu": _Backend(_cpu_index, numpy_search_cost_per_doc, _cpu_warm_up),
    "cupy": _Backend(_cupy_index, cupy_search_cost_per_doc, _cupy_warm_up),
}


def register_backend(name: str, factory: IndexFactory, cost_per_doc: Callable[[int], np.ndarray],
                     warm_up: Callable[[int, str], None] | None = None) -> None:
    """Add a backend that :func:`build_index` and :func:`search_cost_per_doc` accept by ``name``.

    The seam for a stand-in index (a benchmark's baseline, a test double) that the shard searcher
    builds and searches like a product backend. The registry is per process: register in every
    process that builds an index (in a Ray actor, at import of the module that defines the
    backend). Job configs still accept only :data:`BACKENDS`.

    Parameters
    ----------
    name : str
        The backend's name; not one already registered.
    factory : IndexFactory
        ``factory(doc_ids, docs, *, max_len, vocab_size, score, routing)`` returning an object that
        satisfies :class:`ShardIndex`.
    cost_per_doc : callable
        ``cost_per_doc(max_len)``: search work of one doc of each length, numpy.ndarray of int64
        of shape (max_len + 1,), what the shard planner balances (:mod:`settopk.kernels.cost` has the
        product backends').
    warm_up : callable, optional
        ``warm_up(max_len, routing)``: loads what the backend compiles (kernels) into the process
        ahead of the first build, for :func:`warm_up_backend`; None: nothing to load.

    Raises
    ------
    ValueError
        If ``name`` is empty or already registered.
    TypeError
        If ``factory``, ``cost_per_doc`` or a given ``warm_up`` is not callable.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a backend name must be a non-empty string, found {name!r}")
    if not callable(factory) or not callable(cost_per_doc) or not (warm_up is None or callable(warm_up)):
        raise TypeError("factory, cost_per_doc and warm_up (where given) must be callable")
    with _lock:
        if name in _backends:
            raise ValueError(f"backend {name!r} is already registered")
        _backends[name] = _Backend(factory, cost_per_doc, warm_up)


def unregister_backend(name: str) -> None:
    """Remove a backend added by :func:`register_backend`.

    Raises
    ------
    ValueError
        If ``name`` is a product backend (:data:`BACKENDS`) or is not registered.
    """
    if name in BACKENDS:
        raise ValueError(f"the product backend {name!r} cannot be removed")
    with _lock:
        if _backends.pop(name, None) is None:
            raise ValueError(f"backend {name!r} is not registered")


def registered_backends() -> tuple[str, ...]:
    """Names :func:`build_index` accepts: :data:`BACKENDS`, then those registered, in order."""
    with _lock:
        return tuple(_backends)


def _backend(name: str) -> _Backend:
    with _lock:
        entry = _backends.get(name)
        names = tuple(_backends)
    if entry is None:
        raise ValueError(f"backend must be one of {', '.join(map(repr, names))}, found {name!r}")
    return entry


def build_index(backend: str, doc_ids: np.ndarray, docs, *, max_len: int, vocab_size: int = 65536,
                score: str = DEFAULT_SCORE, routing: str = "scan", threads: int | None = None) -> ShardIndex:
    """The backend's index over one shard's docs.

    Parameters
    ----------
    backend : str
        ``"numpy"`` (:class:`settopk.kernels.NumpyShardIndex`, host memory), ``"cpu"``
        (:class:`settopk.kernels.numba_index.NumbaShardIndex`, host memory), ``"cupy"``
        (:class:`settopk.kernels.cuda.CupyShardIndex`, on the current GPU) or a name given to
        :func:`register_backend`.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Global doc ids, strictly increasing.
    docs : SetBatch or list of SetBatch
        The ``n_docs`` sets in ``doc_ids`` order, host memory; for ``"cupy"`` also a list of
        SetBatch pieces, concatenated on the GPU in order. ``"numpy"`` and ``"cpu"`` take
        ``uint16`` or ``uint32`` tokens (ids below ``2**24``); ``"cupy"`` takes ``uint32`` only
        where ``vocab_size`` exceeds 65536.
    max_len : int
        Bound on set sizes (``"cupy"``: at most 4096).
    vocab_size : int, default 65536
        Token ids are below this, up to ``2**24`` (checked by ``"cupy"``, whose layout is wide above
        65536; ``"numpy"`` and ``"cpu"`` size their tables by the docs' ids instead).
    score : str, default "braun_blanquet"
        What the index ranks by, one of :data:`settopk.kernels.SCORES`.
    routing : str, default "scan"
        One of :data:`settopk.kernels.postings.ROUTINGS`: whether the index also holds postings and
        routes queries to them.
    threads : int, optional
        CPU threads the index may search with (``"cpu"``; the others ignore it). None: every CPU
        this process may run on.

    Returns
    -------
    ShardIndex

    Raises
    ------
    ValueError
        If ``backend`` is not registered, or the backend rejects the docs or an argument (an
        unknown ``score`` or ``routing`` included).
    ImportError
        If ``backend == "cupy"`` and CuPy is not installed.
    """
    factory = _backend(backend).factory
    return factory(doc_ids, docs, max_len=max_len, vocab_size=vocab_size, score=score, routing=routing,
                   threads=threads)


def warm_up_backend(backend: str, max_len: int, routing: str = "scan") -> bool:
    """Load what ``backend`` compiles into this process ahead of its first build and search.

    ``"cupy"``: the CUDA context on the current device and every kernel (compiled by NVRTC on a
    machine's first run, then from CuPy's disk cache); ``"cpu"``: Numba's compiled functions
    for ``max_len`` and ``routing`` (from Numba's disk cache after the first run); ``"numpy"``
    and backends registered without a warm-up: nothing. All of it would happen at first use
    anyway; a shard actor calls this in a thread while its docs arrive.

    Returns
    -------
    bool
        Whether the backend had anything to load.

    Raises
    ------
    ValueError
        If ``backend`` is not registered.
    ImportError
        If the backend's library (CuPy, Numba) is not installed.
    """
    hook = _backend(backend).warm_up
    if hook is None:
        return False
    hook(max_len, routing)
    return True


def search_cost_per_doc(backend: str, max_len: int) -> np.ndarray:
    """Search work of one doc of each length on ``backend``: what the shard planner balances
    (``settopk.shards.plan_shards_from_counts(doc_cost=...)``). Needs no backend module.

    ``"numpy"`` and ``"cpu"``: the doc's ids (:func:`settopk.kernels.cost.numpy_search_cost_per_doc`); ``"cupy"``: its
    ids padded to a multiple of 8 plus a per-doc overhead
    (:func:`settopk.kernels.cost.cupy_search_cost_per_doc`).

    Parameters
    ----------
    backend : str
        A registered backend (:func:`registered_backends`).
    max_len : int
        Longest set, ``>= 0``.

    Returns
    -------
    numpy.ndarray of int64, shape (max_len + 1,)

    Raises
    ------
    ValueError
        If ``backend`` is not registered.
    """
    return np.asarray(_backend(backend).cost_per_doc(max_len), dtype=np.int64)
