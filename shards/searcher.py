"""A shard's searcher: loads its own docs once, then answers query batches.

:class:`ShardSearcher` is plain Python so it can be tested without Ray;
:data:`ShardActor` is the same class as a Ray actor.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import warnings

import numpy as np

from kernels import NumpyShardIndex, SetBatch, TopK

from .inputs import SetLimits, fingerprint, read_corpus
from .plan import ShardSpec

__all__ = ["ShardSearcher", "ShardActor", "read_shard", "build_index"]


def read_shard(spec: ShardSpec, corpus_path: str, limits: SetLimits, on_invalid: str = "error", corpus_sha256: str | None = None):
    """Read one shard's docs from the corpus and check them against the plan.

    Parameters
    ----------
    spec : ShardSpec
        The length range to keep, and the doc and id counts the plan expects.
    corpus_path : str
        The corpus (text or Parquet).
    limits : SetLimits
        ``vocab_size`` and ``max_len`` of the run.
    on_invalid : str
        ``"error"`` or ``"quarantine"``, as the driver read it.
    corpus_sha256 : str, optional
        The driver's :func:`shards.fingerprint` of the corpus.

    Returns
    -------
    Corpus
        The shard's docs in doc id order (host memory).

    Raises
    ------
    RuntimeError
        If the corpus changed since the driver validated it (another fingerprint,
        or other counts than the plan's).
    """
    corpus = read_corpus(corpus_path, limits, (spec.min_len, spec.max_len), on_invalid=on_invalid)
    if corpus_sha256 is not None and fingerprint(corpus.files, corpus_path)["sha256"] != corpus_sha256:
        raise RuntimeError(
            f"shard {spec.shard_id}: {corpus_path} changed (file sizes or modification times) after the "
            "driver validated it; rerun the job once the corpus is no longer being written"
        )
    if corpus.docs.n_sets != spec.n_docs or len(corpus.docs.tokens) != spec.n_tokens:
        raise RuntimeError(
            f"shard {spec.shard_id} (lengths {spec.min_len}..{spec.max_len}) read "
            f"{corpus.docs.n_sets} docs / {len(corpus.docs.tokens)} ids from {corpus_path}, "
            f"but the plan expects {spec.n_docs} / {spec.n_tokens}: the corpus changed "
            "while the job ran; rerun the job"
        )
    return corpus


def build_index(backend: str, corpus, limits: SetLimits):
    """The backend's index over a shard's docs: :class:`kernels.NumpyShardIndex` (host memory) or
    :class:`kernels.cuda.CupyShardIndex` (on the current GPU).

    Raises
    ------
    ValueError
        If ``backend`` is not ``"numpy"`` or ``"cupy"``.
    ImportError
        If ``backend == "cupy"`` and CuPy is not installed.
    """
    if backend == "cupy":
        from kernels.cuda import CupyShardIndex

        return CupyShardIndex(corpus.docs, corpus.doc_ids, limits.max_len, limits.vocab_size)
    if backend == "numpy":
        return NumpyShardIndex(corpus.docs, corpus.doc_ids, limits.max_len)
    raise ValueError(f"backend must be 'numpy' or 'cupy', found {backend!r}")


class ShardSearcher:
    """Holds one length-bucket shard in its backend's layout and searches it.

    Parameters
    ----------
    spec : ShardSpec
        The length range to load.
    corpus_path : str
        The corpus (text or Parquet); the searcher reads it itself, keeping only
        docs whose length lies in ``[spec.min_len, spec.max_len]``.
    limits : SetLimits
        ``vocab_size`` and ``max_len`` of the run.
    backend : str
        ``"numpy"`` or ``"cupy"``.
    on_invalid : str
        The run's policy for bad lines or rows (``"error"`` or ``"quarantine"``); the
        searcher must skip exactly the docs the driver set aside.
    crash_after : int, optional
        Test-only fault injection: the process exits at this search call (1-based),
        once per ``crash_marker`` file, as a crashed GPU worker would.
    crash_marker : str, optional
        File created before the injected crash, so a restarted actor does not crash again;
        without one, every life of the actor crashes.
    crash_mode : str
        ``"exit"`` (the process dies) or ``"hang"`` (the call never returns).
    corpus_sha256 : str, optional
        The driver's :func:`shards.fingerprint` of the corpus; a different one here means
        the corpus changed after the driver validated it.

    Raises
    ------
    RuntimeError
        If the docs read do not match the plan (the corpus changed since the
        driver validated it), or the GPU runs out of memory (the message names
        the node, the GPU and the setting to lower).
    ImportError
        If ``backend == "cupy"`` and CuPy is not installed on this node.
    """

    def __init__(
        self,
        spec: ShardSpec,
        corpus_path: str,
        limits: SetLimits,
        backend: str,
        on_invalid: str = "error",
        crash_after: int | None = None,
        crash_marker: str | None = None,
        crash_mode: str = "exit",
        corpus_sha256: str | None = None,
    ):
        start = time.perf_counter()
        self.spec = spec
        self.backend = backend
        self._crash_after, self._crash_marker, self._crash_mode, self._searches = crash_after, crash_marker, crash_mode, 0
        corpus = read_shard(spec, corpus_path, limits, on_invalid=on_invalid, corpus_sha256=corpus_sha256)
        self.read_s = time.perf_counter() - start
        with self._out_of_memory("loading its docs", "raise n_shards (or add GPUs) so each shard holds fewer docs"):
            self.index = build_index(backend, corpus, limits)
        self.load_s = time.perf_counter() - start
        self.search_s = 0.0

    def info(self) -> dict:
        """Where the shard runs and how long it took to load (seconds)."""
        gpu_ids = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return {
            "shard_id": self.spec.shard_id,
            "n_docs": self.index.n_docs,
            "backend": self.backend,
            "node": socket.gethostname(),
            "gpu_ids": gpu_ids if self.backend == "cupy" else "",
            "read_s": round(self.read_s, 3),
            "load_s": round(self.load_s, 3),
            "search_s": round(self.search_s, 3),
            "restarted": _restarted(),
        }

    def search(self, queries: SetBatch, k: int) -> TopK:
        """Shard-local top-k of each query: ``TopK`` of shape ``(n_queries, k)``, ``-1`` padded."""
        self._searches += 1
        if self._crash_after == self._searches and not (self._crash_marker and os.path.exists(self._crash_marker)):
            if self._crash_marker:
                open(self._crash_marker, "w").close()
            if self._crash_mode == "hang":
                time.sleep(24 * 3600)  # test-only: a call that never returns, like a stuck GPU
            os._exit(1)  # test-only: die like a worker killed by the OS or a GPU fault
        start = time.perf_counter()
        with self._out_of_memory(f"searching a batch of {queries.n_sets} queries", "lower query_batch_size"):
            result = self.index.search(queries, k)
        self.search_s += time.perf_counter() - start
        return result

    @contextlib.contextmanager
    def _out_of_memory(self, doing: str, fix: str):
        """Turn a GPU out-of-memory error into one that says where it happened and what to lower."""
        try:
            yield
        except Exception as exc:
            if type(exc).__name__ not in ("OutOfMemoryError", "CUDARuntimeError") or "memory" not in str(exc).lower():
                raise
            gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "?")
            raise RuntimeError(
                f"shard {self.spec.shard_id} (lengths {self.spec.min_len}..{self.spec.max_len}, {self.spec.n_docs} docs) "
                f"on node {socket.gethostname()} GPU {gpu} ran out of GPU memory while {doing}: {exc}; {fix}"
            ) from exc


def _restarted() -> bool:
    """True in a Ray actor that was restarted after a failure; False elsewhere."""
    import ray

    if not ray.is_initialized():  # plain use: asking for the runtime context would start Ray
        return False
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:
        return False
    with warnings.catch_warnings():  # Ray 2.60 implements the property with a deprecated accessor
        warnings.simplefilter("ignore", DeprecationWarning)
        return bool(context.was_current_actor_reconstructed)


def _make_actor():
    import ray

    return ray.remote(ShardSearcher)


ShardActor = _make_actor()
