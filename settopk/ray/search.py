""":func:`search`: exact top-k of every query of a Ray Data dataset, as a dataset of result rows."""

from __future__ import annotations

import functools
import inspect
import logging

import pyarrow as pa
import ray

from settopk.configs import AUTO_QUERY_BATCH_SIZE
from settopk.shards.inputs import InputError

from .corpus import CorpusHandle, check_search_settings, load_corpus, resolve_backend
from .stage import ROWS, ShardSearch, result_rows

__all__ = ["search"]

log = logging.getLogger("settopk")
# Settings of the corpus: taken from a CorpusHandle when one is passed as docs, so they may not be passed again.
_CORPUS_SETTINGS = ("k", "score", "n_shards", "backend", "routing", "max_len", "vocab_size", "on_invalid")
_GPU_CALLS_AT_ONCE = 2  # as settopk.jobs.shard_pool's GPU actors
_RUN_AHEAD_BLOCKS = 32  # least blocks the repartition task may yield ahead of the executor (Ray's default: 2)
_MISSING = object()
# Queries per block on a GPU pool: each block pays Ray Data's per-block steps (a task, its result
# put and taken by the row-building task) on top of the index's per-batch steps, so a block holds
# four of the job's batches to keep those steps small beside the search (the measurements:
# docs/benchmarks.md, "The library and Ray Data against the kernel and the job").
_GPU_BLOCK_QUERIES = 16_384
# Queries per block of result rows (the job's chunk of a GPU batch): a searched block larger than
# this is cut before its rows are built and written, so a block's rows are written by several
# tasks at once, and what is left after the last search (the last block's rows and write) is one
# of these, not a whole search block.
_ROWS_BLOCK_QUERIES = 4096
_DEFAULTS = {"k": 100, "score": "braun_blanquet", "n_shards": 1, "backend": "auto", "routing": "scan", "max_len": 128,
             "vocab_size": 65536, "on_invalid": "error"}


def search(queries, docs, *, k: int | None = None, score: str | None = None, replicas: int = 1, n_shards: int | None = None,
           backend: str | None = None, rows: str = "per_rank", batch_size: int | None = None, num_cpus: float = 1.0,
           num_gpus: float | None = None, id_column: str = "query_id", tokens_column: str = "tokens",
           routing: str | None = None, max_len: int | None = None, vocab_size: int | None = None,
           on_invalid: str | None = None, searcher_cls: type = ShardSearch):
    """Exact top-k set-similarity search of every query of a dataset against a corpus, on pools of Ray actors.

    The corpus is read now, by Ray tasks, into the object store (:func:`settopk.ray.load_corpus`);
    the queries are searched when the returned dataset runs (``write_parquet``, ``take``, ...). Each
    of the ``n_shards`` length-bucket shards is a ``map_batches`` stage on a fixed pool of
    ``replicas`` actors (:class:`settopk.ray.ShardSearch`), each holding its shard's index, built
    once from the object store; each stage merges its lists into the previous stages' exactly.
    Results equal the job's (``settopk score``) on the same inputs: ranked by ``score`` descending,
    then doc id ascending. Rows come in no particular order (Ray Data's default); each carries its
    ``query_id``. A pool actor that dies is restarted and its batches searched again.

    Parameters
    ----------
    queries : ray.data.Dataset
        One row per query: ``id_column`` (string or integer, written as strings; not checked for
        uniqueness) and ``tokens_column`` (list of integer token ids; order and repeats do not matter).
    docs : str, os.PathLike, pyarrow.Table, ray.data.Dataset or CorpusHandle
        The corpus in one of the job's formats (``docs.txt``, or Parquet with ``doc_id`` and ``tokens``),
        a local path or a URI; a table or a dataset with ``doc_id`` and ``tokens``, put into the
        object store once and checked row by row as a Parquet file (:func:`settopk.ray.load_corpus`);
        or a :class:`settopk.ray.CorpusHandle` already loaded (its settings
        then apply, and ``k``, ``score``, ``n_shards``, ``backend``, ``routing``, ``max_len``,
        ``vocab_size`` and ``on_invalid`` may not be passed).
    k : int
        Results per query, in ``[1, 32767]`` (default 100).
    score : str
        What to rank by, one of :data:`settopk.kernels.SCORES` (default ``"braun_blanquet"``).
    replicas : int
        Actors in each shard's pool (each holds the whole shard and searches a share of the batches).
    n_shards : int
        Most length-bucket shards (default 1): more when the corpus does not fit one actor's memory.
    backend : str
        ``"auto"`` (default: ``"cupy"`` on a cluster with GPUs, else ``"cpu"``), ``"cupy"``, ``"cpu"`` or ``"numpy"``.
    rows : str
        ``"per_rank"`` (default): one row per (query, rank) with the job's columns and types
        (:data:`settopk.jobs.output.RESULT_SCHEMA`); ``"per_query"``: one row per query with list
        columns (:data:`settopk.ray.PER_QUERY_SCHEMA`).
    batch_size : int, optional
        Queries per call to an actor, one block each (default: 16,384 with cupy, fewer and larger blocks
        than the job's 4096 since each block also pays Ray Data's own steps; the job's 512 with cpu
        and 256 with numpy). Rows are built and written in blocks of at most 4096 queries, each
        searched block cut into as many.
    num_cpus : float
        CPUs each actor reserves (default 1; also the threads of a ``"cpu"`` index). Leave some of
        the cluster's CPUs to Ray Data's read and write tasks.
    num_gpus : float, optional
        GPUs each actor reserves (default 1 for ``"cupy"``, else 0).
    id_column, tokens_column : str
        The query columns.
    routing : str
        One of :data:`settopk.kernels.postings.ROUTINGS` (default ``"scan"``).
    max_len, vocab_size : int
        Every set holds at most ``max_len`` (default 128, at most 4096) distinct ids, each in
        ``[0, vocab_size)`` (default 65536; up to 2**24).
    on_invalid : str
        Bad docs: ``"error"`` (default) or ``"quarantine"`` (left out). A bad query always raises.
    searcher_cls : type
        :class:`settopk.ray.ShardSearch` or a subclass of it (to instrument the actors).

    Returns
    -------
    ray.data.Dataset
        Lazy: the search runs when the dataset is consumed.

    Raises
    ------
    ValueError
        A setting out of its range, or more CPUs or GPUs asked for than the cluster has (the
        message says which and what to lower).
    TypeError
        ``queries`` not a Dataset, ``docs`` neither a path, a table, a dataset nor a CorpusHandle,
        or ``searcher_cls`` not a ShardSearch.
    settopk.shards.inputs.InputError
        A query column missing or of a wrong type (from ``queries.schema()``, before anything
        runs). A bad doc (the file and row or line named), a missing corpus or an empty one. A bad
        query value (an id out of range, a set too long) raises when the dataset runs, naming the column.

    Notes
    -----
    When a run fails, its pool actors, and the CPUs and GPUs they reserve, live as long as the
    exception's traceback does: it reaches Ray Data's executor, which holds them. An interactive
    shell keeps the last one (``sys.last_value``, ``sys.last_traceback``; ``sys.last_exc`` from
    Python 3.12), so after a failed run in a notebook a new run may wait for the GPUs the old pool
    still holds. Set those to None and call ``gc.collect()`` before running again (checked with
    Ray 2.60: the actor's CPUs came back; the test suite waits for them for the same reason).
    """
    if not isinstance(queries, ray.data.Dataset):
        raise TypeError(f"queries must be a ray.data.Dataset with columns '{id_column}' and '{tokens_column}', "
                        f"found {type(queries).__name__}; make one with ray.data.read_parquet or ray.data.from_items")
    if not (isinstance(searcher_cls, type) and issubclass(searcher_cls, ShardSearch)):
        raise TypeError(f"searcher_cls must be settopk.ray.ShardSearch or a subclass of it, found {searcher_cls!r}")
    if rows not in ROWS:
        raise ValueError(f"rows must be one of {', '.join(ROWS)}, found {rows!r}")
    for name, value in (("replicas", replicas), ("batch_size", batch_size)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{name} must be an integer >= 1, found {value!r}")
    if not num_cpus >= 0 or (num_gpus is not None and not num_gpus >= 0):
        raise ValueError(f"num_cpus and num_gpus must be >= 0, found {num_cpus!r} and {num_gpus!r}")
    _check_columns(queries, id_column, tokens_column)
    given = {name: value for name, value in zip(_CORPUS_SETTINGS, (k, score, n_shards, backend, routing, max_len, vocab_size, on_invalid))
             if value is not None}
    if isinstance(docs, CorpusHandle):
        if given:
            raise ValueError(f"docs is a CorpusHandle, whose settings apply; do not pass {sorted(given)} as well "
                             "(load the corpus again with settopk.ray.load_corpus to change them)")
        corpus = docs
        num_gpus = (1.0 if corpus.backend == "cupy" else 0.0) if num_gpus is None else num_gpus
        _check_resources(corpus.n_shards * replicas, num_cpus, num_gpus)
    else:
        settings = {**_DEFAULTS, **given}
        check_search_settings(*(settings[name] for name in ("k", "score", "backend", "routing", "max_len", "vocab_size")))
        if not ray.is_initialized():
            ray.init()
        settings["backend"] = resolve_backend(*(settings[name] for name in ("backend", "routing", "max_len")))
        num_gpus = (1.0 if settings["backend"] == "cupy" else 0.0) if num_gpus is None else num_gpus
        if isinstance(settings["n_shards"], int):  # else load_corpus says what is wrong with it
            # Before the corpus is read: the plan has at most n_shards shards.
            _check_resources(settings["n_shards"] * replicas, num_cpus, num_gpus)
        corpus = load_corpus(docs, threads=max(1, int(num_cpus)), **settings)
    batch_size = batch_size or (_GPU_BLOCK_QUERIES if corpus.backend == "cupy" else AUTO_QUERY_BATCH_SIZE.get(corpus.backend, 512))
    # Blocks of one batch each: a pool gets as many tasks as batches, spread over its actors (a
    # block is one task, and a file read as one block would keep one actor busy and the others idle).
    dataset = queries.repartition(target_num_rows_per_block=batch_size)
    _let_repartition_run_ahead(dataset, replicas * (_GPU_CALLS_AT_ONCE if corpus.backend == "cupy" else 1))
    for shard in range(corpus.n_shards):
        options = {"num_gpus": num_gpus} if num_gpus else {}
        compute = _pool(replicas, _GPU_CALLS_AT_ONCE if corpus.backend == "cupy" else 1, options)  # may add to options
        # Ray Data restarts a pool actor that dies and sends its batches again (its defaults:
        # max_restarts=-1, max_task_retries=-1); the new actor takes its shard from the holder.
        dataset = dataset.map_batches(
            searcher_cls,
            fn_constructor_kwargs={"corpus": corpus, "shard": shard, "id_column": id_column, "tokens_column": tokens_column},
            compute=compute,
            batch_size=batch_size,
            batch_format="pyarrow",
            zero_copy_batch=True,
            num_cpus=num_cpus,
            **options,
        )
    if batch_size > _ROWS_BLOCK_QUERIES:
        dataset = dataset.repartition(target_num_rows_per_block=_ROWS_BLOCK_QUERIES)
    # Tasks, not the search actors: expanding k rows per query and scoring them runs on other CPUs.
    return dataset.map_batches(functools.partial(result_rows, score=corpus.score, rows=rows), batch_format="pyarrow",
                               batch_size=None, zero_copy_batch=True)


def _let_repartition_run_ahead(dataset, calls_at_once: int) -> None:
    """Let the streaming repartition's task yield enough blocks ahead to keep every pool actor busy.

    A query file read as one block is split by one repartition task, a streaming generator that
    Ray Data lets hold only ``DataContext._max_num_blocks_in_streaming_gen_buffer`` (2) blocks
    not yet taken by the executor; the executor takes them once per loop of its scheduler (ray.wait
    for up to 0.1 s). That capped the pool's input near 20 blocks a second, whatever the number
    of actors (82 k q/s on one GPU and on two, at 4096 queries a block). A run-ahead of a few
    blocks per call the pools take at once lifts the cap; a block of queries is small (about 1 MB
    at 4096 queries), so the object store holds little more.

    The dataset's context is shared with the datasets it was derived from (the queries); the
    setting is only raised, never lowered. It is a private attribute of Ray Data (2.50 and 2.60):
    where it is missing, the default is left and a debug line says so.
    """
    context = dataset.context
    wanted = max(_RUN_AHEAD_BLOCKS, 4 * calls_at_once)
    current = getattr(context, "_max_num_blocks_in_streaming_gen_buffer", _MISSING)
    if current is _MISSING:
        log.debug("Ray Data has no _max_num_blocks_in_streaming_gen_buffer; the repartition's run-ahead is its default")
    elif current is not None and current < wanted:  # None: Ray Data applies no such limit
        context._max_num_blocks_in_streaming_gen_buffer = wanted


def _pool(size: int, calls_at_once: int, options: dict):
    """A fixed pool of ``size`` actors, each taking ``calls_at_once`` batches at once.

    Two calls at once on a GPU, as the job's GPU actors take: one's Arrow work (parsing the
    queries, building the output) runs while the other's kernels do. Ray 2.60 names this
    ``max_concurrent_calls_per_actor``; before, it was the actor's ``max_concurrency`` (added to ``options``).
    Ray 2.60 still runs the function itself one call at a time; its defaults stay: the function two
    at a time (``enable_true_multi_threading``) with no blocks queued beyond those an actor runs was
    slower (docs/benchmarks.md, "The library and Ray Data against the kernel and the job").
    """
    if calls_at_once > 1:
        if "max_concurrent_calls_per_actor" in inspect.signature(ray.data.ActorPoolStrategy).parameters:
            return ray.data.ActorPoolStrategy(size=size, max_concurrent_calls_per_actor=calls_at_once)
        options["max_concurrency"] = calls_at_once
    return ray.data.ActorPoolStrategy(size=size)


def _check_columns(queries, id_column: str, tokens_column: str) -> None:
    """Check the query columns and their types from the dataset's schema, now rather than when it runs.

    ``Dataset.schema()`` reads it from metadata where Ray Data knows it (a Parquet read, items,
    Arrow), else runs the dataset's first block. A schema Ray Data cannot tell, or one without
    Arrow types (pandas blocks), is left to the actors, which check every batch.

    Raises
    ------
    settopk.shards.inputs.InputError
        A missing column, ids neither strings nor integers, or tokens not a list of integers.
    """
    try:
        schema = queries.schema()
    except Exception:  # a schema Ray Data cannot tell without running the dataset: the actors check each batch
        return
    names = list(getattr(schema, "names", None) or [])
    if schema is None or not names:
        return
    missing = [c for c in (id_column, tokens_column) if c not in names]
    if missing:
        raise InputError(f"queries: expected columns '{id_column}' (ids) and '{tokens_column}' (token ids), "
                         f"missing {missing}, found columns {names}; rename them or pass id_column=/tokens_column=")
    arrow = getattr(schema, "base_schema", None)
    if not isinstance(arrow, pa.Schema):
        return
    ids, tokens = arrow.field(id_column).type, arrow.field(tokens_column).type
    if not (pa.types.is_integer(ids) or pa.types.is_string(ids) or pa.types.is_large_string(ids)):
        raise InputError(f"queries column '{id_column}'", "string or integer ids", f"type {ids}",
                         "cast the column (e.g. Dataset.map_batches with pyarrow.compute.cast)")
    if not ((pa.types.is_list(tokens) or pa.types.is_large_list(tokens)) and pa.types.is_integer(tokens.value_type)):
        raise InputError(f"queries column '{tokens_column}'", "a list of integer token ids, as the corpus's ids "
                         "(settopk.ray searches token ids in [0, vocab_size))", f"type {tokens}",
                         "map the tokens to the corpus's integer ids first, or search token values in-process "
                         "with settopk.Index, which maps them through a dictionary of the docs' tokens")


def _check_resources(n_actors: int, num_cpus: float, num_gpus: float) -> None:
    """The pools must fit the cluster, leaving a CPU to Ray Data's read and write tasks (else it waits forever)."""
    resources = ray.cluster_resources()
    cpus, gpus = float(resources.get("CPU", 0)), float(resources.get("GPU", 0))
    if n_actors * num_gpus > gpus + 1e-9 or n_actors * num_cpus > cpus - min(1.0, cpus / 2) + 1e-9:
        raise ValueError(
            f"{n_actors} search actor(s) (shards x replicas) at {num_cpus:g} CPU and {num_gpus:g} GPU each need "
            f"{n_actors * num_cpus:g} CPU(s) and {n_actors * num_gpus:g} GPU(s); the cluster has {cpus:g} and {gpus:g}, "
            f"and Ray Data's read and write tasks need {min(1.0, cpus / 2):g} CPU(s) besides; lower replicas, n_shards, "
            "num_cpus or num_gpus (fractions are allowed)")
