"""Throughput of the whole job: ``settopk.jobs.score`` end to end on each layout, against the kernel alone.

Run by ``python -m settopk bench --config job-1m`` (or any config with a ``throughput``
section). The config's synthetic corpus and queries are generated once; then, for
each layout of ``throughput`` (shards x replicas), the job runs as its own process
(``python -m settopk score``, its own Ray instance, as a user runs it) and its manifest
gives the phases, the actors' time inside the search and the driver's peak memory.
Last, in this process, one bench actor holds the whole corpus and searches the same
queries in the same batches one after another, data resident: the **kernel-only**
time (host queries to host results, no Ray call, no merge, no write).

For each layout the table reports wall time (the process, Ray's start included),
the search phase, queries per second in it, the kernel-only time for the layout
(the one-GPU time divided by its GPUs: the best the layout could do), their ratio
(host overhead: 1.0 means the job searches at the kernel's pace), the GPU busy
fraction (each actor's time inside the search over the search phase, mean over
actors), the driver's peak RSS, and the rows and bytes written. The stage columns
say where the rest went: the driver reading query chunks and sending batches, and
the merge tasks' merging and writing (summed over tasks, which overlap the search).

Exactness: every part of every layout equals the first layout's (``Table.equals``,
part by part), and a seeded sample of ``verify_queries`` queries of the first
layout's output equals the NumPy reference on the whole corpus (ids, overlaps,
lengths). Any difference stops the run before a number is printed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import numpy as np
import pyarrow.parquet as pq
import yaml

from settopk.configs import SearchConfig
from settopk.jobs.chunks import plan_chunks
from settopk.jobs.output import part_name, read_manifest
from settopk.jobs.cluster import resolve_backend
from settopk.kernels import SetBatch, TopK
from settopk.shards.inputs import QueryStream, SetLimits

from .common import ExactnessError, load_shards, verify_sample
from .layouts import layout_problems

if TYPE_CHECKING:  # annotations only: the config imports every mode
    from .config import BenchConfig

__all__ = ["ThroughputConfig", "format_throughput_table", "job_config", "run_job", "run_throughput"]

log = logging.getLogger("settopk.bench")


@dataclass(frozen=True)
class ThroughputConfig:
    """A whole-job throughput run (:mod:`settopk.jobs.bench.throughput`): ``settopk.jobs.score`` end to end on each layout.

    Attributes
    ----------
    shards : list of int
        Length-bucket shards of each run, in order; the first run is the baseline of the
        speed-ups and the reference the others' results must equal.
    replicas : list of int, optional
        Replicas of every shard in each run, one entry per ``shards`` entry (default 1);
        a run uses ``shards[i] * replicas[i]`` GPUs (or CPU slots).
    query_chunk_size : int
        Queries per chunk, one committed part file each (``settopk.configs.JobConfig.query_chunk_size``).
    """

    shards: List[int] = field(default_factory=lambda: [1])
    replicas: Optional[List[int]] = None
    query_chunk_size: int = 100_000

    @property
    def layouts(self) -> list[tuple[int, int]]:
        """``(n_shards, replicas)`` of each run, in order."""
        return list(zip(self.shards, self.replicas or [1] * len(self.shards)))

    def problems(self, cfg: BenchConfig) -> list[str]:
        """What is wrong with the section, given the whole config ``cfg`` (empty if nothing)."""
        problems = layout_problems("throughput", self.shards, self.replicas)
        if self.query_chunk_size < 1:
            problems.append(f"throughput.query_chunk_size must be >= 1, found {self.query_chunk_size}")
        if cfg.query_batch_size < 1:
            problems.append(f"query_batch_size must be >= 1 in a throughput run, found {cfg.query_batch_size}")
        return problems


def job_config(cfg: BenchConfig, n_shards: int, replicas: int, query_chunk_size: int) -> dict:
    """The ``settopk.jobs.score`` config of one layout: the benchmark's search settings (those of
    :class:`settopk.configs.SearchConfig` but the corpus, which the job reads from files) and batching."""
    search = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(SearchConfig) if f.name != "synthetic"}
    return {**search, "n_shards": n_shards, "replicas": replicas, "query_batch_size": cfg.query_batch_size,
            "query_chunk_size": query_chunk_size}


def run_job(cfg: BenchConfig, n_shards: int, replicas: int, docs: Path, queries: Path, out: Path, scratch: Path, *,
            job_cfg: dict | None = None, module: str = "settopk.jobs.score", env: dict | None = None, tag: str = "") -> dict:
    """Run ``settopk.jobs.score`` (or ``module``, which takes its arguments) for one layout in its own
    process; its measurements from the manifest.

    ``job_cfg`` replaces :func:`job_config` with ``cfg.throughput``'s chunk size; ``env`` adds
    to the process's environment; ``tag`` tells apart runs of the same layout.

    Raises
    ------
    RuntimeError
        If the job exits non-zero (the message holds the end of its log).
    """
    name = f"job-{n_shards}x{replicas}{tag}"
    if job_cfg is None:
        job_cfg = job_config(cfg, n_shards, replicas, cfg.throughput.query_chunk_size)
    config_path = scratch / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(job_cfg))
    log_path = scratch / f"{name}.log"
    command = [sys.executable, "-m", module, "--config", str(config_path), "--docs", str(docs),
               "--queries", str(queries), "--out", str(out), "--force", "--run-id", f"bench-{n_shards}x{replicas}"]
    env = {**{key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}, **(env or {})}  # a fresh local cluster
    start = time.perf_counter()
    with open(log_path, "w") as log_file:
        code = subprocess.run(command, stdout=log_file, stderr=subprocess.STDOUT, env=env, check=False).returncode
    wall_s = time.perf_counter() - start
    if code != 0:
        tail = log_path.read_text()[-4000:]
        raise RuntimeError(f"settopk.jobs.score on {n_shards} shard(s) x {replicas} replica(s) exited {code}; its log ends:\n{tail}")
    manifest = read_manifest(out)
    t = manifest["timings_s"]
    busy = [s["busy_s"] for s in manifest["shards"]]
    search_s = t["search_s"]
    n_queries = manifest["counts"]["n_queries"]
    return {
        "n_shards": n_shards,
        "replicas": replicas,
        "n_actors": n_shards * replicas,
        "wall_s": wall_s,
        "job_s": t["total_s"],
        "phases_s": {key: t[key] for key in ("validate_s", "validate_wait_s", "connect_s", "read_s", "load_s", "search_s", "commit_s") if key in t},
        "search_s": search_s,
        "queries_per_s": n_queries / search_s if search_s > 0 else float("inf"),
        "actor_search_s": busy,
        "gpu_busy": float(np.mean(busy)) / search_s if search_s > 0 else 0.0,
        "stages_s": {key: t.get(key, 0.0) for key in ("read_queries_s", "send_s", "merge_s", "write_s")},
        "driver_max_rss_bytes": manifest["driver_max_rss_bytes"],
        "driver_max_rss_bytes_by_phase": manifest.get("driver_max_rss_bytes_by_phase", {}),
        "rows": manifest["counts"]["rows"],
        "bytes": sum(f.stat().st_size for f in out.glob("*.parquet")),
        "parts": manifest["output"]["parts"],
        "n_queries": n_queries,
        "shards": manifest["shards"],
        "log": str(log_path),
    }


def _differing_parts(first: Path, other: Path, parts: int) -> list[int]:
    """Part numbers whose tables differ between two results (read one part at a time)."""
    return [i for i in range(parts) if not pq.read_table(first / part_name(i)).equals(pq.read_table(other / part_name(i)))]


def _kernel_only(cfg: BenchConfig, docs: Path, stream: QueryStream, limits: SetLimits, backend: str,
                 sample: np.ndarray) -> tuple[float, TopK]:
    """One actor, the whole corpus, the queries in ``query_batch_size`` batches one after another.

    Returns the seconds inside the index's search (warm: one batch is searched first,
    untimed) and the NumPy reference's TopK for the ``sample`` rows.
    """
    import ray

    _, actors, read_once = load_shards(str(docs), limits, backend, 1, cfg)
    (actor,) = actors
    try:
        read_once()
        ray.get(actor.build.remote())
        seconds, sample_sets, lo = 0.0, [], 0
        for i, (_, chunk) in enumerate(stream.chunks(cfg.throughput.query_chunk_size)):
            if i == 0:
                ray.get(actor.search_batches.remote(chunk.take(np.arange(min(cfg.query_batch_size, chunk.n_sets))), cfg.k, cfg.query_batch_size))
            seconds += ray.get(actor.search_batches.remote(chunk, cfg.k, cfg.query_batch_size))
            mine = sample[(sample >= lo) & (sample < lo + chunk.n_sets)] - lo
            sample_sets += chunk.take(mine).to_lists()
            lo += chunk.n_sets
        reference = ray.get(actor.reference.remote(SetBatch.from_lists(sample_sets), cfg.k))
    finally:
        ray.kill(actor)
    return seconds, reference


def _check_sample(out: Path, sample: np.ndarray, reference: TopK, chunks: list, rows_per_query: int) -> list[dict]:
    """Mismatches between the written rows of the ``sample`` queries and the reference
    (``chunks``: the run's :func:`settopk.jobs.chunks.plan_chunks`, which say each query's part)."""
    mismatches, tables = [], {}
    starts = np.array([c.lo for c in chunks])
    for j, q in enumerate(sample.tolist()):
        part = int(np.searchsorted(starts, q, side="right")) - 1
        row = q - chunks[part].lo
        if part not in tables:
            tables = {part: pq.read_table(out / part_name(part), columns=["doc_id", "overlap", "doc_len"])}  # one part held
        got = tables[part].slice(row * rows_per_query, rows_per_query)
        for name, want in (("doc_id", reference.doc_ids[j]), ("overlap", reference.overlap[j]), ("doc_len", reference.doc_len[j])):
            want = want[want >= 0] if name == "doc_id" else want[reference.doc_ids[j] >= 0]
            if not np.array_equal(got[name].to_numpy(), want):
                mismatches.append({"query": q, "column": name})
    return mismatches


def run_throughput(cfg: BenchConfig, name: str, docs: Path, queries: Path) -> dict:
    """Run every layout of ``cfg.throughput``, then the kernel-only pass; returns the result.

    Parameters
    ----------
    cfg : BenchConfig
        With a ``throughput`` section.
    name : str
        The config's name, for the result.
    docs, queries : pathlib.Path
        The generated corpus and queries (Parquet).

    Raises
    ------
    ExactnessError
        If a layout's results differ from the first layout's, or a sampled query from the
        NumPy reference.
    RuntimeError
        If a job run fails.
    """
    import ray

    limits = SetLimits(vocab_size=cfg.vocab_size, max_len=cfg.max_len)
    scratch = Path(tempfile.mkdtemp(prefix="settopk bench-job-"))
    try:
        runs, first_out = [], None
        for n_shards, replicas in cfg.throughput.layouts:
            out = scratch / f"out-{n_shards}x{replicas}"
            log.info("throughput: settopk.jobs.score on %d shard(s) x %d replica(s)", n_shards, replicas)
            run = run_job(cfg, n_shards, replicas, docs, queries, out, scratch)
            if first_out is None:
                first_out = out
            else:
                differ = _differing_parts(first_out, out, run["parts"])
                if differ:
                    raise ExactnessError([{"layout": [n_shards, replicas], "parts_differing": differ}])
                shutil.rmtree(out)  # results of a large run take gigabytes: keep only the first layout's
            runs.append(run)

        if not ray.is_initialized():
            ray.init()
        backend, _ = resolve_backend(cfg, ray.cluster_resources())
        stream = QueryStream(str(queries), limits)  # validated once; read again by the kernel-only pass
        n_queries = stream.n_queries
        sample = verify_sample(cfg, n_queries)
        log.info("throughput: kernel-only pass and the NumPy reference for %d sampled queries", len(sample))
        kernel_s, reference = _kernel_only(cfg, docs, stream, limits, backend, sample)
        chunks = plan_chunks(n_queries, cfg.throughput.query_chunk_size)
        mismatches = _check_sample(first_out, sample, reference, chunks, runs[0]["rows"] // n_queries)
        if mismatches:
            raise ExactnessError(mismatches)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    base = runs[0]
    for run in runs:
        run["kernel_only_s"] = kernel_s / run["n_actors"]
        run["host_overhead"] = run["search_s"] / run["kernel_only_s"] if run["kernel_only_s"] > 0 else float("inf")
        run["speedup"] = run["queries_per_s"] / base["queries_per_s"]
        run.pop("log")
        run.pop("shards")
    return {
        "benchmark": "settopk.bench.throughput",
        "config": name,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": cfg.to_dict(),
        "backend": backend,
        "n_queries": n_queries,
        "kernel_only_1_actor_s": kernel_s,
        "kernel_only_queries_per_s": n_queries / kernel_s if kernel_s > 0 else float("inf"),
        "runs": runs,
        "exactness": {"reference": "settopk.kernels.NumpyShardIndex", "sample": sample.tolist(), "layouts_identical": True, "identical": True},
    }


def format_throughput_table(result: dict) -> str:
    """The printed summary of a throughput result."""
    lines = [
        f"settopk bench {result['config']}: whole job, {result['n_queries']:,} queries, backend {result['backend']}; "
        f"kernel alone on one actor: {result['kernel_only_1_actor_s']:.2f} s ({result['kernel_only_queries_per_s']:,.0f} queries/s)",
        f"{'layout':>7}{'wall_s':>8}{'search_s':>9}{'queries/s':>11}{'kernel_s':>9}{'ratio':>7}{'busy':>6}{'speedup':>8}"
        f"{'rss_GB':>7}{'rows':>13}{'GB':>7} | stages (s): read_queries send merge write",
    ]
    for r in result["runs"]:
        st = r["stages_s"]
        lines.append(
            f"{r['n_shards']:>3}x{r['replicas']:<3}{r['wall_s']:>8.2f}{r['search_s']:>9.2f}{r['queries_per_s']:>11,.0f}{r['kernel_only_s']:>9.2f}"
            f"{r['host_overhead']:>7.2f}{r['gpu_busy']:>6.2f}{r['speedup']:>8.2f}{r['driver_max_rss_bytes'] / 1e9:>7.2f}{r['rows']:>13,}"
            f"{r['bytes'] / 1e9:>7.2f} | {st['read_queries_s']:.2f} {st['send_s']:.2f} {st['merge_s']:.2f} {st['write_s']:.2f}"
        )
    lines.append("layout: shards x replicas; kernel_s: the kernel-only time over the layout's actors; ratio: search_s / kernel_s "
                 "(1.0 = the kernel's pace); busy: actors' time in the search / search_s; speedup: queries/s over the first row's")
    lines.append(f"exact: every layout's parts identical to the first's; {len(result['exactness']['sample'])} sampled queries identical "
                 "to the NumPy reference")
    return "\n".join(lines)
