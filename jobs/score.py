"""The scoring job: exact top-k Braun-Blanquet search from a corpus to Parquet.

``python -m jobs.score --docs PATH --queries PATH --out DIR [--k 100] [--config NAME|FILE] [--tsv FILE]``

The driver validates every input before any actor starts, plans length-bucket
shards, starts one Ray actor per shard (each reads its own docs from the
corpus), sends query batches to all of them, merges the shard-local top-k lists
exactly and writes the result dataset atomically. With no ``--docs/--queries``
it runs on the config's synthetic corpus.

Exit codes: 0 done (or the output was already complete), 2 bad input, config or
output path (nothing written), 1 any other failure (nothing written).
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
import time
from dataclasses import dataclass

import numpy as np

import configs
from kernels import SetBatch, TopK
from shards import InputError, SetLimits, ShardActor, merge_topk, plan_shards, read_corpus, read_queries

from .output import OutputExistsError, check_output_dir, results_table, write_results, write_tsv

__all__ = ["main", "build_parser"]

log = logging.getLogger("settopk")
_EXIT_BAD_INPUT = 2
_IN_FLIGHT_BATCHES = 2  # per actor: one searching, one queued, so the GPU never waits on the driver


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of ``jobs.score``."""
    p = argparse.ArgumentParser(
        prog="python -m jobs.score",
        description="Exact top-k Braun-Blanquet set-overlap search; results as a Parquet dataset.",
    )
    p.add_argument("--docs", help="corpus: STI2 docs.txt, or a Parquet file/directory (doc_id, tokens)")
    p.add_argument("--queries", help="queries: a directory of one-query files, a text file, or Parquet (query_id, tokens)")
    p.add_argument("--out", default="out/settopk-results", help="result dataset directory (default: %(default)s)")
    p.add_argument("--k", type=int, help="results per query (default: the config's k, 100)")
    p.add_argument("--config", default="local", help=f"config name {configs.config_names()} or YAML path (default: %(default)s)")
    p.add_argument("--tsv", help="also write the competition's TSV result file here")
    p.add_argument("--dry-run", action="store_true", help="validate inputs, print the shard plan, and exit")
    p.add_argument("--force", action="store_true", help="recompute even if --out already holds a finished result")
    p.add_argument("--quiet", action="store_true", help="no progress bar; warnings and errors only")
    return p


@dataclass
class _Inputs:
    docs_path: str
    queries_path: str
    synthetic: bool


def _resolve_inputs(args, cfg: configs.JobConfig) -> _Inputs:
    if (args.docs is None) != (args.queries is None):
        raise InputError("give both --docs and --queries, or neither (to run on the config's synthetic corpus)")
    if args.docs is not None:
        return _Inputs(args.docs, args.queries, synthetic=False)
    from .synthetic import SyntheticSpec, ensure_synthetic

    s = cfg.synthetic
    spec = SyntheticSpec(
        n_docs=s.n_docs,
        n_queries=s.n_queries,
        seed=s.seed,
        vocab_size=s.vocab_size,
        id_dist=s.id_dist,
        zipf_s=s.zipf_s,
        near_duplicate_fraction=s.near_duplicate_fraction,
        max_len=cfg.max_len,
    )
    log.info("no --docs/--queries: using the synthetic corpus %s (generated once into %s)", spec, s.cache_dir)
    docs, queries = ensure_synthetic(spec, _expand(s.cache_dir))
    return _Inputs(str(docs), str(queries), synthetic=True)


def _expand(path: str) -> str:
    import os

    return os.path.expanduser(path)


def _resolve_backend(cfg: configs.JobConfig, resources: dict) -> tuple[str, int]:
    """Backend and shard count, checked against the cluster before any actor starts."""
    n_gpus = float(resources.get("GPU", 0))
    n_cpus = float(resources.get("CPU", 0))
    backend = cfg.backend
    if backend == "auto":
        backend = "cupy" if n_gpus > 0 else "numpy"
        log.info("backend auto: %s (the Ray cluster has %g GPU(s))", backend, n_gpus)
    if backend == "cupy" and n_gpus == 0:
        raise InputError(
            f"config asks for backend 'cupy' but the Ray cluster has no GPU (resources: {resources}); "
            "run on a GPU cluster or use a config with backend 'numpy' or 'auto'"
        )
    if cfg.n_shards == "auto":
        if backend == "cupy":
            n_shards = max(1, int(n_gpus / cfg.gpus_per_shard))
        else:
            n_shards = max(1, int(n_cpus / cfg.cpus_per_shard) if cfg.cpus_per_shard else int(n_cpus))
    else:
        n_shards = int(cfg.n_shards)
    need_gpus = n_shards * cfg.gpus_per_shard if backend == "cupy" else 0
    if need_gpus > n_gpus + 1e-9 or n_shards * cfg.cpus_per_shard > n_cpus + 1e-9:
        raise InputError(
            f"{n_shards} shards need {need_gpus:g} GPU(s) and {n_shards * cfg.cpus_per_shard:g} CPU(s), "
            f"the Ray cluster has {n_gpus:g} and {n_cpus:g}; lower n_shards or the per-shard resources"
        )
    return backend, n_shards


def _versions() -> dict:
    import pyarrow
    import ray

    out = {"python": platform.python_version(), "numpy": np.__version__, "pyarrow": pyarrow.__version__, "ray": ray.__version__}
    try:
        from importlib.metadata import version

        out["settopk"] = version("settopk")
    except Exception:  # running from a source tree that was not installed
        out["settopk"] = "source"
    return out


def _search(actors, queries: SetBatch, k: int, max_len: int, batch_size: int, quiet: bool) -> tuple[TopK, float]:
    """Send query batches to every shard, merge each batch exactly as it completes."""
    import ray
    from tqdm import tqdm

    n = queries.n_sets
    starts = list(range(0, n, batch_size))
    merged: dict[int, TopK] = {}
    pending: dict = {}  # batch start -> list of refs
    merge_s = 0.0
    bar = tqdm(total=n, unit="query", desc="search", disable=quiet, file=sys.stderr)
    next_batch = 0
    while next_batch < len(starts) or pending:
        while next_batch < len(starts) and len(pending) < _IN_FLIGHT_BATCHES:
            lo = starts[next_batch]
            batch = queries.take(np.arange(lo, min(lo + batch_size, n)))
            ref = ray.put(batch)
            pending[lo] = [a.search.remote(ref, k) for a in actors]
            next_batch += 1
        lo = min(pending)  # oldest batch first keeps the driver's memory bounded
        parts = ray.get(pending.pop(lo))
        t = time.perf_counter()
        hi = min(lo + batch_size, n)
        merged[lo] = merge_topk(parts, queries.lengths[lo:hi], k, max_len)
        merge_s += time.perf_counter() - t
        bar.update(hi - lo)
    bar.close()
    blocks = [merged[lo] for lo in starts]
    return TopK(*(np.concatenate([getattr(b, f) for b in blocks]) for f in TopK._fields)), merge_s


def run(args) -> int:
    """Run the job for parsed arguments; returns the exit code."""
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    overrides = {"k": args.k} if args.k is not None else {}
    cfg = configs.load_config(args.config, overrides)
    if not args.dry_run and check_output_dir(args.out, args.force):
        log.info("%s already holds a finished result; nothing to do (use --force to recompute)", args.out)
        return 0
    inputs = _resolve_inputs(args, cfg)
    limits = SetLimits(vocab_size=cfg.vocab_size, max_len=cfg.max_len)

    t = time.perf_counter()
    queries = read_queries(inputs.queries_path, limits)
    corpus = read_corpus(inputs.docs_path, limits)
    timings["validate_s"] = time.perf_counter() - t
    if corpus.docs.n_sets == 0:
        raise InputError(f"{inputs.docs_path}: the corpus has no docs; expected at least one")
    if queries.queries.n_sets == 0:
        raise InputError(f"{inputs.queries_path}: no queries found; expected at least one")
    doc_lengths = corpus.docs.lengths
    n_docs, doc_repeats, doc_files, doc_fmt = corpus.docs.n_sets, corpus.n_with_repeats, corpus.files, corpus.fmt
    del corpus  # the driver only needed the lengths: actors read their own docs
    log.info(
        "inputs valid: %d docs (%d with repeated ids) from %s; %d queries (%d with repeated ids) from %s",
        n_docs, doc_repeats, inputs.docs_path, queries.queries.n_sets, queries.n_with_repeats, inputs.queries_path,
    )

    import ray

    if not ray.is_initialized():
        ray.init()  # no address: attaches to the cluster under `ray job submit`, else starts a local one
    backend, n_shards = _resolve_backend(cfg, ray.cluster_resources())
    plan = plan_shards(doc_lengths, n_shards, cfg.max_len)
    lines = _plan_lines(plan, backend, cfg, n_docs, queries.queries.n_sets)
    if args.dry_run:
        print("\n".join(lines))
        return 0
    for line in lines:
        log.info("%s", line)

    actors = []
    try:
        t = time.perf_counter()
        options = {"num_cpus": cfg.cpus_per_shard, "num_gpus": cfg.gpus_per_shard if backend == "cupy" else 0}
        actors = [ShardActor.options(**options).remote(spec, inputs.docs_path, limits, backend) for spec in plan]
        infos = ray.get([a.info.remote() for a in actors])
        timings["load_s"] = time.perf_counter() - t

        t = time.perf_counter()
        topk, merge_s = _search(actors, queries.queries, cfg.k, cfg.max_len, cfg.query_batch_size, args.quiet)
        timings["search_s"] = time.perf_counter() - t - merge_s
        timings["merge_s"] = merge_s
        infos = ray.get([a.info.remote() for a in actors])
    finally:
        for a in actors:
            ray.kill(a)

    t = time.perf_counter()
    table = results_table(queries.query_ids, queries.queries.lengths, topk)
    timings["total_s"] = time.perf_counter() - t0  # updated below; the manifest needs a value
    manifest = {
        "job": "settopk.score",
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "inputs": {
            "docs": {"path": inputs.docs_path, "format": doc_fmt, "files": list(doc_files), "synthetic": inputs.synthetic},
            "queries": {"path": inputs.queries_path, "format": queries.fmt, "files_count": len(queries.files)},
        },
        "counts": {
            "n_docs": n_docs,
            "n_queries": queries.queries.n_sets,
            "k": cfg.k,
            "rows": table.num_rows,
            "docs_with_repeated_ids": doc_repeats,
            "queries_with_repeated_ids": queries.n_with_repeats,
        },
        "backend": backend,
        "shards": [{**spec.to_dict(), **info} for spec, info in zip(plan, infos)],
        "config": cfg.to_dict(),
        "timings_s": {key: round(v, 4) for key, v in timings.items()},
        "versions": _versions(),
    }
    write_results(args.out, table, manifest)
    if args.tsv:
        write_tsv(args.tsv, topk)
    timings["write_s"] = time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - t0
    log.info(
        "done: %d queries x %d docs, k=%d, %d rows -> %s | backend %s, %d shard(s) | %s",
        queries.queries.n_sets, n_docs, cfg.k, table.num_rows, args.out, backend, len(plan),
        " ".join(f"{key}={timings[key]:.3f}" for key in ("validate_s", "load_s", "search_s", "merge_s", "write_s", "total_s")),
    )
    return 0


def _plan_lines(plan, backend: str, cfg: configs.JobConfig, n_docs: int, n_queries: int) -> list[str]:
    lines = [f"plan: {n_docs} docs, {n_queries} queries, k={cfg.k}, backend {backend}, {len(plan)} shard(s)"]
    for s in plan:
        lines.append(f"  shard {s.shard_id}: lengths {s.min_len}..{s.max_len}, {s.n_docs} docs, {s.n_tokens} ids")
    return lines


def main(argv=None) -> int:
    """Entry point of ``python -m jobs.score`` and ``settopk-score``; returns the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s settopk %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        return run(args)
    except (InputError, configs.ConfigError, OutputExistsError) as exc:
        log.error("%s", exc)
        return _EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
