"""The scoring job: exact top-k Braun-Blanquet search from a corpus to Parquet.

``python -m jobs.score --docs PATH --queries PATH --out DIR [--k 100] [--config NAME|FILE] [--tsv FILE]``
``python -m jobs.score --config nightly --docs PATH --queries PATH --out ROOT [--date YYYY-MM-DD]``

The driver validates every input before any actor starts, plans length-bucket
shards, starts one Ray actor per shard (each reads its own docs from the
corpus), sends query batches to all of them, merges the shard-local top-k lists
exactly and writes the result dataset atomically. With no ``--docs/--queries``
it runs on the config's synthetic corpus. With a config whose
``output.partition`` is ``dt`` (``nightly``), ``--out`` is a dataset root and
the run writes ``ROOT/dt=YYYY-MM-DD/``.

Exit codes: 0 done (or the output was already complete), 2 bad input, config,
arguments or output path (nothing written), 1 any other failure (nothing written).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import logging
import os
import platform
import re
import socket
import sys
import time
import uuid
from dataclasses import dataclass

import numpy as np

import configs
from kernels import SetBatch, TopK
from shards import InputError, SetLimits, ShardActor, merge_topk, plan_shards, read_corpus, read_queries

from .output import (
    OutputExistsError,
    check_dataset_root,
    check_output_dir,
    partition_dir,
    results_table,
    write_results,
    write_tsv,
)

__all__ = ["main", "build_parser", "run", "fingerprint", "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT"]

log = logging.getLogger("settopk")
EXIT_OK = 0
"""Done, or ``--out`` already held a finished result (nothing to do)."""
EXIT_FAILED = 1
"""Any failure other than bad input (cluster, actor, disk); nothing was written."""
EXIT_BAD_INPUT = 2
"""Bad input, config, arguments or output path; nothing was written, a rerun fails the same way."""
_IN_FLIGHT_BATCHES = 2  # per actor: one searching, one queued, so the GPU never waits on the driver
_ACTOR_RESTARTS = 2  # a shard actor that dies (node lost, worker killed) is restarted and reloads its shard
_BAR_DELAY_S = 2.0  # local bars appear only for phases longer than this, so short runs stay quiet
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


class UsageError(ValueError):
    """Command-line arguments that do not fit together or with the config."""


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of ``jobs.score``."""
    p = argparse.ArgumentParser(
        prog="python -m jobs.score",
        description="Exact top-k Braun-Blanquet set-overlap search; results as a Parquet dataset.",
    )
    p.add_argument("--docs", help="corpus: STI2 docs.txt, or a Parquet file/directory (doc_id, tokens)")
    p.add_argument("--queries", help="queries: a directory of one-query files, a text file, or Parquet (query_id, tokens)")
    p.add_argument(
        "--out", default="out/settopk-results",
        help="result dataset directory; with a partitioned config (nightly) the dataset root (default: %(default)s)",
    )
    p.add_argument("--k", type=int, help="results per query (default: the config's k, 100)")
    p.add_argument("--config", default="local", help=f"config name {configs.config_names()} or YAML path (default: %(default)s)")
    p.add_argument("--tsv", help="also write the competition's TSV result file here")
    p.add_argument("--dry-run", action="store_true", help="validate inputs, print the shard plan, and exit")
    p.add_argument("--force", action="store_true", help="recompute even if --out already holds a finished result")
    p.add_argument("--quiet", action="store_true", help="no progress bars; warnings and errors only (for schedulers)")
    p.add_argument(
        "--date", type=_iso_date, metavar="YYYY-MM-DD",
        help="partition date of a partitioned config (nightly): writes OUT/dt=YYYY-MM-DD/ (default: today in UTC)",
    )
    p.add_argument(
        "--run-id", type=_run_id_arg,
        help="id recorded in the manifest and Parquet metadata (default: the Ray job's submission id, else a new one)",
    )
    return p


def _iso_date(text: str) -> datetime.date:
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%d").date()
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, found {text!r}") from None


def _run_id_arg(text: str) -> str:
    if not _RUN_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected 1-128 letters, digits, '.', '_', ':' or '-' (starting with a letter or digit), found {text!r}"
        )
    return text


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
    docs, queries = ensure_synthetic(spec, os.path.expanduser(s.cache_dir))
    return _Inputs(str(docs), str(queries), synthetic=True)


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


def _ray_submission_id() -> str | None:
    """The submission id when this driver runs under ``ray job submit`` (or a KubeRay RayJob), else None."""
    # Ray's job supervisor hands the driver its job config, metadata included, in this variable.
    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return None
    try:
        return json.loads(raw).get("metadata", {}).get("job_submission_id") or None
    except (ValueError, AttributeError):
        return None


def _new_run_id(now: datetime.datetime) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def fingerprint(files, base: str) -> dict:
    """A cheap fingerprint of input files: SHA-256 over each file's name, size and mtime.

    Parameters
    ----------
    files : sequence of str
        The files read, in the order read.
    base : str
        The input path given; names are taken relative to it when it is a
        directory, so moving the whole input keeps the fingerprint.

    Returns
    -------
    dict
        ``sha256`` (hex), ``files`` (count), ``bytes`` (total size) and ``method``.
        Reading no content keeps this instant at corpus scale; a copy that keeps
        modification times (``cp -p``, ``rsync -a``) keeps the fingerprint, and an
        edit that changes neither size nor mtime goes unnoticed.
    """
    h = hashlib.sha256()
    total_bytes = 0
    for f in files:
        st = os.stat(f)
        name = os.path.relpath(f, base) if os.path.isdir(base) else os.path.basename(f)
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        total_bytes += st.st_size
    return {"method": "sha256(name, size_bytes, mtime_ns per file)", "sha256": h.hexdigest(), "files": len(files), "bytes": total_bytes}


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(desc: str, total: int, unit: str, quiet: bool):
    """A progress bar for one phase.

    Under a Ray job the driver's output goes to the job log, so the bar is Ray's
    ``tqdm_ray`` (updates rate-limited to one a second); locally it is plain tqdm
    on stderr, shown only once the phase has run for ``_BAR_DELAY_S``.
    """
    if quiet:
        return _NoBar()
    if _ray_submission_id() is not None:
        from ray.experimental.tqdm_ray import tqdm as ray_tqdm

        return ray_tqdm(desc=desc, total=total, unit=unit)
    from tqdm import tqdm

    return tqdm(desc=desc, total=total, unit=unit, file=sys.stderr, delay=_BAR_DELAY_S, dynamic_ncols=True)


@contextlib.contextmanager
def _phase(name: str, timings: dict):
    """Time a phase into ``timings[name + '_s']`` and log it when it ends."""
    t = time.perf_counter()
    yield
    timings[f"{name}_s"] = time.perf_counter() - t
    log.info("phase %s: %.3f s", name, timings[f"{name}_s"])


def _load(actors, quiet: bool) -> list[dict]:
    """Wait for every shard actor to hold its docs; returns their ``info()`` in actor order."""
    import ray

    refs = [a.info.remote() for a in actors]
    bar = _bar("load", len(refs), "shard", quiet)
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        ray.get(done)  # raises here if a shard failed to load
        bar.update(len(done))
    bar.close()
    return ray.get(refs)


def _search(actors, queries: SetBatch, k: int, max_len: int, batch_size: int, quiet: bool) -> tuple[TopK, float]:
    """Send query batches to every shard, merge each batch exactly as it completes."""
    import ray

    n = queries.n_sets
    starts = list(range(0, n, batch_size))
    merged: dict[int, TopK] = {}
    pending: dict = {}  # batch start -> list of refs
    merge_s = 0.0
    bar = _bar("search", n, "query", quiet)
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


@dataclass
class _Target:
    out_dir: str  # where this run's result goes
    dataset_root: str  # what readers scan: out_dir itself, or the root of the dt= partitions
    day: datetime.date | None  # the partition date, for a partitioned config


def _target(args, cfg: configs.JobConfig, now: datetime.datetime) -> _Target:
    if cfg.output.partition == "dt":
        day = args.date or now.date()  # `now` is UTC: the partition of a run is its UTC day
        return _Target(str(partition_dir(args.out, day)), args.out, day)
    if args.date is not None:
        raise UsageError(
            f"--date {args.date.isoformat()} needs a config whose output.partition is 'dt' "
            f"(config {args.config!r} writes --out directly); use --config nightly or drop --date"
        )
    return _Target(args.out, args.out, None)


def run(args) -> int:
    """Run the job for parsed arguments.

    Parameters
    ----------
    args : argparse.Namespace
        As parsed by :func:`build_parser`.

    Returns
    -------
    int
        :data:`EXIT_OK`; bad input raises (``main`` maps it to :data:`EXIT_BAD_INPUT`).
    """
    t0 = time.perf_counter()
    started = datetime.datetime.now(datetime.timezone.utc)
    timings: dict[str, float] = {}
    overrides = {"k": args.k} if args.k is not None else {}
    cfg = configs.load_config(args.config, overrides)
    target = _target(args, cfg, started)
    if target.day is not None:
        check_dataset_root(target.dataset_root)
    if not args.dry_run and check_output_dir(target.out_dir, args.force):
        log.info("done: %s already holds a finished result; nothing to do (use --force to recompute)", target.out_dir)
        return EXIT_OK
    submission_id = _ray_submission_id()
    run_id = args.run_id or submission_id or _new_run_id(started)
    inputs = _resolve_inputs(args, cfg)
    limits = SetLimits(vocab_size=cfg.vocab_size, max_len=cfg.max_len)

    with _phase("validate", timings):
        queries = read_queries(inputs.queries_path, limits)
        corpus = read_corpus(inputs.docs_path, limits)
        if corpus.docs.n_sets == 0:
            raise InputError(f"{inputs.docs_path}: the corpus has no docs; expected at least one")
        if queries.queries.n_sets == 0:
            raise InputError(f"{inputs.queries_path}: no queries found; expected at least one")
        fingerprints = {"docs": fingerprint(corpus.files, inputs.docs_path), "queries": fingerprint(queries.files, inputs.queries_path)}
    doc_lengths = corpus.docs.lengths
    n_docs, doc_repeats, doc_files, doc_fmt = corpus.docs.n_sets, corpus.n_with_repeats, corpus.files, corpus.fmt
    del corpus  # the driver only needed the lengths: actors read their own docs
    log.info(
        "inputs valid: %d docs (%d with repeated ids) from %s; %d queries (%d with repeated ids) from %s",
        n_docs, doc_repeats, inputs.docs_path, queries.queries.n_sets, queries.n_with_repeats, inputs.queries_path,
    )

    import ray

    with _phase("connect", timings):
        if not ray.is_initialized():
            ray.init()  # no address: attaches to the cluster under `ray job submit`, else starts a local one
        backend, n_shards = _resolve_backend(cfg, ray.cluster_resources())
        plan = plan_shards(doc_lengths, n_shards, cfg.max_len)
    lines = _plan_lines(plan, backend, cfg, n_docs, queries.queries.n_sets)
    if args.dry_run:
        print("\n".join(lines + [f"  output: {target.out_dir}"]))
        return EXIT_OK
    log.info("run %s -> %s", run_id, target.out_dir)
    for line in lines:
        log.info("%s", line)

    actors = []
    try:
        with _phase("load", timings):
            options = {
                "num_cpus": cfg.cpus_per_shard,
                "num_gpus": cfg.gpus_per_shard if backend == "cupy" else 0,
                # Ray's own fault tolerance: a dead actor restarts (re-reading its shard) and
                # its pending searches are retried; searches are pure, so a retry is exact.
                "max_restarts": _ACTOR_RESTARTS,
                "max_task_retries": _ACTOR_RESTARTS,
            }
            actors = [ShardActor.options(**options).remote(spec, inputs.docs_path, limits, backend) for spec in plan]
            _load(actors, args.quiet)

        with _phase("search", timings):
            topk, merge_s = _search(actors, queries.queries, cfg.k, cfg.max_len, cfg.query_batch_size, args.quiet)
        timings["search_s"] -= merge_s
        timings["merge_s"] = merge_s
        infos = ray.get([a.info.remote() for a in actors])
    finally:
        for a in actors:
            ray.kill(a)

    with _phase("write", timings):
        table = results_table(queries.query_ids, queries.queries.lengths, topk)
        timings["total_s"] = time.perf_counter() - t0  # the write itself is not counted in the manifest's total
        manifest = {
            "job": "settopk.score",
            "run_id": run_id,
            "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "started_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "args": {key: value.isoformat() if isinstance(value, datetime.date) else value for key, value in vars(args).items()},
            "ray": {"submission_id": submission_id, "job_id": ray.get_runtime_context().get_job_id()},
            "host": socket.gethostname(),
            "output": {
                "path": os.path.abspath(target.out_dir),
                "dataset_root": os.path.abspath(target.dataset_root),
                "partition": {"dt": target.day.isoformat()} if target.day else None,
            },
            "inputs": {
                "docs": {"path": inputs.docs_path, "format": doc_fmt, "files": list(doc_files), "synthetic": inputs.synthetic},
                "queries": {"path": inputs.queries_path, "format": queries.fmt, "files_count": len(queries.files)},
            },
            "fingerprint": {
                **fingerprints,
                "corpus": fingerprints["docs"]["sha256"],
                "inputs": hashlib.sha256((fingerprints["docs"]["sha256"] + fingerprints["queries"]["sha256"]).encode()).hexdigest(),
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
            "config_source": args.config,
            "config": cfg.to_dict(),
            "timings_s": {key: round(v, 4) for key, v in timings.items()},
            "versions": _versions(),
        }
        if args.tsv:
            # Before the dataset: its _SUCCESS then means the whole run is done, so a rerun
            # after a failed TSV write recomputes instead of skipping.
            write_tsv(args.tsv, topk)
        write_results(
            target.out_dir,
            table,
            manifest,
            dataset_root=target.dataset_root,
            metadata={"settopk.run_id": run_id, "settopk.k": str(cfg.k)},
            row_group_rows=cfg.output.row_group_rows,
        )
    timings["total_s"] = time.perf_counter() - t0
    log.info(
        "done: run %s: %d queries x %d docs, k=%d, %d rows -> %s | backend %s, %d shard(s) | %s",
        run_id, queries.queries.n_sets, n_docs, cfg.k, table.num_rows, target.out_dir, backend, len(plan),
        " ".join(f"{key}={timings[key]:.3f}" for key in ("validate_s", "connect_s", "load_s", "search_s", "merge_s", "write_s", "total_s")),
    )
    return EXIT_OK


def _plan_lines(plan, backend: str, cfg: configs.JobConfig, n_docs: int, n_queries: int) -> list[str]:
    lines = [f"plan: {n_docs} docs, {n_queries} queries, k={cfg.k}, backend {backend}, {len(plan)} shard(s)"]
    for s in plan:
        lines.append(f"  shard {s.shard_id}: lengths {s.min_len}..{s.max_len}, {s.n_docs} docs, {s.n_tokens} ids")
    return lines


def main(argv=None) -> int:
    """Entry point of ``python -m jobs.score`` and ``settopk-score``.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        :data:`EXIT_OK` (0), :data:`EXIT_FAILED` (1) or :data:`EXIT_BAD_INPUT` (2);
        argparse exits with 2 itself on unknown or malformed arguments.
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s settopk %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        return run(args)
    except (InputError, configs.ConfigError, OutputExistsError, UsageError) as exc:
        log.error("%s", exc)
        return EXIT_BAD_INPUT
    except Exception:
        # One logged traceback and a definite exit code, rather than an uncaught exception,
        # so a scheduler's log ends with the cause.
        log.exception("failed: the result dataset was not written; a rerun starts over")
        return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
