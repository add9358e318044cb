"""The benchmark's shard actor: times each phase of one shard in its own process.

:class:`BenchShard` is plain Python (testable without Ray); :data:`BenchShardActor`
is the same class as a Ray actor. Every method that is timed returns seconds
measured inside the actor with ``time.perf_counter``, after the GPU finished
(the indexes return host arrays, and builds end with a device synchronisation),
so Ray's transport is not counted.
"""

from __future__ import annotations

import os
import platform
import socket
import time

import numpy as np

from settopk.kernels import DEFAULT_SCORE, NumpyShardIndex, SetBatch, TopK, build_index
from settopk.shards import ShardSpec
from settopk.shards.inputs import SetLimits
from settopk.shards.searcher import load_shard

from .baselines import BASELINES
from .machine import cpu_model

__all__ = ["BenchShard", "BenchShardActor"]


def _sync(backend: str) -> None:
    if backend == "cupy":
        import cupy

        cupy.cuda.runtime.deviceSynchronize()


def _free_gpu(backend: str) -> None:
    """Return cached GPU blocks, so that one baseline's buffers do not crowd out the next."""
    if backend == "cupy":
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
        try:
            import torch

            torch.cuda.empty_cache()
        except ImportError:
            pass


class BenchShard:
    """One length-bucket shard: its docs, its index, and one baseline at a time.

    Parameters
    ----------
    spec : ShardSpec
        The length range to hold; the docs taken must match its counts.
    limits : SetLimits
        ``vocab_size`` and ``max_len`` of the run.
    backend : str
        ``"numpy"``, ``"cpu"`` or ``"cupy"``.
    score : str
        What the index, the reference and the baselines rank by (one of :data:`settopk.kernels.SCORES`;
        each baseline ranks by the scores :data:`settopk.jobs.bench.baselines.BASELINES` lists).
    routing : str
        The index's routing (:data:`settopk.kernels.postings.ROUTINGS`); the reference always scans.
    threads : int, optional
        CPU threads of the ``"cpu"`` index and of the multi-threaded baselines: the CPUs the
        actor reserves (``cpus_per_shard``). None: every CPU of the machine.

    Raises
    ------
    ValueError
        If ``backend`` is unknown.
    """

    def __init__(self, spec: ShardSpec, limits: SetLimits, backend: str, score: str = DEFAULT_SCORE,
                 routing: str = "scan", threads: int | None = None):
        if backend not in ("numpy", "cpu", "cupy"):
            raise ValueError(f"backend must be 'numpy', 'cpu' or 'cupy', found {backend!r}")
        self.spec = spec
        self.limits = limits
        self.backend = backend
        self.score = score
        self.routing = routing
        self.threads = threads
        self.corpus = None
        self.index = None
        self.variants = {}  # (score, routing) -> index: variant_build
        self.baseline = None

    def environment(self) -> dict:
        """Where this shard runs: host, CPU count, GPU name (cupy), library versions."""
        info = {
            "node": socket.gethostname(),
            "cpus_visible": _cpus(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpu_model": cpu_model(),
        }
        if self.backend == "cpu":
            import numba

            info["numba"] = numba.__version__
            info["threads"] = self.threads or info["cpus_visible"]
        if self.backend == "cupy":
            import cupy

            props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
            name = props["name"]
            info["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
            info["gpu_ids"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            info["cupy"] = cupy.__version__
            info["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        return info

    def read(self, pieces: list, drops: dict | None = None, ordered: bool = True) -> float:
        """Take the shard's docs out of the corpus pieces (``settopk.shards.searcher.load_shard``); seconds.

        ``pieces`` holds the readers' ``ObjectRef`` s (nested in a list, so the fetch is timed here).

        Raises
        ------
        RuntimeError
            If the docs taken do not match the plan's counts.
        """
        start = time.perf_counter()
        self.corpus = None
        self.corpus = load_shard(self.spec, pieces, drops, ordered)
        return time.perf_counter() - start

    def build(self) -> float:
        """Build the backend's index from the docs in host memory; seconds (GPU work included)."""
        self.index = None
        _free_gpu(self.backend)
        start = time.perf_counter()
        self.index = self._build(self.score, self.routing)
        _sync(self.backend)
        return time.perf_counter() - start

    def _build(self, score: str, routing: str):
        return build_index(self.backend, *self.corpus, max_len=self.limits.max_len, vocab_size=self.limits.vocab_size,
                           score=score, routing=routing, threads=self.threads)

    def variant_build(self, score: str, routing: str) -> float:
        """Build another index of the backend ranking by ``score`` with ``routing`` (the per-score and
        per-routing timings), held beside the main index and the other variants until
        :meth:`variant_free`; seconds."""
        start = time.perf_counter()
        self.variants[(score, routing)] = self._build(score, routing)
        _sync(self.backend)
        return time.perf_counter() - start

    def variant_search(self, queries: SetBatch, k: int, score: str, routing: str) -> tuple[float, TopK]:
        """Shard-local top-k with the variant index of ``score`` and ``routing``: (seconds, TopK)."""
        start = time.perf_counter()
        result = self.variants[(score, routing)].search(queries, k)
        return time.perf_counter() - start, result

    def variant_routing(self, score: str, routing: str) -> dict:
        """That variant index's routing of its last search (as ``routing_stats()["last"]``)."""
        return dict(self.variants[(score, routing)].last_routing)

    def variant_free(self) -> None:
        """Drop the variant indexes."""
        self.variants = {}
        _free_gpu(self.backend)

    def search(self, queries: SetBatch, k: int) -> tuple[float, TopK]:
        """Shard-local top-k of ``queries`` with the index: (seconds, TopK of shape (n_queries, k))."""
        start = time.perf_counter()
        result = self.index.search(queries, k)
        return time.perf_counter() - start, result

    def routing_stats(self) -> dict:
        """The index's routing of its last search (``last_routing``: queries per path, and GPU seconds per
        path for cupy), the postings' bytes, the docs' bytes (CSR: 2 per id, 8 per doc) and, for
        cupy, the device bytes the whole index holds (``index_bytes``; 0 for the host backends)."""
        doc_ids, docs = self.corpus
        pieces = [docs] if isinstance(docs, SetBatch) else list(docs)
        return {"routing": self.routing, "last": dict(self.index.last_routing),
                "postings_bytes": int(self.index.postings_bytes), "n_docs": len(doc_ids),
                "index_bytes": int(getattr(self.index, "device_bytes", 0)),
                "docs_bytes": int(sum(p.tokens.nbytes + p.offsets.nbytes for p in pieces))}

    def search_batches(self, queries: SetBatch, k: int, batch_size: int) -> float:
        """Seconds inside the index's ``search`` for ``queries`` searched in batches of
        ``batch_size``, one after another, data resident (results are dropped): the kernel-only
        time the throughput benchmark compares the job with."""
        seconds = 0.0
        for lo in range(0, queries.n_sets, batch_size):
            batch = queries.take(np.arange(lo, min(lo + batch_size, queries.n_sets)))
            start = time.perf_counter()
            self.index.search(batch, k)
            seconds += time.perf_counter() - start
        return seconds

    def reference(self, queries: SetBatch, k: int, score: str | None = None) -> TopK:
        """The NumPy reference (:class:`settopk.kernels.NumpyShardIndex`) for ``queries`` on this shard, ranked by
        ``score`` (default: the shard's)."""
        doc_ids, docs = self.corpus
        return NumpyShardIndex(docs, doc_ids, self.limits.max_len, score or self.score, routing="scan").search(queries, k)

    def baseline_build(self, name: str) -> float | str:
        """Build baseline ``name`` (see :data:`settopk.jobs.bench.baselines.BASELINES`); seconds, or why it cannot run.

        A missing optional library (CuPy, PyTorch, SciPy, sparse_dot_topn) is reported as a
        string instead of raising; any other error raises.

        Raises
        ------
        ValueError
            If the baseline does not rank by the shard's score.
        """
        spec = BASELINES[name]
        if self.score not in spec.scores:
            raise ValueError(f"baseline {name} ranks by {', '.join(spec.scores)}, this shard by {self.score!r}; "
                             "drop it from the baselines or change the score")
        self.baseline = None
        _free_gpu(self.backend)
        try:
            if spec.device == "gpu":
                import cupy  # noqa: F401
                import torch  # noqa: F401  (the GPU baselines select with torch.topk)
            start = time.perf_counter()
            doc_ids, docs = self.corpus
            self.baseline = spec.factory(docs, doc_ids, self.limits.max_len, self.limits.vocab_size, score=self.score,
                                         threads=self.threads or _cpus(), routing=self.routing)
        except ImportError as exc:
            self.baseline = None
            return f"not run: {exc}"
        _sync("cupy" if spec.device == "gpu" else "numpy")
        return time.perf_counter() - start

    def baseline_search(self, queries: SetBatch, k: int) -> tuple[float, TopK]:
        """Top-k with the baseline built last: (seconds, TopK)."""
        start = time.perf_counter()
        result = self.baseline.search(queries, k)
        return time.perf_counter() - start, result

    def baseline_free(self) -> None:
        """Drop the baseline and its GPU memory."""
        self.baseline = None
        _free_gpu(self.backend)


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _make_actor():
    import ray

    return ray.remote(BenchShard)


BenchShardActor = _make_actor()
