"""What the benchmark's runs share: timing statistics, the exactness check, the corpus and the bench actors."""

from __future__ import annotations

import logging
import statistics
import time
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from settopk.shards.reading import pieces_for_cluster, read_corpus_pieces
from settopk.jobs.cluster import shard_doc_cost
from settopk.jobs.synthetic import SyntheticSpec
from settopk.kernels import SetBatch, TopK, score_key
from settopk.shards import ShardSpec, merge_topk, plan_shards_from_counts
from settopk.shards.inputs import SetLimits

from .machine import cpu_model

if TYPE_CHECKING:  # annotations only: the config imports every mode, and modes import this module
    from .config import BenchConfig

__all__ = [
    "ExactnessError",
    "compare_scores",
    "compare_topk",
    "cpu_model",
    "load_shards",
    "merge_batches",
    "reference_topk",
    "repeat",
    "synthetic_spec",
    "timing_stats",
    "verify_sample",
]

log = logging.getLogger("settopk.bench")


class ExactnessError(RuntimeError):
    """Results of the backend or a baseline differ from the NumPy reference.

    Attributes
    ----------
    mismatches : list of dict
        One entry per (implementation, query) that differs: ``implementation``,
        ``query_index``, ``rank`` (1-based, first difference), ``got`` and
        ``expected`` as ``(doc_id, overlap, doc_len)``; or, for the whole-job run and
        the threshold joins' peers, the layout, query or pair and what differs.
    result : dict or None
        The run's result without timings, with the mismatches, to be written as the
        result JSON (None where the run writes none).
    """

    def __init__(self, mismatches: list[dict], result: dict | None = None):
        self.mismatches = mismatches
        self.result = result
        first = mismatches[0]
        if "query_index" in first:
            names = sorted({m["implementation"] for m in mismatches})
            message = (
                f"{len(mismatches)} sampled (implementation, query) pairs differ from the NumPy reference "
                f"({', '.join(names)}); first: {first['implementation']} query {first['query_index']} rank "
                f"{first['rank']}: got {first['got']}, expected {first['expected']}"
            )
        else:
            message = f"{len(mismatches)} result(s) differ; first: {first}"
        super().__init__(message)


def timing_stats(runs: list[float]) -> dict:
    """Median, min and every run of a timed phase, in seconds."""
    return {"median_s": statistics.median(runs), "min_s": min(runs), "runs_s": [round(r, 6) for r in runs]}


def repeat(fn: Callable[[], float], warmup: int, repetitions: int) -> list[float]:
    """Call ``fn`` (returning seconds) ``warmup`` times untimed, then return ``repetitions`` results."""
    for _ in range(warmup):
        fn()
    return [float(fn()) for _ in range(repetitions)]


def synthetic_spec(cfg: BenchConfig, n_docs: int | None = None) -> SyntheticSpec:
    """The spec of the config's corpus (``n_docs`` replaces its size)."""
    s = cfg.synthetic
    return SyntheticSpec(n_docs=s.n_docs if n_docs is None else n_docs, n_queries=s.n_queries, seed=s.seed,
                         vocab_size=s.vocab_size, id_dist=s.id_dist, zipf_s=s.zipf_s,
                         near_duplicate_fraction=s.near_duplicate_fraction, max_len=cfg.max_len,
                         token_type=s.token_type, token_offset=s.token_offset, length_law=s.length_law,
                         duplicate_fraction=s.duplicate_fraction, duplicate_zipf_s=s.duplicate_zipf_s)


def verify_sample(cfg: BenchConfig, n_queries: int) -> np.ndarray:
    """The seeded sample of queries checked against the reference: sorted int64 indices, shape
    (min(verify_queries, n_queries),)."""
    rng = np.random.default_rng(cfg.seed)
    return np.sort(rng.choice(n_queries, size=min(cfg.verify_queries, n_queries), replace=False))


def compare_topk(name: str, got: TopK, want: TopK, sample: np.ndarray) -> list[dict]:
    """Mismatches between rows ``sample`` of ``got`` and the reference ``want`` (rows in sample order).

    Parameters
    ----------
    name : str
        The implementation, for the report.
    got : TopK
        Shape (n_queries, k).
    want : TopK
        Shape (len(sample), k): the reference for the sampled queries.
    sample : numpy.ndarray of int, shape (n_sample,)
        Query indices into ``got``.

    Returns
    -------
    list of dict
        One entry per differing query (see :class:`ExactnessError`); empty if all agree,
        dtypes included.
    """
    out = []
    for j, qi in enumerate(sample.tolist()):
        g = list(zip(got.doc_ids[qi].tolist(), got.overlap[qi].tolist(), got.doc_len[qi].tolist()))
        w = list(zip(want.doc_ids[j].tolist(), want.overlap[j].tolist(), want.doc_len[j].tolist()))
        same_dtypes = all(getattr(got, f).dtype == getattr(want, f).dtype for f in TopK._fields)
        if g != w or not same_dtypes:
            rank = next((r for r, (a, b) in enumerate(zip(g, w)) if a != b), 0)
            out.append({"implementation": name, "query_index": qi, "rank": rank + 1,
                        "got": list(g[rank]) if g else None, "expected": list(w[rank]) if w else None})
    return out


def compare_scores(name: str, got: TopK, want: TopK, sample: np.ndarray, query_len: np.ndarray,
                   cfg: BenchConfig) -> tuple[list[dict], int]:
    """Mismatches of the multiset of scores per query: for an implementation whose ties at the k-th
    score may keep other docs than settopk's (lower doc id first), such as ``sparse_dot_topn``.

    Parameters
    ----------
    name : str
        The implementation, for the report.
    got : TopK
        Shape (n_queries, k).
    want : TopK
        Shape (len(sample), k): the reference for the sampled queries.
    sample : numpy.ndarray of int, shape (n_sample,)
        Query indices into ``got``.
    query_len : numpy.ndarray of int, shape (n_queries,)
    cfg : BenchConfig
        ``max_len`` and ``score``.

    Returns
    -------
    (list of dict, int)
        One entry per sampled query whose sorted score keys (padding as -1) differ from the
        reference's, or whose returned docs' lengths are wrong (see :class:`ExactnessError`: ``rank``
        is the first differing rank of the sorted keys, ``got`` and ``expected`` the keys there);
        and the number of sampled queries whose doc ids differ although their scores agree (ties
        kept differently).
    """
    out, ids_differ = [], 0
    qlen = np.asarray(query_len)[sample][:, None]
    keys = []
    for t, rows in ((got, sample), (want, np.arange(len(sample)))):
        key = score_key(t.overlap[rows], qlen, t.doc_len[rows], cfg.max_len, cfg.score).astype(np.int64)
        keys.append(-np.sort(-np.where(t.doc_ids[rows] >= 0, key, -1), axis=1))
    for j, qi in enumerate(sample.tolist()):
        g, w = keys[0][j], keys[1][j]
        if not np.array_equal(g, w):
            rank = int(np.flatnonzero(g != w)[0])
            out.append({"implementation": name, "query_index": qi, "rank": rank + 1, "got": [int(g[rank])],
                        "expected": [int(w[rank])]})
        elif not np.array_equal(got.doc_ids[qi], want.doc_ids[j]):
            ids_differ += 1
    return out, ids_differ


def merge_batches(shard_lists: Sequence[Sequence[TopK]], query_len: np.ndarray, starts: Sequence[int], batch: int,
                  cfg: BenchConfig, score: str | None = None) -> TopK:
    """The exact merge of every batch's shard lists, batches concatenated in query order.

    Parameters
    ----------
    shard_lists : sequence of sequence of TopK
        Per batch, every shard's top-k of the batch's queries.
    query_len : numpy.ndarray of int, shape (n_queries,)
    starts : sequence of int
        First query of each batch; a batch holds at most ``batch`` queries.
    batch : int
    cfg : BenchConfig
        ``k``, ``max_len`` and ``score``.
    score : str, optional
        What the lists rank by, if not ``cfg.score``.

    Returns
    -------
    TopK
        Shape (n_queries, k).
    """
    merged = [merge_topk(lists, query_len[lo : lo + batch], cfg.k, cfg.max_len, score or cfg.score)
              for lists, lo in zip(shard_lists, starts)]
    return TopK(*(np.concatenate([getattr(m, f) for m in merged]) for f in TopK._fields))


def reference_topk(actors: list, queries: SetBatch, sample: np.ndarray, cfg: BenchConfig,
                   score: str | None = None) -> TopK:
    """The NumPy reference for the ``sample`` queries: each actor's shard (one replica of each)
    searched with :class:`settopk.kernels.NumpyShardIndex`, merged like the backend's lists; ranked by
    ``score`` (default ``cfg.score``).

    Returns
    -------
    TopK
        Shape (len(sample), k), rows in sample order.
    """
    import ray

    score = score or cfg.score
    sample_ref = ray.put(queries.take(sample))
    return merge_topk(ray.get([a.reference.remote(sample_ref, cfg.k, score) for a in actors]), queries.lengths[sample],
                      cfg.k, cfg.max_len, score)


def load_shards(docs_path, limits: SetLimits, backend: str, n_shards: int, cfg: BenchConfig,
                replicas: int = 1, queries=None) -> tuple[list[ShardSpec], list, Callable[[], float]]:
    """Read the corpus with the reader tasks, plan ``n_shards`` shards and start ``replicas`` bench
    actors each.

    Where ``queries`` (a validated :class:`settopk.shards.inputs.QueryStream`) or the docs hold token
    values rather than ids (int64 beyond ``vocab_size``, strings), every read maps them as the job
    does (:func:`settopk.jobs.vocabulary.settle_tokens`: Ray tasks merge the pieces' tokens, then
    map the docs), inside the timed read, and sets ``queries.token_map``.

    Returns
    -------
    (list of ShardSpec, list of ActorHandle, callable)
        The plan, the actors (their docs not taken yet; actor ``r * n_shards + s`` is replica
        ``r`` of shard ``s``), and ``read_once()``: reads the corpus
        again and has every actor take its shard; returns the seconds from the first reader task
        to the slowest actor holding its docs.

    Raises
    ------
    settopk.shards.inputs.InputError
        If the corpus is not valid.
    """
    import ray

    from .shard import BenchShardActor  # defines a Ray actor class: imports Ray

    from settopk.jobs.vocabulary import longest, settle_tokens

    pieces, _, _ = pieces_for_cluster(str(docs_path), float(ray.cluster_resources().get("CPU", 1)))
    first = read_corpus_pieces(pieces, limits, "error")
    wide_queries = queries is not None and not queries.vocab.all_small
    plan = plan_shards_from_counts(first.length_counts, n_shards, doc_cost=shard_doc_cost(backend, limits.max_len))
    del first
    options = {"num_cpus": cfg.cpus_per_shard, "num_gpus": cfg.gpus_per_shard if backend == "cupy" else 0}
    threads = max(1, int(cfg.cpus_per_shard))  # the CPUs the actor reserves, as the job's shards
    actors = [BenchShardActor.options(**options).remote(sp, limits, backend, cfg.score, cfg.routing, threads)
              for _ in range(replicas) for sp in plan]
    # Readers run while the actors hold their CPUs: reserve one each only where CPUs are left.
    free_cpus = ray.cluster_resources().get("CPU", 0) - len(actors) * cfg.cpus_per_shard
    reader_cpus = 1.0 if free_cpus >= 1 else 0.0

    def read_once() -> float:
        start = time.perf_counter()
        corpus = read_corpus_pieces(pieces, limits, "error", reader_cpus=reader_cpus)
        if queries is not None and (corpus.wide or wide_queries):
            settle_tokens(queries, corpus, limits, longest(corpus.length_counts))
        ray.get([a.read.remote(corpus.corpus_refs, corpus.drops, corpus.ordered) for a in actors])
        return time.perf_counter() - start

    return plan, actors, read_once
