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

from kernels import DEFAULT_SCORE, NumpyShardIndex, SetBatch, TopK, build_index
from shards import ShardSpec
from shards.inputs import SetLimits
from shards.searcher import load_shard

from .baselines import BASELINES

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
        ``"numpy"`` or ``"cupy"``.
    score : str
        What the index and the reference rank by (one of :data:`kernels.SCORES`); the
        baselines rank by Braun-Blanquet only.
    routing : str
        The index's routing (:data:`kernels.postings.ROUTINGS`); the reference always scans.

    Raises
    ------
    ValueError
        If ``backend`` is unknown.
    """

    def __init__(self, spec: ShardSpec, limits: SetLimits, backend: str, score: str = DEFAULT_SCORE,
                 routing: str = "scan"):
        if backend not in ("numpy", "cupy"):
            raise ValueError(f"backend must be 'numpy' or 'cupy', found {backend!r}")
        self.spec = spec
        self.limits = limits
        self.backend = backend
        self.score = score
        self.routing = routing
        self.corpus = None
        self.index = None
        self.baseline = None

    def environment(self) -> dict:
        """Where this shard runs: host, CPU count, GPU name (cupy), library versions."""
        info = {
            "node": socket.gethostname(),
            "cpus_visible": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
        }
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
        """Take the shard's docs out of the corpus pieces (``shards.searcher.load_shard``); seconds.

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
        self.index = build_index(self.backend, *self.corpus, max_len=self.limits.max_len,
                                 vocab_size=self.limits.vocab_size, score=self.score, routing=self.routing)
        _sync(self.backend)
        return time.perf_counter() - start

    def search(self, queries: SetBatch, k: int) -> tuple[float, TopK]:
        """Shard-local top-k of ``queries`` with the index: (seconds, TopK of shape (n_queries, k))."""
        start = time.perf_counter()
        result = self.index.search(queries, k)
        return time.perf_counter() - start, result

    def routing_stats(self) -> dict:
        """The index's routing of its last search (``last_routing``: queries per path, and GPU seconds per
        path for cupy), the postings' bytes and the docs' bytes (CSR: 2 per id, 8 per doc)."""
        doc_ids, docs = self.corpus
        pieces = [docs] if isinstance(docs, SetBatch) else list(docs)
        return {"routing": self.routing, "last": dict(self.index.last_routing),
                "postings_bytes": int(self.index.postings_bytes),
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

    def reference(self, queries: SetBatch, k: int) -> TopK:
        """The NumPy reference (:class:`kernels.NumpyShardIndex`) for ``queries`` on this shard."""
        doc_ids, docs = self.corpus
        return NumpyShardIndex(docs, doc_ids, self.limits.max_len, self.score, routing="scan").search(queries, k)

    def baseline_build(self, name: str) -> float | str:
        """Build baseline ``name`` (see :data:`jobs.bench.baselines.BASELINES`); seconds, or why it cannot run.

        A missing optional library (CuPy, PyTorch, SciPy) is reported as a
        string instead of raising; any other error raises.

        Raises
        ------
        ValueError
            If the shard's score is not braun_blanquet, the only score the baselines rank by.
        """
        if self.score != DEFAULT_SCORE:
            raise ValueError(f"the baselines rank by {DEFAULT_SCORE} only, this shard by {self.score!r}; run no baselines")
        self.baseline = None
        _free_gpu(self.backend)
        cls, device = BASELINES[name]
        try:
            if device == "gpu":
                import cupy  # noqa: F401
                import torch  # noqa: F401  (the GPU baselines select with torch.topk)
            start = time.perf_counter()
            doc_ids, docs = self.corpus
            self.baseline = cls(docs, doc_ids, self.limits.max_len, self.limits.vocab_size)
        except ImportError as exc:
            self.baseline = None
            return f"not run: {exc}"
        _sync("cupy" if device == "gpu" else "numpy")
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


def _make_actor():
    import ray

    return ray.remote(BenchShard)


BenchShardActor = _make_actor()
