"""A shard's searcher: loads its own docs once, then answers query batches.

:class:`ShardSearcher` is plain Python so it can be tested without Ray; importing this
module does not import Ray. :func:`settopk.shards.actor.actor_class` makes it a Ray actor (whose constructor
takes its inputs from a :class:`settopk.shards.actor.ShardInputs` actor).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import warnings

import numpy as np

from settopk.kernels import DEFAULT_SCORE, SetBatch, TopK, build_index, interleave_pairs, self_join_pairs, warm_up_backend

from .components import group_components
from .inputs import SetLimits, assemble_shard
from .plan import ShardSpec
from .thresholds import floors_from

__all__ = ["ShardSearcher", "load_shard"]

_log = logging.getLogger("settopk")


def load_shard(spec: ShardSpec, pieces, drops: dict | None = None, ordered: bool = True, concatenate: bool = True):
    """Take one shard's docs out of the corpus pieces and check them against the plan.

    Parameters
    ----------
    spec : ShardSpec
        The length range to keep, and the doc and id counts the plan expects.
    pieces : list of Corpus or ray.ObjectRef
        Every piece's docs from the reader tasks (:func:`settopk.shards.inputs.read_piece`), in read
        order; references are fetched one at a time.
    drops : dict, optional
        Doc ids to leave out per piece position (repeats found by :func:`settopk.shards.inputs.check_doc_ids`).
    ordered : bool
        The pieces' doc id ranges increase in read order.
    concatenate : bool
        One SetBatch (True), or one per piece where the pieces are ordered (False; for the
        GPU index, which concatenates them on the device).

    Returns
    -------
    (numpy.ndarray, SetBatch or list of SetBatch)
        ``doc_ids`` (int64, shape (n_docs,), strictly increasing) and their sets (host memory).

    Raises
    ------
    RuntimeError
        If the docs taken do not match the plan's counts.
    """
    doc_ids, docs = assemble_shard(spec.min_len, spec.max_len, _fetched(pieces), drops, ordered, concatenate)
    n_tokens = sum(len(p.tokens) for p in ([docs] if isinstance(docs, SetBatch) else docs))
    if len(doc_ids) != spec.n_docs or n_tokens != spec.n_tokens:
        raise RuntimeError(
            f"shard {spec.shard_id} (lengths {spec.min_len}..{spec.max_len}) holds {len(doc_ids)} docs / "
            f"{n_tokens} ids, but the plan expects {spec.n_docs} / {spec.n_tokens}: the corpus "
            "pieces changed after planning; rerun the job"
        )
    return doc_ids, docs


def _fetched(pieces):
    for piece in pieces:
        if type(piece).__name__ == "ObjectRef":
            import ray

            piece = ray.get(piece)
        yield piece


class ShardSearcher:
    """Holds one length-bucket shard in its backend's layout and searches it.

    Parameters
    ----------
    spec : ShardSpec
        The length range to hold.
    pieces : list of Corpus or ray.ObjectRef
        Every corpus piece's docs from the reader tasks, in read order; the searcher
        keeps the docs whose length lies in ``[spec.min_len, spec.max_len]``
        (:func:`load_shard`). A restarted actor takes them again from the object store.
    limits : SetLimits
        ``vocab_size`` and ``max_len`` of the run.
    backend : str
        ``"numpy"`` or ``"cupy"``.
    drops : dict, optional
        Doc ids repeated across pieces, to leave out (quarantine).
    ordered : bool
        The pieces' doc id ranges increase in read order.
    score : str
        What the shard ranks by, one of :data:`settopk.kernels.SCORES` (default braun_blanquet).
    routing : str
        :data:`settopk.kernels.postings.ROUTINGS`: whether the index also holds postings and
        sends queries to them (default ``"scan"``).
    threads : int, optional
        CPU threads of the ``"cpu"`` backend's index (the driver passes the CPUs the actor
        reserves, ``cpus_per_shard``); None: every CPU of the process.

    Raises
    ------
    RuntimeError
        If the docs do not match the plan, or the GPU runs out of memory (the message
        names the node, the GPU and the setting to lower).
    ImportError
        If ``backend == "cupy"`` and CuPy is not installed on this node.
    """

    def __init__(
        self,
        spec: ShardSpec,
        pieces,
        limits: SetLimits,
        backend: str,
        drops: dict | None = None,
        ordered: bool = True,
        score: str = DEFAULT_SCORE,
        routing: str = "scan",
        threads: int | None = None,
    ):
        start = time.perf_counter()
        self.spec = spec
        self.backend = backend
        self.max_len = limits.max_len
        self.score = score
        warm = self.start_warm_up(limits, backend, routing)
        doc_ids, docs = load_shard(spec, pieces, drops, ordered, concatenate=backend != "cupy")
        self.read_s = time.perf_counter() - start
        if warm is not None:  # a subclass may have nothing to warm up
            warm.join()
        self.warm_s = warm.seconds if warm is not None else 0.0
        with self._out_of_memory("loading its docs", "raise n_shards (or add GPUs) so each shard holds fewer docs"):
            self.index = build_index(backend, doc_ids, docs, max_len=limits.max_len, vocab_size=limits.vocab_size,
                                     score=score, routing=routing, threads=threads)
        self.routing = routing
        self.load_s = time.perf_counter() - start
        self.search_s = self.busy_s = 0.0
        self._lock = threading.Lock()  # GPU actors run two searches at once
        self._active, self._busy_since = 0, 0.0
        self.searched = self.skipped = self.posted = 0

    @classmethod
    def start_warm_up(cls, limits: SetLimits, backend: str, routing: str = "scan") -> threading.Thread | None:
        """Start loading ``backend``'s compiled kernels in a thread (:func:`settopk.kernels.warm_up_backend`), once per process.

        The constructor calls it, and the Ray actor calls it before it waits for its docs, so
        that loading the kernels overlaps the corpus's read. A later call with the same
        arguments returns the same thread.

        Returns
        -------
        threading.Thread or None
            The thread (its ``seconds``: how long the loading took); None from a subclass
            with nothing to load.
        """
        return _warm_up_in_background(backend, limits.max_len, routing)

    def info(self) -> dict:
        """Where the shard runs, how long it took to load and search (seconds), and how many
        (query, shard) searches the floors skipped and the postings answered (``routing``).
        ``search_s`` sums the calls' times;
        ``busy_s`` is the time at least one search ran (less where calls overlapped)."""
        gpu_ids = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return {
            "shard_id": self.spec.shard_id,
            "n_docs": self.index.n_docs,
            "backend": self.backend,
            "node": socket.gethostname(),
            "node_id": _node_id(),
            "gpu_ids": gpu_ids if self.backend == "cupy" else "",
            "read_s": round(self.read_s, 3),
            "load_s": round(self.load_s, 3),
            "warm_s": round(self.warm_s, 3),
            "search_s": round(self.search_s, 3),
            "busy_s": round(self.busy_s, 3),
            "queries_searched": self.searched,
            "queries_skipped": self.skipped,
            "routing": self.routing,
            "queries_postings": self.posted,
            "restarted": _restarted(),
        }

    def search(self, queries: SetBatch, k: int, rows=None, home_rows=(), *home_results: TopK) -> TopK:
        """Shard-local top-k of some queries of a batch.

        Parameters
        ----------
        queries : SetBatch
            The batch (``n_queries`` sets, host memory).
        k : int
            Results per query.
        rows : numpy.ndarray of int64, optional
            The batch rows to search (default: all).
        home_rows : sequence of numpy.ndarray of int64
            With ``home_results``: the batch rows each first-round result covers.
        *home_results : TopK
            First-round results of the other shards; each query's k-th key there is its
            floor here (:func:`settopk.shards.thresholds.floors_from`): only docs scoring at least
            that are returned, and a query this shard cannot reach is skipped.

        Returns
        -------
        TopK
            Shape ``(len(rows), k)``, ``-1`` padded (also where a floor left fewer than k docs).
        """
        start = self._enter()
        rows = np.arange(queries.n_sets, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        subset = queries if len(rows) == queries.n_sets else queries.take(rows)
        floor = None
        if home_results:
            floor = floors_from(home_results, home_rows, queries.lengths, k, self.max_len, self.score)[rows]
        skipped = posted = 0
        try:
            with self._out_of_memory(f"searching a batch of {len(rows)} queries", "lower query_batch_size"):
                result = self.index.search(subset, k, floor_key=floor) if floor is not None else self.index.search(subset, k)
            if floor is not None:  # with two calls at once this may count the other's: a diagnostic only
                skipped = int(getattr(self.index, "last_skipped", 0))
            posted = int(self.index.last_routing["postings"])
        finally:
            self._leave(start, len(rows), skipped, posted)
        return result

    def _enter(self) -> float:
        """Mark a search as started; returns its start time."""
        now = time.perf_counter()
        with self._lock:
            if not self._active:
                self._busy_since = now
            self._active += 1
        return now

    def _leave(self, start: float, n_rows: int, skipped: int, posted: int) -> None:
        """Mark a search as ended: its time adds to ``search_s``, and to ``busy_s`` the time since
        the last moment no search ran (GPU actors run two calls at once)."""
        now = time.perf_counter()
        with self._lock:
            self._active -= 1
            if not self._active:
                self.busy_s += now - self._busy_since
            self.search_s += now - start
            self.searched += n_rows
            self.skipped += skipped
            self.posted += posted

    def search_with_receipt(self, queries: SetBatch, k: int, rows=None, home_rows=(), *home_results: TopK) -> tuple[int, TopK]:
        """:meth:`search` for an actor call with two returns: ``(len(rows), TopK)``.

        The driver waits on the small first return only; the TopK stays in the object
        store and goes straight to the next round and the merge task.
        """
        result = self.search(queries, k, rows, home_rows, *home_results)
        return len(result.doc_ids), result

    def threshold_search(self, queries: SetBatch, threshold: str, k: int | None = None, rows=None,
                         from_own_length: bool = False, own_ids=None, include_self: bool = False,
                         max_entries: int | None = None):
        """Every doc of the shard whose score with a query of the batch reaches ``threshold``.

        Parameters
        ----------
        queries : SetBatch
            The batch (``n_queries`` sets, host memory).
        threshold : str
            ``T`` as the config carries it (canonical fraction text), read exactly.
        k : int, optional
            Keep each query's ``k`` best passing docs of this shard (after the self-join rule
            where ``own_ids`` is given); None keeps all.
        rows : numpy.ndarray of int64, optional
            The batch rows to search (default: all): those that can reach the shard's lengths
            (:func:`settopk.jobs.threshold_job.shard_rows`).
        from_own_length : bool
            Search each query against the docs at least as long as itself only (a symmetric
            self-join, whose rule keeps each pair under its shorter doc:
            :func:`settopk.kernels.self_join_keep`).
        own_ids : numpy.ndarray of int64, shape (n_queries,), optional
            A self-join: each query's own doc id. The pairs then follow the self-join rule
            (:func:`settopk.kernels.self_join_pairs`) before ``k`` is applied, so that a shard's
            ``k`` best are those the merge keeps. With ``from_own_length``, where the index keeps
            its self-join (a symmetric score, ``T > 0``, within ``max_entries``), the queries that
            are this shard's docs take their pairs from it (:meth:`prepare_self_join` finds it
            once); the others are probed.
        include_self : bool
            With ``own_ids``: keep each doc's pair with itself.
        max_entries : int, optional
            The most the shard's self-join may hold: pairs of groups, and list entries on ``cpu``
            (``settopk.kernels.join.host_join.SelfJoin``) or pairs on ``numpy`` and ``cupy``
            (``settopk.kernels.join.kept.KeptSelfJoin``); past it the shard probes its own docs
            batch by batch too, as its other queries, and says so in its log once.

        Returns
        -------
        settopk.kernels.ThresholdPairs
            CSR over ``rows``, each query's pairs best first (at most ``k``).
        """
        start = self._enter()
        rows = np.arange(queries.n_sets, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        subset = queries if len(rows) == queries.n_sets else queries.take(rows)
        skipped = posted = 0
        try:
            with self._out_of_memory(f"searching a batch of {len(rows)} queries", "lower query_batch_size"):
                if own_ids is None:
                    result = self.index.threshold_search(subset, threshold, k,
                                                         min_doc_len=subset.lengths if from_own_length else None)
                elif from_own_length and self._has_self_join(threshold, include_self, k, max_entries):
                    result = self._own_pairs(subset, threshold, np.asarray(own_ids, np.int64)[rows], include_self, k,
                                             max_entries)
                else:
                    result = self._probed_pairs(subset, threshold, np.asarray(own_ids, np.int64)[rows], from_own_length,
                                                include_self, k)
            skipped = int(getattr(self.index, "last_skipped", 0))
            posted = int(getattr(self.index, "last_routing", {}).get("postings", 0))
        finally:
            self._leave(start, len(rows), skipped, posted)
        return result

    def prepare_self_join(self, threshold: str, include_self: bool = False, k: int | None = None,
                          max_entries: int | None = None) -> dict:
        """Find the shard's self-join at ``threshold`` now, where the index has one and it holds
        at most ``max_entries`` (see :meth:`threshold_search`; the arguments as the calls will pass
        them), and return :meth:`info`. A job's symmetric self-join calls it as its shards load, so
        that the first search does not pay it (most of it is the docs' frequency order and
        groups); its time counts in the shard's ``load_s``."""
        start = time.perf_counter()
        if self._has_self_join(threshold, include_self, k, max_entries):
            self.load_s += time.perf_counter() - start
        return self.info()

    def dedup_components(self, threshold: str, include_self: bool = False, k: int | None = None,
                         max_entries: int | None = None):
        """The shard's docs grouped by every passing pair among them, from its identical-doc
        groups and the passing pairs of distinct groups (GroupJoin's; no pair of members listed):
        those of its kept self-join where it keeps one (:meth:`prepare_self_join`, the same
        arguments), else, on ``numpy`` and ``cupy`` (a self-join past its budget: many pairs of
        identical docs), those its index verifies for this call (``join_groups``). None where the
        join through groups does not apply (``T == 0``, containment) or past ``max_entries`` pairs
        of groups.

        Returns
        -------
        (numpy.ndarray of int64, numpy.ndarray of int64) or None
            ``(doc_ids, group)``: each doc of the shard with a passing pair among the shard's
            docs, ascending, and its component's least doc id; shape (n_grouped,) each, at most
            the shard's ``n_docs``. A ``--dedup`` run joins them with the pairs across shards.
        """
        from settopk.kernels import parse_threshold
        from settopk.kernels.join import join_applies, self_passing

        t = parse_threshold(threshold, self.score)
        if self._has_self_join(threshold, include_self, k, max_entries):
            join = self.index.kept_self_join(threshold, include_self, k, max_entries)
            groups, (g_a, g_b) = join.groups, join.group_pairs
        elif hasattr(self.index, "join_groups") and self.score != "containment" and self.index.n_docs > 0 \
                and join_applies(t):
            from settopk.kernels.join import JoinTooLarge

            fix = "raise --threshold, or spread the docs over more shards (n_shards)"
            try:
                with self._out_of_memory("grouping the shard's docs", fix):
                    groups, g_a, g_b = self.index.join_groups(threshold, max_entries)
            except JoinTooLarge:
                return None  # past the budget before the pairs of groups were all held
        else:
            return None
        self_pass = self_passing(t, self.score, self.index.max_len, groups.group_len)
        return group_components(groups, self.index.doc_ids, self_pass, g_a, g_b)

    def _has_self_join(self, threshold: str, include_self: bool, k: int | None, max_entries: int | None) -> bool:
        """Whether the shard answers its own docs from its self-join: the index keeps one (every
        backend, a symmetric score, ``T > 0``) and it fits ``max_entries`` (found here, once)."""
        from settopk.kernels import parse_threshold
        from settopk.kernels.join import join_applies

        if not (hasattr(self.index, "self_join_rows") and self.score != "containment" and self.index.n_docs > 0
                and join_applies(parse_threshold(threshold, self.score))):
            return False
        key = (threshold, include_self, k, max_entries)
        if getattr(self, "_self_join_refused", None) == key:
            return False
        from settopk.kernels.join.host_join import SelfJoinTooLarge

        try:
            self.index.self_join_rows(threshold, 0, 0, include_self, k, max_entries)
        except SelfJoinTooLarge as exc:
            self._self_join_refused = key
            _log.info("shard %s: %s; its own docs are probed batch by batch",
                      getattr(getattr(self, "spec", None), "shard_id", "?"), exc)
            return False
        return True

    def _own_pairs(self, queries: SetBatch, threshold: str, own_ids: np.ndarray, include_self: bool, k: int | None,
                   max_entries: int | None):
        """:meth:`threshold_search` of a symmetric self-join's queries (``own_ids`` their docs): the
        shard's own docs among them from its self-join, in runs of consecutive positions; the rest
        probed from their own length, then the rule."""
        doc_ids = self.index.doc_ids
        pos = np.searchsorted(doc_ids, own_ids)
        home = pos < len(doc_ids)
        home[home] = doc_ids[pos[home]] == own_ids[home]
        home_rows = np.flatnonzero(home)
        parts = []
        if len(home_rows):
            p = pos[home_rows]
            cuts = np.concatenate([[0], np.flatnonzero(np.diff(p) != 1) + 1, [len(p)]])
            for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
                parts.append((home_rows[a:b], self.index.self_join_rows(threshold, int(p[a]), int(p[b - 1]) + 1,
                                                                        include_self, k, max_entries)))
        away = np.flatnonzero(~home)
        if len(away):
            probe = queries if len(away) == queries.n_sets else queries.take(away)
            parts.append((away, self._probed_pairs(probe, threshold, own_ids[away], True, include_self, k)))
        return interleave_pairs(queries.n_sets, parts)

    def _probed_pairs(self, queries: SetBatch, threshold: str, own_ids: np.ndarray, from_own_length: bool,
                      include_self: bool, k: int | None):
        """A self-join's queries (``own_ids`` their docs) probed against the shard, then the rule and ``k``."""
        found = self.index.threshold_search(queries, threshold, None, min_doc_len=queries.lengths if from_own_length else None)
        return self_join_pairs(found, own_ids, queries.lengths, self.score, include_self, k)

    def threshold_with_receipt(self, queries: SetBatch, threshold: str, k: int | None = None, rows=None,
                               from_own_length: bool = False, own_ids=None, include_self: bool = False,
                               max_entries: int | None = None):
        """:meth:`threshold_search` for an actor call with two returns: ``(n_pairs, ThresholdPairs)``;
        the driver waits on the small first one, the pairs go straight to the merge task."""
        result = self.threshold_search(queries, threshold, k, rows, from_own_length, own_ids, include_self, max_entries)
        return len(result.doc_ids), result

    @contextlib.contextmanager
    def _out_of_memory(self, doing: str, fix: str):
        """Turn a GPU out-of-memory error into one that says where it happened and what to lower."""
        try:
            yield
        except Exception as exc:
            if type(exc).__name__ not in ("OutOfMemoryError", "CUDARuntimeError") or "memory" not in str(exc).lower():
                raise
            gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "?")
            raise RuntimeError(
                f"shard {self.spec.shard_id} (lengths {self.spec.min_len}..{self.spec.max_len}, {self.spec.n_docs} docs) "
                f"on node {socket.gethostname()} GPU {gpu} ran out of GPU memory while {doing}: {exc}; {fix}"
            ) from exc


class _WarmUp(threading.Thread):
    """Loads the backend's compiled kernels (:func:`settopk.kernels.warm_up_backend`) while the docs are
    fetched, so that the two overlap (else the build or the first search would load them). An
    error here surfaces again, with its message, in the index build or the first search.
    ``seconds`` is how long it took."""

    def __init__(self, backend: str, max_len: int, routing: str) -> None:
        super().__init__(name=f"settopk-warm-{backend}", daemon=True)
        self.backend, self.max_len, self.routing = backend, max_len, routing
        self.seconds = 0.0

    def run(self) -> None:
        start = time.perf_counter()
        try:
            warm_up_backend(self.backend, self.max_len, self.routing)
        except Exception:  # the build or the search reports it
            pass
        self.seconds = time.perf_counter() - start


_warming: dict = {}  # (backend, max_len, routing) -> its _WarmUp, one per process
_warming_lock = threading.Lock()


def _warm_up_in_background(backend: str, max_len: int, routing: str) -> _WarmUp:
    key = (backend, max_len, routing)
    with _warming_lock:
        if key not in _warming:
            _warming[key] = _WarmUp(backend, max_len, routing)
            _warming[key].start()
        return _warming[key]


def _node_id() -> str:
    """The Ray node id of this process ("" outside Ray)."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""


def _restarted() -> bool:
    """True in a Ray actor that was restarted after a failure; False elsewhere."""
    import ray

    if not ray.is_initialized():  # plain use: asking for the runtime context would start Ray
        return False
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:
        return False
    with warnings.catch_warnings():  # Ray 2.60 implements the property with a deprecated accessor
        warnings.simplefilter("ignore", DeprecationWarning)
        return bool(context.was_current_actor_reconstructed)
