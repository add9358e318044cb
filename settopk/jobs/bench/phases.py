"""The phase run of the benchmark: every phase of a search timed, against the baselines, exactly checked.

Run by ``python -m settopk bench --config sti2-zipf`` (or any config without a
``scaling`` or ``throughput`` section). One Ray actor per length-bucket shard
(:mod:`settopk.jobs.bench.shard`); each phase runs ``warmup`` times untimed, then
``repetitions`` times timed:

* ``read``: reader tasks decode the corpus pieces (``settopk.shards.reading``), then every
  actor takes its length range from the object store (``settopk.shards.searcher.load_shard``);
* ``build``: each actor builds its index from the docs in host memory (for the
  cupy backend: host memory to the GPU layout, GPU work included);
* ``search``: every query against every shard, timed inside the actors (data
  resident, from host queries to host results; the slowest shard counts), and
  ``search_rpc``, the same seen from the driver (Ray transport included);
* ``merge``: the exact merge of the shard lists in the driver;
* ``write``: the result table and its Parquet dataset (``settopk.jobs.output``).

Phases of several actors run in parallel; a phase's time is the slowest
actor's. ``total`` is the sum of the medians of read, build, search_rpc, merge
and write: the job from Parquet on disk to Parquet written (the reader tasks
validate the corpus as they decode it), without Ray's start and the actors' own start.

Baselines (:mod:`settopk.jobs.bench.baselines`) are built and searched in the same actors, on
the same docs and queries, with the same warm-up and ``baseline_repetitions``
timed repetitions (default: ``repetitions``). Then the results of the backend and
of every baseline are compared with the NumPy reference on a seeded sample of
queries (for ``sparse_dot_topn``, which keeps its own docs among ties at the k-th
score, the multiset of scores per query); any difference raises
:class:`settopk.jobs.bench.common.ExactnessError` (with the result to write: the
mismatches, no timings).

Last, the backend's search is timed again (same warm-up and repetitions) with each
score of ``compare_scores`` and, where ``compare_routings`` is set, with the config's
routing and each of those, an index built for each in the same actors, one after
another (the config's own score and routing afresh too, so that the ratios compare
runs taken back to back), each checked against the NumPy reference for its score:
the result's ``scores`` (with each score's ratio to ``overlap``'s search time) and
``routings`` (with the ratio to ``scan``'s), each with its checks per second. With
``peak_checks_per_s``, ``peak`` gives the ratio of the scan's checks per second
(routing ``scan`` where ``compare_routings`` times it, else the config's routing) to
that estimate, and the estimate's basis.
"""

from __future__ import annotations

import logging
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from settopk.jobs.output import results_table, write_results
from settopk.jobs.cluster import resolve_backend
from settopk.kernels import TopK, score_definition
from settopk.shards.inputs import QueryStream, SetLimits, read_queries

from .baselines import BASELINES
from .common import (
    ExactnessError,
    compare_scores,
    compare_topk,
    load_shards,
    merge_batches,
    reference_topk,
    repeat,
    timing_stats,
    verify_sample,
)
from .config import BenchConfig

__all__ = ["PHASES", "TOTAL_PHASES", "format_phases_table", "resolve_baselines", "run_phases"]

log = logging.getLogger("settopk.bench")

#: The timed phases, in the result's order.
PHASES = ("read", "build", "search", "search_rpc", "merge", "write")
#: The phases whose medians add up to ``total_s``.
TOTAL_PHASES = ("read", "build", "search_rpc", "merge", "write")


def resolve_baselines(names: list[str], backend: str) -> list[str]:
    """The baselines to run: ``auto`` expanded for the backend's device, repeats dropped, order kept."""
    out = []
    for name in names:
        expanded = (["spmm", "popc4"] if backend == "cupy" else ["scipy"]) if name == "auto" else [name]
        out += [n for n in expanded if n not in out]
    return out


def run_phases(cfg: BenchConfig, name: str, docs_path: Path, queries_path: Path) -> dict:
    """Time every phase of the search of ``queries_path`` in ``docs_path``, then the baselines.

    Parameters
    ----------
    cfg : BenchConfig
        Without a ``scaling`` or ``throughput`` section.
    name : str
        The config's name, for the result.
    docs_path, queries_path : pathlib.Path
        The generated corpus and queries (Parquet).

    Returns
    -------
    dict
        The result (the caller writes it as JSON and prints :func:`format_phases_table`).

    Raises
    ------
    settopk.shards.inputs.InputError
        If the cluster lacks the resources, or the inputs are not valid.
    ExactnessError
        If a result differs from the NumPy reference; its ``result`` holds the mismatches
        and no timings.
    """
    import ray

    limits = SetLimits(vocab_size=cfg.vocab_size, max_len=cfg.max_len)
    queries = read_queries(str(queries_path), limits)
    qset = queries.queries

    if not ray.is_initialized():
        ray.init()
    backend, n_shards = resolve_backend(cfg, ray.cluster_resources())
    stream = QueryStream(str(queries_path), limits)  # its counts give the token map, as in the job
    plan, actors, read_once = load_shards(docs_path, limits, backend, n_shards, cfg, queries=stream)
    baselines = resolve_baselines(cfg.baselines, backend)
    n_docs, n_tokens = sum(sp.n_docs for sp in plan), sum(sp.n_tokens for sp in plan)
    log.info("bench %s: %d docs, %d ids, %d queries, k=%d, score %s, backend %s, %d shard(s), baselines %s",
             name, n_docs, n_tokens, qset.n_sets, cfg.k, cfg.score, backend, len(plan), baselines)
    batch = cfg.query_batch_size or max(1, qset.n_sets)
    starts = list(range(0, qset.n_sets, batch))
    warmup, reps = cfg.warmup, cfg.repetitions

    work_dir = Path(tempfile.mkdtemp(prefix="settopk bench-"))
    try:
        environment = ray.get(actors[0].environment.remote())
        runs: dict[str, list[float]] = {}
        runs["read"] = repeat(read_once, warmup, reps)
        if stream.token_map is not None:  # token values: the read mapped the docs, the same map takes the queries
            qset = stream.token_map.queries(queries.queries)
        batch_refs = [ray.put(qset.take(np.arange(lo, min(lo + batch, qset.n_sets)))) for lo in starts]
        runs["build"] = repeat(lambda: max(ray.get([a.build.remote() for a in actors])), warmup, reps)

        last: dict = {}

        def search(method: str, *args) -> tuple[float, float, list[list[TopK]]]:
            """One pass of every batch over every shard (``method(batch, k, *args)``): (slowest shard's seconds,
            driver seconds, shard lists)."""
            start = time.perf_counter()
            pending = [[getattr(a, method).remote(ref, cfg.k, *args) for a in actors] for ref in batch_refs]
            answers = [ray.get(p) for p in pending]
            wall = time.perf_counter() - start
            shard_s = [sum(answers[b][i][0] for b in range(len(starts))) for i in range(len(actors))]
            return max(shard_s), wall, [[topk for _, topk in answer] for answer in answers]

        def search_once() -> float:
            shard_s, wall, last["shard_lists"] = search("search")
            runs.setdefault("search_rpc", []).append(wall)
            return shard_s

        runs["search"] = repeat(search_once, warmup, reps)
        runs["search_rpc"] = runs["search_rpc"][warmup:]
        routing = ray.get([a.routing_stats.remote() for a in actors])  # of the last timed search
        log.info("routing of the last search, per shard: %s", routing)

        def merge_once() -> float:
            start = time.perf_counter()
            last["topk"] = merge_batches(last["shard_lists"], qset.lengths, starts, batch, cfg)
            return time.perf_counter() - start

        runs["merge"] = repeat(merge_once, warmup, reps)
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

        runs["write"] = repeat(write_once, warmup, reps)

        # The reference on a seeded sample, per shard, merged like the backend's lists.
        sample = verify_sample(cfg, qset.n_sets)
        t = time.perf_counter()
        reference = reference_topk(actors, qset, sample, cfg)
        log.info("NumPy reference for %d sampled queries in %.1f s", len(sample), time.perf_counter() - t)
        mismatches = compare_topk("settopk", topk, reference, sample)
        checked = ["settopk"]
        scores_checked: list[str] = []  # baselines whose ids may differ among ties: score multisets checked

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
            build_runs = repeat(lambda: max(ray.get([a.baseline_build.remote(bname) for a in actors])),
                                max(0, warmup - 1), base_reps)  # the build above was the first warm-up

            def baseline_once() -> float:
                shard_s, _, last["baseline_lists"] = search("baseline_search")
                return shard_s

            base_runs = repeat(baseline_once, warmup, base_reps)
            merged = merge_batches(last["baseline_lists"], qset.lengths, starts, batch, cfg)
            baseline_results[bname] = {"build": timing_stats(build_runs), "search": timing_stats(base_runs)}
            if BASELINES[bname].exact_ids:
                mismatches += compare_topk(bname, merged, reference, sample)
                checked.append(bname)
            else:
                differ, ids_differ = compare_scores(bname, merged, reference, sample, qset.lengths, cfg)
                mismatches += differ
                scores_checked.append(bname)
                baseline_results[bname]["ids_differ_on_ties"] = ids_differ
            ray.get([a.baseline_free.remote() for a in actors])
            log.info("baseline %s: search median %.4f s", bname, statistics.median(base_runs))

        # Every variant is timed afresh, the config's own score and routing too, and the variants take
        # turns, a search each, so that a slow moment of the machine falls on all of them alike: the
        # ratios compare searches taken side by side. Their indexes are all held meanwhile.
        pairs = list(dict.fromkeys([(s, cfg.routing) for s in cfg.compare_scores] + [
            (cfg.score, r) for r in ([cfg.routing] + cfg.compare_routings if cfg.compare_routings else [])]))
        timed: dict[tuple[str, str], dict] = {}
        if pairs:
            ray.get([a.variant_build.remote(*pair) for pair in pairs for a in actors])
            variant_runs: dict[tuple[str, str], list[float]] = {pair: [] for pair in pairs}
            for rep in range(warmup + reps):
                for pair in pairs:
                    shard_s, _, last[pair] = search("variant_search", *pair)
                    if rep >= warmup:
                        variant_runs[pair].append(shard_s)
            for pair in pairs:
                v_score, v_routing = pair
                mix = ray.get([a.variant_routing.remote(*pair) for a in actors])
                want = reference if v_score == cfg.score else reference_topk(actors, qset, sample, cfg, v_score)
                got = merge_batches(last[pair], qset.lengths, starts, batch, cfg, v_score)
                label = f"settopk[{v_score}, {v_routing}]"
                mismatches.extend(compare_topk(label, got, want, sample))
                checked.append(label)
                log.info("backend %s, score %s, routing %s: search median %.4f s", backend, v_score, v_routing,
                         statistics.median(variant_runs[pair]))
                timed[pair] = {"search": timing_stats(variant_runs[pair]), "routing_last": mix}
            ray.get([a.variant_free.remote() for a in actors])
        score_runs = {s: timed[(s, cfg.routing)] for s in cfg.compare_scores}
        routing_runs = {r: timed[(cfg.score, r)] for r in ([cfg.routing] + cfg.compare_routings if cfg.compare_routings else [])}
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
                   "n_queries": qset.n_sets, "query_tokens": int(len(qset.tokens)),
                   "tokens": None if stream.token_map is None else stream.token_map.summary()},
        "backend": backend,
        "shards": [sp.to_dict() for sp in plan],
        "exactness": {"reference": "settopk.kernels.NumpyShardIndex", "sample": sample.tolist(), "checked": checked,
                      "scores_checked": scores_checked, "identical": not mismatches, "mismatches": mismatches},
    }
    if mismatches:
        raise ExactnessError(mismatches, result)
    phases = {p: timing_stats(runs[p]) for p in PHASES}
    search_s = phases["search"]["median_s"]
    for entry in baseline_results.values():
        if "search" in entry:
            entry["speedup"] = entry["search"]["median_s"] / search_s if search_s > 0 else float("inf")
    throughput = qset.n_sets * n_tokens / search_s if search_s > 0 else float("inf")
    result.update({
        "phases": phases,
        "total_s": sum(phases[p]["median_s"] for p in TOTAL_PHASES),
        "checks": qset.n_sets * n_tokens,
        "throughput_checks_per_s": throughput,
        "baselines": baseline_results,
        "routing": routing,
    })
    checks = qset.n_sets * n_tokens
    for entry in list(score_runs.values()) + list(routing_runs.values()):
        median = entry["search"]["median_s"]
        entry["checks_per_s"] = checks / median if median > 0 else float("inf")
    if cfg.peak_checks_per_s:
        # The estimate is of the scan's counting: compare the scan's rate where it was timed (postings
        # routes count far fewer pairs than queries x doc ids, so their rate is no measure of it).
        peak_routing = "scan" if "scan" in routing_runs else cfg.routing
        measured = routing_runs["scan"]["checks_per_s"] if "scan" in routing_runs else throughput
        result["peak"] = {"checks_per_s": cfg.peak_checks_per_s, "basis": cfg.peak_basis, "routing": peak_routing,
                          "measured_checks_per_s": measured, "ratio": measured / cfg.peak_checks_per_s}
    if score_runs:
        base = score_runs.get("overlap", {}).get("search", {}).get("median_s")
        for entry in score_runs.values():
            entry["ratio_to_overlap"] = entry["search"]["median_s"] / base if base else None
        result["scores"] = score_runs
    if routing_runs:
        scan = routing_runs.get("scan", {}).get("search", {}).get("median_s")
        for entry in routing_runs.values():
            entry["ratio_to_scan"] = entry["search"]["median_s"] / scan if scan else None
        result["routings"] = routing_runs
    return result


def format_phases_table(result: dict) -> str:
    """The printed summary of a phase run's result (one table: phases, then baselines)."""
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
        mix = ", ".join(f"{p} {last[p]}" for p in ("scan", "postings", "scancount", "prefix", "filled") if p in last)
        times = ", ".join(f"{p} {last[p] * 1e3:.2f} ms" for p in ("scan_s", "postings_s") if p in last)
        lines.append(f"routing {r['routing']} (shard {i}): {mix}" + (f" | GPU time per path {times}" if times else "")
                     + f" | postings {r['postings_bytes'] / 2**20:.1f} MiB = {r['postings_bytes'] / max(1, r['docs_bytes']):.2f}x"
                     f" the docs' {r['docs_bytes'] / 2**20:.1f} MiB"
                     + (f" | GPU index {r['index_bytes'] / 2**20:.1f} MiB = {r['index_bytes'] / max(1, r['n_docs']):.1f}"
                        " bytes per doc" if r.get("index_bytes") else ""))
    if "peak" in result:
        peak = result["peak"]
        lines.append(f"throughput with routing {peak['routing']}: {peak['measured_checks_per_s']:.3e} checks/s = "
                     f"{peak['ratio']:.2f} x the estimate {peak['checks_per_s']:.2e} checks/s ({peak['basis']})")
    for key, label, ratio in (("scores", "score", "ratio_to_overlap"), ("routings", "routing", "ratio_to_scan")):
        if key in result:
            lines.append(f"{label:<16}{'search_s':>12}{'min_s':>12}{ratio:>18}{'checks/s':>12}")
            for name, entry in result[key].items():
                r = entry.get(ratio)
                lines.append(f"{name:<16}{entry['search']['median_s']:>12.4f}{entry['search']['min_s']:>12.4f}"
                             + (f"{r:>17.2f}x" if r is not None else f"{'-':>18}") + f"{entry['checks_per_s']:>12.2e}")
    if result["baselines"]:
        lines.append(f"{'baseline':<20}{'build_s':>12}{'search_s':>12}{'search_min_s':>14}{'settopk_x':>11}")
        for name, b in result["baselines"].items():
            if "skipped" in b:
                lines.append(f"{name:<20}  {b['skipped']}")
                continue
            lines.append(f"{name:<20}{b['build']['median_s']:>12.4f}{b['search']['median_s']:>12.4f}"
                         f"{b['search']['min_s']:>14.4f}{b['speedup']:>10.1f}x")
    ex = result["exactness"]
    lines.append(f"exact: {len(ex['sample'])} sampled queries identical to the NumPy reference for "
                 f"{', '.join(ex['checked'])}")
    for name in ex.get("scores_checked", []):
        differ = result["baselines"][name]["ids_differ_on_ties"]
        lines.append(f"equal scores: {name}: the multiset of scores of every sampled query identical to the "
                     f"reference's; doc ids differ in {differ} of {len(ex['sample'])} queries, only among docs tied "
                     "at the k-th score (the library keeps its own)")
    return "\n".join(lines)
