"""Benchmark job: time every phase of a search on a seeded corpus, against baselines, exactly checked.

``python -m jobs.bench --config NAME|FILE [--out FILE.json] [--data-dir DIR] [--quiet]``

Named configs live in ``configs/bench/`` (``sti2-zipf``, ``sti2-uniform``,
``smoke``; the scaling runs ``scale-weak``, ``scale-strong`` and ``scale-smoke``,
see :mod:`jobs.bench_scale`; the whole-job throughput runs ``job-1m``, ``job-1m-4gpu``,
``job-10m-4gpu`` and ``job-smoke``, see :mod:`jobs.bench_job`). The job generates the config's synthetic corpus once (into
``--data-dir`` or ``synthetic.cache_dir``), starts one Ray actor per
length-bucket shard, and runs each phase ``warmup`` times untimed, then
``repetitions`` times timed:

* ``read``: reader tasks decode the corpus pieces (``jobs.reading``), then every
  actor takes its length range from the object store (``shards.searcher.load_shard``);
* ``build``: each actor builds its index from the docs in host memory (for the
  cupy backend: host memory to the GPU layout, GPU work included);
* ``search``: every query against every shard, timed inside the actors (data
  resident, from host queries to host results; the slowest shard counts), and
  ``search_rpc``, the same seen from the driver (Ray transport included);
* ``merge``: the exact merge of the shard lists in the driver;
* ``write``: the result table and its Parquet dataset (``jobs.output``).

Phases of several actors run in parallel; a phase's time is the slowest
actor's. ``total`` is the sum of the medians of read, build, search_rpc, merge
and write: the job from Parquet on disk to Parquet written (the reader tasks
validate the corpus as they decode it), without Ray's start and the actors' own start.

Baselines (``kernels.baselines``) are built and searched in the same actors, on
the same docs and queries, with the same warm-up and ``baseline_repetitions``
timed repetitions (default: ``repetitions``). Then the
results of the backend and of every baseline are compared with the NumPy
reference on a seeded sample of queries; if any id, overlap or length differs,
the job prints no timing, writes the mismatches to the JSON file and exits 1.

Exit codes: 0 done; 1 results differ from the reference, or another failure;
2 bad config or input.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import configs
from configs.benchmark import bench_config_names, load_bench_config
from kernels import TopK
from shards import merge_topk, plan_shards_from_counts
from shards.inputs import InputError, SetLimits, read_queries

from .reading import pieces_for_cluster, read_corpus_pieces
from .score import resolve_backend, shard_doc_cost

__all__ = ["ExactnessError", "build_parser", "main", "run"]

log = logging.getLogger("settopk.bench")
_EXIT_MISMATCH = 1
_EXIT_BAD_INPUT = 2
_PHASES = ("read", "build", "search", "search_rpc", "merge", "write")
_TOTAL_PHASES = ("read", "build", "search_rpc", "merge", "write")


class ExactnessError(RuntimeError):
    """Results of the backend or a baseline differ from the NumPy reference.

    Attributes
    ----------
    mismatches : list of dict
        One entry per (implementation, query) that differs: ``implementation``,
        ``query_index``, ``rank`` (1-based, first difference), ``got`` and
        ``expected`` as ``(doc_id, overlap, doc_len)``.
    """

    def __init__(self, mismatches: list[dict]):
        self.mismatches = mismatches
        names = sorted({m["implementation"] for m in mismatches})
        first = mismatches[0]
        super().__init__(
            f"{len(mismatches)} sampled (implementation, query) pairs differ from the NumPy reference "
            f"({', '.join(names)}); first: {first['implementation']} query {first['query_index']} rank "
            f"{first['rank']}: got {first['got']}, expected {first['expected']}"
        )


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of ``jobs.bench``."""
    p = argparse.ArgumentParser(prog="python -m jobs.bench", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help=f"benchmark config name {bench_config_names()} or YAML path")
    p.add_argument("--out", help="result JSON file (default: out/bench/<config name>.json)")
    p.add_argument("--data-dir", help="where the corpus is generated and cached (default: the config's synthetic.cache_dir)")
    p.add_argument("--quiet", action="store_true", help="warnings and errors only (the table is still printed)")
    return p


# ---------------------------------------------------------------------------- helpers


def _stats(runs: list[float]) -> dict:
    """Median, min and every run of a timed phase, in seconds."""
    return {"median_s": statistics.median(runs), "min_s": min(runs), "runs_s": [round(r, 6) for r in runs]}


def _repeat(fn, warmup: int, repetitions: int) -> list[float]:
    """Call ``fn`` (returning seconds) ``warmup`` times untimed, then return ``repetitions`` results."""
    for _ in range(warmup):
        fn()
    return [float(fn()) for _ in range(repetitions)]


def load_shards(docs_path, limits: SetLimits, backend: str, n_shards: int, cfg, replicas: int = 1):
    """Read the corpus with the reader tasks, plan ``n_shards`` shards and start ``replicas`` bench
    actors each.

    Returns
    -------
    (list of ShardSpec, list of ActorHandle, callable)
        The plan, the actors (their docs not taken yet; actor ``r * n_shards + s`` is replica
        ``r`` of shard ``s``), and ``read_once()``: reads the corpus
        again and has every actor take its shard; returns the seconds from the first reader task
        to the slowest actor holding its docs.
    """
    import ray

    from jobs.bench_shard import BenchShardActor

    pieces, _, _ = pieces_for_cluster(str(docs_path), float(ray.cluster_resources().get("CPU", 1)))
    first = read_corpus_pieces(pieces, limits, "error")
    plan = plan_shards_from_counts(first.length_counts, n_shards, doc_cost=shard_doc_cost(backend, limits.max_len))
    del first
    options = {"num_cpus": cfg.cpus_per_shard, "num_gpus": cfg.gpus_per_shard if backend == "cupy" else 0}
    actors = [BenchShardActor.options(**options).remote(sp, limits, backend, cfg.score, cfg.routing) for _ in range(replicas) for sp in plan]
    # Readers run while the actors hold their CPUs: reserve one each only where CPUs are left.
    free_cpus = ray.cluster_resources().get("CPU", 0) - len(actors) * cfg.cpus_per_shard
    reader_cpus = 1.0 if free_cpus >= 1 else 0.0

    def read_once() -> float:
        start = time.perf_counter()
        corpus = read_corpus_pieces(pieces, limits, "error", reader_cpus=reader_cpus)
        ray.get([a.read.remote(corpus.corpus_refs, corpus.drops, corpus.ordered) for a in actors])
        return time.perf_counter() - start

    return plan, actors, read_once


def _resolve_baselines(names: list[str], backend: str) -> list[str]:
    out = []
    for name in names:
        expanded = (["spmm", "popc4"] if backend == "cupy" else ["scipy"]) if name == "auto" else [name]
        out += [n for n in expanded if n not in out]
    return out


def _compare(name: str, got: TopK, want: TopK, sample: np.ndarray) -> list[dict]:
    """Mismatches between rows ``sample`` of ``got`` and the reference ``want`` (rows in sample order)."""
    out = []
    for j, qi in enumerate(sample.tolist()):
        g = list(zip(got.doc_ids[qi].tolist(), got.overlap[qi].tolist(), got.doc_len[qi].tolist()))
        w = list(zip(want.doc_ids[j].tolist(), want.overlap[j].tolist(), want.doc_len[j].tolist()))
        same_dtypes = all(getattr(got, f).dtype == getattr(want, f).dtype for f in TopK._fields)
        if g != w or not same_dtypes:
            rank = next((r for r, (a, b) in enumerate(zip(g, w)) if a != b), 0)
            out.append({"implementation": name, "query_index": qi, "rank": rank + 1,
                        "got": list(g[rank]) if g else None, "expected": list(w[rank]) if w else None})
    return out


# ---------------------------------------------------------------------------- the run


def run(args) -> dict:
    """Run the benchmark for parsed arguments; returns the result (also written as JSON).

    Raises
    ------
    configs.ConfigError, shards.inputs.InputError
        Bad config or inputs.
    ExactnessError
        A result differs from the NumPy reference (the JSON file then holds
        the mismatches and no timings).
    """
    import ray

    from jobs.output import results_table, write_results
    from kernels import score_definition
    from jobs.synthetic import SyntheticSpec, ensure_synthetic

    cfg = load_bench_config(args.config)
    name = Path(args.config).stem
    out_path = Path(args.out) if args.out else Path("out") / "bench" / f"{name}.json"
    if cfg.scaling is not None:
        from .bench_scale import data_dir_for, format_scaling_table, run_scaling

        result = run_scaling(cfg, name, data_dir_for(cfg, args.data_dir))
        _write_json(out_path, result)
        print(format_scaling_table(result))
        print(f"written: {out_path}")
        return result
    s = cfg.synthetic
    spec = SyntheticSpec(n_docs=s.n_docs, n_queries=s.n_queries, seed=s.seed, vocab_size=s.vocab_size,
                         id_dist=s.id_dist, zipf_s=s.zipf_s, near_duplicate_fraction=s.near_duplicate_fraction,
                         max_len=cfg.max_len)
    t = time.perf_counter()
    docs_path, queries_path = ensure_synthetic(spec, os.path.expanduser(args.data_dir or s.cache_dir))
    log.info("corpus ready in %.1f s: %s", time.perf_counter() - t, docs_path.parent)
    if cfg.throughput is not None:
        from .bench_job import format_throughput_table, run_throughput

        result = run_throughput(cfg, name, docs_path, queries_path)
        _write_json(out_path, result)
        print(format_throughput_table(result))
        print(f"written: {out_path}")
        return result
    limits = SetLimits(vocab_size=cfg.vocab_size, max_len=cfg.max_len)
    queries = read_queries(str(queries_path), limits)
    qset = queries.queries

    if not ray.is_initialized():
        ray.init()
    backend, n_shards = resolve_backend(cfg, ray.cluster_resources())
    plan, actors, read_once = load_shards(docs_path, limits, backend, n_shards, cfg)
    baselines = _resolve_baselines(cfg.baselines, backend)
    n_docs, n_tokens = sum(sp.n_docs for sp in plan), sum(sp.n_tokens for sp in plan)
    log.info("bench %s: %d docs, %d ids, %d queries, k=%d, score %s, backend %s, %d shard(s), baselines %s",
             name, n_docs, n_tokens, qset.n_sets, cfg.k, cfg.score, backend, len(plan), baselines)
    batch = cfg.query_batch_size or max(1, qset.n_sets)
    starts = list(range(0, qset.n_sets, batch))
    batch_refs = [ray.put(qset.take(np.arange(lo, min(lo + batch, qset.n_sets)))) for lo in starts]
    warmup, reps = cfg.warmup, cfg.repetitions

    work_dir = Path(tempfile.mkdtemp(prefix="settopk-bench-"))
    try:
        environment = ray.get(actors[0].environment.remote())
        runs: dict[str, list[float]] = {}
        runs["read"] = _repeat(read_once, warmup, reps)
        runs["build"] = _repeat(lambda: max(ray.get([a.build.remote() for a in actors])), warmup, reps)

        last: dict = {}

        def search(method: str) -> tuple[float, float, list[list[TopK]]]:
            """One pass of every batch over every shard: (slowest shard's seconds, driver seconds, parts)."""
            start = time.perf_counter()
            pending = [[getattr(a, method).remote(ref, cfg.k) for a in actors] for ref in batch_refs]
            answers = [ray.get(p) for p in pending]
            wall = time.perf_counter() - start
            shard_s = [sum(answers[b][i][0] for b in range(len(starts))) for i in range(len(actors))]
            return max(shard_s), wall, [[part for _, part in answer] for answer in answers]

        def merge(parts: list[list[TopK]]) -> TopK:
            merged = [merge_topk(p, qset.lengths[lo : lo + batch], cfg.k, cfg.max_len, cfg.score) for p, lo in zip(parts, starts)]
            return TopK(*(np.concatenate([getattr(m, f) for m in merged]) for f in TopK._fields))

        def search_once() -> float:
            shard_s, wall, last["parts"] = search("search")
            runs.setdefault("search_rpc", []).append(wall)
            return shard_s

        runs["search"] = _repeat(search_once, warmup, reps)
        runs["search_rpc"] = runs["search_rpc"][warmup:]
        routing = ray.get([a.routing_stats.remote() for a in actors])  # of the last timed search
        log.info("routing of the last search, per shard: %s", routing)

        def merge_once() -> float:
            start = time.perf_counter()
            last["topk"] = merge(last["parts"])
            return time.perf_counter() - start

        runs["merge"] = _repeat(merge_once, warmup, reps)
        topk = last["topk"]
        manifest = {"job": "settopk.bench", "config": name}

        def write_once() -> float:
            target = work_dir / f"results-{time.monotonic_ns()}"
            start = time.perf_counter()
            write_results(target, results_table(queries.query_ids, qset.lengths, topk, cfg.score), manifest,
                          metadata={"settopk.score": score_definition(cfg.score)})
            elapsed = time.perf_counter() - start
            shutil.rmtree(target, ignore_errors=True)
            return elapsed

        runs["write"] = _repeat(write_once, warmup, reps)

        # The reference on a seeded sample, per shard, merged like the backend's lists.
        rng = np.random.default_rng(cfg.seed)
        sample = np.sort(rng.choice(qset.n_sets, size=min(cfg.verify_queries, qset.n_sets), replace=False))
        t = time.perf_counter()
        sample_ref = ray.put(qset.take(sample))
        reference = merge_topk(ray.get([a.reference.remote(sample_ref, cfg.k) for a in actors]),
                               qset.lengths[sample], cfg.k, cfg.max_len, cfg.score)
        log.info("NumPy reference for %d sampled queries in %.1f s", len(sample), time.perf_counter() - t)
        mismatches = _compare("settopk", topk, reference, sample)
        checked = ["settopk"]

        baseline_results: dict[str, dict] = {}
        for bname in baselines:
            built = ray.get([a.baseline_build.remote(bname) for a in actors])
            skipped = [b for b in built if isinstance(b, str)]
            if skipped:
                baseline_results[bname] = {"skipped": skipped[0]}
                log.warning("baseline %s %s", bname, skipped[0])
                ray.get([a.baseline_free.remote() for a in actors])
                continue
            base_reps = cfg.baseline_repetitions or reps
            build_runs = _repeat(lambda: max(ray.get([a.baseline_build.remote(bname) for a in actors])),
                                 max(0, warmup - 1), base_reps)  # the build above was the first warm-up

            def baseline_once() -> float:
                shard_s, _, last["baseline_parts"] = search("baseline_search")
                return shard_s

            base_runs = _repeat(baseline_once, warmup, base_reps)
            mismatches += _compare(bname, merge(last["baseline_parts"]), reference, sample)
            checked.append(bname)
            ray.get([a.baseline_free.remote() for a in actors])
            baseline_results[bname] = {"build": _stats(build_runs), "search": _stats(base_runs)}
            log.info("baseline %s: search median %.4f s", bname, statistics.median(base_runs))
    finally:
        for a in actors:
            ray.kill(a)
        shutil.rmtree(work_dir, ignore_errors=True)

    result = {
        "benchmark": "settopk.bench",
        "config": name,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": cfg.to_dict(),
        "environment": environment,
        "corpus": {"docs": str(docs_path), "queries": str(queries_path), "n_docs": n_docs, "n_tokens": n_tokens,
                   "n_queries": qset.n_sets, "query_tokens": int(len(qset.tokens))},
        "backend": backend,
        "shards": [sp.to_dict() for sp in plan],
        "exactness": {"reference": "kernels.NumpyShardIndex", "sample": sample.tolist(), "checked": checked,
                      "identical": not mismatches, "mismatches": mismatches},
    }
    if mismatches:
        _write_json(out_path, result)
        raise ExactnessError(mismatches)
    phases = {p: _stats(runs[p]) for p in _PHASES}
    search_s = phases["search"]["median_s"]
    for bname, entry in baseline_results.items():
        if "search" in entry:
            entry["speedup"] = entry["search"]["median_s"] / search_s if search_s > 0 else float("inf")
    result.update({
        "phases": phases,
        "total_s": sum(phases[p]["median_s"] for p in _TOTAL_PHASES),
        "checks": qset.n_sets * n_tokens,
        "throughput_checks_per_s": qset.n_sets * n_tokens / search_s if search_s > 0 else float("inf"),
        "baselines": baseline_results,
        "routing": routing,
    })
    _write_json(out_path, result)
    print(format_table(result))
    print(f"written: {out_path}")
    return result


def _write_json(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, path)


def format_table(result: dict) -> str:
    """The printed summary of a result (one table: phases, then baselines)."""
    c = result["corpus"]
    env = result["environment"]
    device = env.get("gpu") or f"{env.get('cpus_visible')} CPU(s)"
    lines = [
        f"settopk bench {result['config']}: {c['n_docs']:,} docs ({c['n_tokens']:,} ids), {c['n_queries']:,} queries, "
        f"k={result['settings']['k']} | backend {result['backend']}, {len(result['shards'])} shard(s) | {device}",
        f"{'phase':<14}{'median_s':>12}{'min_s':>12}",
    ]
    for p, stats in result["phases"].items():
        lines.append(f"{p:<14}{stats['median_s']:>12.4f}{stats['min_s']:>12.4f}")
    lines.append(f"{'total':<14}{result['total_s']:>12.4f}{'':>12}  (read + build + search_rpc + merge + write)")
    lines.append(f"throughput: {result['throughput_checks_per_s']:.3e} query-token checks/s "
                 f"({result['checks']:.3e} checks in the search median)")
    for i, r in enumerate(result.get("routing", [])):
        last = r["last"]
        mix = ", ".join(f"{p} {last[p]}" for p in ("scan", "postings", "scancount", "prefix", "fallback") if p in last)
        times = ", ".join(f"{p} {last[p] * 1e3:.2f} ms" for p in ("scan_s", "postings_s") if p in last)
        lines.append(f"routing {r['routing']} (shard {i}): {mix}" + (f" | GPU time per path {times}" if times else "")
                     + f" | postings {r['postings_bytes'] / 2**20:.1f} MiB = {r['postings_bytes'] / max(1, r['docs_bytes']):.2f}x"
                     f" the docs' {r['docs_bytes'] / 2**20:.1f} MiB")
    if result["baselines"]:
        lines.append(f"{'baseline':<14}{'build_s':>12}{'search_s':>12}{'search_min_s':>14}{'settopk_x':>11}")
        for name, b in result["baselines"].items():
            if "skipped" in b:
                lines.append(f"{name:<14}  {b['skipped']}")
                continue
            lines.append(f"{name:<14}{b['build']['median_s']:>12.4f}{b['search']['median_s']:>12.4f}"
                         f"{b['search']['min_s']:>14.4f}{b['speedup']:>10.1f}x")
    ex = result["exactness"]
    lines.append(f"exact: {len(ex['sample'])} sampled queries identical to the NumPy reference for "
                 f"{', '.join(ex['checked'])}")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Entry point of ``python -m jobs.bench``; returns the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s settopk %(levelname)s %(message)s", stream=sys.stderr)
    try:
        run(args)
    except (InputError, configs.ConfigError) as exc:
        log.error("%s", exc)
        return _EXIT_BAD_INPUT
    except ExactnessError as exc:
        log.error("no timings printed: %s", exc)
        return _EXIT_MISMATCH
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
