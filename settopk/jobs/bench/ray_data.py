"""The Ray Data pipeline against the job: ``settopk.ray.search`` Parquet to Parquet, beside ``settopk score``.

Run by ``python -m settopk bench --config ray-data-1m`` (or any config with a ``ray_data``
section). The config's synthetic corpus and queries are generated once; then, for each replica
count of ``ray_data.replicas``, two processes run one after the other, each with its own Ray
instance, as a user runs them:

* the job (``settopk score``, one shard, that many replicas; :func:`settopk.jobs.bench.throughput.run_job`);
* the pipeline (``python -m settopk.jobs.bench.ray_data``): ``ray.data.read_parquet(queries)`` ->
  ``settopk.ray.search(..., replicas=N)`` -> ``write_parquet``, zstd as the job writes.

Queries per second are taken as the job's are: the queries over the search phase, from the moment
every search actor holds its index to the last result file written (the job's ``search_s``, which
ends when the last part is written, before the commit; for the pipeline, from the last pool actor's
index built to the newest file's modification time). The pipeline's queries over the time to
``write_parquet``'s return (Ray Data's ending of the write included) are given too. The table also
gives each one's whole process (wall), their ratio, and each driver's peak resident memory (the
job's manifest; the pipeline's ``VmHWM``).

Exactness: the two results hold the same rows (DuckDB ``EXCEPT ALL`` both ways is empty, or, where
DuckDB is not installed, the two tables sorted by query and rank are equal); any difference
stops the run before a number is printed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

from settopk.jobs.progress import max_rss_bytes

from .common import ExactnessError
from .throughput import job_config, run_job

if TYPE_CHECKING:  # annotations only: the config imports every mode
    from .config import BenchConfig

__all__ = ["RayDataConfig", "format_ray_data_table", "main", "run_pipeline", "run_ray_data"]

log = logging.getLogger("settopk.bench")


@dataclass(frozen=True)
class RayDataConfig:
    """A Ray Data run (:mod:`settopk.jobs.bench.ray_data`): ``settopk.ray.search`` Parquet to Parquet against the job.

    Attributes
    ----------
    replicas : list of int
        Search actors (one shard, that many replicas) of each run, in order; each runs the job and
        the pipeline on ``replicas`` GPUs (or CPU slots).
    query_chunk_size : int
        The job's queries per chunk (one part file each). The pipeline writes the job's rows
        (``rows="per_rank"``), compared row for row.
    batch_size : int, optional
        The pipeline's queries per block (``settopk.ray.search``'s ``batch_size``); None: its
        default for the backend. The job's batch is ``query_batch_size``.
    """

    replicas: List[int] = field(default_factory=lambda: [1])
    query_chunk_size: int = 100_000
    batch_size: Optional[int] = None

    def problems(self, cfg: BenchConfig) -> list[str]:
        """What is wrong with the section, given the whole config ``cfg`` (empty if nothing)."""
        problems = []
        if not self.replicas or any(n < 1 for n in self.replicas):
            problems.append(f"ray_data.replicas must list replica counts >= 1, found {self.replicas}")
        if self.query_chunk_size < 1:
            problems.append(f"ray_data.query_chunk_size must be >= 1, found {self.query_chunk_size}")
        if self.batch_size is not None and self.batch_size < 1:
            problems.append(f"ray_data.batch_size must be >= 1 (or left out for the default), found {self.batch_size}")
        if cfg.query_batch_size < 1:
            problems.append(f"query_batch_size must be >= 1 in a ray_data run, found {cfg.query_batch_size}")
        return problems


def _pipeline_settings(cfg: BenchConfig, replicas: int) -> dict:
    """What the pipeline process passes to ``settopk.ray.search``, from the benchmark's search settings."""
    return {"k": cfg.k, "score": cfg.score, "backend": cfg.backend, "routing": cfg.routing, "max_len": cfg.max_len,
            "vocab_size": cfg.vocab_size, "replicas": replicas, "batch_size": cfg.ray_data.batch_size,
            # A GPU actor needs one CPU: the others run Ray Data's read, row-building and write tasks.
            "num_cpus": 1.0 if cfg.backend == "cupy" else float(cfg.cpus_per_shard), "num_gpus": float(cfg.gpus_per_shard) if cfg.backend in ("cupy", "auto") else None}


def run_pipeline(docs: Path, queries: Path, out: Path, settings: dict, scratch: Path, tag: str) -> dict:
    """Run the Ray Data pipeline in its own process; its measurements.

    Raises
    ------
    RuntimeError
        If the process exits non-zero (the message holds the end of its log).
    """
    settings_path, result_path, log_path = (scratch / f"ray-data{tag}.{ext}" for ext in ("settings.json", "result.json", "log"))
    settings_path.write_text(json.dumps(settings))
    command = [sys.executable, "-m", "settopk.jobs.bench.ray_data", "--docs", str(docs), "--queries", str(queries),
               "--out", str(out), "--settings", str(settings_path), "--result", str(result_path)]
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}  # a fresh local cluster, as the job's
    start = time.perf_counter()
    with open(log_path, "w") as log_file:
        code = subprocess.run(command, stdout=log_file, stderr=subprocess.STDOUT, env=env, check=False).returncode
    wall_s = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"the Ray Data pipeline ({settings['replicas']} replica(s)) exited {code}; its log ends:\n"
                           f"{log_path.read_text()[-4000:]}")
    return {**json.loads(result_path.read_text()), "wall_s": wall_s}


def _rows_differing(a: Path, b: Path) -> tuple[int, int]:
    """Rows of result ``a`` not in ``b`` and of ``b`` not in ``a`` (as multisets)."""
    try:
        import duckdb
    except ImportError:
        duckdb = None
    if duckdb is not None:
        x, y = f"read_parquet('{a}/*.parquet')", f"read_parquet('{b}/*.parquet')"
        return tuple(duckdb.sql(f"SELECT count(*) FROM (SELECT * FROM {p} EXCEPT ALL SELECT * FROM {q})").fetchall()[0][0]
                     for p, q in ((x, y), (y, x)))
    import pyarrow.dataset as ds

    def ordered(path):
        table = ds.dataset(str(path), format="parquet").to_table()
        return table.sort_by([("query_id", "ascending"), ("rank", "ascending")]).replace_schema_metadata(None)

    first, second = ordered(a), ordered(b)
    same = first.num_rows == second.num_rows and first.equals(second)
    return (0, 0) if same else (max(first.num_rows, 1), max(second.num_rows, 1))


def run_ray_data(cfg: BenchConfig, name: str, docs: Path, queries: Path) -> dict:
    """Run the job and the pipeline for every replica count of ``cfg.ray_data``; returns the result.

    Raises
    ------
    ExactnessError
        If a pipeline's rows differ from the job's.
    RuntimeError
        If a job or pipeline run fails.
    """
    scratch = Path(tempfile.mkdtemp(prefix="settopk-bench-ray-data-"))
    runs = []
    try:
        for replicas in cfg.ray_data.replicas:
            job_out, pipeline_out = scratch / f"job-{replicas}", scratch / f"ray-data-{replicas}"
            log.info("ray_data: settopk score on 1 shard x %d replica(s)", replicas)
            job = run_job(cfg, 1, replicas, docs, queries, job_out, scratch,
                          job_cfg=job_config(cfg, 1, replicas, cfg.ray_data.query_chunk_size))
            log.info("ray_data: the Ray Data pipeline on %d replica(s)", replicas)
            pipeline = run_pipeline(docs, queries, pipeline_out, _pipeline_settings(cfg, replicas), scratch, f"-{replicas}")
            only_pipeline, only_job = _rows_differing(pipeline_out, job_out)
            if only_pipeline or only_job:
                raise ExactnessError([{"replicas": replicas, "rows_only_in_ray_data": only_pipeline, "rows_only_in_job": only_job}])
            shutil.rmtree(job_out)
            shutil.rmtree(pipeline_out)  # a 1 M-query result takes gigabytes: one pair at a time
            runs.append({
                "replicas": replicas,
                "n_queries": job["n_queries"],
                "rows": job["rows"],
                "job": {key: job[key] for key in ("wall_s", "search_s", "queries_per_s", "driver_max_rss_bytes")},
                "ray_data": pipeline,
                "queries_per_s_ratio": pipeline["queries_per_s"] / job["queries_per_s"] if job["queries_per_s"] > 0 else 0.0,
                "queries_per_s_to_return_ratio": (pipeline["queries_per_s_to_return"] / job["queries_per_s"]
                                                  if job["queries_per_s"] > 0 else 0.0),
                "wall_ratio": pipeline["wall_s"] / job["wall_s"] if job["wall_s"] > 0 else 0.0,
                "driver_rss_ratio": pipeline["driver_max_rss_bytes"] / max(job["driver_max_rss_bytes"], 1),
            })
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "benchmark": "settopk.bench.ray_data",
        "config": name,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": cfg.to_dict(),
        "n_queries": runs[0]["n_queries"],
        "runs": runs,
        "exactness": {"compared": "every row, DuckDB EXCEPT ALL both ways (else sorted tables)", "identical": True},
    }


def format_ray_data_table(result: dict) -> str:
    """The printed summary of a Ray Data result."""
    lines = [
        f"settopk bench {result['config']}: Ray Data pipeline (read_parquet -> settopk.ray.search -> write_parquet) "
        f"against the job, {result['n_queries']:,} queries, backend {result['settings']['backend']}",
        f"{'replicas':>8}{'job_q/s':>12}{'ray_q/s':>12}{'ratio':>7}{'ray_q/s_ret':>12}{'ratio_ret':>10}{'job_wall':>9}{'ray_wall':>9}"
        f"{'job_rss_GB':>11}{'ray_rss_GB':>11}",
    ]
    for r in result["runs"]:
        job, ray_data = r["job"], r["ray_data"]
        lines.append(
            f"{r['replicas']:>8}{job['queries_per_s']:>12,.0f}{ray_data['queries_per_s']:>12,.0f}{r['queries_per_s_ratio']:>7.2f}"
            f"{ray_data['queries_per_s_to_return']:>12,.0f}{r['queries_per_s_to_return_ratio']:>10.2f}"
            f"{job['wall_s']:>9.1f}{ray_data['wall_s']:>9.1f}{job['driver_max_rss_bytes'] / 1e9:>11.2f}"
            f"{ray_data['driver_max_rss_bytes'] / 1e9:>11.2f}")
    lines.append("q/s: queries over the search, from every actor holding its index to the last result file written; "
                 "ratio: Ray Data's over the job's (target >= 0.9); _ret: the pipeline's to write_parquet's return; "
                 "wall: each whole process, Ray's start included; rss: the driver's peak")
    for r in result["runs"]:
        t = r["ray_data"].get("timeline_s") or {}
        if t:
            lines.append(f"ray_data search phase, {r['replicas']} replica(s): to the first call {t['to_first_call']:.2f} s, "
                         f"calls {t['calls']:.2f} s ({t['n_calls']} calls, {t['mean_call']:.3f} s each; actors busy "
                         + ", ".join(f"{b:.2f}" for b in t["busy"].values()) + f"), after the last call {t['after_last_call']:.2f} s"
                         + (f" (the last file written after {t['to_last_file']:.2f} s)" if "to_last_file" in t else ""))
    for r in result["runs"]:
        peaks = r["ray_data"].get("driver_memory_peaks") or {}
        if peaks:
            lines.append(f"ray_data driver peaks, {r['replicas']} replica(s): " + ", ".join(
                f"{field} {peak['bytes'] / 1e9:.2f} GB ({peak['phase']})" for field, peak in peaks.items()))
    lines.append("exact: every row of each pipeline's result equals the job's (EXCEPT ALL both ways empty)")
    return "\n".join(lines)


# --- the pipeline process: python -m settopk.jobs.bench.ray_data ---------------------------------


def _timed_search_class(clock_name: str):
    """A :class:`settopk.ray.ShardSearch` that tells the named clock actor when its index is built."""
    import ray

    from settopk.ray import ShardSearch

    class TimedShardSearch(ShardSearch):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._clock = ray.get_actor(clock_name)
            # The index is built in a thread: its end, not the constructor's, starts the search phase.
            self.built.add_done_callback(lambda _: ray.get(self._clock.ready.remote(time.time())))

        def __call__(self, batch):
            self.built.result()  # a call's time starts with the index there (calls may come before)
            start = time.time()
            carried = super().__call__(batch)
            self._clock.call.remote(os.getpid(), start, time.time(), carried.num_rows)  # not waited for: off the search's path
            return carried

    return TimedShardSearch


def _clock_class():
    import ray

    @ray.remote(num_cpus=0)
    class Clock:
        """When each pool actor's index was built, and each search call's span (wall clock, seconds since the epoch; one node)."""

        def __init__(self):
            self.times = []
            self.calls = []

        def ready(self, at: float) -> None:
            self.times.append(at)

        def call(self, actor: int, start: float, end: float, n_queries: int) -> None:
            self.calls.append((actor, start, end, n_queries))

        def all(self) -> list:
            return list(self.times)

        def all_calls(self) -> list:
            return list(self.calls)

    return Clock


_MEMORY_FIELDS = ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")


class _MemorySampler:
    """Peaks of this process's resident memory by kind (``/proc/self/status``: ``VmHWM`` the kernel's own
    high-water mark, whose phase is where it last rose; ``RssAnon`` is its
    own heap, ``RssShmem`` object-store pages it maps, ``RssFile`` mapped files), sampled every
    ``interval_s`` in a daemon thread, each with the phase it was seen in. Linux only; elsewhere
    the peaks stay empty."""

    def __init__(self, interval_s: float = 0.2):
        import threading

        self.phase = "start"
        self.peaks: dict[str, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        try:
            with open("/proc/self/status") as f:
                values = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.split(":")[0] in _MEMORY_FIELDS}
        except OSError:
            return
        for key, value in values.items():
            if value > self.peaks.get(key, {}).get("bytes", -1):
                self.peaks[key] = {"bytes": value, "phase": self.phase}

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self._sample()

    def stop(self) -> dict:
        """Stop sampling; ``{field: {"bytes": peak, "phase": where}}``."""
        self._stop.set()
        self._thread.join()
        self._sample()
        return self.peaks


def _pipeline(docs: str, queries: str, out: str, settings: dict) -> dict:
    """Run read_parquet -> settopk.ray.search -> write_parquet on a fresh local Ray; its measurements."""
    import pyarrow.parquet as pq
    import ray

    import settopk.ray

    memory = _MemorySampler()
    start = time.perf_counter()
    ray.init(logging_level=logging.WARNING)
    clock_name = f"settopk-bench-clock-{uuid.uuid4().hex}"
    clock = _clock_class().options(name=clock_name).remote()
    replicas = settings.pop("replicas")
    loaded = time.perf_counter()
    memory.phase = "load_corpus"
    dataset = settopk.ray.search(ray.data.read_parquet(queries), docs, replicas=replicas,
                                 searcher_cls=_timed_search_class(clock_name), **settings)
    load_s = time.perf_counter() - loaded
    memory.phase = "write_parquet"
    dataset.write_parquet(out, compression="zstd")
    end = time.time()
    memory.phase = "end"
    ready = ray.get(clock.all.remote())
    n_queries = pq.ParquetFile(queries).metadata.num_rows if os.path.isfile(queries) else ray.data.read_parquet(queries).count()
    last_file = _last_written(out)
    # From the last actor's first index, as the job's search phase starts, to the last result file
    # written, as it ends (the job's commit is not in it; Ray Data's ending of the write is not either).
    started = max(ready[:replicas])
    search_s = (last_file if last_file is not None else end) - started
    to_return_s = end - started
    return {
        "timeline_s": _timeline(started, end, ray.get(clock.all_calls.remote()), last_file),
        "read_docs_s": load_s,
        "pipeline_s": time.perf_counter() - loaded - load_s,
        "search_s": search_s,
        "queries_per_s": n_queries / search_s if search_s > 0 else float("inf"),
        "search_to_return_s": to_return_s,
        "queries_per_s_to_return": n_queries / to_return_s if to_return_s > 0 else float("inf"),
        "actor_starts": len(ready),
        # The kernel's high-water mark of this process, as the job's manifest reports it. Not
        # getrusage's ru_maxrss: a process started by subprocess (vfork, then exec) begins with its
        # parent's peak there, and the bench's parent has held gigabytes of results (docs/benchmarks.md,
        # "The library and Ray Data against the kernel and the job", shows the peak it misread).
        "driver_max_rss_bytes": max_rss_bytes(),
        "driver_memory_peaks": memory.stop(),
        "process_s": time.perf_counter() - start,
    }


def _last_written(out: str) -> float | None:
    """When the last result file under a local ``out`` was written (seconds since the epoch)."""
    times = [p.stat().st_mtime for p in Path(out).rglob("*.parquet")]
    return max(times) if times else None


def _timeline(start: float, end: float, calls: list, last_file: float | None = None) -> dict:
    """Where the pipeline's search phase went, from the pool actors' calls ``(actor, start, end, n_queries)``.

    ``to_first_call``: from the last actor's index built to the first call (negative where an
    actor built first began before); ``calls``: from the first call's start to the last call's end;
    ``after_last_call``: from there to the write's end, of which ``to_last_file`` until the last
    result file was written (the last blocks' rows built and written) and the rest Ray Data's
    ending of the write; ``busy``: each actor's time in at least one call over ``calls``.
    """
    if not calls:
        return {}
    first, last = min(c[1] for c in calls), max(c[2] for c in calls)
    tail = {"to_last_file": last_file - last} if last_file is not None else {}
    busy = {}
    for actor in sorted({c[0] for c in calls}):
        spans = sorted((c[1], c[2]) for c in calls if c[0] == actor)
        covered, reach = 0.0, float("-inf")
        for lo, hi in spans:  # the union of the actor's (overlapping) calls
            covered += max(0.0, hi - max(lo, reach))
            reach = max(reach, hi)
        busy[str(actor)] = covered / (last - first) if last > first else 0.0
    return {"to_first_call": first - start, "calls": last - first, "after_last_call": end - last, "n_calls": len(calls),
            "busy": busy, "mean_call": sum(c[2] - c[1] for c in calls) / len(calls), **tail}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the pipeline process (``python -m settopk.jobs.bench.ray_data``); writes its result JSON."""
    p = argparse.ArgumentParser(prog="python -m settopk.jobs.bench.ray_data", description="The Ray Data side of settopk bench ray_data.")
    for name in ("--docs", "--queries", "--out", "--settings", "--result"):
        p.add_argument(name, required=True)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s settopk %(levelname)s %(message)s", stream=sys.stderr)
    result = _pipeline(args.docs, args.queries, args.out, json.loads(Path(args.settings).read_text()))
    Path(args.result).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
