"""Placing the shard actors and running the query chunks through them.

One placement group holds one bundle per shard (its GPUs and CPUs), so the
shards are reserved together or not at all, and a restarted actor comes back in
its own bundle. The job reserves it before reading the corpus; the readers use
its CPUs until the actors start. Each batch of queries is searched in two rounds
(:mod:`shards.thresholds`): every shard searches its *home* queries (those
whose length lies in its range), then the other queries with each query's
home k-th score as a floor. The actors compute the floors themselves from the
first round's results, which Ray passes to them directly. A chunk's results then
go, again directly, to a merge task that writes the chunk's part file, so the
driver holds neither the corpus nor the results, and merging never stalls the
search of the next chunk. The next chunk's first round is sent before the driver
waits for the current one, so the actors never wait on the driver between chunks.
"""

from __future__ import annotations

import collections
import logging
import time

import numpy as np

from shards import split_rounds
from shards.actor import ShardActor

from .chunks import BatchLayout, finish_chunk
from .dispatch import gather

__all__ = ["reserve_shards", "start_shards", "search_chunks", "stop_shards"]

log = logging.getLogger("settopk")
_FINISH_WINDOW = 4  # least merge tasks in flight; each pins one chunk's shard results in the object store
_GPU_CALLS_AT_ONCE = 2  # searches one GPU actor runs at once (threads; see start_shards)
_CHUNKS_AHEAD = 1  # chunks sent to the actors beyond the one the driver waits for
_PLACEMENT_TIMEOUT_S = 120.0


def _shard_bundle(backend: str, cfg) -> dict:
    """The resources one shard actor reserves: ``cpus_per_shard`` CPUs and, for ``cupy``,
    ``gpus_per_shard`` GPUs (a token 0.001 CPU where both are 0: a bundle cannot be empty)."""
    gpus = cfg.gpus_per_shard if backend == "cupy" else 0
    bundle = {key: value for key, value in {"CPU": cfg.cpus_per_shard, "GPU": gpus}.items() if value}
    return bundle or {"CPU": 0.001}


def reserve_shards(n_actors: int, backend: str, cfg):
    """Reserve one placement-group bundle per shard actor and wait until Ray has placed them all.

    The job reserves before it reads the corpus: reader tasks run in the bundles' CPUs until
    the actors take them (:func:`jobs.reading.read_corpus_pieces`), and a cluster that cannot
    hold the shards fails before anything is read. Asking only once the readers had freed
    their CPUs cost 0.03 s or 0.6 s at random (Ray places a group from a cluster view that
    lags the freed CPUs, then retries with a back-off).

    Parameters
    ----------
    n_actors : int
        Shards times replicas.
    backend : str
    cfg : configs.JobConfig

    Returns
    -------
    ray.util.placement_group.PlacementGroup
        ``n_actors`` bundles of :func:`_shard_bundle`, strategy PACK.

    Raises
    ------
    RuntimeError
        If the cluster cannot place the bundles within two minutes (the message gives them).
    """
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    bundle = _shard_bundle(backend, cfg)
    group = placement_group([dict(bundle) for _ in range(n_actors)], strategy="PACK")
    try:
        ray.get(group.ready(), timeout=_PLACEMENT_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(group)
        raise RuntimeError(
            f"the cluster could not place {n_actors} shard bundle(s) of {bundle} within {_PLACEMENT_TIMEOUT_S:g} s "
            f"(resources: {ray.cluster_resources()}); lower n_shards, replicas or cpus_per_shard, or add nodes"
        ) from None
    return group


def start_shards(plan, corpus, limits, backend: str, cfg, group, crash_shard_kwargs=None) -> list:
    """Start the shard actors in the bundles of ``group``.

    Each shard gets ``cfg.replicas`` actors; actor ``r * len(plan) + s`` is replica ``r``
    of shard ``s`` (replica 0 of every shard first) and runs in bundle ``r * len(plan) + s``.

    Parameters
    ----------
    plan : list of ShardSpec
    corpus : jobs.reading.CorpusRead
        The pieces' docs in the object store.
    limits : SetLimits
    backend : str
    cfg : configs.JobConfig
    group : ray.util.placement_group.PlacementGroup
        From :func:`reserve_shards` with ``len(plan) * cfg.replicas`` bundles.
    crash_shard_kwargs : dict, optional
        Test-only fault injection keyword arguments for replica 0 of shard ``cfg.faults.crash_shard``.

    Returns
    -------
    list of ActorHandle
        ``len(plan) * cfg.replicas`` actors.
    """
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    f = cfg.faults
    actors = []
    for index in range(len(plan) * cfg.replicas):
        spec = plan[index % len(plan)]
        options = {
            "num_cpus": cfg.cpus_per_shard,
            "num_gpus": cfg.gpus_per_shard if backend == "cupy" else 0,
            # Ray's own fault tolerance: a dead actor restarts (taking its docs again from the
            # object store) and the searches it was running are sent again; searches are pure.
            "max_restarts": f.actor_restarts,
            "max_task_retries": f.actor_restarts,
            # Two calls at once on a GPU: one's Ray transport (arguments in, results out to the
            # object store) runs while the other's kernels do; the GPU serialises the kernels.
            "max_concurrency": _GPU_CALLS_AT_ONCE if backend == "cupy" else 1,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index),
        }
        kwargs = {"drops": corpus.drops, "ordered": corpus.ordered, "score": cfg.score, "routing": cfg.routing}
        if crash_shard_kwargs and index == f.crash_shard:
            kwargs.update(crash_shard_kwargs)
        actors.append(ShardActor.options(**options).remote(spec, corpus.corpus_refs, limits, backend, **kwargs))
    return actors


def stop_shards(actors, group) -> None:
    """Kill the shard actors and free their placement group (``group`` may be None)."""
    import ray
    from ray.util.placement_group import remove_placement_group

    for a in actors:
        ray.kill(a)
    if group is not None:
        remove_placement_group(group)


def _search(actor, results: dict, key, batch, k: int, rows, extra: tuple, homes: list):
    """Send one search; keep its TopK reference under ``key`` and return the receipt reference."""
    receipt, topk = actor.search_part.options(num_returns=2).remote(batch, k, rows, *extra, *homes)
    results[key] = topk
    return receipt


class _ChunkSearch:
    """One chunk's searches: its first round is sent on creation, :meth:`finish` waits for it.

    The driver creates the next chunk's search before it waits for this one's, so the
    actors always have a chunk queued while the driver reads queries. Each call returns
    a small receipt (waited on) and its TopK (left in the object store for the second
    round and the merge task). Where the chunk has one round (no threshold exchange),
    its merge task starts with the first round too and writes each batch as its search
    ends; if a call had to be sent again, that task is cancelled and a new one takes the
    results that succeeded (a retried call stores its new TopK in ``results``).
    """

    def __init__(self, actors, plan, chunk, query_ids, chunk_sets, cfg, exchange: bool, start_finish, first_batch: int = 0):
        import ray

        self.actors, self.plan, self.chunk, self.query_ids, self.cfg = actors, plan, chunk, query_ids, cfg
        self.start_finish = start_finish
        self.query_len = chunk_sets.lengths
        self.replicas = len(actors) // len(plan)
        self.first_batch = first_batch  # batches of the run before this chunk: replicas take turns across chunks
        self.layouts = []
        size = min(cfg.query_batch_size, -(-(chunk.hi - chunk.lo) // self.replicas))
        for lo in range(0, chunk.hi - chunk.lo, size):
            hi = min(lo + size, chunk.hi - chunk.lo)
            batch = ray.put(chunk_sets.take(np.arange(lo, hi)))
            first, second = split_rounds(plan, self.query_len[lo:hi]) if exchange else (
                [np.arange(hi - lo, dtype=np.int64)] * len(plan), [np.zeros(0, dtype=np.int64)] * len(plan))
            self.layouts.append((lo, hi, batch, first, second))
        self.what = f"search of queries {chunk.lo}..{chunk.hi - 1}"
        self.results: dict[tuple[int, int, int], object] = {}
        self.entries: list = []
        self.first_calls = self._calls(0)
        self.first_refs = [call(actors[i]) for i, call in self.first_calls]
        one_round = not any(len(rows) for *_, second in self.layouts for rows in second)
        self.early = self._start_finish() if one_round else None  # (task, the results it was given)

    def _calls(self, round_index: int) -> list:
        """``(actor index, call)`` pairs of one round; records each call's (batch, shard, rows, key)."""
        n_shards, cfg, calls = len(self.plan), self.cfg, []
        for b, (lo, hi, batch, first, second) in enumerate(self.layouts):
            home_keys = [(0, b, s) for s, rows in enumerate(first) if len(rows)]
            for s, rows in enumerate(first if round_index == 0 else second):
                if not len(rows):
                    continue
                key = (round_index, b, s)
                extra = () if round_index == 0 else ([first[j] for _, _, j in home_keys],)
                homes = [] if round_index == 0 else home_keys
                calls.append(((self.first_batch + b) % self.replicas * n_shards + s, lambda a, key=key, batch=batch, rows=rows, extra=extra, homes=homes: _search(
                    a, self.results, key, batch, cfg.k, rows, extra, [self.results[h] for h in homes])))
                self.entries.append((b, s, rows, key))
        return calls

    def _start_finish(self):
        """Start the merge task on the current results: ``(task reference, result references)``."""
        batch_layouts, refs = [], []
        for b, (lo, hi, *_rest) in enumerate(self.layouts):
            mine = [e for e in self.entries if e[0] == b]
            batch_layouts.append(BatchLayout(lo, hi, tuple((s, rows) for _, s, rows, _ in mine)))
            refs += [self.results[key] for *_, key in mine]
        return self.start_finish(self.chunk, self.query_ids, self.query_len, batch_layouts, refs), refs

    def finish(self, infos):
        """Wait for both rounds (retrying failed calls); returns the reference of the merge task
        that writes the chunk's part."""
        import ray

        f = self.cfg.faults
        if self.first_calls:
            gather(self.actors, infos, self.first_calls, f"{self.what} (round 1)", f.search_timeout_s,
                   f.search_attempts, f.retry_backoff_s, submitted=self.first_refs)
        second = self._calls(1)
        if second:
            gather(self.actors, infos, second, f"{self.what} (round 2)", f.search_timeout_s, f.search_attempts, f.retry_backoff_s)
        if self.early is not None:
            task, refs = self.early
            if refs == [self.results[key] for *_, key in self.entries]:
                return task
            ray.cancel(task)  # it waits on a result that was replaced; its temporary file is dropped
            ray.wait([task], timeout=self.cfg.faults.search_timeout_s)
        return self._start_finish()[0]


def search_chunks(actors, infos, plan, chunks, cfg, backend: str, work, metadata: dict, bar=None) -> dict:
    """Search every chunk (two rounds per batch) and commit each as a part file through a merge task.

    The actors search chunk ``c + 1`` while the driver waits for chunk ``c`` and starts
    its merge task, so they never wait on the driver between chunks.

    Parameters
    ----------
    actors : list of ActorHandle
        ``replicas`` per shard of ``plan``, as :func:`start_shards` returns them. The run's
        batch ``b`` (counted across chunks, so no replica gets a chunk's odd batch every time)
        goes to replica ``b % replicas`` of every shard; with replicas, chunks are cut into at
        least ``replicas`` batches so that every replica has work.
    infos : list of dict
        The actors' ``info()``, for messages.
    plan : list of ShardSpec
    chunks : iterable of (jobs.chunks.Chunk, list of str, SetBatch)
        The chunks still to compute, with their query ids and queries (read one chunk at a
        time, :meth:`shards.QueryStream.chunks`).
    cfg : configs.JobConfig
        ``cfg.k`` is what each shard searches per query: for a self-join without the own
        doc the job passes ``k + 1``, and the merge tasks drop each query's own doc.
    backend : str
        Decides ``threshold_exchange: auto`` (on for numpy, off for cupy).
    work : pathlib.Path
        The run's work directory.
    metadata : dict
        Parquet footer metadata of every part.
    bar : progress bar, optional
        Advanced by each chunk's queries when its part is written.

    Returns
    -------
    dict
        ``merge_s`` and ``write_s`` summed over the merge tasks (seconds, overlapped with the search);
        ``read_queries_s`` and ``send_s``: the driver's time reading the query chunks, and cutting
        them into batches and sending them (seconds).
    """
    import ray

    exchange = cfg.threshold_exchange if isinstance(cfg.threshold_exchange, bool) else backend == "numpy"
    finish = ray.remote(num_cpus=0)(finish_chunk)  # light next to the search; the window bounds how many run
    window = max(_FINISH_WINDOW, 2 * len(actors))  # more GPUs fill more parts per second
    in_flight: list[tuple[object, int]] = []
    totals = {"merge_s": 0.0, "write_s": 0.0, "read_queries_s": 0.0, "send_s": 0.0}

    def settle(limit: int) -> None:
        while len(in_flight) > limit:
            ref, n = in_flight.pop(0)
            out = ray.get(ref)
            totals["merge_s"] += out["merge_s"]
            totals["write_s"] += out["write_s"]
            if bar is not None:
                bar.update(n)

    searching: collections.deque[_ChunkSearch] = collections.deque()

    def start_finish(chunk, query_ids, query_len, layouts, refs):
        # The references travel inside a list, so the task starts before the searches end.
        return finish.remote(str(work), chunk.index, query_ids, query_len, cfg.k, cfg.max_len, len(plan),
                             layouts, metadata, cfg.output.row_group_rows, refs, score=cfg.score,
                             exclude_self=cfg.self_join and not cfg.include_self)

    def finish_oldest() -> None:
        search = searching.popleft()
        in_flight.append((search.finish(infos), search.chunk.hi - search.chunk.lo))
        settle(window)

    stream, batches = iter(chunks), 0
    while True:
        start = time.perf_counter()
        item = next(stream, None)
        totals["read_queries_s"] += time.perf_counter() - start
        if item is None:
            break
        start = time.perf_counter()
        searching.append(_ChunkSearch(actors, plan, *item, cfg, exchange, start_finish, first_batch=batches))
        batches += len(searching[-1].layouts)
        totals["send_s"] += time.perf_counter() - start
        if len(searching) > _CHUNKS_AHEAD:
            finish_oldest()
    while searching:
        finish_oldest()
    settle(0)
    return totals
