"""The scoring job: exact top-k set-similarity search (Braun-Blanquet by default) from a corpus to Parquet.

``python -m settopk score --docs PATH --queries PATH --out DIR [--k 100] [--score NAME] [--config NAME|FILE] [--tsv FILE]``
``python -m settopk score --config nightly --docs PATH --queries PATH --out ROOT [--date YYYY-MM-DD]``
``python -m settopk score --self-join --docs PATH --out DIR [--include-self]``
``... [--backend B] [--routing R] [--shards N|auto] [--replicas N] [--gpus N] [--query-batch-size N|auto]`` (override the config)

:func:`run` calls one stage after another:

- validate (:mod:`settopk.jobs.validate`): the config, where the result goes and the output's lock
  first; then the one pass over the queries and the inputs' fingerprints, in a driver thread
  that runs while the cluster works (connect, read, load). The driver waits for it before
  anything is written: bad queries stop the actors and write nothing.
- connect: the Ray cluster, and the backend and shard count that fit it.
- read (:mod:`settopk.jobs.reading`): the shard actors' placement group is reserved first
  (:mod:`settopk.jobs.shard_pool`; its CPUs run reader tasks too), then reader tasks validate and
  decode the corpus's pieces into the object store. For a corpus of 16 MiB and more the
  shard actors start before the read and load their kernels while it runs (bad input stops
  them); for a smaller one, after it.
- plan: length-bucket shards from the readers' length histograms.
- load (:mod:`settopk.jobs.shard_pool`): one Ray actor per shard and replica, in its bundle; given its
  shard after the plan, each takes its docs from the pieces, while the driver waits for the
  queries' pass.
- search (:mod:`settopk.jobs.search`): query batches to every shard in two rounds, chunk by chunk.
- merge and write (:mod:`settopk.jobs.merge_task`): a Ray task per chunk, running beside the search,
  merges the chunk's shard lists exactly and writes its part.
- commit (:mod:`settopk.jobs.output`): every part checked, the manifest (:mod:`settopk.jobs.manifest`)
  written, the result dataset renamed into place.

With no ``--docs/--queries`` the job runs on the config's synthetic corpus. With a config
whose ``output.partition`` is ``dt`` (``nightly``), ``--out`` is a dataset root and the run
writes ``ROOT/dt=YYYY-MM-DD/``. A self-join (``--self-join``, no ``--queries``) searches
every doc of the corpus against the corpus, read as queries chunk by chunk
(:class:`settopk.shards.inputs.DocQueryStream`), leaving each doc out of its own results unless
``--include-self``.

Exit codes: 0 done (or the output was already complete), 2 bad input, config,
arguments or output path (nothing written), 1 any other failure (nothing written).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import os
import pathlib
import re
import sys
import time
from dataclasses import dataclass

import pyarrow as pa

import settopk.configs
from settopk.kernels import SCORES, search_cost_per_doc
from settopk.kernels.postings import ROUTINGS
from settopk.shards import plan_shards_from_counts
from settopk.shards import storage
from settopk.shards.inputs import InputError, fingerprint, plan_pieces, query_files
from settopk.shards.inputs.files import file_stat
from settopk.shards.searcher import ShardSearcher

from . import add_version, prog_name
from .chunks import ReadAhead, check_parts, chunk_stream, drop_resume_key, open_work_dir, plan_chunks, resume_key
from .dispatch import gather
from .guard import PathError
from .location import absolute
from .manifest import build_manifest, inputs_section, output_section, ray_submission_id, shard_entries
from .output import REJECTED_SCHEMA, OutputExistsError, check_output_dir, commit_results, read_part_doc_ids, rejected_path, work_dir, write_tsv
from .progress import PhaseClock, max_rss_bytes, progress_bar
from .reading import pieces_for_cluster, read_corpus_pieces
from .search import prestart_merge_workers, search_chunks
from .shard_pool import ShardPool, reserve_shards, start_shards, supply_shards
from .vocabulary import tokens_for_run
from .validate import Job, UsageError, Validated, ValidationThread, check_gpus, check_unchanged_since, self_join_note, settle

__all__ = ["main", "build_parser", "run", "resolve_backend", "resolve_cpus_per_shard", "fingerprint", "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT"]  # fingerprint: from shards

log = logging.getLogger("settopk")
EXIT_OK = 0
"""Done, or ``--out`` already held a finished result (nothing to do)."""
EXIT_FAILED = 1
"""Any failure other than bad input (cluster, actor, disk); nothing was written."""
EXIT_BAD_INPUT = 2
"""Bad input, config, arguments or output path; nothing was written, a rerun fails the same way."""
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_OVERLAP_FROM_BYTES = 16 << 20
"""Inputs from this size are checked while the cluster works: queries validated while the corpus is
read and loaded, a corpus read while the shard actors start (they load their kernels meanwhile).
Smaller ones, which take less than Ray's start (queries) or an actor's start (corpus) to check,
are checked first, so that bad input starts nothing."""


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of ``settopk.jobs.score``."""
    p = argparse.ArgumentParser(
        prog=prog_name("score"),
        description="Exact top-k set-overlap search (Braun-Blanquet by default); results as a Parquet dataset. "
        "Options that name a config key override the config's value.",
    )
    add_version(p)
    p.add_argument("--docs", help="corpus: STI2 docs.txt, or a Parquet file/directory (doc_id, tokens); a local path or a URI (s3://, gs://, abfs://, hdfs://, file://)")
    p.add_argument("--queries", help="queries: a directory of one-query files, a text file, or Parquet (query_id, tokens); a local path or a URI")
    p.add_argument(
        "--out", default="out/settopk-results",
        help="result dataset directory, a local path or a URI (s3://bucket/prefix, ...); with a partitioned config "
             "(nightly) the dataset root (default: %(default)s)",
    )
    p.add_argument("--k", type=_k_value, metavar="K", help="results per query (default: the config's k, 100)")
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
    p.add_argument(
        "--backend", choices=settopk.configs.BACKENDS,
        help="search backend: cupy (GPUs), cpu (compiled, CPUs), numpy (CPUs) or auto (cupy where the cluster has GPUs, else cpu) (config key backend)",
    )
    p.add_argument(
        "--routing", choices=ROUTINGS,
        help=f"how a shard finds its candidates, one of {', '.join(ROUTINGS)} (config key routing)",
    )
    p.add_argument(
        "--shards", dest="n_shards", type=_auto_or_positive_int, metavar="N|auto",
        help="length-bucket shards; auto: one per GPU (cupy) or per CPU slot (cpu, numpy) divided by --replicas (config key n_shards)",
    )
    p.add_argument("--replicas", type=_positive_int, metavar="N", help="actors per shard (config key replicas)")
    p.add_argument(
        "--gpus", type=_positive_int, metavar="N",
        help="GPUs the job uses: backend cupy, N / (replicas x gpus_per_shard) shards, replicas 1 unless --replicas; "
        "a cluster with fewer GPUs fails at the start (overrides backend, n_shards, replicas)",
    )
    p.add_argument(
        "--query-batch-size", dest="query_batch_size", type=_auto_or_positive_int, metavar="N|auto",
        help="queries per call to a shard actor; auto: the backend's default (config key query_batch_size)",
    )
    p.add_argument("--config", default="local", help=f"config name {settopk.configs.config_names()} or YAML path (default: %(default)s)")
    p.add_argument("--tsv", help="also write the competition's TSV result file here (a local path or a URI)")
    p.add_argument(
        "--dry-run", action="store_true",
        help="validate inputs, print the shard plan and whether the real run would do anything, and exit",
    )
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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, found {text!r}")
    return value


def _k_value(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= settopk.configs.MAX_K:
        raise argparse.ArgumentTypeError(
            f"expected an integer in [1, {settopk.configs.MAX_K}] (the result's rank column is int16), found {text!r}")
    return value


def _auto_or_positive_int(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer >= 1, found {text!r}") from None


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


def resolve_backend(cfg, resources: dict, replicas: int = 1, node_cpus: list | None = None) -> tuple[str, int]:
    """Backend and shard count for a cluster, checked before any actor starts.

    Parameters
    ----------
    cfg : settopk.configs.JobConfig or settopk.jobs.bench.config.BenchConfig
        Uses ``backend``, ``n_shards``, ``gpus_per_shard`` and ``cpus_per_shard``.
    resources : dict
        ``ray.cluster_resources()``.
    replicas : int
        Actors per shard (``settopk.configs.JobConfig.replicas``).
    node_cpus : list of float, optional
        CPUs of each alive node, for ``cpus_per_shard: auto`` (:func:`resolve_cpus_per_shard`).

    Returns
    -------
    (str, int)
        ``"cpu"``, ``"numpy"`` or ``"cupy"``, and the number of shards.

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
        backend = "cupy" if n_gpus > 0 else "cpu"
        log.info("backend auto: %s (the Ray cluster has %g GPU(s))", backend, n_gpus)
    if backend == "cupy" and n_gpus == 0:
        raise InputError(
            f"config asks for backend 'cupy' but the Ray cluster has no GPU (resources: {resources}); "
            "run on a GPU cluster or use backend 'cpu', 'numpy' or 'auto'"
        )
    cpus = resolve_cpus_per_shard(cfg, backend, node_cpus if node_cpus is not None else [n_cpus], replicas)
    if cfg.n_shards == "auto":
        if backend == "cupy":
            n_shards = max(1, int(n_gpus / (cfg.gpus_per_shard * replicas)))
        else:
            n_shards = max(1, int(n_cpus / (cpus * replicas)) if cpus else int(n_cpus / replicas))
    else:
        n_shards = int(cfg.n_shards)
    n_actors = n_shards * replicas
    need_gpus = n_actors * cfg.gpus_per_shard if backend == "cupy" else 0
    if need_gpus > n_gpus + 1e-9 or n_actors * cpus > n_cpus + 1e-9:
        raise InputError(
            f"{n_shards} shard(s) x {replicas} replica(s) need {need_gpus:g} GPU(s) and {n_actors * cpus:g} CPU(s), "
            f"the Ray cluster has {n_gpus:g} and {n_cpus:g}; lower n_shards, replicas or the per-shard resources"
        )
    return backend, n_shards


def resolve_cpus_per_shard(cfg, backend: str, node_cpus: list, replicas: int = 1) -> float:
    """The CPUs each shard actor reserves: ``cfg.cpus_per_shard``, or what ``"auto"`` means for ``backend``.

    For ``"cpu"``, ``"auto"`` is the CPUs of the smallest node that has any, divided by
    ``replicas`` (at least 1): a shard's index runs one thread per CPU, and threads of one
    shard split its docs at no extra cost, where more shards on one node would each search
    every query again above the first round's floors, and be merged. For ``"numpy"`` (one
    thread) and ``"cupy"`` (the GPU searches), 1.

    Parameters
    ----------
    cfg : settopk.configs.JobConfig or settopk.jobs.bench.config.BenchConfig
    backend : str
        The resolved backend: ``"cpu"``, ``"numpy"`` or ``"cupy"``.
    node_cpus : list of float
        CPUs of each alive node of the cluster.
    replicas : int

    Returns
    -------
    float
    """
    if cfg.cpus_per_shard != "auto":
        return float(cfg.cpus_per_shard)
    if backend != "cpu":
        return 1.0
    smallest = min((c for c in node_cpus if c >= 1), default=1.0)
    return float(max(1, int(smallest // max(1, replicas))))


def shard_doc_cost(backend: str, max_len: int):
    """What the shard planner balances for ``backend``: its search cost per doc by length
    (:func:`settopk.kernels.search_cost_per_doc`)."""
    return search_cost_per_doc(backend, max_len)


def _rejected_table(corpus_rejected, query_rejected) -> pa.Table:
    """The lines and rows quarantine set aside, as the run record's ``rejected.parquet`` table."""
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
class _Cluster:
    """What the run settled with the Ray cluster."""

    backend: str  # "cpu", "numpy" or "cupy"
    n_shards: int
    n_cpus: float


@dataclass
class _CorpusFacts:
    """What the run reports about the corpus once its docs are freed."""

    fmt: str
    files: tuple
    n_docs: int
    n_with_repeats: int
    n_rejected: int
    n_pieces: int
    fingerprint: str  # of the corpus's files, as the run listed them at its start and the readers read them
    tokens: dict | None = None  # distinct tokens and the dense ids' form (settopk.jobs.vocabulary)


@dataclass
class _Work:
    """The run's work directory: its chunks, those already committed, and the rows each query gets."""

    path: object  # a pathlib.Path, or a URI (str) on a store
    chunks: list
    done: set
    rows_per_query: int


def _connect(job: Job) -> tuple[Job, _Cluster]:
    """Attach to the Ray cluster (or start a local one) and fit the backend and shard count to it."""
    import ray

    if not ray.is_initialized():
        # No address: attaches to the cluster under `ray job submit`, else starts a local one.
        # --quiet: Ray's own start-up lines (INFO, and WARNINGs about a local instance) are
        # not the job's warnings; its errors still show.
        ray.init(**({"logging_level": logging.ERROR} if job.args.quiet else {}))
    resources = ray.cluster_resources()
    check_gpus(job.args, resources)
    node_cpus = [float(node["Resources"].get("CPU", 0)) for node in ray.nodes() if node.get("Alive")]
    backend, n_shards = resolve_backend(job.cfg, resources, job.cfg.replicas, node_cpus)
    cpus = resolve_cpus_per_shard(job.cfg, backend, node_cpus, job.cfg.replicas)
    if job.cfg.cpus_per_shard == "auto":
        log.info("cpus_per_shard auto: %g per shard actor (backend %s)", cpus, backend)
    cfg = dataclasses.replace(job.cfg, query_batch_size=job.cfg.batch_size_for(backend), cpus_per_shard=cpus)
    return dataclasses.replace(job, cfg=cfg), _Cluster(backend, n_shards, float(resources.get("CPU", 1)))


def _docs_fingerprint(job: Job) -> str:
    """The corpus's fingerprint as the run first lists it (files and footers)."""
    return fingerprint(plan_pieces(job.inputs.docs_path, 1)[2], job.inputs.docs_path)


def _read(job: Job, cluster: _Cluster, start_ns: int, listed: str, pool: ShardPool, searcher_cls: type):
    """Reserve the shards' bundles, then read the corpus with reader tasks into the object store.

    For a corpus of at least :data:`_OVERLAP_FROM_BYTES`, the shard actors start before the
    read, so that they start and load their kernels while it runs. ``listed`` is the corpus's
    fingerprint from the run's start (:func:`_docs_fingerprint`). Returns the
    :class:`settopk.jobs.reading.CorpusRead` and the :class:`_CorpusFacts`.
    """
    cfg, docs_path = job.cfg, job.inputs.docs_path
    pieces, doc_fmt, doc_files = pieces_for_cluster(docs_path, cluster.n_cpus)
    if fingerprint(doc_files, docs_path) != listed:
        _corpus_changed(docs_path)
    if not job.args.dry_run:
        pool.group = reserve_shards(cluster.n_shards * cfg.replicas, cluster.backend, cfg)
        if _large(doc_files):
            _start_actors(job, cluster, pool, searcher_cls)
    bar = progress_bar("read", len(pieces), "pieces", job.args.quiet)
    try:
        corpus = read_corpus_pieces(pieces, job.limits, cfg.on_invalid, on_done=lambda: bar.update(1), group=pool.group)
    finally:
        bar.close()
    check_unchanged_since(start_ns, doc_files)
    if corpus.n_docs == 0:
        raise InputError(f"{docs_path}: the corpus has no docs; expected at least one")
    facts = _CorpusFacts(doc_fmt, doc_files, corpus.n_docs, corpus.n_with_repeats, len(corpus.rejected), len(pieces), listed)
    return corpus, facts


def _corpus_changed(docs_path: str):
    raise InputError(docs_path, "input files that stay unchanged while the job runs", "files changed while the job listed them",
                     "run the job once the input is completely written (write it elsewhere, then move it into place)")


def _check_read_against_validated(job: Job, valid: Validated, facts: _CorpusFacts) -> None:
    """The corpus the readers read is the one the validating pass fingerprinted (and, for a
    self-join, counted as queries)."""
    docs_path = job.inputs.docs_path
    if facts.fingerprint != valid.fingerprints["docs"]:
        _corpus_changed(docs_path)
    if job.cfg.self_join and facts.n_docs != valid.queries.n_queries:
        # Both apply the same rules to the same unchanged files; a difference is a bug, not bad input.
        raise RuntimeError(f"{docs_path}: the self-join's query pass kept {valid.queries.n_queries} docs, "
                           f"the corpus readers {facts.n_docs}; they must agree (report this)")


def _plan(job: Job, cluster: _Cluster, corpus) -> list:
    """The length-bucket shards, from the readers' length histograms."""
    return plan_shards_from_counts(corpus.length_counts, cluster.n_shards, doc_cost=shard_doc_cost(cluster.backend, job.cfg.max_len))


def _set_aside(job: Job, valid: Validated, corpus, facts: _CorpusFacts):
    """Log what the corpus holds and what quarantine set aside; returns the rejected lines as a table."""
    # In a self-join the queries set aside are the docs set aside: listed once, as docs.
    query_rejected = () if job.cfg.self_join else valid.queries.rejected
    rejected = _rejected_table(corpus.rejected, query_rejected)
    log.info("corpus valid: %d docs (%d with repeated ids) from %s, read in %d piece(s)",
             facts.n_docs, facts.n_with_repeats, job.inputs.docs_path, facts.n_pieces)
    if rejected.num_rows:
        log.warning(
            "on_invalid: quarantine set aside %d doc line(s)/row(s) and %d query line(s)/row(s)/file(s); "
            "they are listed with the reason in %s", facts.n_rejected, len(query_rejected),
            rejected_path(job.target.out_dir, job.target.dataset_root),
        )
    return rejected


def _open_work(job: Job, valid: Validated, facts: _CorpusFacts, plan_lines: list[str]) -> tuple[Job, _Work]:
    """Cut the queries into chunks and open the work directory: a rerun with the same resume key
    keeps the interrupted run's id and its committed chunks."""
    cfg, target = job.cfg, job.target
    chunks = plan_chunks(valid.queries.n_queries, cfg.query_chunk_size)
    # Excluding self, a query ranks the n_docs - 1 other docs.
    rows_per_query = min(cfg.k, facts.n_docs - 1) if job.exclude_self else min(cfg.k, facts.n_docs)
    path = work_dir(target.out_dir, target.dataset_root)
    results_config = {key: value for key, value in cfg.to_dict().items() if key != "faults"}
    key = resume_key(fingerprints=valid.fingerprints, config=results_config, out=absolute(target.out_dir),
                     chunks=[(c.lo, c.hi) for c in chunks])
    done, run_id = open_work_dir(path, key, chunks, job.run_id)
    if done:
        log.info("resuming run %s: %d of %d query chunk(s) already committed in %s", run_id, len(done), len(chunks), path)
    log.info("run %s -> %s", run_id, target.out_dir)
    for line in plan_lines:
        log.info("%s", line)
    return dataclasses.replace(job, run_id=run_id), _Work(path, chunks, done, rows_per_query)


def _start_actors(job: Job, cluster: _Cluster, pool: ShardPool, searcher_cls: type) -> None:
    """Start the shard actors in their bundles; each loads its kernels, then waits for its shard."""
    n_actors = cluster.n_shards * job.cfg.replicas
    pool.actors, pool.inputs = start_shards(n_actors, job.limits, cluster.backend, job.cfg, pool.group, searcher_cls)


def _wait_loaded(job: Job, plan: list, pool: ShardPool) -> list[dict]:
    """Wait until each shard actor has loaded its shard; returns their ``info()``."""
    cfg = job.cfg
    placeholders = [{"shard_id": spec.shard_id, "node": "?", "gpu_ids": ""} for spec in plan] * cfg.replicas
    bar = progress_bar("load", len(pool.actors), "shards", job.args.quiet)
    infos = gather(pool.actors, placeholders, lambda a: a.info.remote(), "loading", cfg.faults.load_timeout_s, 1, 0.0,
                   on_done=lambda: bar.update(1))
    bar.close()
    return infos


def _read_ahead(job: Job, queries, work: _Work) -> ReadAhead:
    """The chunks not yet committed with their queries, read from now on one window ahead of the search."""
    size = job.cfg.query_chunk_size
    return ReadAhead(chunk_stream(work.chunks, queries.chunks(size), size, work.done))


def _search(job: Job, cluster: _Cluster, plan: list, stream: ReadAhead, work: _Work, actors: list, infos: list[dict]) -> dict:
    """Search the chunks of ``stream`` (:func:`_read_ahead`); each chunk's merge task merges its
    shard lists and writes its part. Returns the search's timings (:func:`settopk.jobs.search.search_chunks`)."""
    cfg = job.cfg
    todo = [c for c in work.chunks if c.index not in work.done]
    bar = progress_bar("search", sum(c.hi - c.lo for c in todo), "queries", job.args.quiet)
    # Excluding self, the shards search k + 1 per query and the merge tasks drop each
    # query's own doc (exact: see settopk.shards.drop_own_docs).
    # Sized by the rows a query can get (min(k, n_docs)), not by k: a large k on a small corpus
    # costs nothing.
    search_cfg = dataclasses.replace(cfg, k=work.rows_per_query + 1 if job.exclude_self else work.rows_per_query)
    metadata = {"settopk.run_id": job.run_id, "settopk.k": str(cfg.k)}
    timings = search_chunks(actors, infos, plan, stream, search_cfg, cluster.backend, work.path, metadata, bar)
    bar.close()
    return timings


def _commit(job: Job, cluster: _Cluster, plan: list, valid: Validated, facts: _CorpusFacts, rejected, work: _Work,
            infos: list[dict], clock: PhaseClock) -> int:
    """Check every part, write the TSV and the run record (manifest, quarantined lines), and
    rename the work directory into place as the result; returns the rows written."""
    import ray

    cfg, args, target, queries = job.cfg, job.args, job.target, valid.queries
    total_rows = check_parts(work.path, work.chunks, work.rows_per_query)
    clock.stamp_total()  # the commit itself is not counted in the manifest's total
    self_join = self_join_note(cfg).strip(" ()") if cfg.self_join else None
    manifest = build_manifest(
        run_id=job.run_id, started=clock.started, args=vars(args), submission_id=job.submission_id,
        ray_job_id=ray.get_runtime_context().get_job_id(),
        output=output_section(target.out_dir, target.dataset_root, target.day, len(work.chunks)),
        inputs=inputs_section(docs_path=job.inputs.docs_path, docs_format=facts.fmt, docs_files=facts.files,
                              synthetic=job.inputs.synthetic, queries_path=job.inputs.queries_path, queries_format=queries.fmt,
                              queries_files_count=len(queries.files), self_join=self_join, include_self=cfg.include_self)
        | {"tokens": facts.tokens},
        fingerprints=valid.fingerprints,
        counts={
            "n_docs": facts.n_docs,
            "n_queries": queries.n_queries,
            "k": cfg.k,
            "rows": total_rows,
            "docs_with_repeated_ids": facts.n_with_repeats,
            "queries_with_repeated_ids": queries.n_with_repeats,
            "rejected_docs": facts.n_rejected,
            "rejected_queries": 0 if cfg.self_join else len(queries.rejected),
            "rows_per_query": work.rows_per_query,
            "chunks_resumed": len(work.done),
        },
        score=cfg.score, backend=cluster.backend, shards=shard_entries([spec.to_dict() for spec in plan], infos),
        config_source=args.config, config=cfg.to_dict(), timings=clock.timings, max_rss_bytes=max_rss_bytes(),
        max_rss_by_phase=clock.peaks,
    )
    if args.tsv:
        # Before the dataset: its _SUCCESS then means the whole run is done, so a rerun
        # after a failed TSV write recomputes instead of skipping.
        write_tsv(args.tsv, (read_part_doc_ids(work.path, c.index, work.rows_per_query) for c in work.chunks))
    drop_resume_key(work.path)
    commit_results(work.path, target.out_dir, manifest, dataset_root=target.dataset_root,
                   rejected=rejected if cfg.on_invalid == "quarantine" else None)
    return total_rows


def run(args, searcher_cls: type = ShardSearcher) -> int:
    """Run the job for parsed arguments.

    Parameters
    ----------
    args : argparse.Namespace
        As parsed by :func:`build_parser`.
    searcher_cls : type
        The class each shard actor wraps: :class:`settopk.shards.ShardSearcher`, or a subclass of it
        (the chaos tests pass one that fails on purpose).

    Returns
    -------
    int
        :data:`EXIT_OK`; bad input raises (``main`` maps it to :data:`EXIT_BAD_INPUT`).
    """
    pool = ShardPool()
    try:
        return _run(args, pool, searcher_cls)
    finally:
        pool.release()  # also when the read fails: the bundles were reserved before it


def _run(args, pool: ShardPool, searcher_cls: type) -> int:
    """The stages in order; each phase is timed and logged (:class:`settopk.jobs.progress.PhaseClock`)."""
    clock = PhaseClock()
    _check_outputs_absolute_under_ray_job(args)
    job = settle(args, clock.started)
    if job is None:
        return EXIT_OK
    try:
        return _run_settled(job, clock, pool, searcher_cls)
    finally:
        if job.lock is not None:
            job.lock.release()


def _run_settled(job: Job, clock: PhaseClock, pool: ShardPool, searcher_cls: type) -> int:
    """The stages after :func:`settopk.jobs.validate.settle`, while the run holds the output's lock.

    The queries' validating pass runs in a driver thread from the start. For a query input of
    at least :data:`_OVERLAP_FROM_BYTES` it goes on while Ray starts, the readers read the
    corpus and the shard actors load it, and the driver waits for it before it writes
    anything; a smaller one is checked before any cluster work (it takes less than Ray's start).
    """
    args = job.args
    start_ns = time.time_ns()
    checking = ValidationThread(job, start_ns)
    valid = _wait_for_queries(job, checking, clock) if not _overlaps(job) else None
    try:
        job, cluster, corpus, facts, plan, load_started = _prepare(job, clock, pool, searcher_cls, start_ns, _docs_fingerprint(job))
    except BaseException as exc:
        _raise_validation_error_first(checking, exc)
    if valid is None:
        valid = _wait_for_queries(job, checking, clock)
    _check_read_against_validated(job, valid, facts)
    facts.tokens = tokens_for_run(job, valid, corpus, plan, pool)
    rejected = _set_aside(job, valid, corpus, facts)
    lines = _plan_lines(plan, cluster.backend, job.cfg, facts.n_docs, valid.queries.n_queries)
    if args.dry_run:
        print("\n".join(lines + [f"  output: {job.target.out_dir}"]))
        if check_output_dir(job.target.out_dir, args.force):
            print(f"  no-op: {job.target.out_dir} already holds a finished result, so the real run would do nothing "
                  "(add --force to recompute)")
        return EXIT_OK
    job, work = _open_work(job, valid, facts, lines)
    # The workers are held until each actor answers, that is, until it has loaded its shard.
    prestart_merge_workers(len(pool.actors), len(work.chunks) - len(work.done), [a.info.remote() for a in pool.actors])
    stream = _read_ahead(job, valid.queries, work)  # the first window is read while the shards load
    try:
        with clock.phase("load", since=load_started):  # load_s: from the plan, across the validation's wait
            infos = _wait_loaded(job, plan, pool)
        with clock.phase("search"):
            clock.timings.update(_search(job, cluster, plan, stream, work, pool.actors, infos))
        infos = gather(pool.actors, infos, lambda a: a.info.remote(), "final info", job.cfg.faults.search_timeout_s, 1, 0.0)
    finally:
        stream.close()
        pool.release()  # the GPUs are free before the commit
        del corpus  # frees the pieces' docs in the object store
    with clock.phase("commit"):
        total_rows = _commit(job, cluster, plan, valid, facts, rejected, work, infos, clock)
    clock.stamp_total()
    _log_done(job, cluster, plan, valid, facts, total_rows, clock.timings)
    return EXIT_OK


def _overlaps(job: Job) -> bool:
    """Whether the queries' pass should run beside the cluster work: a query input (a
    self-join's: the corpus) of at least :data:`_OVERLAP_FROM_BYTES`. One that cannot even be
    listed is checked first: the pass reports what is wrong with it before Ray starts."""
    try:
        files = plan_pieces(job.inputs.docs_path, 1)[2] if job.cfg.self_join else query_files(job.inputs.queries_path)
    except (InputError, OSError):
        return False
    return _large(files)


def _large(files) -> bool:
    """Whether ``files`` hold at least :data:`_OVERLAP_FROM_BYTES` (False where one cannot be
    stat'ed: the pass that reads them reports why)."""
    try:
        return sum(file_stat(f)[0] for f in files) >= _OVERLAP_FROM_BYTES
    except (InputError, OSError):
        return False


def _wait_for_queries(job: Job, checking: ValidationThread, clock: PhaseClock) -> Validated:
    """Wait for the queries' pass (phase ``validate``: the wait; ``validate_s``: the pass's own time)."""
    with clock.phase("validate", timing="validate_wait_s"):
        valid = checking.result()
    clock.timings["validate_s"] = checking.seconds
    log.info("queries valid: %d (%d with repeated ids) from %s%s", valid.queries.n_queries, valid.queries.n_with_repeats,
             job.inputs.queries_path or job.inputs.docs_path, self_join_note(job.cfg) if job.cfg.self_join else "")
    return valid


def _prepare(job: Job, clock: PhaseClock, pool: ShardPool, searcher_cls: type, start_ns: int, listed: str):
    """Connect, read the corpus, plan the shards and start the actors' loading (not for ``--dry-run``).

    Returns ``(job, cluster, corpus, facts, plan, load_started)``; ``load_started`` is the
    ``time.perf_counter()`` at which the actors were given their shards, after the read (None
    for ``--dry-run``).
    """
    with clock.phase("connect"):
        job, cluster = _connect(job)
    with clock.phase("read"):
        corpus, facts = _read(job, cluster, start_ns, listed, pool, searcher_cls)
        plan = _plan(job, cluster, corpus)
    load_started = None
    if not job.args.dry_run:
        load_started = time.perf_counter()
        if not pool.actors:
            _start_actors(job, cluster, pool, searcher_cls)
        if not corpus.wide:  # wide docs are supplied once mapped to dense ids (tokens_for_run)
            supply_shards(pool, plan, corpus, job.cfg.replicas)  # each actor loads its shard's docs while the driver goes on
    return job, cluster, corpus, facts, plan, load_started


def _raise_validation_error_first(checking: ValidationThread, exc: BaseException):
    """Re-raise ``exc`` from the corpus's side, unless the queries' pass failed too: bad queries
    are reported first, as when the pass ran before anything else. Waits for the pass either way,
    so no thread of the run outlives it."""
    error = checking.error()
    if error is not None:
        raise error from None
    raise exc


def _check_outputs_absolute_under_ray_job(args) -> None:
    """Under ``ray job submit`` the driver's working directory is Ray's temporary copy of
    ``--working-dir``, gone with the head: refuse a relative ``--out`` (its default included)
    or ``--tsv`` there rather than write the result where nobody finds it. A URI
    (``s3://...``) is not relative to anything and passes."""
    submission_id = ray_submission_id()
    if submission_id is None:
        return
    for flag, value in (("--out", args.out), ("--tsv", args.tsv)):
        if value is not None and not os.path.isabs(value) and not storage.is_uri(value):
            default = " (the default)" if flag == "--out" and value == build_parser().get_default("out") else ""
            raise UsageError(
                f"{flag} {value}{default} is a relative path, and this driver runs under the Ray job {submission_id}, "
                f"whose working directory is Ray's temporary copy of the job's --working-dir ({os.getcwd()}): the result "
                f"would be lost with it; give an absolute path or a URI for {flag}, on storage every node of the cluster "
                "reaches, e.g. --out /mnt/shared/settopk-results"
            )


def _log_done(job: Job, cluster: _Cluster, plan: list, valid: Validated, facts: _CorpusFacts, total_rows: int,
              timings: dict) -> None:
    """The run's last log line: what was searched, where the result went, and the phase times."""
    phases = ("validate_s", "connect_s", "read_s", "load_s", "search_s", "merge_s", "write_s", "commit_s", "total_s")
    log.info(
        "done: run %s: %d queries x %d docs, k=%d, %d rows -> %s | backend %s, %d shard(s) | %s",
        job.run_id, valid.queries.n_queries, facts.n_docs, job.cfg.k, total_rows, absolute(job.target.out_dir),
        cluster.backend, len(plan),
        " ".join(f"{key}={timings[key]:.3f}" for key in phases) + f" driver_max_rss_bytes={max_rss_bytes()}",
    )


def _plan_lines(plan, backend: str, cfg: settopk.configs.JobConfig, n_docs: int, n_queries: int) -> list[str]:
    copies = f" x {cfg.replicas} replicas" if cfg.replicas > 1 else ""
    join = self_join_note(cfg) if cfg.self_join else ""
    lines = [f"plan: {n_docs} docs, {n_queries} queries{join}, k={cfg.k}, score {cfg.score}, routing {cfg.routing}, "
             f"backend {backend}, {len(plan)} shard(s){copies}"]
    for s in plan:
        lines.append(f"  shard {s.shard_id}: lengths {s.min_len}..{s.max_len}, {s.n_docs} docs, {s.n_tokens} ids")
    return lines


def main(argv=None, *, searcher_cls: type = ShardSearcher) -> int:
    """Entry point of ``python -m settopk score`` and ``settopk score``.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).
    searcher_cls : type
        The class each shard actor wraps (see :func:`run`); not a command-line option.

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
        return run(args, searcher_cls)
    except (InputError, settopk.configs.ConfigError, OutputExistsError, UsageError, PathError) as exc:
        log.error("%s", exc)
        return EXIT_BAD_INPUT
    except Exception:
        # One logged traceback and a definite exit code, rather than an uncaught exception,
        # so a scheduler's log ends with the cause.
        log.exception("failed: the result dataset was not written; a rerun with the same arguments resumes from the committed query chunks")
        return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
