"""The search stage: every query chunk through the shard actors, each chunk's lists to its merge task.

Each batch of queries is searched in two rounds (:mod:`settopk.shards.thresholds`): every shard
searches its *home* queries (those whose length lies in its range), then the other
queries with each query's home k-th score as a floor. The actors compute the floors
themselves from the first round's results, which Ray passes to them directly. A chunk's
shard lists then go, again directly, to a merge task (:mod:`settopk.jobs.merge_task`) that writes
the chunk's part, so the driver holds neither the corpus nor the results, and merging
never stalls the search of the next chunk. The next chunk's first round is sent before
the driver waits for the current one, so the actors never wait on the driver between chunks.

A threshold run (``--threshold``) has one round: each batch goes once to the shards its queries
can reach (:func:`settopk.jobs.threshold_job.shard_rows`), whose pairs go to
:func:`settopk.jobs.merge_task.merge_and_write_pairs`.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import NamedTuple

import numpy as np

from settopk.errors import SettopkError
from settopk.shards import split_rounds
from settopk.shards.results import query_id_column, query_id_values

from .dispatch import gather
from .merge_task import BatchLayout, merge_and_write_chunk, merge_and_write_pairs
from .threshold_job import self_join_entries, shard_cap, shard_rows

__all__ = ["prestart_merge_workers", "search_chunks"]

log = logging.getLogger("settopk")
# Merge tasks alive at once: two per actor for the full-size parts being written (a part is
# written several times slower than a GPU searches it), and room for the small chunks of the
# run's end, whose tasks must start as their searches do. Each pins its chunk's shard lists in
# the object store.
_MERGE_PER_ACTOR = 2
_MERGE_TAIL = 8
_MERGE_MIN = 2  # the window on a cluster of fewer CPUs: a chunk searched while another merges
# Queries sent to the actors beyond the chunk the driver waits for, in chunks of query_chunk_size:
# counted in queries, so that the small chunks of the run's end (settopk.jobs.chunks.plan_chunks)
# are sent together and the actors' queue does not run dry between them.
_CHUNKS_AHEAD = 1
# Light next to the search; the window bounds how many run. SPREAD: on several nodes the
# merging and writing use every node's CPUs, not only those of the driver's node.
_MERGE_OPTIONS = {"num_cpus": 0, "scheduling_strategy": "SPREAD"}
_PRESTART_HOLD_S = 0.5  # how long a prestart task keeps its worker, so that each starts its own


def _merge_window(n_actors: int) -> int:
    """Merge tasks alive at once at most (those of the chunks being searched included): more
    actors fill more parts per second. As many workers are started ahead for them
    (:func:`prestart_merge_workers`): a task beyond them would wait for a new worker process.

    No more than the cluster's CPUs (but at least ``_MERGE_MIN``): a merge is CPU work (the merge,
    the Parquet encoding), so tasks beyond the CPUs only wait for one, each in a worker process
    of its own (a Python process importing Ray and this package: about 1.7 CPU seconds on a
    2-core machine, where twelve of them took more CPU than a small run's search). Each worker
    started ahead also loads what a merge task needs while the shards load, CPU taken from the
    load: on a small cluster two are enough (docs/benchmarks.md, "Real data", measures both)."""
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 0))
    return min(_MERGE_PER_ACTOR * n_actors + _MERGE_TAIL, max(_MERGE_MIN, cpus))


def _hold_worker(seconds: float, until: list) -> None:
    """Keep this worker busy for ``seconds`` and until the object refs ``until`` are ready (or failed),
    with what a merge task loads at its first call loaded: the part writer's ``pyarrow.parquet``,
    and pandas, which PyArrow imports (where it is installed) at its first array made from NumPy.
    Loaded here, while the shards load, they are not paid by each merge task's first call in the
    search phase (docs/benchmarks.md, "Real data", measures it)."""
    start = time.monotonic()
    import pyarrow as pa
    import pyarrow.parquet  # noqa: F401

    pa.array(np.zeros(1, np.int64))
    if until:
        import ray

        ray.wait(until, num_returns=len(until), timeout=None)  # never raises for a failed one
    time.sleep(max(0.0, seconds - (time.monotonic() - start)))


def prestart_merge_workers(n_actors: int, n_chunks: int, until: list = ()) -> list:
    """Have Ray start the worker processes of the first merge tasks now, while the shards load.

    Ray starts a worker process for each task that finds no idle one, and the process imports
    this package before the task runs, which takes longer than a fast search's first chunk: the
    first wave of merge tasks waited behind it (docs/benchmarks.md, "Host path with stand-in
    shards"). Each of the ``min(window, n_chunks)`` tasks started here holds its worker for at
    least half a second, so that they take distinct workers, and until the refs ``until`` (the
    shards' load) are ready: Ray stops the workers that idle for a second beyond its soft limit
    (about a worker per CPU), and a load of several seconds lost them, the search then waiting
    on new workers (docs/benchmarks.md, "CPU backend on 2 cores": the quick start with
    ``routing: auto``).

    Parameters
    ----------
    n_actors, n_chunks : int
        The shard actors and the chunks still to search: they size the window.
    until : sequence of ray.ObjectRef
        Refs the held workers wait for (the job passes each actor's ``info()``, answered once
        its shard is loaded); a failed one ends the wait too.

    Returns
    -------
    list of ray.ObjectRef
        Nothing depends on them; the caller may drop them.
    """
    import ray

    hold = ray.remote(**_MERGE_OPTIONS)(_hold_worker)
    until = list(until)
    return [hold.remote(_PRESTART_HOLD_S, until) for _ in range(min(_merge_window(n_actors), n_chunks))]


def _search(actor, results: dict, key, batch, k: int, rows, extra: tuple, homes: list):
    """Send one search; keep its TopK reference under ``key`` and return the receipt reference."""
    receipt, topk = actor.search_with_receipt.options(num_returns=2).remote(batch, k, rows, *extra, *homes)
    results[key] = topk
    return receipt


class _Threshold(NamedTuple):
    """What every shard call of a threshold run takes."""

    threshold: float  # the score a pair must reach
    cap: int  # the most pairs a shard keeps per query (settopk.jobs.threshold_job.shard_cap)
    from_own_length: bool  # search only the docs at least as long as the query (a symmetric self-join)
    self_join: bool = False  # the queries are the docs: each call names their own doc ids
    include_self: bool = False  # a self-join keeps each doc's pair with itself
    max_entries: int | None = None  # what a shard's kept self-join may hold (threshold_job.self_join_entries)


def _search_pairs(actor, results: dict, key, batch, threshold: _Threshold, rows, own_ids):
    """Send one threshold search; keep its pairs' reference under ``key`` and return the receipt reference."""
    receipt, pairs = actor.threshold_with_receipt.options(num_returns=2).remote(
        batch, threshold.threshold, threshold.cap, rows, threshold.from_own_length, own_ids, threshold.include_self,
        threshold.max_entries)
    results[key] = pairs
    return receipt


def _own_ids(threshold: _Threshold | None, query_ids, lo: int, hi: int) -> np.ndarray | None:
    """A self-join's queries ``lo .. hi - 1`` are docs: their doc ids, with which each shard applies
    the rule and takes its own docs' pairs from its self-join
    (:meth:`settopk.shards.ShardSearcher.threshold_search`); None for any other run."""
    if threshold is None or not threshold.self_join:
        return None
    return query_id_values(query_ids[lo:hi])


def _reach(plan, query_len, cfg, threshold: _Threshold) -> list:
    """Per shard, the rows of a batch of lengths ``query_len`` that a threshold run sends it
    (:func:`settopk.jobs.threshold_job.shard_rows`; a symmetric self-join from each query's own length)."""
    return shard_rows(plan, query_len, threshold.threshold, cfg.max_len, cfg.score,
                      min_doc_len=query_len if threshold.from_own_length else None)


def _first_batch_size(actors, infos, plan, item, cfg, threshold: _Threshold) -> tuple[int, int, int]:
    """A threshold run's batch size before its first chunk: one call of the chunk's first
    ``pairs_per_piece // cap`` queries, at least one (no shard can answer more than
    ``pairs_per_piece`` pairs for it, or ``cap`` where that is more: each returns at most ``cap``
    per query) to the first replica of each shard they
    reach, its pairs dropped; the batches are then cut to ``pairs_per_piece`` over the most pairs
    per query a shard answered, as after each chunk. Returns ``(batch size, queries sent, most
    pairs of one answer)``."""
    import ray

    chunk, query_ids, chunk_sets = item
    n = min(chunk.hi - chunk.lo, max(1, cfg.output.pairs_per_piece // threshold.cap))
    lengths = chunk_sets.lengths[:n]
    batch = ray.put(chunk_sets.take(np.arange(n)))
    reach = _reach(plan, lengths, cfg, threshold)
    own, dropped = _own_ids(threshold, query_ids, 0, n), {}
    calls = [(s, lambda a, s=s, rows=rows: _search_pairs(a, dropped, s, batch, threshold, rows, own))
             for s, rows in enumerate(reach) if len(rows)]
    f = cfg.faults
    receipts = gather(actors, infos, calls, f"sizing call of queries {chunk.lo}..{chunk.lo + n - 1}", f.search_timeout_s,
                      f.search_attempts, f.retry_backoff_s) if calls else []
    per_query = max([r / len(reach[s]) for r, (s, _) in zip(receipts, calls)], default=0.0)
    size = max(1, min(cfg.query_batch_size, int(cfg.output.pairs_per_piece // max(per_query, 1.0))))
    return size, n, max(receipts, default=0)


class _ChunkSearch:
    """One chunk's searches: its first round is sent on creation, :meth:`wait` waits for both rounds.

    The driver creates the next chunk's search before it waits for this one's, so the
    actors always have a chunk queued while the driver reads queries. Each call returns
    a small receipt (waited on) and its TopK (left in the object store for the second
    round and the merge task). Where the chunk has one round (no threshold exchange),
    its merge task starts with the first round too and writes each batch as its search
    ends; if a call had to be sent again, that task is cancelled and a new one takes the
    results that succeeded (a retried call stores its new TopK in ``results``).
    """

    def __init__(self, actors, plan, chunk, query_ids, chunk_sets, cfg, exchange: bool, start_merge, first_batch: int = 0,
                 threshold: _Threshold | None = None, batch_size: int | None = None):
        import ray

        self.threshold = threshold  # a threshold run: one round, to the shards a query can reach

        self.actors, self.plan, self.chunk, self.query_ids, self.cfg = actors, plan, chunk, query_ids, cfg
        self.start_merge = start_merge
        self.query_len = chunk_sets.lengths
        self.replicas = len(actors) // len(plan)
        self.first_batch = first_batch  # batches of the run before this chunk: replicas take turns across chunks
        self.layouts = []
        self.own_ids = []  # per batch: a symmetric self-join's doc id of each query, else None
        size = min(batch_size or cfg.query_batch_size, -(-(chunk.hi - chunk.lo) // self.replicas))
        self.batch_size = size
        for lo in range(0, chunk.hi - chunk.lo, size):
            hi = min(lo + size, chunk.hi - chunk.lo)
            batch = ray.put(chunk_sets.take(np.arange(lo, hi)))
            self.own_ids.append(_own_ids(threshold, query_ids, lo, hi))
            if threshold is not None:
                first = _reach(plan, self.query_len[lo:hi], cfg, threshold)
                second = [np.zeros(0, dtype=np.int64)] * len(plan)
            elif exchange:
                first, second = split_rounds(plan, self.query_len[lo:hi])
            else:
                first, second = [np.arange(hi - lo, dtype=np.int64)] * len(plan), [np.zeros(0, dtype=np.int64)] * len(plan)
            self.layouts.append((lo, hi, batch, first, second))
        self.what = f"search of queries {chunk.lo}..{chunk.hi - 1}"
        self.most_pairs, self.pairs_per_query = 0, 0.0  # a threshold run's largest shard answer, once waited for
        self.results: dict[tuple[int, int, int], object] = {}
        self.entries: list = []
        self.first_calls = self._calls(0)
        self.first_refs = [call(actors[i]) for i, call in self.first_calls]
        one_round = not any(len(rows) for *_, second in self.layouts for rows in second)
        self.early = self._start_merge() if one_round else None  # (task, the results it was given)

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
                # The call binds the results dict, not self: no reference cycle keeps a finished
                # chunk (and the result references it pins) alive until the cyclic GC runs.
                actor = (self.first_batch + b) % self.replicas * n_shards + s
                if self.threshold is not None:
                    calls.append((actor, lambda a, key=key, batch=batch, rows=rows, results=self.results, t=self.threshold,
                                  own=self.own_ids[b]: _search_pairs(a, results, key, batch, t, rows, own)))
                else:
                    calls.append((actor, lambda a, key=key, batch=batch, rows=rows, extra=extra, homes=homes, results=self.results: _search(
                        a, results, key, batch, cfg.k, rows, extra, [results[h] for h in homes])))
                self.entries.append((b, s, rows, key))
        return calls

    def _start_merge(self):
        """Start the merge task on the current results: ``(task reference, result references)``."""
        batch_layouts, refs = [], []
        for b, (lo, hi, *_rest) in enumerate(self.layouts):
            mine = [e for e in self.entries if e[0] == b]
            batch_layouts.append(BatchLayout(lo, hi, tuple((s, rows) for _, s, rows, _ in mine)))
            refs += [self.results[key] for *_, key in mine]
        return self.start_merge(self.chunk, self.query_ids, self.query_len, batch_layouts, refs), refs

    def wait(self, infos):
        """Wait for both rounds (retrying failed calls); returns the reference of the merge task
        that writes the chunk's part."""
        import ray

        f = self.cfg.faults
        if self.first_calls:
            receipts = gather(self.actors, infos, self.first_calls, f"{self.what} (round 1)", f.search_timeout_s,
                              f.search_attempts, f.retry_backoff_s, submitted=self.first_refs)
            if self.threshold is not None:  # a threshold call's receipt is its pair count
                self.most_pairs = max(receipts)
                self.pairs_per_query = max(n / len(rows) for n, (_, _, rows, _) in zip(receipts, self.entries))
        second = self._calls(1)
        if second:
            gather(self.actors, infos, second, f"{self.what} (round 2)", f.search_timeout_s, f.search_attempts, f.retry_backoff_s)
        if self.early is not None:
            task, refs = self.early
            if refs == [self.results[key] for *_, key in self.entries]:
                return task
            ray.cancel(task)  # it waits on a result that was replaced; its temporary file is dropped
            ray.wait([task], timeout=self.cfg.faults.search_timeout_s)
        return self._start_merge()[0]


def search_chunks(actors, infos, plan, chunks, cfg, backend: str, work, metadata: dict, bar=None,
                  cap: int | None = None) -> dict:
    """Search every chunk (two rounds per batch) and commit each as a part file through a merge task.

    The actors search chunk ``c + 1`` while the driver waits for chunk ``c`` and starts
    its merge task, so they never wait on the driver between chunks. At most
    :func:`_merge_window` merge tasks are alive at once, the workers started ahead for them.

    Parameters
    ----------
    actors : list of ActorHandle
        ``replicas`` per shard of ``plan``, as :func:`settopk.jobs.shard_pool.start_shards` returns
        them. The run's batch ``b`` (counted across chunks, so no replica gets a chunk's odd
        batch every time) goes to replica ``b % replicas`` of every shard; with replicas,
        chunks are cut into at least ``replicas`` batches so that every replica has work.
    infos : list of dict
        The actors' ``info()``, for messages.
    plan : list of ShardSpec
    chunks : iterable of (settopk.jobs.chunks.Chunk, list of str, SetBatch)
        The chunks still to compute, with their query ids and queries (read one chunk at a
        time, :meth:`settopk.shards.inputs.QueryStream.chunks`).
    cfg : settopk.configs.JobConfig
        ``cfg.k`` is what each shard searches per query: for a self-join without the own
        doc the job passes ``k + 1``, and the merge tasks drop each query's own doc.
    backend : str
        Decides ``threshold_exchange: auto`` (on for the CPU backends, off for cupy).
    work : pathlib.Path
        The run's work directory.
    metadata : dict
        Parquet footer metadata of every part.
    bar : progress bar, optional
        Advanced by each chunk's queries when its part is written.
    cap : int, optional
        A threshold run (``cfg.threshold`` set): ``--k``, the pairs kept per query at most; None
        keeps all. Each batch goes once to the shards its queries can reach
        (:func:`settopk.jobs.threshold_job.shard_rows`), and each chunk's pairs to
        :func:`settopk.jobs.merge_task.merge_and_write_pairs`.

    Returns
    -------
    dict
        ``merge_s`` and ``write_s`` summed over the merge tasks (seconds, overlapped with the search);
        ``read_queries_s`` and ``send_s``: the driver's time waiting for the query chunks (read
        ahead in a thread, :class:`settopk.jobs.chunks.ReadAhead`), and cutting them into batches and
        sending them (seconds). A threshold run adds what bounds its memory (issue 46):
        ``shard_pairs_max`` (the most pairs one shard call answered), ``merge_piece_pairs_max``
        (the most one merge held), ``first_call_queries`` (the queries of the call that sizes
        the first chunk's batches: ``pairs_per_piece // shard_cap`` at most, and at least one, so
        no answer to it exceeds ``output.pairs_per_piece``, or one query's cap where that is
        more; :func:`_first_batch_size`) and ``batch_size_min``
        (the smallest batch size used: before the first chunk and after each, the batches are
        cut to ``output.pairs_per_piece`` over the most pairs per query a shard answered so far,
        never growing back).
    """
    import ray

    exchange = cfg.threshold_exchange if isinstance(cfg.threshold_exchange, bool) else backend != "cupy"
    merge = ray.remote(**_MERGE_OPTIONS)(merge_and_write_chunk)
    pairs_merge = ray.remote(**_MERGE_OPTIONS)(merge_and_write_pairs)
    threshold = None
    if cfg.threshold is not None:
        # A shard's best `cap` pairs of each query hold that query's best `cap` over all shards; a
        # self-join's shards apply its rule (own doc, the longer doc's copy of a symmetric pair)
        # before they cut, given each query's doc id. A symmetric self-join keeps each pair under
        # its shorter doc, so a query searches the docs at least as long as itself only
        # (settopk.kernels.self_join_keep).
        threshold = _Threshold(cfg.threshold, shard_cap(cap), cfg.self_join and cfg.score != "containment",
                               cfg.self_join, cfg.include_self, self_join_entries(cfg.output.pairs_per_piece))
    window = _merge_window(len(actors))
    in_flight: list[tuple[object, int]] = []
    totals = {"merge_s": 0.0, "write_s": 0.0, "read_queries_s": 0.0, "send_s": 0.0}

    def settle(limit: int) -> None:
        while len(in_flight) > limit:
            ref, n = in_flight.pop(0)
            try:
                out = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, SettopkError):  # a user's error (too many pairs): its message alone
                    raise exc.cause from None
                raise
            totals["merge_s"] += out["merge_s"]
            totals["write_s"] += out["write_s"]
            if "largest_piece" in out:
                totals["merge_piece_pairs_max"] = max(totals.get("merge_piece_pairs_max", 0), out["largest_piece"])
            if bar is not None:
                bar.update(n)

    searching: collections.deque[_ChunkSearch] = collections.deque()

    def start_merge(chunk, query_ids, query_len, layouts, refs):
        # The references travel inside a list, so the task starts before the searches end.
        if threshold is not None:
            return pairs_merge.remote(str(work), chunk.index, query_ids, query_len, cap, cfg.max_len, layouts, metadata,
                                      cfg.output.row_group_rows, refs, score=cfg.score, piece_pairs=cfg.output.pairs_per_piece)
        return merge.remote(str(work), chunk.index, query_ids, query_len, cfg.k, cfg.max_len, len(plan),
                            layouts, metadata, cfg.output.row_group_rows, refs, score=cfg.score,
                            exclude_self=cfg.self_join and not cfg.include_self)

    sizing = {"batch_size": None}  # a threshold run's batches, cut to the pairs per query seen so far

    def wait_oldest() -> None:
        search = searching.popleft()
        in_flight.append((search.wait(infos), search.chunk.hi - search.chunk.lo))
        if threshold is not None:
            totals["shard_pairs_max"] = max(totals.get("shard_pairs_max", 0), search.most_pairs)
            fit = int(cfg.output.pairs_per_piece // max(search.pairs_per_query, 1.0))
            sizing["batch_size"] = max(1, min(cfg.query_batch_size, fit, sizing["batch_size"] or fit))

    def make_room() -> None:
        # A chunk's merge task starts with its search: keep the tasks alive within the window.
        while len(in_flight) + len(searching) >= window:
            if in_flight:
                settle(len(in_flight) - 1)
            else:
                wait_oldest()

    stream, batches = iter(chunks), 0
    while True:
        start = time.perf_counter()
        item = next(stream, None)
        totals["read_queries_s"] += time.perf_counter() - start
        if item is None:
            break
        chunk, query_ids, chunk_sets = item
        # One Arrow array per chunk: its batches' doc ids and its merge task's argument come from it
        # without a Python object per query.
        item = (chunk, query_id_column(query_ids), chunk_sets)
        if threshold is not None and sizing["batch_size"] is None:
            sizing["batch_size"], totals["first_call_queries"], most = _first_batch_size(actors, infos, plan, item, cfg,
                                                                                          threshold)
            totals["shard_pairs_max"] = max(totals.get("shard_pairs_max", 0), most)
        make_room()
        start = time.perf_counter()
        searching.append(_ChunkSearch(actors, plan, *item, cfg, exchange, start_merge, first_batch=batches, threshold=threshold,
                                      batch_size=sizing["batch_size"]))
        if threshold is not None:
            totals["batch_size_min"] = min(totals.get("batch_size_min", cfg.query_batch_size), searching[-1].batch_size)
        batches += len(searching[-1].layouts)
        totals["send_s"] += time.perf_counter() - start
        if sum(c.chunk.hi - c.chunk.lo for c in list(searching)[1:]) >= _CHUNKS_AHEAD * cfg.query_chunk_size:
            wait_oldest()
    while searching:
        wait_oldest()
    settle(0)
    return totals
