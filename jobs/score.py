"""The scoring job: exact top-k set-similarity search (Braun-Blanquet by default) from a corpus to Parquet.

``python -m jobs.score --docs PATH --queries PATH --out DIR [--k 100] [--score NAME] [--config NAME|FILE] [--tsv FILE]``
``python -m jobs.score --config nightly --docs PATH --queries PATH --out ROOT [--date YYYY-MM-DD]``
``python -m jobs.score --self-join --docs PATH --out DIR [--include-self]``

The driver validates the queries and lists the corpus's pieces, and reserves
the shard actors' placement group (its CPUs run reader tasks until the actors
start); reader tasks validate and decode the pieces into the object store
(``jobs.reading``), all before any shard actor starts. The driver plans
length-bucket shards from the readers' length histograms, starts one Ray actor
per shard in its bundle (each takes its docs from the pieces), sends query batches to all of them
(``jobs.searching``), has Ray tasks merge each chunk's shard-local top-k lists
exactly and write it, and commits the result dataset atomically. With no ``--docs/--queries``
it runs on the config's synthetic corpus. With a config whose
``output.partition`` is ``dt`` (``nightly``), ``--out`` is a dataset root and
the run writes ``ROOT/dt=YYYY-MM-DD/``. A self-join (``--self-join``, no ``--queries``)
searches every doc of the corpus against the corpus, read as queries chunk by chunk
(:class:`shards.inputs.DocQueryStream`), leaving each doc out of its own results unless
``--include-self``.

Exit codes: 0 done (or the output was already complete), 2 bad input, config,
arguments or output path (nothing written), 1 any other failure (nothing written).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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
from kernels import SCORES, search_cost_per_doc
from shards import plan_shards_from_counts
from shards.inputs import DocQueryStream, InputError, QueryStream, SetLimits, fingerprint, plan_pieces

from .chunks import check_parts, open_work_dir, plan_chunks, resume_key
from .dispatch import gather
from .reading import pieces_for_cluster, read_corpus_pieces
from .searching import reserve_shards, search_chunks, start_shards, stop_shards
from .output import (
    REJECTED_SCHEMA,
    OutputExistsError,
    check_dataset_root,
    check_output_dir,
    commit_results,
    partition_dir,
    read_part_doc_ids,
    work_dir,
    write_rejected,
    write_tsv,
)

__all__ = ["main", "build_parser", "run", "resolve_backend", "fingerprint", "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT"]  # fingerprint: from shards

log = logging.getLogger("settopk")
EXIT_OK = 0
"""Done, or ``--out`` already held a finished result (nothing to do)."""
EXIT_FAILED = 1
"""Any failure other than bad input (cluster, actor, disk); nothing was written."""
EXIT_BAD_INPUT = 2
"""Bad input, config, arguments or output path; nothing was written, a rerun fails the same way."""
_BAR_DELAY_S = 2.0  # local bars appear only for phases longer than this, so short runs stay quiet
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


class UsageError(ValueError):
    """Command-line arguments that do not fit together or with the config."""


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of ``jobs.score``."""
    p = argparse.ArgumentParser(
        prog="python -m jobs.score",
        description="Exact top-k set-overlap search (Braun-Blanquet by default); results as a Parquet dataset.",
    )
    p.add_argument("--docs", help="corpus: STI2 docs.txt, or a Parquet file/directory (doc_id, tokens)")
    p.add_argument("--queries", help="queries: a directory of one-query files, a text file, or Parquet (query_id, tokens)")
    p.add_argument(
        "--out", default="out/settopk-results",
        help="result dataset directory; with a partitioned config (nightly) the dataset root (default: %(default)s)",
    )
    p.add_argument("--k", type=int, help="results per query (default: the config's k, 100)")
    p.add_argument(
        "--score", choices=SCORES, metavar="NAME",
        help=f"what to rank by, one of {', '.join(SCORES)} (default: the config's score, braun_blanquet)",
    )
    p.add_argument(
        "--self-join", action="store_true",
        help="every doc of --docs is a query against the corpus (query_id: its doc id), its own doc left out; "
        "no --queries (config key self_join)",
    )
    p.add_argument(
        "--include-self", action="store_true",
        help="with --self-join: keep each doc in its own results (config key include_self)",
    )
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
    queries_path: str | None  # None for a self-join: the queries are the docs
    synthetic: bool


def _resolve_inputs(args, cfg: configs.JobConfig) -> _Inputs:
    if cfg.self_join:  # --queries with it was refused before (_check_self_join_args)
        if args.docs is not None:
            return _Inputs(args.docs, None, synthetic=False)
    elif (args.docs is None) != (args.queries is None):
        raise InputError("give both --docs and --queries, or neither (to run on the config's synthetic corpus)")
    elif args.docs is not None:
        return _Inputs(args.docs, args.queries, synthetic=False)
    from .synthetic import SyntheticSpec, ensure_synthetic

    s = cfg.synthetic
    shared = {f.name for f in dataclasses.fields(SyntheticSpec)} - {"max_len"}  # cache_dir is the config's only extra
    spec = SyntheticSpec(max_len=cfg.max_len, **{name: getattr(s, name) for name in shared})
    log.info("no --docs/--queries: using the synthetic corpus %s (generated once into %s)", spec, s.cache_dir)
    docs, queries = ensure_synthetic(spec, os.path.expanduser(s.cache_dir))
    return _Inputs(str(docs), None if cfg.self_join else str(queries), synthetic=True)


def _check_self_join_args(args) -> None:
    """A self-join takes its queries from the corpus: refuse ``--queries`` with it."""
    if args.queries is not None:
        raise UsageError(
            f"--queries {args.queries} was given with a self-join (--self-join, or self_join: true in the config): "
            "a self-join takes its queries from the corpus (--docs); drop --queries, or drop the self-join to search those queries"
        )


def resolve_backend(cfg, resources: dict, replicas: int = 1) -> tuple[str, int]:
    """Backend and shard count for a cluster, checked before any actor starts.

    Parameters
    ----------
    cfg : configs.JobConfig or jobs.bench.config.BenchConfig
        Uses ``backend``, ``n_shards``, ``gpus_per_shard`` and ``cpus_per_shard``.
    resources : dict
        ``ray.cluster_resources()``.
    replicas : int
        Actors per shard (``configs.JobConfig.replicas``).

    Returns
    -------
    (str, int)
        ``"numpy"`` or ``"cupy"``, and the number of shards.

    Raises
    ------
    InputError
        If ``cupy`` is asked for on a cluster without GPUs, or the shards' actors need more
        GPUs or CPUs than the cluster has (they would wait forever).
    """
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
            n_shards = max(1, int(n_gpus / (cfg.gpus_per_shard * replicas)))
        else:
            n_shards = max(1, int(n_cpus / (cfg.cpus_per_shard * replicas)) if cfg.cpus_per_shard else int(n_cpus / replicas))
    else:
        n_shards = int(cfg.n_shards)
    n_actors = n_shards * replicas
    need_gpus = n_actors * cfg.gpus_per_shard if backend == "cupy" else 0
    if need_gpus > n_gpus + 1e-9 or n_actors * cfg.cpus_per_shard > n_cpus + 1e-9:
        raise InputError(
            f"{n_shards} shard(s) x {replicas} replica(s) need {need_gpus:g} GPU(s) and {n_actors * cfg.cpus_per_shard:g} CPU(s), "
            f"the Ray cluster has {n_gpus:g} and {n_cpus:g}; lower n_shards, replicas or the per-shard resources"
        )
    return backend, n_shards


def shard_doc_cost(backend: str, max_len: int):
    """What the shard planner balances for ``backend``: its search cost per doc by length
    (:func:`kernels.search_cost_per_doc`)."""
    return search_cost_per_doc(backend, max_len)


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
def _phase(name: str, timings: dict, peaks: dict):
    """Time a phase into ``timings[name + '_s']``, record the driver's peak RSS in ``peaks[name]``,
    and log both when it ends."""
    t = time.perf_counter()
    yield
    timings[f"{name}_s"] = time.perf_counter() - t
    peaks[name] = _max_rss_bytes()  # the peak so far: the manifest shows which phase raised it
    log.info("phase %s: %.3f s (driver peak RSS so far %.2f GB)", name, timings[f"{name}_s"], peaks[name] / 1e9)


def _check_unchanged_since(start_ns: int, files) -> None:
    """Refuse inputs modified after ``start_ns`` (while the driver read them): the validated
    data and what the actors will read could differ."""
    for path in files:
        if os.stat(path).st_mtime_ns > start_ns:
            raise InputError(
                path, "input files that stay unchanged while the job runs", "a file modified while the job was reading it",
                "run the job once the input is completely written (write it elsewhere, then move it into place)",
            )


def _rejected_table(corpus_rejected, query_rejected) -> "pa.Table":
    import pyarrow as pa

    rows = [("docs", r) for r in corpus_rejected] + [("queries", r) for r in query_rejected]
    return pa.table(
        {
            "input": [source for source, _ in rows],
            "path": [r.path for _, r in rows],
            "line": pa.array([r.line for _, r in rows], pa.int64()),
            "row": pa.array([r.row for _, r in rows], pa.int64()),
            "reason": [r.reason for _, r in rows],
        },
        schema=REJECTED_SCHEMA,
    )


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


@dataclass
class _Held:
    """What a run holds on the cluster: the shard bundles (from before the read) and actors."""

    group: object = None
    actors: list = dataclasses.field(default_factory=list)

    def release(self) -> None:
        actors, group, self.actors, self.group = self.actors, self.group, [], None
        stop_shards(actors, group)


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
    held = _Held()
    try:
        return _run(args, held)
    finally:
        held.release()  # also when the read fails: the bundles were reserved before it


def _run(args, held: _Held) -> int:
    t0 = time.perf_counter()
    started = datetime.datetime.now(datetime.timezone.utc)
    timings: dict[str, float] = {}
    peaks: dict[str, int] = {}  # driver peak RSS after each phase, bytes
    overrides = {name: getattr(args, name) for name in ("k", "score") if getattr(args, name) is not None}
    overrides.update({name: True for name in ("self_join", "include_self") if getattr(args, name, False)})
    cfg = configs.load_config(args.config, overrides)
    if cfg.self_join:
        _check_self_join_args(args)  # before the no-op check: a wrong command fails whatever --out holds
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

    exclude_self = cfg.self_join and not cfg.include_self
    with _phase("validate", timings, peaks):
        read_start_ns = time.time_ns()
        if cfg.self_join:  # the corpus itself, validated as the readers will; read again chunk by chunk
            queries = DocQueryStream(inputs.docs_path, limits, on_invalid=cfg.on_invalid)
        else:
            queries = QueryStream(inputs.queries_path, limits, on_invalid=cfg.on_invalid)  # validated; read again chunk by chunk
        _, doc_fmt, doc_files = plan_pieces(inputs.docs_path, 1)  # the corpus's files and footers; readers check rows
        _check_unchanged_since(read_start_ns, queries.files)
        if cfg.self_join:
            _check_self_join_size(inputs.docs_path, queries.n_queries, exclude_self)
        elif queries.n_queries == 0:
            raise InputError(f"{inputs.queries_path}: no queries found; expected at least one")
        fingerprints = {"docs": fingerprint(doc_files, inputs.docs_path)}
        # A self-join's queries are the docs: the same files, the same fingerprint.
        fingerprints["queries"] = fingerprints["docs"] if cfg.self_join else fingerprint(queries.files, inputs.queries_path)
    log.info("queries valid: %d (%d with repeated ids) from %s%s", queries.n_queries, queries.n_with_repeats,
             inputs.queries_path or inputs.docs_path, _self_join_note(cfg) if cfg.self_join else "")

    import ray

    with _phase("connect", timings, peaks):
        if not ray.is_initialized():
            ray.init()  # no address: attaches to the cluster under `ray job submit`, else starts a local one
        resources = ray.cluster_resources()
        backend, n_shards = resolve_backend(cfg, resources, cfg.replicas)
        cfg = dataclasses.replace(cfg, query_batch_size=cfg.batch_size_for(backend))

    with _phase("read", timings, peaks):
        if not args.dry_run:
            held.group = reserve_shards(n_shards * cfg.replicas, backend, cfg)
        pieces, doc_fmt, doc_files = pieces_for_cluster(inputs.docs_path, float(resources.get("CPU", 1)))
        if fingerprint(doc_files, inputs.docs_path) != fingerprints["docs"]:
            raise InputError(inputs.docs_path, "input files that stay unchanged while the job runs", "files changed while the job listed them",
                             "run the job once the input is completely written (write it elsewhere, then move it into place)")
        bar = _bar("read", len(pieces), "piece", args.quiet)
        try:
            corpus = read_corpus_pieces(pieces, limits, cfg.on_invalid, on_done=lambda: bar.update(1), group=held.group)
        finally:
            bar.close()
        _check_unchanged_since(read_start_ns, doc_files)
        if corpus.n_docs == 0:
            raise InputError(f"{inputs.docs_path}: the corpus has no docs; expected at least one")
        if cfg.self_join and corpus.n_docs != queries.n_queries:
            # Both apply the same rules to the same unchanged files; a difference is a bug, not bad input.
            raise RuntimeError(f"{inputs.docs_path}: the self-join's query pass kept {queries.n_queries} docs, "
                               f"the corpus readers {corpus.n_docs}; they must agree (report this)")
        plan = plan_shards_from_counts(corpus.length_counts, n_shards, doc_cost=shard_doc_cost(backend, cfg.max_len))
    # In a self-join the queries set aside are the docs set aside: listed once, as docs.
    query_rejected = () if cfg.self_join else queries.rejected
    rejected = _rejected_table(corpus.rejected, query_rejected)
    n_docs, doc_repeats, n_rejected_docs = corpus.n_docs, corpus.n_with_repeats, len(corpus.rejected)
    log.info("corpus valid: %d docs (%d with repeated ids) from %s, read in %d piece(s)",
             n_docs, corpus.n_with_repeats, inputs.docs_path, len(pieces))
    if rejected.num_rows:
        log.warning(
            "on_invalid: quarantine set aside %d doc line(s)/row(s) and %d query line(s)/row(s)/file(s); "
            "they are listed with the reason in %s/_rejected/", len(corpus.rejected), len(query_rejected), target.out_dir,
        )
    lines = _plan_lines(plan, backend, cfg, n_docs, queries.n_queries)
    if args.dry_run:
        print("\n".join(lines + [f"  output: {target.out_dir}"]))
        return EXIT_OK
    chunks = plan_chunks(queries.n_queries, cfg.query_chunk_size)
    # Excluding self, a query ranks the n_docs - 1 other docs.
    rows_per_query = min(cfg.k, n_docs - 1) if exclude_self else min(cfg.k, n_docs)
    work = work_dir(target.out_dir, target.dataset_root)
    results_config = {key: value for key, value in cfg.to_dict().items() if key != "faults"}
    key = resume_key(fingerprints=fingerprints, config=results_config, out=os.path.abspath(target.out_dir))
    done, run_id = open_work_dir(work, key, chunks, run_id)
    if done:
        log.info("resuming run %s: %d of %d query chunk(s) already committed in %s", run_id, len(done), len(chunks), work)
    log.info("run %s -> %s", run_id, target.out_dir)
    for line in lines:
        log.info("%s", line)

    parquet_metadata = {"settopk.run_id": run_id, "settopk.k": str(cfg.k)}
    f = cfg.faults
    try:
        with _phase("load", timings, peaks):
            crash = {"crash_after": f.crash_after_searches, "crash_marker": f.crash_marker, "crash_mode": f.crash_mode}
            actors = held.actors = start_shards(plan, corpus, limits, backend, cfg, held.group, crash_shard_kwargs=crash)
            placeholders = [{"shard_id": spec.shard_id, "node": "?", "gpu_ids": ""} for spec in plan] * cfg.replicas
            bar = _bar("load", len(actors), "shard", args.quiet)
            infos = gather(actors, placeholders, lambda a: a.info.remote(), "loading", f.load_timeout_s, 1, 0.0, on_done=lambda: bar.update(1))
            bar.close()

        with _phase("search", timings, peaks):
            todo = [c for c in chunks if c.index not in done]
            bar = _bar("search", sum(c.hi - c.lo for c in todo), "query", args.quiet)
            stream = ((c, ids, sets) for c, (ids, sets) in zip(chunks, queries.chunks(cfg.query_chunk_size)) if c.index not in done)
            # Excluding self, the shards search k + 1 per query and the merge tasks drop each
            # query's own doc (exact: see shards.drop_own_docs).
            search_cfg = dataclasses.replace(cfg, k=cfg.k + 1) if exclude_self else cfg
            timings.update(search_chunks(actors, infos, plan, stream, search_cfg, backend, work, parquet_metadata, bar))
            bar.close()
        infos = gather(actors, infos, lambda a: a.info.remote(), "final info", f.search_timeout_s, 1, 0.0)
    finally:
        held.release()  # the GPUs are free before the commit
        del corpus  # frees the pieces' docs in the object store

    with _phase("commit", timings, peaks):
        total_rows = check_parts(work, chunks, rows_per_query)
        if cfg.on_invalid == "quarantine":
            write_rejected(work, rejected)
        timings["total_s"] = time.perf_counter() - t0  # the commit itself is not counted in the manifest's total
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
                "parts": len(chunks),
            },
            "inputs": {
                "docs": {"path": inputs.docs_path, "format": doc_fmt, "files": list(doc_files), "synthetic": inputs.synthetic},
                "queries": {"path": inputs.queries_path, "format": queries.fmt, "files_count": len(queries.files)}
                if not cfg.self_join else
                {"self_join": True, "include_self": cfg.include_self, "path": inputs.docs_path, "format": queries.fmt,
                 "files_count": len(queries.files), "description": _self_join_note(cfg).strip(" ()")},
            },
            "fingerprint": {
                **fingerprints,
                "corpus": fingerprints["docs"]["sha256"],
                "inputs": hashlib.sha256((fingerprints["docs"]["sha256"] + fingerprints["queries"]["sha256"]).encode()).hexdigest(),
            },
            "counts": {
                "n_docs": n_docs,
                "n_queries": queries.n_queries,
                "k": cfg.k,
                "rows": total_rows,
                "docs_with_repeated_ids": doc_repeats,
                "queries_with_repeated_ids": queries.n_with_repeats,
                "rejected_docs": n_rejected_docs,
                "rejected_queries": len(query_rejected),
                "rows_per_query": rows_per_query,
                "chunks_resumed": len(done),
            },
            "score": cfg.score,
            "backend": backend,
            "shards": [{**plan[i % len(plan)].to_dict(), "replica": i // len(plan), **info} for i, info in enumerate(infos)],
            "config_source": args.config,
            "config": cfg.to_dict(),
            "timings_s": {key: round(v, 4) for key, v in timings.items()},
            "driver_max_rss_bytes": _max_rss_bytes(),
            "driver_max_rss_bytes_by_phase": peaks,
            "versions": _versions(),
        }
        if args.tsv:
            # Before the dataset: its _SUCCESS then means the whole run is done, so a rerun
            # after a failed TSV write recomputes instead of skipping.
            write_tsv(args.tsv, (read_part_doc_ids(work, c.index, rows_per_query) for c in chunks))
        (work / "_resume.json").unlink()
        commit_results(work, target.out_dir, manifest, dataset_root=target.dataset_root)
    timings["total_s"] = time.perf_counter() - t0
    log.info(
        "done: run %s: %d queries x %d docs, k=%d, %d rows -> %s | backend %s, %d shard(s) | %s",
        run_id, queries.n_queries, n_docs, cfg.k, total_rows, target.out_dir, backend, len(plan),
        " ".join(f"{key}={timings[key]:.3f}" for key in ("validate_s", "connect_s", "read_s", "load_s", "search_s", "merge_s", "write_s", "commit_s", "total_s"))
        + f" driver_max_rss_bytes={_max_rss_bytes()}",
    )
    return EXIT_OK


def _max_rss_bytes() -> int:
    """Peak resident memory of this driver process so far (Linux reports kilobytes)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _self_join_note(cfg: configs.JobConfig) -> str:
    own = "each doc included in its own results" if cfg.include_self else "each doc left out of its own results"
    return f" (self-join: every doc is a query, {own})"


def _check_self_join_size(docs_path: str, n_docs: int, exclude_self: bool) -> None:
    """Refuse a self-join that would write no row at all: no docs, or one doc without itself."""
    if n_docs == 0:
        raise InputError(f"{docs_path}: the corpus has no docs; expected at least one")
    if exclude_self and n_docs < 2:
        raise InputError(
            f"{docs_path}: self-join needs at least 2 docs (each doc is searched against the others), found {n_docs}; "
            "add docs, or keep each doc in its own results with --include-self"
        )


def _plan_lines(plan, backend: str, cfg: configs.JobConfig, n_docs: int, n_queries: int) -> list[str]:
    copies = f" x {cfg.replicas} replicas" if cfg.replicas > 1 else ""
    join = _self_join_note(cfg) if cfg.self_join else ""
    lines = [f"plan: {n_docs} docs, {n_queries} queries{join}, k={cfg.k}, score {cfg.score}, routing {cfg.routing}, "
             f"backend {backend}, {len(plan)} shard(s){copies}"]
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
        log.exception("failed: the result dataset was not written; a rerun with the same arguments resumes from the committed query chunks")
        return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
