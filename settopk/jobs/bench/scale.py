"""Scaling runs of the benchmark: the same search on 1, 2, 4, ... shards (one GPU each), in one process.

Run by ``python -m settopk bench --config scale-weak`` (or any config with a
``scaling`` section). For each shard count of ``scaling.shards`` (with its
``scaling.replicas``, default 1), in order: the corpus (``weak``:
``synthetic.n_docs`` times the shard count; ``strong``: the same corpus every
time) is read by the reader tasks, planned into that many length-bucket shards
and loaded by one bench actor per shard and replica (read and build are timed
once); then the queries are cut into one batch per replica (or
``query_batch_size``), each batch goes to every shard of one replica
``warmup`` times untimed and ``repetitions`` times timed. ``search`` is the
busiest actor's time inside it, ``search_rpc`` the driver's wall time for the
whole request (Ray transport included; actors run in parallel). Throughput is query-token
checks per second, ``n_queries * n_tokens / search_rpc``; each count's ratio
is against the first count's throughput, measured in the same process.
Results are checked against the NumPy reference on a seeded sample of queries
at every shard count; any difference stops the run before a number is printed.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional

import numpy as np

from settopk.jobs.cluster import resolve_backend
from settopk.jobs.synthetic import ensure_synthetic
from settopk.shards.inputs import SetLimits, read_queries

from .common import (
    ExactnessError,
    compare_topk,
    load_shards,
    merge_batches,
    reference_topk,
    repeat,
    synthetic_spec,
    timing_stats,
    verify_sample,
)
from .layouts import layout_problems

if TYPE_CHECKING:  # annotations only: the config imports every mode
    from .config import BenchConfig

__all__ = ["ScalingConfig", "run_scaling", "format_scaling_table"]

log = logging.getLogger("settopk.bench")


@dataclass(frozen=True)
class ScalingConfig:
    """A scaling run: the same search on several shard counts, one shard per GPU (or CPU slot).

    Attributes
    ----------
    mode : str
        ``"strong"``: the same corpus on every shard count; ``"weak"``: a corpus of
        ``synthetic.n_docs`` times the shard count (same length histogram and id law).
    shards : list of int
        Shard counts to run, in order; the first is the baseline of the ratios.
    replicas : list of int, optional
        Replicas of every shard in each run (``settopk.configs.JobConfig.replicas``), one entry per
        ``shards`` entry; a run uses ``shards[i] * replicas[i]`` GPUs (or CPU slots).
        Default: 1 for every run.
    """

    mode: str = "strong"
    shards: List[int] = field(default_factory=lambda: [1, 4])
    replicas: Optional[List[int]] = None

    @property
    def layouts(self) -> list[tuple[int, int]]:
        """``(n_shards, replicas)`` of each run, in order."""
        return list(zip(self.shards, self.replicas or [1] * len(self.shards)))

    def problems(self, cfg: BenchConfig) -> list[str]:
        """What is wrong with the section, given the whole config ``cfg`` (empty if nothing)."""
        problems = []
        if self.mode not in ("strong", "weak"):
            problems.append(f"scaling.mode must be 'strong' or 'weak', found {self.mode!r}")
        return problems + layout_problems("scaling", self.shards, self.replicas)


def _stage(cfg: BenchConfig, n_shards: int, replicas: int, data_dir: str, backend: str, limits: SetLimits) -> dict:
    """One layout: corpus, actors, read and build once, the timed searches and the exactness check."""
    import ray

    n_docs = cfg.synthetic.n_docs * (n_shards if cfg.scaling.mode == "weak" else 1)
    t = time.perf_counter()
    docs_path, queries_path = ensure_synthetic(synthetic_spec(cfg, n_docs), data_dir)
    log.info("scaling %d shard(s) x %d replica(s): corpus of %d docs ready in %.1f s", n_shards, replicas, n_docs, time.perf_counter() - t)
    qset = read_queries(str(queries_path), limits).queries
    plan, actors, read_once = load_shards(docs_path, limits, backend, n_shards, cfg, replicas)
    try:
        read_s = read_once()
        build_s = max(ray.get([a.build.remote() for a in actors]))
        share = -(-max(1, qset.n_sets) // replicas)  # every replica gets a batch
        batch = min(cfg.query_batch_size or share, share)
        starts = list(range(0, qset.n_sets, batch))
        refs = [ray.put(qset.take(np.arange(lo, min(lo + batch, qset.n_sets)))) for lo in starts]
        owner = [[b % replicas * n_shards + s for s in range(n_shards)] for b in range(len(refs))]  # batch b: replica b % replicas
        rpc: list[float] = []
        last: dict = {}

        def search_once() -> float:
            start = time.perf_counter()
            pending = [[actors[i].search.remote(ref, cfg.k) for i in owner[b]] for b, ref in enumerate(refs)]
            answers = [ray.get(p) for p in pending]
            rpc.append(time.perf_counter() - start)
            last["answers"] = answers
            busy = [0.0] * len(actors)
            for b, answer in enumerate(answers):
                for i, (seconds, _) in zip(owner[b], answer):
                    busy[i] += seconds
            return max(busy)

        search_runs = repeat(search_once, cfg.warmup, cfg.repetitions)
        rpc_runs = rpc[cfg.warmup:]
        sample = verify_sample(cfg, qset.n_sets)
        reference = reference_topk(actors[:n_shards], qset, sample, cfg)
        shard_lists = [[topk for _, topk in answer] for answer in last["answers"]]
        topk = merge_batches(shard_lists, qset.lengths, starts, batch, cfg)
        mismatches = compare_topk(f"settopk {n_shards} shard(s) x {replicas} replica(s)", topk, reference, sample)
        if mismatches:
            raise ExactnessError(mismatches)
    finally:
        for a in actors:
            ray.kill(a)
    n_tokens = sum(sp.n_tokens for sp in plan)
    rpc_median = statistics.median(rpc_runs)
    return {
        "n_shards": n_shards,
        "replicas": replicas,
        "n_docs": sum(sp.n_docs for sp in plan),
        "n_tokens": n_tokens,
        "n_queries": qset.n_sets,
        "shards": [sp.to_dict() for sp in plan],
        "read_s": read_s,
        "build_s": build_s,
        "search": timing_stats(search_runs),
        "search_rpc": timing_stats(rpc_runs),
        "throughput_checks_per_s": qset.n_sets * n_tokens / rpc_median if rpc_median > 0 else float("inf"),
        "exact_sample": sample.tolist(),
    }


def run_scaling(cfg: BenchConfig, name: str, data_dir: str) -> dict:
    """Run every shard count of ``cfg.scaling``; returns the result (the caller writes and prints it).

    Parameters
    ----------
    cfg : BenchConfig
        With a ``scaling`` section.
    name : str
        The config's name, for the result.
    data_dir : str
        Where the corpora are generated and cached.

    Raises
    ------
    settopk.shards.inputs.InputError
        If the cluster lacks the GPUs or CPUs for the largest shard count.
    ExactnessError
        If a result differs from the NumPy reference.
    """
    import ray

    if not ray.is_initialized():
        ray.init()
    limits = SetLimits(vocab_size=cfg.vocab_size, max_len=cfg.max_len)
    backend = None
    for n, replicas in cfg.scaling.layouts:  # every layout must fit before the first one runs
        backend, _ = resolve_backend(dataclasses.replace(cfg, n_shards=n), ray.cluster_resources(), replicas)
    stages = [_stage(cfg, n, replicas, data_dir, backend, limits) for n, replicas in cfg.scaling.layouts]
    base = stages[0]
    for st in stages:
        st["throughput_ratio"] = st["throughput_checks_per_s"] / base["throughput_checks_per_s"]
        st["search_speedup"] = base["search_rpc"]["median_s"] / st["search_rpc"]["median_s"]
    return {
        "benchmark": "settopk.bench.scaling",
        "config": name,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": cfg.to_dict(),
        "backend": backend,
        "mode": cfg.scaling.mode,
        "stages": stages,
        "exactness": {"reference": "settopk.kernels.NumpyShardIndex", "identical": True},
    }


def format_scaling_table(result: dict) -> str:
    """The printed summary of a scaling result."""
    lines = [
        f"settopk bench {result['config']}: {result['mode']} scaling, backend {result['backend']}",
        f"{'shards':>6}{'replicas':>9}{'n_docs':>12}{'read_s':>9}{'build_s':>9}{'search_s':>10}{'rpc_s':>9}{'checks/s':>11}{'ratio':>8}{'speedup':>9}",
    ]
    for st in result["stages"]:
        lines.append(
            f"{st['n_shards']:>6}{st['replicas']:>9}{st['n_docs']:>12,}{st['read_s']:>9.3f}{st['build_s']:>9.3f}{st['search']['median_s']:>10.4f}"
            f"{st['search_rpc']['median_s']:>9.4f}{st['throughput_checks_per_s']:>11.3e}{st['throughput_ratio']:>8.2f}{st['search_speedup']:>9.2f}"
        )
    lines.append("ratio: throughput (query-token checks per second, rpc time) over the first row's; "
                 "speedup: the first row's rpc time over this row's")
    lines.append(f"exact: every layout's sampled queries identical to the NumPy reference ({len(result['stages'][0]['exact_sample'])} queries)")
    return "\n".join(lines)

