"""The self-join run: the threshold self-join (and its near-duplicate groups) against the top-k
self-join, on one index, in this process (issue 32).

Run by ``python -m settopk bench --config self-join-sti2`` (or any config with a ``self_join``
section). The config's synthetic docs and queries are generated once; the queries are
near-duplicates of docs (``synthetic.near_duplicate_fraction``: each keeps 80-95 % of a doc's ids
and replaces the rest, Jaccard about 0.67-0.90 with its doc), and join the docs as more docs, so
the corpus holds ``n_docs + n_queries`` sets with planted near-duplicates. One backend index is
built over it (the planted sets are counted in ``n_planted``). Then, repetition by repetition and in turn, the corpus (or its first
``self_join.n_queries`` sets) searched against itself:

- **top-k self-join**: ``index.search(queries, k)``, the job's self-join at the kernel;
- **threshold self-join**: ``index.threshold_search(queries, T, min_doc_len=...)`` from each
  query's own length, and :func:`settopk.kernels.self_join_pairs` (each unordered pair once, under
  its shorter doc), as the job runs it;
- **components**: :func:`settopk.jobs.dedup.components` over those pairs (``--dedup``'s groups),
  timed apart.

The ratio threshold / top-k is the issue's target (at most 0.5). Also reported: pairs/s, the
groups, and the recall that MinHash LSH with ``lsh_bands x lsh_rows`` (NeMo Curator's 20 x 13)
would reach on the exact pairs (:func:`settopk.jobs.bench.lsh.lsh_recall`).

Exactness: for a seeded sample of ``verify_queries`` queries, the threshold pairs and the top-k
equal the NumPy reference (:class:`settopk.kernels.NumpyShardIndex` on the whole corpus), and the
groups equal a union-find over the pairs. Any difference stops the run before a number is printed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from .lsh import lsh_recall

__all__ = ["SelfJoinConfig", "format_self_join_table", "lsh_recall", "run_self_join"]

log = logging.getLogger("settopk.bench")

_NUMPY_TOPK_BATCH = 256  # queries per call of the NumPy index's top-k (its memory is queries x docs)


@dataclass(frozen=True)
class SelfJoinConfig:
    """A self-join run (:mod:`settopk.jobs.bench.self_join`).

    Attributes
    ----------
    threshold : str
        ``T`` of the threshold self-join, exact decimal or fraction text (``"0.8"``).
    n_queries : int, optional
        Search only the corpus's first ``n_queries`` sets against it (default: all of them).
    lsh_bands, lsh_rows : int
        The MinHash LSH banding whose recall on the exact pairs is reported (NeMo Curator's
        fuzzy dedup: 20 bands of 13 rows).
    """

    threshold: str = "0.8"
    n_queries: Optional[int] = None
    lsh_bands: int = 20
    lsh_rows: int = 13

    def problems(self, cfg) -> list[str]:
        """What is wrong with the section, given the whole config ``cfg`` (empty if nothing)."""
        from settopk.kernels import parse_threshold

        problems = []
        try:
            parse_threshold(self.threshold, "jaccard")
        except ValueError as exc:
            problems.append(f"self_join.threshold: {exc}")
        if self.n_queries is not None and self.n_queries < 1:
            problems.append(f"self_join.n_queries must be >= 1 (or left out: every set), found {self.n_queries}")
        if self.lsh_bands < 1 or self.lsh_rows < 1:
            problems.append(f"self_join.lsh_bands and lsh_rows must be >= 1, found {self.lsh_bands} x {self.lsh_rows}")
        return problems


def _topk(index, queries, k: int, backend: str):
    if backend != "numpy":
        return index.search(queries, k)
    parts = [index.search(queries.take(np.arange(lo, min(lo + _NUMPY_TOPK_BATCH, queries.n_sets))), k)
             for lo in range(0, queries.n_sets, _NUMPY_TOPK_BATCH)]
    return type(parts[0])(*(np.concatenate(columns) for columns in zip(*parts)))


def _pair_arrays(pairs, query_ids):
    """``(left, right, overlap, doc_len, query_row)`` of a self-join's ThresholdPairs."""
    row = np.repeat(np.arange(pairs.n_queries), pairs.counts)
    return np.asarray(query_ids)[row], pairs.doc_ids, pairs.overlap, pairs.doc_len, row


def _check(sets, ids, queries, cfg, t, pairs, top, sample) -> list[dict]:
    """Mismatches of the sampled queries' pairs and top-k against the NumPy reference."""
    from settopk.kernels import NumpyShardIndex, self_join_pairs

    from .common import compare_topk

    reference = NumpyShardIndex(sets, ids, cfg.max_len, cfg.score, routing="scan")
    sampled = queries.take(sample)
    want = self_join_pairs(reference.threshold_search(sampled, t), ids[sample], sampled.lengths, cfg.score)
    mismatches = []
    for i, q in enumerate(sample.tolist()):
        if pairs.row(q) != want.row(i):
            mismatches.append({"implementation": "threshold_search", "against": "numpy", "query": q})
    want_top = reference.search(sampled, cfg.k)
    return mismatches + compare_topk("search", top, want_top, sample)


def _groups_agree(left, right, labels_nodes, labels) -> bool:
    """The components' groups equal a union-find's over the same pairs (least id of each group)."""
    parent: dict[int, int] = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in zip(left.tolist(), right.tolist()):
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)
    return {n: find(n) for n in parent} == dict(zip(labels_nodes.tolist(), labels.tolist()))


def run_self_join(cfg, name: str, docs: Path, queries: Path) -> dict:
    """Build one index over docs and planted near-duplicates; time the top-k self-join, the threshold
    self-join and its components in turn; check them; returns the result.

    Parameters
    ----------
    cfg : settopk.jobs.bench.config.BenchConfig
        With a ``self_join`` section; uses ``backend``, ``score``, ``routing``, ``k``, ``max_len``,
        ``vocab_size``, ``cpus_per_shard``, ``warmup``, ``repetitions``, ``verify_queries``, ``seed``.
    name : str
        The config's name, for the result.
    docs, queries : pathlib.Path
        The generated docs and their near-duplicates (Parquet).

    Raises
    ------
    ExactnessError
        If a sampled query's pairs or top-k differ from the NumPy reference, or the groups from a union-find.
    """
    from settopk.jobs.dedup import components
    from settopk.kernels import SetBatch, build_index, parse_threshold, score_value, self_join_pairs
    from settopk.shards.inputs import SetLimits, read_corpus, read_queries

    from .common import ExactnessError, timing_stats, verify_sample

    section = cfg.self_join
    t = parse_threshold(section.threshold, cfg.score)
    limits = SetLimits(vocab_size=cfg.vocab_size, max_len=cfg.max_len)
    start = time.perf_counter()
    corpus = read_corpus(docs, limits).docs
    sets = SetBatch.concat([corpus, read_queries(queries, limits).queries])
    n_planted = sets.n_sets - corpus.n_sets
    del corpus
    read_s = time.perf_counter() - start
    ids = np.arange(sets.n_sets, dtype=np.int64)
    n_queries = min(section.n_queries or sets.n_sets, sets.n_sets)
    query_sets = sets if n_queries == sets.n_sets else sets.take(np.arange(n_queries))
    start = time.perf_counter()
    index = build_index(cfg.backend, ids, sets, max_len=cfg.max_len, vocab_size=cfg.vocab_size, score=cfg.score,
                        routing=cfg.routing, threads=max(1, int(cfg.cpus_per_shard)))
    build_s = time.perf_counter() - start
    log.info("self-join: %d sets, %d queries, backend %s; read %.1f s, build %.1f s", sets.n_sets, n_queries,
             cfg.backend, read_s, build_s)

    # A symmetric score keeps each pair under its shorter doc, so each query searches the docs at
    # least as long as itself, as the job does (settopk.kernels.self_join_keep).
    own_length = None if cfg.score == "containment" else query_sets.lengths
    runs: dict[str, list[float]] = {"topk": [], "threshold": [], "components": []}
    top = pairs = None
    for rep in range(cfg.warmup + cfg.repetitions):
        top = None  # the last repetition's results are kept: they are large
        start = time.perf_counter()
        top = _topk(index, query_sets, cfg.k, cfg.backend)
        topk_s = time.perf_counter() - start
        log.info("self-join: repetition %d: top-k %.3f s", rep + 1, topk_s)
        pairs = None
        start = time.perf_counter()
        pairs = self_join_pairs(index.threshold_search(query_sets, t, min_doc_len=own_length), ids[:n_queries],
                                query_sets.lengths, cfg.score)
        threshold_s = time.perf_counter() - start
        left, right, *_ = _pair_arrays(pairs, ids[:n_queries])
        start = time.perf_counter()
        nodes, labels = components(left, right)
        components_s = time.perf_counter() - start
        if rep >= cfg.warmup:
            runs["topk"].append(topk_s)
            runs["threshold"].append(threshold_s)
            runs["components"].append(components_s)
        log.info("self-join: repetition %d: threshold %.3f s (%d pairs), components %.3f s",
                 rep + 1, threshold_s, len(left), components_s)

    sample = verify_sample(cfg, n_queries)
    mismatches = _check(sets, ids, query_sets, cfg, t, pairs, top, sample)
    if not _groups_agree(left, right, nodes, labels):
        mismatches.append({"implementation": "components", "against": "union-find"})
    if mismatches:
        raise ExactnessError(mismatches)

    _, _, overlap, doc_len, row = _pair_arrays(pairs, ids[:n_queries])
    jaccard = score_value(overlap, query_sets.lengths[row], doc_len, "jaccard")  # whatever the run's score
    stats = {key: timing_stats(value) for key, value in runs.items()}
    topk_med, thr_med = stats["topk"]["median_s"], stats["threshold"]["median_s"]
    n_groups = len(np.unique(labels))
    return {
        "benchmark": "settopk.bench.self_join",
        "config": name,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": cfg.to_dict(),
        "backend": cfg.backend,
        "n_docs": sets.n_sets,
        "n_planted": n_planted,
        "n_queries": n_queries,
        "k": cfg.k,
        "T": section.threshold,
        "read_s": read_s,
        "build_s": build_s,
        **stats,
        "pairs": int(len(left)),
        "pairs_per_s": len(left) / thr_med if thr_med > 0 else float("inf"),
        "groups": n_groups,
        "grouped_docs": int(len(nodes)),
        "duplicates": int(len(nodes) - n_groups),
        "ratio": thr_med / topk_med if topk_med > 0 else float("inf"),
        "ratio_with_components": (thr_med + stats["components"]["median_s"]) / topk_med if topk_med > 0 else float("inf"),
        "lsh": {"bands": section.lsh_bands, "rows": section.lsh_rows,
                "recall": lsh_recall(jaccard, section.lsh_bands, section.lsh_rows)},
        "exactness": {"reference": "settopk.kernels.NumpyShardIndex", "sample": sample.tolist(), "identical": True,
                      "groups": "identical to a union-find over the pairs"},
    }


def format_self_join_table(result: dict) -> str:
    """The printed summary of a self-join result."""
    lines = [
        f"settopk bench {result['config']}: self-join of {result['n_docs']:,} sets ({result['n_queries']:,} as queries), "
        f"score {result['settings']['score']}, backend {result['backend']}; build {result['build_s']:.2f} s",
        f"{'':>22}{'median_s':>10}{'min_s':>9}",
    ]
    for key, label in (("topk", f"top-k (k = {result['k']})"), ("threshold", f"threshold {result['T']}"),
                       ("components", "components")):
        lines.append(f"{label:>22}{result[key]['median_s']:>10.3f}{result[key]['min_s']:>9.3f}")
    lsh = result["lsh"]
    lines += [
        f"ratio threshold / top-k: {result['ratio']:.3f} (with components {result['ratio_with_components']:.3f}); "
        f"{result['pairs']:,} pairs, {result['pairs_per_s']:,.0f} pairs/s; {result['groups']:,} groups of "
        f"{result['grouped_docs']:,} docs, {result['duplicates']:,} duplicates",
        f"MinHash LSH {lsh['bands']} x {lsh['rows']} would find {lsh['recall']:.4f} of these exact pairs",
        f"exact: {len(result['exactness']['sample'])} sampled queries' pairs and top-k identical to the NumPy "
        "reference; the groups identical to a union-find",
    ]
    return "\n".join(lines)
