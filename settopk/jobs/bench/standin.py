"""Stand-in shards for the host-path benchmark: actors that answer like GPUs without one.

A stand-in index (backend ``"standin"``, added through :func:`settopk.kernels.register_backend`, the
index seam) holds its shard's docs in a real :class:`settopk.kernels.NumpyShardIndex`. When it is built
(in the actor's load, as a GPU index's build), it searches for real one query of each length
``0..max_len`` (ids ``0..length - 1``) with ``k`` = :data:`TEMPLATE_K`; every query of that
length is then answered with that result cut to its ``k`` (the *template* of its length: the
first ``k`` of a top-``K`` list are the top-``k``), so each block has the real shape and dtypes (``(n_rows, k)``: doc ids of the shard, their overlaps and lengths,
ordered by the key the query's length gives) and the merge tasks do their real work on it. The
results are not the queries' own: the benchmark measures the host path, not the answers.

Each search then waits until ``n_rows / pace`` seconds have passed since its templates were
ready, so that the actor answers at a set pace, a GPU's kernel rate (the real searches of new
templates, a cost no GPU has, are not counted in the pace). The pace comes from the environment variable
:data:`PACE_ENV` (queries per second on this actor's shard; ``0``: no pacing, the ceiling), set
by :mod:`settopk.jobs.bench.host` for the job's process, whose local Ray cluster hands it to the actors.

:class:`StandInSearcher` is the :class:`settopk.shards.ShardSearcher` the job's actors wrap
(``settopk.jobs.score.main(argv, searcher_cls=StandInSearcher)``): it registers the backend in the actor's
process and builds its index with it, whatever the job config's backend says. Job configs cannot
select it.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from settopk.kernels import NumpyShardIndex, SetBatch, TopK, register_backend, registered_backends, score_key
from settopk.kernels.cost import numpy_search_cost_per_doc
from settopk.shards.searcher import ShardSearcher

__all__ = ["BACKEND", "PACE_ENV", "TEMPLATE_K", "StandInIndex", "StandInSearcher", "register_standin"]

BACKEND = "standin"
PACE_ENV = "SETTOPK_STANDIN_QUERIES_PER_S"
"""Queries per second one stand-in answers on its shard; ``0`` (or unset) answers at once."""
TEMPLATE_K = 128
"""Docs per template row learnt at build; a search with a larger ``k`` learns its templates again."""

_register_lock = threading.Lock()


class StandInIndex:
    """A :class:`settopk.kernels.ShardIndex` whose answers are its templates' real results, paced.

    Parameters
    ----------
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
    docs : SetBatch
    max_len : int
    score : str
    routing : str
    queries_per_s : float
        Pace of :meth:`search` (``0``: none).
    """

    def __init__(self, doc_ids, docs, *, max_len: int, score: str, routing: str, queries_per_s: float):
        self._real = NumpyShardIndex(docs, doc_ids, max_len, score, routing=routing)
        self.doc_ids = self._real.doc_ids
        self.max_len, self.score, self.routing = max_len, score, routing
        self.postings_bytes = 0
        self.last_skipped = 0
        self.last_routing = {"scan": 0, "postings": 0}
        self.queries_per_s = float(queries_per_s)
        self.templates_searched = 0
        self._k = 0
        self._templates: TopK | None = None  # rows indexed by query length
        self._have = np.zeros(max_len + 1, dtype=bool)
        every_length = [list(range(n)) for n in range(max_len + 1)]
        self._learn(SetBatch.from_lists(every_length), TEMPLATE_K)

    @property
    def n_docs(self) -> int:
        return self._real.n_docs

    def _learn(self, queries: SetBatch, k: int) -> None:
        """Search for real one query of each length not learnt yet (the templates), with at least ``k`` docs."""
        if k > self._k:
            self._k = k
            shape = (self.max_len + 1, k)
            self._templates = TopK(np.full(shape, -1, np.int64), np.zeros(shape, np.int16), np.zeros(shape, np.int16))
            self._have[:] = False
        lengths = np.asarray(queries.lengths)
        new = np.flatnonzero(~self._have[lengths])
        if not len(new):
            return
        _, first = np.unique(lengths[new], return_index=True)
        rows = new[first]
        found = self._real.search(queries.take(rows), k)
        for field in TopK._fields:
            getattr(self._templates, field)[lengths[rows]] = getattr(found, field)
        self._have[lengths[rows]] = True
        self.templates_searched += len(rows)

    def search(self, queries: SetBatch, k: int, floor_key: np.ndarray | None = None) -> TopK:
        """The template of each query's length (shape (n_queries, k)), no sooner than the pace allows.

        With ``floor_key``, entries below a query's floor are dropped (``-1`` padded), as the
        real index drops them.
        """
        self._learn(queries, k)
        start = time.perf_counter()  # the pace counts from here: learning templates is the stand-in's own cost
        lengths = np.asarray(queries.lengths)
        out = TopK(*(getattr(self._templates, f)[lengths, :k] for f in TopK._fields))
        skipped = 0
        if floor_key is not None:
            floor = np.asarray(floor_key, dtype=np.int64)
            keys = score_key(out.overlap, lengths[:, None], out.doc_len, self.max_len, self.score).astype(np.int64)
            below = (out.doc_ids < 0) | (keys < floor[:, None])
            # The rows stay ordered: what is kept is a prefix of each row.
            out = TopK(np.where(below, -1, out.doc_ids), np.where(below, 0, out.overlap).astype(np.int16),
                       np.where(below, 0, out.doc_len).astype(np.int16))
            skipped = int(np.count_nonzero(below.all(axis=1)))
        self.last_skipped = skipped
        self.last_routing = {"scan": queries.n_sets, "postings": 0}
        if self.queries_per_s > 0:
            wait = start + queries.n_sets / self.queries_per_s - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
        return out


def _pace() -> float:
    text = os.environ.get(PACE_ENV, "0")
    try:
        pace = float(text)
    except ValueError:
        raise ValueError(f"{PACE_ENV} must be a number of queries per second, found {text!r}") from None
    if pace < 0:
        raise ValueError(f"{PACE_ENV} must be >= 0, found {pace}")
    return pace


def _factory(doc_ids, docs, *, max_len, vocab_size, score, routing, threads):
    if not isinstance(docs, SetBatch):
        raise TypeError(f"the stand-in index takes one SetBatch of docs, found {type(docs).__name__}")
    return StandInIndex(doc_ids, docs, max_len=max_len, score=score, routing=routing, queries_per_s=_pace())


def register_standin() -> None:
    """Add the ``"standin"`` backend to this process's registry (once; later calls do nothing)."""
    with _register_lock:
        if BACKEND not in registered_backends():
            register_backend(BACKEND, _factory, numpy_search_cost_per_doc)


class StandInSearcher(ShardSearcher):
    """A :class:`settopk.shards.ShardSearcher` whose index is a :class:`StandInIndex` (the ``backend``
    argument is ignored: the job passes its config's)."""

    def __init__(self, spec, pieces, limits, backend, *args, **kwargs):
        register_standin()
        super().__init__(spec, pieces, limits, BACKEND, *args, **kwargs)

    @classmethod
    def start_warm_up(cls, limits, backend, routing="scan"):
        """Nothing to load: a stand-in has no compiled kernels (the job's ``backend`` is ignored)."""
        return None

    def info(self) -> dict:
        """:meth:`settopk.shards.ShardSearcher.info`, with the stand-in's pace and the templates it searched."""
        out = super().info()
        out["simulated_queries_per_s"] = self.index.queries_per_s
        out["templates_searched"] = self.index.templates_searched
        return out

