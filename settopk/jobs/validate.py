"""The validate stage: what the run does, and its queries checked before anything is written.

:func:`settle` reads the config and the arguments, decides where the result goes and
which inputs to read (given, or the config's synthetic corpus), and stops a run whose
output is already complete. :func:`validate` makes the one pass over the queries (a
self-join's: the corpus's docs) that checks every set and counts them, and fingerprints
the inputs. The job runs it in a driver thread (:class:`ValidationThread`) while the
cluster reads the corpus and the shard actors load it; bad input stops those and writes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import os
import threading
import time
from dataclasses import dataclass

import pyarrow

import settopk.configs
from settopk.errors import SettopkError
from settopk.kernels.threshold import parse_threshold
from settopk.shards.location import Location
from settopk.shards.inputs import DocQueryStream, InputError, QueryStream, SetLimits, fingerprint, plan_pieces, query_files

from .manifest import new_run_id, ray_submission_id
from .target import RESULT_SETTINGS, Decision, Target, ThisRun
from .threshold_job import threshold_config

__all__ = ["UsageError", "Inputs", "Job", "NoOp", "Validated", "ValidationThread", "check_gpus", "gpu_layout", "locate_args", "settle", "validate",
           "check_unchanged_since", "self_join_note"]

_LOCATION_ARGS = ("docs", "queries", "out", "tsv")


log = logging.getLogger("settopk")


class UsageError(ValueError, SettopkError):
    """Command-line arguments that do not fit together or with the config."""


def locate_args(args) -> argparse.Namespace:
    """``args`` with its paths and URIs (``docs``, ``queries``, ``out``, ``tsv``) as
    :class:`~settopk.shards.location.Location` s: where they enter the job. Everything below
    takes those, whose display form hides any credential a URI holds."""
    values = vars(args).copy()
    for name in _LOCATION_ARGS:
        if values.get(name) is not None:
            values[name] = Location.of(values[name])
    return argparse.Namespace(**values)


@dataclass
class Inputs:
    """The input paths: given, or the config's synthetic corpus (generated once)."""

    docs_path: Location
    queries_path: Location | None  # None for a self-join: the queries are the docs
    synthetic: bool


def _resolve_inputs(args, cfg: settopk.configs.JobConfig) -> Inputs:
    if cfg.self_join:  # --queries with it was refused before (_check_self_join_args)
        if args.docs is not None:
            return Inputs(args.docs, None, synthetic=False)
    elif (args.docs is None) != (args.queries is None):
        raise InputError("give both --docs and --queries, or neither (to run on the config's synthetic corpus)")
    elif args.docs is not None:
        return Inputs(args.docs, args.queries, synthetic=False)
    from .synthetic import SyntheticSpec, ensure_synthetic

    s = cfg.synthetic
    problems = settopk.configs.synthetic_problems(s, cfg.vocab_size)
    if problems:
        raise settopk.configs.ConfigError(
            f"{args.config}: {'; '.join(problems)}; this run uses the config's synthetic corpus (no --docs/--queries): "
            "lower synthetic.vocab_size or raise vocab_size, or give --docs and --queries")
    shared = {f.name for f in dataclasses.fields(SyntheticSpec)} - {"max_len"}  # cache_dir is the config's only extra
    spec = SyntheticSpec(max_len=cfg.max_len, **{name: getattr(s, name) for name in shared})
    log.info("no --docs/--queries: using the synthetic corpus %s (generated once into %s)", spec, s.cache_dir)
    docs, queries = ensure_synthetic(spec, os.path.expanduser(s.cache_dir))
    return Inputs(Location.of(docs), None if cfg.self_join else Location.of(queries), synthetic=True)


def _check_self_join_args(args) -> None:
    """A self-join takes its queries from the corpus: refuse ``--queries`` with it."""
    if args.queries is not None:
        raise UsageError(
            f"--queries {args.queries} was given with a self-join (--self-join, or self_join: true in the config): "
            "a self-join takes its queries from the corpus (--docs); drop --queries, or drop the self-join to search those queries"
        )


def _check_threshold_arg(value, score: str) -> None:
    """Refuse a ``--threshold`` outside ``score``'s range naming the option, not the config file."""
    try:
        parse_threshold(value, score)
    except ValueError as e:
        raise UsageError(f"argument --threshold: {e}") from None


def _check_dedup_args(args, cfg: settopk.configs.JobConfig, target) -> None:
    """``--dedup`` groups a threshold self-join's pairs: refuse it without both, or where its three
    datasets cannot be committed together (one rename of a local directory)."""
    missing = [flag for flag, on in (("--self-join", cfg.self_join), ("--threshold", cfg.threshold is not None)) if not on]
    if missing:
        raise UsageError(f"--dedup groups the pairs of a threshold self-join, so it needs --self-join and --threshold; "
                         f"found no {' and no '.join(missing)}; add {' and '.join(missing)} (e.g. --self-join "
                         "--threshold 0.8 --score jaccard), or drop --dedup")
    if target.day is not None or not target.out_dir.renames:
        where = "a partitioned (dt=) config" if target.day is not None else f"--out {target.out_dir} on object storage"
        raise UsageError(f"--dedup commits DIR/pairs, DIR/groups and DIR/duplicates together by renaming one local "
                         f"directory; found {where}; give a local or shared-filesystem --out DIR, with an "
                         "unpartitioned config (e.g. a dated --out for a nightly run)")


def _target(args, cfg: settopk.configs.JobConfig, now: datetime.datetime) -> Target:
    if cfg.output.partition == "dt":
        return Target.of(args.out, args.date or now.date())  # `now` is UTC: the partition of a run is its UTC day
    if args.date is not None:
        raise UsageError(
            f"--date {args.date.isoformat()} needs a config whose output.partition is 'dt' "
            f"(config {args.config!r} writes --out directly); use --config nightly or drop --date"
        )
    return Target.of(args.out)


@dataclass
class Job:
    """What the run was asked to do, settled before any input is read."""

    args: argparse.Namespace
    cfg: settopk.configs.JobConfig  # query_batch_size resolved once the backend is known (settopk.jobs.score)
    target: Target  # holds the output's lock (none for --dry-run) until the run ends
    inputs: Inputs
    limits: SetLimits
    run_id: str  # the resumed run's id replaces it (settopk.jobs.score)
    submission_id: str | None

    @property
    def lock(self):
        """The output's lock (None for ``--dry-run``): :attr:`settopk.jobs.target.Target.lock`."""
        return self.target.lock

    @property
    def exclude_self(self) -> bool:
        """A self-join that leaves each doc out of its own results."""
        return self.cfg.self_join and not self.cfg.include_self


@dataclass(frozen=True)
class NoOp:
    """What :func:`settle` returns where the output already holds a finished result of the same
    inputs and settings: there is nothing to do."""

    target: Target


@dataclass
class Validated:
    """The validate stage's result: the queries (validated, read again chunk by chunk later) and
    the inputs' fingerprints."""

    queries: QueryStream | DocQueryStream
    fingerprints: dict
    start_ns: int  # when the driver began reading the inputs: files modified later are refused


def settle(args, started: datetime.datetime) -> Job | NoOp:
    """Settle what the run does before reading any input: config, output target, run id, input
    paths, the output's lock.

    Parameters
    ----------
    args : argparse.Namespace
        As parsed by :func:`settopk.jobs.score.build_parser`, its paths made locations
        (:func:`locate_args`).
    started : datetime.datetime
        Start of the run, UTC (the partition date and the default run id come from it).

    Returns
    -------
    Job or NoOp
        :class:`NoOp` where ``--out`` already holds a finished result of the same inputs and
        settings (nothing to do). A returned job's target holds the output's lock and its decision
        (:class:`settopk.jobs.target.Target`); the caller releases the lock (``job.target.release()``).

    Raises
    ------
    settopk.configs.ConfigError, UsageError, settopk.jobs.output.OutputExistsError, settopk.jobs.output.PathError, settopk.shards.inputs.InputError
        For a bad config, arguments that do not fit together, an output path that is not
        the job's, overlaps an input, cannot be written or is locked by another run, a
        finished result of other inputs or settings at ``--out``, or missing inputs.
    """
    flags = ("k", "score", "backend", "routing", "n_shards", "replicas", "query_batch_size", "threshold")  # dest = key
    overrides = {name: getattr(args, name, None) for name in flags if getattr(args, name, None) is not None}
    overrides.update({name: True for name in ("self_join", "include_self") if getattr(args, name, False)})
    if "threshold" in overrides:
        _check_threshold_arg(overrides["threshold"], settopk.configs.load_config(args.config, {
            name: value for name, value in overrides.items() if name != "threshold"}).score)
    cfg = settopk.configs.load_config(args.config, overrides)
    if getattr(args, "gpus", None) is not None:
        cfg = settopk.configs.load_config(args.config, {**overrides, **gpu_layout(args, cfg)})
    if cfg.self_join:
        _check_self_join_args(args)  # before the no-op check: a wrong command fails whatever --out holds
    cfg = threshold_config(cfg, getattr(args, "k", None))  # only an explicit --k caps a threshold run
    target = _target(args, cfg, started)
    if getattr(args, "dedup", False):
        _check_dedup_args(args, cfg, target)
    target.check_root()  # first: a store that cannot be reached fails here, with the reason
    inputs = _resolve_inputs(args, cfg)
    target.check_paths({"--docs": inputs.docs_path, "--queries": inputs.queries_path}, args.tsv)
    submission_id = ray_submission_id()
    run_id = args.run_id or submission_id or new_run_id(started)
    if not args.dry_run:
        target.take_lock(run_id)
    try:
        dedup = bool(getattr(args, "dedup", False))
        # --dry-run decides too: a directory that is not a settopk result is refused before Ray starts.
        this_run = None if args.dry_run else (lambda: _this_run(target, inputs, cfg, dedup))
        if target.decide(args.force, this_run) is Decision.NO_OP and not args.dry_run:
            log.info("done: %s already holds a finished result of these inputs and settings; nothing to do "
                     "(use --force to recompute)", target.out_dir)
            target.release()
            return NoOp(target)
        limits = SetLimits(vocab_size=cfg.vocab_size, max_len=cfg.max_len)
        return Job(args, cfg, target, inputs, limits, run_id, submission_id)
    except BaseException:
        target.release()
        raise


def gpu_layout(args, cfg: settopk.configs.JobConfig) -> dict:
    """The config keys ``--gpus N`` sets: backend ``cupy``, and shards x replicas that use exactly N GPUs.

    ``--replicas`` (default 1 with ``--gpus``, whatever the config says) stays; the shards are
    ``N / (replicas * gpus_per_shard)``, or ``--shards`` where given, which must then use the N
    GPUs exactly. Whether the cluster has N GPUs is checked once the job is connected
    (:func:`check_gpus`).

    Parameters
    ----------
    args : argparse.Namespace
        ``gpus``, ``n_shards``, ``replicas``, ``backend``, ``config``.
    cfg : settopk.configs.JobConfig
        The config with the other flags applied.

    Returns
    -------
    dict
        ``backend``, ``n_shards`` and ``replicas`` overrides.

    Raises
    ------
    UsageError
        For a CPU backend, or a layout that does not use exactly N GPUs.
    """
    n = args.gpus
    if cfg.backend not in ("cupy", "auto"):
        source = "--backend" if getattr(args, "backend", None) else f"config {args.config!r}"
        raise UsageError(f"--gpus {n} needs backend cupy or auto, found backend {cfg.backend!r} ({source}); "
                         "drop --gpus for a CPU run, or use --backend cupy")
    replicas = getattr(args, "replicas", None) or 1
    per_shard = cfg.gpus_per_shard
    shards = getattr(args, "n_shards", None)
    if shards not in (None, "auto"):
        if abs(shards * replicas * per_shard - n) > 1e-9:
            raise UsageError(f"--gpus {n} with --shards {shards} x {replicas} replica(s) x gpus_per_shard {per_shard:g} uses "
                             f"{shards * replicas * per_shard:g} GPU(s), expected {n}; drop --shards (then --gpus sets it) or make them agree")
        return {"backend": "cupy", "n_shards": shards, "replicas": replicas}
    exact = n / (replicas * per_shard)
    if round(exact) < 1 or abs(round(exact) - exact) > 1e-9:
        raise UsageError(f"--gpus {n} is not a whole number of shards of {replicas} replica(s) x gpus_per_shard {per_shard:g}; "
                         f"expected a multiple of {replicas * per_shard:g} GPUs, found {n}; change --gpus or --replicas")
    return {"backend": "cupy", "n_shards": int(round(exact)), "replicas": replicas}


def check_gpus(args, resources: dict) -> None:
    """Refuse ``--gpus N`` on a cluster with fewer than N GPUs (``ray.cluster_resources()``),
    before any actor waits for them."""
    n = getattr(args, "gpus", None)
    have = float(resources.get("GPU", 0))
    if n is not None and have + 1e-9 < n:
        raise UsageError(f"--gpus {n}: expected a Ray cluster with at least {n} GPU(s), found {have:g} "
                         f"(resources: {resources}); lower --gpus, or run on a cluster with {n} GPUs")


def _this_run(target: Target, inputs: Inputs, cfg: settopk.configs.JobConfig, dedup: bool) -> ThisRun:
    """What this run asks for, to compare with the finished result at the target: the inputs'
    fingerprints now and the settings a result depends on."""
    # The files set aside are recorded as shown; compared by key, without credentials, so that a
    # rerun after a key rotation is still the same run.
    rejected = {Location.of(path).key for path in target.rejected_inputs("queries")}
    docs_files = plan_pieces(inputs.docs_path, 1)[2]
    docs = fingerprint(docs_files, inputs.docs_path)
    if cfg.self_join:
        queries = docs
    else:
        queries = fingerprint([f for f in query_files(inputs.queries_path) if f.key not in rejected], inputs.queries_path)
    settings = {key: getattr(cfg, key) for key in RESULT_SETTINGS}
    return ThisRun({"docs": docs, "queries": queries}, settings, dedup)


def validate(job: Job, start_ns: int | None = None) -> Validated:
    """Validate the queries in one pass (for a self-join: the corpus's docs) and fingerprint the inputs.

    The corpus's rows are checked by the reader tasks (:mod:`settopk.shards.reading`), while this runs
    (:class:`ValidationThread`).

    Parameters
    ----------
    job : Job
    start_ns : int, optional
        When the run began reading its inputs (``time.time_ns()``; default: now): files
        modified later are refused.

    Raises
    ------
    settopk.shards.inputs.InputError
        For a bad query (with ``on_invalid: error``), no queries, a self-join with too few
        docs, or a query file modified while the driver read it.
    """
    cfg, inputs = job.cfg, job.inputs
    start_ns = time.time_ns() if start_ns is None else start_ns
    if cfg.self_join:  # the corpus itself, validated as the readers will
        queries = DocQueryStream(inputs.docs_path, job.limits, on_invalid=cfg.on_invalid)
    else:
        queries = QueryStream(inputs.queries_path, job.limits, on_invalid=cfg.on_invalid)
    _, _, doc_files = plan_pieces(inputs.docs_path, 1)  # the corpus's files and footers
    check_unchanged_since(start_ns, queries.files)
    if cfg.self_join:
        _check_self_join_size(inputs.docs_path, queries.n_queries, job.exclude_self)
    elif queries.n_queries == 0:
        raise InputError(f"{inputs.queries_path}: no queries found; expected at least one")
    fingerprints = {"docs": fingerprint(doc_files, inputs.docs_path)}
    # A self-join's queries are the docs: the same files, the same fingerprint.
    fingerprints["queries"] = fingerprints["docs"] if cfg.self_join else fingerprint(queries.files, inputs.queries_path)
    return Validated(queries, fingerprints, start_ns)


class ValidationThread:
    """:func:`validate` in a thread of the driver, started before the cluster work.

    The pass reads the queries with Arrow and NumPy (which release the GIL) while the
    driver's main thread waits on Ray for the corpus's readers and the shard actors' loading,
    so neither waits for the other. :meth:`result` joins it.

    Parameters
    ----------
    job : Job
    start_ns : int
        As :func:`validate` takes it.

    Attributes
    ----------
    seconds : float or None
        The pass's own time, once it has ended.
    """

    def __init__(self, job: Job, start_ns: int):
        self.seconds: float | None = None
        self._result: Validated | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(job, start_ns), name="settopk-validate", daemon=True)
        self._thread.start()

    def _run(self, job: Job, start_ns: int) -> None:
        t = time.perf_counter()
        try:
            self._result = validate(job, start_ns)
        except BaseException as exc:  # handed to the driver's thread by result()
            self._error = exc
        finally:
            self.seconds = time.perf_counter() - t
            # Arrow's allocator keeps what the pass's decoding freed (a whole pass's batches): give it back
            # to the system before the search phase reads the queries again.
            pyarrow.default_memory_pool().release_unused()

    def error(self) -> BaseException | None:
        """Wait for the pass; the exception it raised, or None."""
        self._thread.join()
        return self._error

    def result(self) -> Validated:
        """Wait for the pass and return its :class:`Validated`.

        Raises
        ------
        settopk.shards.inputs.InputError
            What :func:`validate` raised.
        """
        error = self.error()
        if error is not None:
            raise error
        return self._result


def check_unchanged_since(start_ns: int, files) -> None:
    """Refuse inputs modified after ``start_ns`` (while the driver read them): the validated
    data and what the actors will read could differ.

    A URI's object is skipped: its time comes from the store's clock, not the driver's; the
    fingerprints and each piece's size and time, checked again when read, cover it."""
    for path in map(Location.of, files):
        if not path.local:
            continue
        if os.stat(path.path).st_mtime_ns > start_ns:
            raise InputError(
                path, "input files that stay unchanged while the job runs", "a file modified while the job was reading it",
                "run the job once the input is completely written (write it elsewhere, then move it into place)",
            )


def self_join_note(cfg: settopk.configs.JobConfig) -> str:
    """`` (self-join: every doc is a query, ...)``, for log lines and the manifest."""
    own = "each doc included in its own results" if cfg.include_self else "each doc left out of its own results"
    return f" (self-join: every doc is a query, {own})"


def _check_self_join_size(docs_path: Location, n_docs: int, exclude_self: bool) -> None:
    """Refuse a self-join that would write no row at all: no docs, or one doc without itself."""
    if n_docs == 0:
        raise InputError(f"{docs_path}: the corpus has no docs; expected at least one")
    if exclude_self and n_docs < 2:
        raise InputError(
            f"{docs_path}: self-join needs at least 2 docs (each doc is searched against the others), found {n_docs}; "
            "add docs, or keep each doc in its own results with --include-self"
        )
