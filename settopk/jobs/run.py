"""The scoring job's run: exact top-k set-similarity search from a corpus to a Parquet dataset.

:func:`run` calls one stage after another:

- validate (:mod:`settopk.jobs.validate`): the config, where the result goes, the output's lock
  and whether the run may write there (:class:`settopk.jobs.target.Target`) first; then the one pass over the queries and the inputs' fingerprints, in a driver thread
  that runs while the cluster works (connect, read, load). The driver waits for it before
  anything is written: bad queries stop the actors and write nothing.
- connect (:mod:`settopk.jobs.cluster`): the Ray cluster, and the backend and shard count that fit it.
- read (:mod:`settopk.shards.reading`): the shard actors' placement group is reserved first
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
- commit (:meth:`settopk.jobs.target.Target.commit`, :mod:`settopk.jobs.output`): every part
  checked, the manifest (:mod:`settopk.jobs.manifest`) written, the result dataset renamed into place.

With no docs/queries the job runs on the config's synthetic corpus. With a config whose
``output.partition`` is ``dt`` (``nightly``), ``out`` is a dataset root and the run writes
``ROOT/dt=YYYY-MM-DD/``. A self-join searches every doc of the corpus against the corpus, read
as queries chunk by chunk (:class:`settopk.shards.inputs.DocQueryStream`), leaving each doc out
of its own results unless ``include_self``. A threshold run (``--threshold``;
:mod:`settopk.jobs.threshold_job`) writes every passing pair, a varying number per query; with
``--dedup`` the commit also writes the groups (:mod:`settopk.jobs.dedup`) and renames
``pairs/``, ``groups/`` and ``duplicates/`` into place together.

The command line (:mod:`settopk.jobs.score`) and the library (:func:`settopk.score`) both call
:func:`run` with the same arguments.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass

import pyarrow as pa

import settopk.configs
from settopk.shards import plan_shards_from_counts
from settopk.shards.inputs import InputError, fingerprint, plan_pieces, query_files
from settopk.shards.inputs.files import file_stat
from settopk.shards.location import Location
from settopk.shards.searcher import ShardSearcher

from .chunks import ReadAhead, check_parts, chunk_stream, drop_resume_key, open_work_dir, plan_chunks, read_part_pair_ids, resume_key
from .cluster import Cluster, connect, shard_doc_cost
from .dedup import shard_groups, stage_dedup
from .dispatch import gather
from .manifest import build_manifest, inputs_section, output_section, ray_submission_id, shard_entries, shown_absolute
from .output import DEFAULT_OUT, REJECTED_SCHEMA, part_name, read_part_doc_ids, write_tsv
from .progress import PhaseClock, max_rss_bytes, progress_bar
from settopk.shards.reading import pieces_for_cluster, read_corpus_pieces
from .search import prestart_merge_workers, search_chunks
from .shard_pool import ShardPool, reserve_shards, start_shards, supply_shards
from .target import Decision
from .threshold_job import self_join_entries, shard_cap, threshold_cap, threshold_section
from .vocabulary import tokens_for_run
from .validate import Job, NoOp, UsageError, Validated, ValidationThread, check_unchanged_since, locate_args, self_join_note, settle

__all__ = ["run", "check_outputs_absolute_under_ray_job"]

log = logging.getLogger("settopk")
_OVERLAP_FROM_BYTES = 16 << 20
"""Inputs from this size are checked while the cluster works: queries validated while the corpus is
read and loaded, a corpus read while the shard actors start (they load their kernels meanwhile).
Smaller ones, which take less than Ray's start (queries) or an actor's start (corpus) to check,
are checked first, so that bad input starts nothing."""


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

    path: object  # a pathlib.Path, or a Location on a store
    chunks: list
    done: set
    rows_per_query: int | None  # None: a threshold run, whose queries get their pairs, however many


def _docs_fingerprint(job: Job) -> str:
    """The corpus's fingerprint as the run first lists it (files and footers)."""
    return fingerprint(plan_pieces(job.inputs.docs_path, 1)[2], job.inputs.docs_path)


def _read(job: Job, cluster: Cluster, start_ns: int, listed: str, pool: ShardPool, searcher_cls: type):
    """Reserve the shards' bundles, then read the corpus with reader tasks into the object store.

    For a corpus of at least :data:`_OVERLAP_FROM_BYTES`, the shard actors start before the
    read, so that they start and load their kernels while it runs. ``listed`` is the corpus's
    fingerprint from the run's start (:func:`_docs_fingerprint`). Returns the
    :class:`settopk.shards.reading.CorpusRead` and the :class:`_CorpusFacts`.
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


def _corpus_changed(docs_path):
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


def _plan(job: Job, cluster: Cluster, corpus) -> list:
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
            job.target.rejected_path,
        )
    return rejected


def _open_work(job: Job, valid: Validated, facts: _CorpusFacts, plan_lines: list[str]) -> tuple[Job, _Work]:
    """Cut the queries into chunks and open the work directory: a rerun with the same resume key
    keeps the interrupted run's id and its committed chunks."""
    cfg, target = job.cfg, job.target
    chunks = plan_chunks(valid.queries.n_queries, cfg.query_chunk_size)
    # Excluding self, a query ranks the n_docs - 1 other docs.
    rows_per_query = min(cfg.k, facts.n_docs - 1) if job.exclude_self else min(cfg.k, facts.n_docs)
    if cfg.threshold is not None:
        rows_per_query = None
    path = target.work_dir
    results_config = {key: value for key, value in cfg.to_dict().items() if key != "faults"}
    # The output by its key: no credentials, so a rerun after a key rotation resumes.
    key = resume_key(fingerprints=valid.fingerprints, config=results_config, out=":".join(target.out_dir.key),
                     chunks=[(c.lo, c.hi) for c in chunks])
    done, run_id = open_work_dir(path, key, chunks, job.run_id)
    if done:
        log.info("resuming run %s: %d of %d query chunk(s) already committed in %s", run_id, len(done), len(chunks), path)
    log.info("run %s -> %s", run_id, target.out_dir)
    for line in plan_lines:
        log.info("%s", line)
    return dataclasses.replace(job, run_id=run_id), _Work(path, chunks, done, rows_per_query)


def _start_actors(job: Job, cluster: Cluster, pool: ShardPool, searcher_cls: type) -> None:
    """Start the shard actors in their bundles; each loads its kernels, then waits for its shard."""
    n_actors = cluster.n_shards * job.cfg.replicas
    pool.actors, pool.inputs = start_shards(n_actors, job.limits, cluster.backend, job.cfg, pool.group, searcher_cls)


def _wait_loaded(job: Job, plan: list, pool: ShardPool) -> list[dict]:
    """Wait until each shard actor has loaded its shard; returns their ``info()``."""
    cfg = job.cfg
    placeholders = [{"shard_id": spec.shard_id, "node": "?", "gpu_ids": ""} for spec in plan] * cfg.replicas
    bar = progress_bar("load", len(pool.actors), "shards", job.args.quiet)
    if cfg.threshold is not None and cfg.self_join:
        # The shards' own self-joins, where they keep one, are found as they load (ShardSearcher.prepare_self_join).
        k, most = shard_cap(threshold_cap(job.args)), self_join_entries(cfg.output.pairs_per_piece)

        def call(a):
            return a.prepare_self_join.remote(cfg.threshold, cfg.include_self, k, most)
    else:
        def call(a):
            return a.info.remote()
    infos = gather(pool.actors, placeholders, call, "loading", cfg.faults.load_timeout_s, 1, 0.0,
                   on_done=lambda: bar.update(1))
    bar.close()
    return infos


def _read_ahead(job: Job, queries, work: _Work) -> ReadAhead:
    """The chunks not yet committed with their queries, read from now on one window ahead of the search."""
    size = job.cfg.query_chunk_size
    return ReadAhead(chunk_stream(work.chunks, queries.chunks(size), size, work.done))


def _search(job: Job, cluster: Cluster, plan: list, stream: ReadAhead, work: _Work, actors: list, infos: list[dict]) -> dict:
    """Search the chunks of ``stream`` (:func:`_read_ahead`); each chunk's merge task merges its
    shard lists and writes its part. Returns the search's timings (:func:`settopk.jobs.search.search_chunks`)."""
    cfg = job.cfg
    todo = [c for c in work.chunks if c.index not in work.done]
    bar = progress_bar("search", sum(c.hi - c.lo for c in todo), "queries", job.args.quiet)
    # Excluding self, the shards search k + 1 per query and the merge tasks drop each
    # query's own doc (exact: see settopk.shards.drop_own_docs).
    # Sized by the rows a query can get (min(k, n_docs)), not by k: a large k on a small corpus
    # costs nothing.
    if cfg.threshold is not None:
        cap = threshold_cap(job.args)
        metadata = {"settopk.run_id": job.run_id, "settopk.threshold": cfg.threshold, "settopk.k": str(cap)}
        timings = search_chunks(actors, infos, plan, stream, cfg, cluster.backend, work.path, metadata, bar, cap=cap)
        bar.close()
        return timings
    search_cfg = dataclasses.replace(cfg, k=work.rows_per_query + 1 if job.exclude_self else work.rows_per_query)
    metadata = {"settopk.run_id": job.run_id, "settopk.k": str(cfg.k)}
    timings = search_chunks(actors, infos, plan, stream, search_cfg, cluster.backend, work.path, metadata, bar)
    bar.close()
    return timings


_HELD = ("shard_pairs_max", "merge_piece_pairs_max", "batch_size_min", "first_call_queries")


def _commit(job: Job, cluster: Cluster, plan: list, valid: Validated, facts: _CorpusFacts, rejected, work: _Work,
            infos: list[dict], clock: PhaseClock, from_shards=None) -> dict:
    """Check every part, write the TSV and the run record (manifest, quarantined lines), and
    rename the work directory into place as the result; returns the manifest. ``from_shards``:
    a ``--dedup`` run's shard groups (:func:`settopk.jobs.dedup.shard_groups`)."""
    import ray

    cfg, args, target, queries = job.cfg, job.args, job.target, valid.queries
    total_rows = check_parts(work.path, work.chunks, work.rows_per_query)
    dedup_stage = dedup_section = None
    if getattr(args, "dedup", False):
        # Before the TSV and the manifest: the groups' counts go into it, and a failure here
        # (too many pairs for one node) leaves the parts in place for a rerun.
        drop_resume_key(work.path)
        if args.tsv:
            write_tsv(args.tsv, (read_part_pair_ids(work.path, c.index) for c in work.chunks))
        dedup_stage, dedup_section = stage_dedup(Location.real(work.path), [part_name(c.index) for c in work.chunks],
                                                 target.out_dir, chunk_edges=cfg.output.pairs_per_piece,
                                                 from_shards=from_shards)
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
            "k": cfg.k if cfg.threshold is None else threshold_cap(args),
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
    if cfg.threshold is not None:
        manifest["threshold"] = threshold_section(cfg, args, total_rows)
        # Pair counts, not seconds: what bounded the run's memory (settopk.jobs.search.search_chunks).
        manifest["threshold"]["held"] = {key: int(manifest["timings_s"].pop(key)) for key in _HELD
                                         if key in manifest["timings_s"]} | {"pairs_per_piece": cfg.output.pairs_per_piece}
        manifest["counts"]["pairs"] = total_rows
    if dedup_section is not None:
        manifest["dedup"] = dedup_section
        target.commit(dedup_stage, manifest, rejected if cfg.on_invalid == "quarantine" else None)
        return manifest
    if args.tsv:
        # Before the dataset: its _SUCCESS then means the whole run is done, so a rerun
        # after a failed TSV write recomputes instead of skipping.
        if work.rows_per_query is None:  # a threshold run: each query's line lists its pairs' docs
            write_tsv(args.tsv, (read_part_pair_ids(work.path, c.index) for c in work.chunks))
        else:
            write_tsv(args.tsv, (read_part_doc_ids(work.path, c.index, work.rows_per_query) for c in work.chunks))
    drop_resume_key(work.path)
    target.commit(work.path, manifest, rejected if cfg.on_invalid == "quarantine" else None)
    return manifest


def run(args, searcher_cls: type = ShardSearcher) -> dict:
    """Run the job for parsed arguments.

    Parameters
    ----------
    args : argparse.Namespace
        As parsed by :func:`settopk.jobs.score.build_parser` (:func:`settopk.score` builds the
        same namespace from keyword arguments).
    searcher_cls : type
        The class each shard actor wraps: :class:`settopk.shards.ShardSearcher`, or a subclass of it
        (the chaos tests pass one that fails on purpose).

    Returns
    -------
    dict
        ``status``: ``"done"`` (the run wrote its result), ``"no-op"`` (``out`` already held a
        finished result of the same inputs and settings) or ``"dry-run"``; ``out``: the result
        directory as given (a URI's credentials are never shown). For ``done`` and ``no-op``,
        ``manifest``: the result's manifest (counts, fingerprints, timings in seconds, shards;
        :func:`settopk.jobs.manifest.build_manifest`). For ``dry-run``, ``plan``: the plan's
        lines and ``no_op``: whether the real run would do nothing.

    Raises
    ------
    settopk.errors.SettopkError
        Bad input, config, arguments or output path (nothing written).
    Exception
        Any other failure of the run (nothing written; a rerun resumes from the committed chunks).
    """
    pool = ShardPool()
    try:
        return _run(args, pool, searcher_cls)
    finally:
        pool.release()  # also when the read fails: the bundles were reserved before it


def _run(args, pool: ShardPool, searcher_cls: type) -> dict:
    """The stages in order; each phase is timed and logged (:class:`settopk.jobs.progress.PhaseClock`)."""
    clock = PhaseClock()
    args = locate_args(args)  # every path and URI a Location from here on
    check_outputs_absolute_under_ray_job(args)
    job = settle(args, clock.started)
    if isinstance(job, NoOp):
        return {"status": "no-op", "out": str(job.target.out_dir), "manifest": job.target.read_manifest()}
    try:
        return _run_settled(job, clock, pool, searcher_cls)
    finally:
        job.target.release()


def _run_settled(job: Job, clock: PhaseClock, pool: ShardPool, searcher_cls: type) -> dict:
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
        no_op = job.target.decision is Decision.NO_OP
        return {"status": "dry-run", "out": str(job.target.out_dir), "plan": lines, "no_op": no_op}
    job, work = _open_work(job, valid, facts, lines)
    # The workers are held until each actor answers, that is, until it has loaded its shard.
    prestart_merge_workers(len(pool.actors), len(work.chunks) - len(work.done), [a.info.remote() for a in pool.actors])
    stream = _read_ahead(job, valid.queries, work)  # the first window is read while the shards load
    try:
        with clock.phase("load", since=load_started):  # load_s: from the plan, across the validation's wait
            infos = _wait_loaded(job, plan, pool)
        with clock.phase("search"):
            clock.timings.update(_search(job, cluster, plan, stream, work, pool.actors, infos))
        # --dedup: the shards' own groups, asked for before the actors go (settopk.jobs.dedup).
        from_shards = shard_groups(pool.actors, infos, plan, job.cfg, threshold_cap(args)) \
            if getattr(args, "dedup", False) else None
        infos = gather(pool.actors, infos, lambda a: a.info.remote(), "final info", job.cfg.faults.search_timeout_s, 1, 0.0)
    finally:
        stream.close()
        pool.release()  # the GPUs are free before the commit
        del corpus  # frees the pieces' docs in the object store
    with clock.phase("commit"):
        manifest = _commit(job, cluster, plan, valid, facts, rejected, work, infos, clock, from_shards)
    clock.stamp_total()
    _log_done(job, cluster, plan, valid, facts, manifest["counts"]["rows"], clock.timings)
    return {"status": "done", "out": str(job.target.out_dir), "manifest": manifest}


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
        job, cluster = connect(job)
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


def check_outputs_absolute_under_ray_job(args) -> None:
    """Under ``ray job submit`` the driver's working directory is Ray's temporary copy of
    ``--working-dir``, gone with the head: refuse a relative ``--out`` (its default included)
    or ``--tsv`` there rather than write the result where nobody finds it. A URI
    (``s3://...``) is not relative to anything and passes."""
    submission_id = ray_submission_id()
    if submission_id is None:
        return
    for flag, value in (("--out", args.out), ("--tsv", args.tsv)):
        if value is not None and value.relative:
            default = " (the default)" if flag == "--out" and value.full == DEFAULT_OUT else ""
            raise UsageError(
                f"{flag} {value}{default} is a relative path, and this driver runs under the Ray job {submission_id}, "
                f"whose working directory is Ray's temporary copy of the job's --working-dir ({os.getcwd()}): the result "
                f"would be lost with it; give an absolute path or a URI for {flag}, on storage every node of the cluster "
                "reaches, e.g. --out /mnt/shared/settopk-results"
            )


def _log_done(job: Job, cluster: Cluster, plan: list, valid: Validated, facts: _CorpusFacts, total_rows: int,
              timings: dict) -> None:
    """The run's last log line: what was searched, where the result went, and the phase times."""
    phases = ("validate_s", "connect_s", "read_s", "load_s", "search_s", "merge_s", "write_s", "commit_s", "total_s")
    log.info(
        "done: run %s: %d queries x %d docs, %s, %d rows -> %s | backend %s, %d shard(s) | %s",
        job.run_id, valid.queries.n_queries, facts.n_docs, _what(job), total_rows, shown_absolute(job.target.out_dir),
        cluster.backend, len(plan),
        " ".join(f"{key}={timings[key]:.3f}" for key in phases) + f" driver_max_rss_bytes={max_rss_bytes()}",
    )


def _plan_lines(plan, backend: str, cfg: settopk.configs.JobConfig, n_docs: int, n_queries: int) -> list[str]:
    copies = f" x {cfg.replicas} replicas" if cfg.replicas > 1 else ""
    join = self_join_note(cfg) if cfg.self_join else ""
    what = f"k={cfg.k}" if cfg.threshold is None else f"threshold {cfg.threshold}"
    lines = [f"plan: {n_docs} docs, {n_queries} queries{join}, {what}, score {cfg.score}, routing {cfg.routing}, "
             f"backend {backend}, {len(plan)} shard(s){copies}"]
    for s in plan:
        lines.append(f"  shard {s.shard_id}: lengths {s.min_len}..{s.max_len}, {s.n_docs} docs, {s.n_tokens} ids")
    return lines


def _what(job: Job) -> str:
    """What the run searched for, for the last log line: ``k=K``, or the threshold and its cap."""
    if job.cfg.threshold is None:
        return f"k={job.cfg.k}"
    cap = threshold_cap(job.args)
    return f"threshold {job.cfg.threshold}" + (f" (at most {cap} per query)" if cap is not None else "")
