"""The library run: ``settopk.Index.search`` in this process against the kernel alone.

Run by ``python -m settopk bench --config library-1m`` (or any config with a ``library``
section). The config's synthetic corpus and queries are generated once and read into this
process; one :class:`settopk.Index` is built over the corpus. Then, repetition by repetition and
in turn, on the same data in the same process:

- **kernel alone**: the index's own backend index (:attr:`settopk.Index.kernel`, a
  :class:`settopk.kernels.ShardIndex`, data resident) searches the queries, a
  :class:`settopk.kernels.SetBatch`, in one call (``numpy``: in batches of 256, or
  ``library.batch_size`` where given): only the backend's ``search`` calls are timed;
- **Index.search**: the whole call on the same SetBatch, timed from call to return: the
  queries' checks, the backend's search, the float64 scores, the padding and the
  :class:`settopk.TopK`.

Their ratio (median over median) is the library's overhead: 1.0 means ``Index.search`` runs at
the kernel's pace; issue 30 asks for at most 1.05 on ``job-1m``'s queries on one GPU. No Ray: the
index is in-process.

Exactness: the Index's ids, overlaps and lengths equal the kernel's for every query, its scores
equal :func:`settopk.kernels.score_value` of them, and a seeded sample of ``verify_queries``
queries equals the NumPy reference (:class:`settopk.kernels.NumpyShardIndex` on the whole corpus).
Any difference stops the run before a number is printed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

__all__ = ["LibraryConfig", "format_library_table", "run_library"]

log = logging.getLogger("settopk.bench")


@dataclass(frozen=True)
class LibraryConfig:
    """A library run (:mod:`settopk.jobs.bench.library`): ``settopk.Index.search`` against the kernel alone.

    Attributes
    ----------
    batch_size : int, optional
        ``Index.search(batch_size=...)``, and the batches the kernel alone is given. Default:
        the Index's own (all queries in one call for ``cpu`` and ``cupy``, 256 for ``numpy``).
    threads : int, optional
        Threads of the ``cpu`` backend (``Index.build(threads=...)``); default: the config's
        ``cpus_per_shard``.
    """

    batch_size: Optional[int] = None
    threads: Optional[int] = None

    def problems(self, cfg) -> list[str]:
        """What is wrong with the section, given the whole config ``cfg`` (empty if nothing)."""
        problems = []
        if self.batch_size is not None and self.batch_size < 1:
            problems.append(f"library.batch_size must be >= 1 (or left out: the Index's own), found {self.batch_size}")
        if self.threads is not None and self.threads < 1:
            problems.append(f"library.threads must be >= 1, found {self.threads}")
        return problems


def _batches(n: int, batch_size: int | None, backend: str) -> list[tuple[int, int]]:
    """``(lo, hi)`` of the kernel alone's calls: ``batch_size`` queries each where given, else all
    at once, as the backend batches for itself (``numpy``: the Index's 256, its memory grows with
    queries x docs). The Index may cut its calls smaller (``cupy``: to overlap its host work with
    the GPU's); that is part of what is timed."""
    from settopk.index.api import _BATCH_SIZE

    size = batch_size or (_BATCH_SIZE["numpy"] if backend == "numpy" else n) or 1
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)] if size < n else [(0, n)]


def _kernel_alone(kernel, queries, k: int, batches: list[tuple[int, int]]):
    """Seconds inside the backend's ``search`` for every batch, and the results (kernel TopKs)."""
    seconds, parts = 0.0, []
    for lo, hi in batches:
        batch = queries if (lo, hi) == (0, queries.n_sets) else queries.slice(lo, hi)
        start = time.perf_counter()
        parts.append(kernel.search(batch, k))
        seconds += time.perf_counter() - start
    return seconds, parts


def _check(top, parts, batches, reference, sample: np.ndarray, query_len: np.ndarray, score: str) -> list[dict]:
    """Mismatches of the Index's result against the kernel's (every query) and the reference (the sample)."""
    from settopk.kernels import TopK as KernelTopK
    from settopk.kernels import score_value

    from .common import compare_topk

    mismatches = []
    for (lo, hi), part in zip(batches, parts):
        width = part.doc_ids.shape[1]
        for name, got in (("doc_ids", top.doc_ids), ("overlap", top.overlap), ("doc_len", top.doc_len)):
            if not np.array_equal(got[lo:hi, :width], getattr(part, name)):
                mismatches.append({"implementation": "Index.search", "against": "kernel", "rows": [lo, hi], "column": name})
    real = top.doc_ids >= 0
    want = score_value(top.overlap, query_len[:, None], top.doc_len, score)
    if not np.array_equal(top.scores[real], want[real]) or not np.isneginf(top.scores[~real]).all():
        mismatches.append({"implementation": "Index.search", "against": "score_value", "column": "scores"})
    mismatches += compare_topk("Index.search", KernelTopK(top.doc_ids, top.overlap, top.doc_len), reference, sample)
    return mismatches


def run_library(cfg, name: str, docs: Path, queries: Path) -> dict:
    """Build the Index, time ``Index.search`` against the kernel alone, check them; returns the result.

    Parameters
    ----------
    cfg : settopk.jobs.bench.config.BenchConfig
        With a ``library`` section; uses ``backend``, ``score``, ``routing``, ``k``, ``max_len``,
        ``vocab_size``, ``cpus_per_shard``, ``warmup``, ``repetitions``, ``verify_queries``, ``seed``.
    name : str
        The config's name, for the result.
    docs, queries : pathlib.Path
        The generated corpus and queries (Parquet).

    Raises
    ------
    ExactnessError
        If the Index's result differs from the kernel's, or a sampled query from the NumPy reference.
    """
    import settopk
    from settopk.kernels import NumpyShardIndex
    from settopk.shards.inputs import SetLimits, read_corpus, read_queries

    from .common import ExactnessError, timing_stats, verify_sample

    lib = cfg.library
    limits = SetLimits(vocab_size=cfg.vocab_size, max_len=cfg.max_len)
    start = time.perf_counter()
    corpus = read_corpus(docs, limits)
    query_sets = read_queries(queries, limits).queries
    read_s = time.perf_counter() - start
    threads = lib.threads or max(1, int(cfg.cpus_per_shard))
    start = time.perf_counter()
    index = settopk.Index.build(corpus.docs, doc_ids=corpus.doc_ids, backend=cfg.backend, score=cfg.score,
                                routing=cfg.routing, max_len=cfg.max_len, vocab_size=cfg.vocab_size, threads=threads)
    build_s = time.perf_counter() - start
    n_queries = query_sets.n_sets
    batches = _batches(n_queries, lib.batch_size, index.backend)
    log.info("library: %d docs, %d queries, backend %s; read %.1f s, build %.1f s", index.n_docs, n_queries,
             index.backend, read_s, build_s)

    kernel_runs, index_runs = [], []
    top = parts = None
    for rep in range(cfg.warmup + cfg.repetitions):
        # In turn, kernel first, so that drift (clocks, caches) falls on both alike.
        kernel_s, parts = _kernel_alone(index.kernel, query_sets, cfg.k, batches)
        parts = parts if rep == cfg.warmup + cfg.repetitions - 1 else None  # keep one result: they are large
        start = time.perf_counter()
        top = index.search(query_sets, cfg.k, batch_size=lib.batch_size)
        index_s = time.perf_counter() - start
        if rep >= cfg.warmup:
            kernel_runs.append(kernel_s)
            index_runs.append(index_s)
        log.info("library: repetition %d: kernel %.3f s, Index.search %.3f s", rep + 1, kernel_s, index_s)

    sample = verify_sample(cfg, n_queries)
    reference = NumpyShardIndex(corpus.docs, corpus.doc_ids, cfg.max_len, cfg.score, routing="scan").search(
        query_sets.take(sample), min(cfg.k, max(1, index.n_docs)))
    if reference.doc_ids.shape[1] < cfg.k:  # a corpus smaller than k: the Index pads, the reference is narrower
        reference = _widened(reference, cfg.k)
    mismatches = _check(top, parts, batches, reference, sample, query_sets.lengths.astype(np.int16), cfg.score)
    if mismatches:
        raise ExactnessError(mismatches)

    kernel, library = timing_stats(kernel_runs), timing_stats(index_runs)
    return {
        "benchmark": "settopk.bench.library",
        "config": name,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": cfg.to_dict(),
        "backend": index.backend,
        "n_docs": index.n_docs,
        "n_queries": n_queries,
        "k": cfg.k,
        "batches": len(batches),
        "read_s": read_s,
        "build_s": build_s,
        "kernel": kernel,
        "index_search": library,
        "ratio": library["median_s"] / kernel["median_s"] if kernel["median_s"] > 0 else float("inf"),
        "ratio_min": library["min_s"] / kernel["min_s"] if kernel["min_s"] > 0 else float("inf"),
        "index_queries_per_s": n_queries / library["median_s"] if library["median_s"] > 0 else float("inf"),
        "exactness": {"reference": "settopk.kernels.NumpyShardIndex", "sample": sample.tolist(),
                      "kernel_identical": True, "identical": True},
    }


def _widened(top, k: int):
    from settopk.kernels import TopK as KernelTopK

    n, width = top.doc_ids.shape
    out = KernelTopK(np.full((n, k), -1, np.int64), np.zeros((n, k), np.int16), np.zeros((n, k), np.int16))
    for whole, part in zip(out, top):
        whole[:, :width] = part
    return out


def format_library_table(result: dict) -> str:
    """The printed summary of a library result."""
    kernel, library = result["kernel"], result["index_search"]
    return "\n".join([
        f"settopk bench {result['config']}: Index.search in-process, {result['n_docs']:,} docs, {result['n_queries']:,} queries, "
        f"k = {result['k']}, backend {result['backend']}, {result['batches']} batch(es); build {result['build_s']:.2f} s",
        f"{'':>14}{'median_s':>10}{'min_s':>9}{'queries/s':>12}",
        f"{'kernel alone':>14}{kernel['median_s']:>10.3f}{kernel['min_s']:>9.3f}{result['n_queries'] / kernel['median_s']:>12,.0f}",
        f"{'Index.search':>14}{library['median_s']:>10.3f}{library['min_s']:>9.3f}{result['index_queries_per_s']:>12,.0f}",
        f"ratio Index.search / kernel alone: {result['ratio']:.3f} (medians), {result['ratio_min']:.3f} (minima); "
        f"{len(kernel['runs_s'])} repetition(s) each, in turn",
        f"exact: the Index's ids, overlaps and lengths identical to the kernel's for every query, its scores to score_value; "
        f"{len(result['exactness']['sample'])} sampled queries identical to the NumPy reference",
    ])
