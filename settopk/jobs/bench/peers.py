"""The peers run: settopk's exact threshold self-join against SetSimilaritySearch and datasketch (issue 32).

Run by ``python -m settopk bench --config threshold-peers`` (or any config with a ``peers``
section). One process, one corpus (:func:`planted_corpus`), and for each threshold ``T`` of
``peers.thresholds`` (score ``jaccard``):

- **settopk**: :class:`settopk.kernels.numba_index.NumbaShardIndex` (backend ``cpu``) over the
  corpus on ``peers.threads`` threads (default: every CPU this process may run on), built once
  (``build_s``, threshold free), then ``threshold_search`` of the corpus against itself, each set
  against the sets at least as long (``min_doc_len``), and :func:`settopk.kernels.self_join_pairs`
  (``join_s``), as the job's ``--self-join --threshold`` runs them: every unordered pair with
  Jaccard ``>= T``, exactly (``T`` taken from its decimal text). ``warmup`` untimed runs, then ``repetitions``;
  medians are reported.
- **SetSimilaritySearch** ``all_pairs`` (exact, pure Python, one thread; its index is built inside
  the call, so ``total_s`` is index and query together).
- **datasketch** ``MinHashLSH`` (approximate): ``MinHash.bulk`` of every set with
  ``peers.num_perm`` permutations (``minhash_s``, threshold free), an index at threshold ``T``
  (its own bands and rows) and every set inserted (``insert_s``), then every set queried
  (``query_s``); its pairs are the unverified candidates (each unordered pair once, no set with
  itself); one thread.

The peers run ``baseline_repetitions`` times (medians). Each system's input is made before any
clock starts: a :class:`settopk.kernels.SetBatch`, lists of ints, lists of bytes (datasketch
hashes bytes). Each total counts what a user of one threshold pays: settopk ``build_s + join_s``,
datasketch ``minhash_s + insert_s + query_s``.

Checks and figures per threshold: settopk's pairs must be SetSimilaritySearch's. That library
compares floats, so a pair may differ only where its exact Jaccard (a
:class:`fractions.Fraction`) equals ``T``, and then settopk must hold it (``ties_at_threshold``
counts them); any other difference stops the run (:class:`ExactnessError`, no timings). Then
datasketch's recall and precision against settopk's pairs, the ratios (SetSimilaritySearch's time
over settopk's total; datasketch's total over settopk's), and the recall LSH with
``lsh_bands`` x ``lsh_rows`` (NeMo Curator's 20 x 13) would reach
(:func:`settopk.jobs.bench.lsh.lsh_recall`) on the exact pairs and on the planted pairs among them.

SetSimilaritySearch and datasketch are in the ``test`` (and ``bench``) extra; if either is
missing the run stops with :class:`MissingPeerError` before it starts.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import time
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from .pair_check import exact_jaccard, float_ties, pair_keys
from .peers_corpus import planted_corpus

__all__ = ["MissingPeerError", "PeersConfig", "format_peers_table", "run_peers"]

log = logging.getLogger("settopk.bench")

_PEERS = ("SetSimilaritySearch", "datasketch")


class MissingPeerError(ImportError):
    """SetSimilaritySearch or datasketch, which the peers run times, is not installed."""


@dataclass(frozen=True)
class PeersConfig:
    """A peers run (:mod:`settopk.jobs.bench.peers`): the exact threshold self-join against its peers.

    The corpus is :func:`settopk.jobs.bench.peers_corpus.planted_corpus` of the config's
    ``synthetic`` section (``n_docs`` sets, ``seed``, ``vocab_size``, ``id_dist``, ``zipf_s``,
    ``near_duplicate_fraction``: the share of the sets that are planted near-duplicates) with
    lengths uniform in ``[min_len, max_len]`` (``max_len``: the config's).

    Attributes
    ----------
    thresholds : list of float
        Jaccard thresholds, each in ``(0, 1]``, run in order (settopk reads each as its
        shortest decimal: 0.8 is 4/5).
    min_len : int
        Fewest ids in a set, in ``[1, max_len]``.
    edit_fraction : float
        Share of a planted near-duplicate's ids replaced with ids its source does not hold, in
        ``(0, 0.2]`` (rounded, at least one).
    num_perm : int
        datasketch's MinHash permutations.
    lsh_bands, lsh_rows : int
        The LSH settings whose expected recall is reported (NeMo Curator's: 20 bands of 13 rows).
    threads : int, optional
        Threads of settopk's index; default: every CPU this process may run on.
    """

    thresholds: List[float] = field(default_factory=lambda: [0.8, 0.5])
    min_len: int = 32
    edit_fraction: float = 0.1
    num_perm: int = 128
    lsh_bands: int = 20
    lsh_rows: int = 13
    threads: Optional[int] = None

    def problems(self, cfg) -> list[str]:
        """What is wrong with the section, given the whole config ``cfg`` (empty if nothing)."""
        problems = []
        if not self.thresholds or not all(0.0 < t <= 1.0 for t in self.thresholds):
            problems.append(f"peers.thresholds must list Jaccard thresholds in (0, 1], found {self.thresholds}")
        if not 1 <= self.min_len <= cfg.max_len:
            problems.append(f"peers.min_len must be in [1, max_len] = [1, {cfg.max_len}], found {self.min_len}")
        if not 0.0 < self.edit_fraction <= 0.2:
            problems.append(f"peers.edit_fraction must be in (0, 0.2], found {self.edit_fraction}")
        for key in ("num_perm", "lsh_bands", "lsh_rows"):
            if getattr(self, key) < 1:
                problems.append(f"peers.{key} must be >= 1, found {getattr(self, key)}")
        if self.threads is not None and self.threads < 1:
            problems.append(f"peers.threads must be >= 1 (or left out: every CPU), found {self.threads}")
        if cfg.backend != "cpu" or cfg.score != "jaccard":
            problems.append(f"a peers run times backend 'cpu' with score 'jaccard' (the peers' score), found "
                            f"{cfg.backend!r} and {cfg.score!r}")
        return problems


def _import_peers():
    """SetSimilaritySearch's ``all_pairs`` and the ``datasketch`` module, or :class:`MissingPeerError`."""
    missing = []
    try:
        from SetSimilaritySearch import all_pairs
    except ImportError:
        missing.append("SetSimilaritySearch")
    try:
        import datasketch
    except ImportError:
        missing.append("datasketch")
    if missing:
        raise MissingPeerError(f"the peers run times {' and '.join(_PEERS)}; {' and '.join(missing)} "
                               "not installed: install the test extra, pip install -e '.[test]' (or '.[bench]')")
    return all_pairs, datasketch


def _settopk_join(index, batch, threshold: float, n: int) -> tuple[float, np.ndarray]:
    """Seconds of settopk's self-join at ``threshold`` (search and :func:`self_join_pairs`) and its pair keys.

    As the job runs it: Jaccard is symmetric, so each pair is kept under its shorter set and each
    set searches only the sets at least as long as itself (``min_doc_len``)."""
    from settopk.kernels import self_join_pairs

    ids, lengths = index.doc_ids, batch.lengths
    start = time.perf_counter()
    pairs = self_join_pairs(index.threshold_search(batch, threshold, min_doc_len=lengths), ids, lengths, "jaccard")
    seconds = time.perf_counter() - start
    return seconds, pair_keys(np.repeat(ids, pairs.counts), pairs.doc_ids, n)


def _sss_join(all_pairs, lists: list, threshold: float, n: int) -> tuple[float, np.ndarray]:
    """Seconds of SetSimilaritySearch's ``all_pairs`` (index and query) and its pair keys."""
    start = time.perf_counter()
    found = [(x, y) for x, y, _ in all_pairs(lists, similarity_func_name="jaccard", similarity_threshold=threshold)]
    seconds = time.perf_counter() - start
    a, b = (np.array(c, dtype=np.int64) for c in zip(*found)) if found else (np.empty(0, np.int64),) * 2
    return seconds, pair_keys(a, b, n)


def _minhashes(datasketch, tokens: list, num_perm: int) -> tuple[float, list]:
    """Seconds of datasketch's MinHash of every set, and the MinHashes."""
    start = time.perf_counter()
    hashes = datasketch.MinHash.bulk(tokens, num_perm=num_perm)
    return time.perf_counter() - start, hashes


def _lsh_join(datasketch, hashes: list, threshold: float, num_perm: int, n: int) -> dict:
    """datasketch's MinHashLSH at ``threshold``: insert and query seconds, its (b, r), its candidate keys."""
    start = time.perf_counter()
    lsh = datasketch.MinHashLSH(threshold=threshold, num_perm=num_perm)
    for i, m in enumerate(hashes):
        lsh.insert(i, m)
    insert_s = time.perf_counter() - start
    start = time.perf_counter()
    a, b = [], []
    for i, m in enumerate(hashes):
        for j in lsh.query(m):
            if j != i:
                a.append(i)
                b.append(j)
    query_s = time.perf_counter() - start
    return {"insert_s": insert_s, "query_s": query_s, "bands": int(lsh.b), "rows": int(lsh.r),
            "keys": pair_keys(a, b, n)}


def _exact_jaccard(keys: np.ndarray, batch, n: int) -> np.ndarray:
    """Jaccard (float64) of each pair key, from the sets' exact overlaps."""
    return np.array([float(exact_jaccard(batch, a, b)) for a, b in zip(*divmod(keys, n))], dtype=np.float64)


def _median(runs: list[float]) -> dict:
    from .common import timing_stats

    return timing_stats(runs)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else float("inf")


def _row(threshold, ours, theirs, ties, sketch, exact_j, planted, cfg, n) -> dict:
    """The result row of one threshold (timings: dicts of :func:`_median`)."""
    from .lsh import lsh_recall

    peers = cfg.peers
    st, sss, ds = ours["timing"], theirs["timing"], sketch
    settopk_total = st["build"]["median_s"] + st["join"]["median_s"]
    ds_total = ds["minhash"]["median_s"] + ds["insert"]["median_s"] + ds["query"]["median_s"]
    exact = ours["keys"]
    true = len(np.intersect1d(exact, ds["keys"], assume_unique=True))
    planted_found = np.isin(planted, exact)
    lsh = {"bands": peers.lsh_bands, "rows": peers.lsh_rows,
           "recall_exact_pairs": _or_none(lsh_recall(exact_j, peers.lsh_bands, peers.lsh_rows)),
           "recall_planted_pairs": _or_none(lsh_recall(exact_j[np.isin(exact, planted)], peers.lsh_bands, peers.lsh_rows))}
    return {
        "threshold": repr(threshold),
        "settopk": {"build": st["build"], "join": st["join"], "total_s": settopk_total, "pairs": len(exact),
                    "threads": ours["threads"]},
        "setsimilaritysearch": {"total": sss, "pairs": len(theirs["keys"]),
                                "recall_of_settopk": _or_none(_share(np.isin(theirs["keys"], exact)))},
        "datasketch": {"minhash": ds["minhash"], "insert": ds["insert"], "query": ds["query"], "total_s": ds_total,
                       "num_perm": peers.num_perm, "bands": ds["bands"], "rows": ds["rows"],
                       "candidate_pairs": len(ds["keys"]), "true_pairs": true,
                       "recall": _or_none(true / len(exact) if len(exact) else float("nan")),
                       "precision": _or_none(true / len(ds["keys"]) if len(ds["keys"]) else float("nan"))},
        "ratios": {"setsimilaritysearch_over_settopk": _ratio(sss["median_s"], settopk_total),
                   "datasketch_over_settopk": _ratio(ds_total, settopk_total)},
        "exactness": {"identical_to_setsimilaritysearch": True, "ties_at_threshold": ties,
                      "settopk_recall_of_setsimilaritysearch": _or_none(_share(np.isin(theirs["keys"], exact)))},
        "planted": {"pairs": len(planted), "at_threshold": int(planted_found.sum())},
        "lsh_expected": lsh,
        "targets": {"same_pairs_as_setsimilaritysearch": True,
                    "at_least_10x_setsimilaritysearch": _ratio(sss["median_s"], settopk_total) >= 10.0,
                    "faster_than_datasketch_total": settopk_total < ds_total,
                    "faster_than_datasketch_index": st["build"]["median_s"]
                    < ds["minhash"]["median_s"] + ds["insert"]["median_s"],
                    "faster_than_datasketch_query": st["join"]["median_s"] < ds["query"]["median_s"]},
    }


def _share(mask: np.ndarray) -> float:
    return float(mask.mean()) if mask.size else float("nan")


def _or_none(x: float):
    """``x``, or None for NaN (no pairs to measure on), so that the JSON stays standard."""
    return None if x != x else x


def _environment(threads: int) -> dict:
    import numba

    from .machine import cpu_model

    versions = {}
    for name in _PEERS:
        try:
            from importlib.metadata import version

            versions[name] = version(name)
        except Exception:  # a checkout on sys.path without metadata
            versions[name] = "unknown"
    return {"cpu_model": cpu_model(), "cpus_visible": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "numba": numba.__version__, "threads": threads, **versions}


def run_peers(cfg, name: str) -> dict:
    """Generate the corpus, time settopk's self-join and its peers at each threshold, check them; returns the result.

    Parameters
    ----------
    cfg : settopk.jobs.bench.config.BenchConfig
        With a ``peers`` section; uses ``max_len``, ``synthetic``, ``warmup``, ``repetitions``,
        ``baseline_repetitions``.
    name : str
        The config's name, for the result.

    Raises
    ------
    MissingPeerError
        If SetSimilaritySearch or datasketch is not installed.
    ExactnessError
        If settopk's pairs differ from SetSimilaritySearch's other than at exact ties with ``T``
        (its ``result`` holds the differences and no timings).
    """
    from settopk.kernels.numba_index import NumbaShardIndex

    from .common import ExactnessError

    all_pairs, datasketch = _import_peers()
    peers, syn = cfg.peers, cfg.synthetic
    start = time.perf_counter()
    batch, planted = planted_corpus(syn.n_docs, peers.min_len, cfg.max_len, syn.vocab_size, syn.id_dist, syn.zipf_s,
                                    syn.near_duplicate_fraction, peers.edit_fraction, syn.seed)
    generate_s = time.perf_counter() - start
    n = batch.n_sets
    lists = [batch.tokens[batch.offsets[i]:batch.offsets[i + 1]].tolist() for i in range(n)]
    planted_keys = pair_keys(planted[:, 0], planted[:, 1], n)
    ids = np.arange(n, dtype=np.int64)
    log.info("peers: %d sets (%d planted near-duplicates), %d ids, generated in %.1f s", n, len(planted),
             len(batch.tokens), generate_s)

    builds, joins, ours = [], {t: [] for t in peers.thresholds}, {}
    threads = None
    for rep in range(cfg.warmup + cfg.repetitions):
        start = time.perf_counter()
        index = NumbaShardIndex(batch, ids, cfg.max_len, "jaccard", routing=cfg.routing, threads=peers.threads)
        build_s = time.perf_counter() - start
        threads = index.threads
        join_s = {}
        for t in peers.thresholds:
            join_s[t], ours[t] = _settopk_join(index, batch, t, n)
        if rep >= cfg.warmup:
            builds.append(build_s)
            for t in peers.thresholds:
                joins[t].append(join_s[t])
        log.info("peers: settopk %s: build %.3f s, join %s", f"repetition {rep + 1 - cfg.warmup}" if rep >= cfg.warmup
                 else f"warm-up {rep + 1}", build_s, ", ".join(f"{t}: {join_s[t]:.3f} s" for t in peers.thresholds))
        del index

    reps = cfg.baseline_repetitions or cfg.repetitions
    theirs, sss_runs = {}, {t: [] for t in peers.thresholds}
    for t in peers.thresholds:
        for rep in range(reps):
            seconds, theirs[t] = _sss_join(all_pairs, lists, t, n)
            sss_runs[t].append(seconds)
            log.info("peers: SetSimilaritySearch at %s, repetition %d: %.2f s, %d pairs", t, rep + 1, seconds,
                     len(theirs[t]))

    mismatches, ties = [], {}
    for t in peers.thresholds:
        ties[t], wrong = float_ties(ours[t], theirs[t], functools.partial(exact_jaccard, batch), t, n, "setsimilaritysearch")
        mismatches += wrong
    if mismatches:
        raise ExactnessError(mismatches, {"benchmark": "settopk.bench.peers", "config": name, "mismatches": mismatches,
                                          "pairs": {repr(t): {"settopk": len(ours[t]), "setsimilaritysearch":
                                                              len(theirs[t])} for t in peers.thresholds}})

    tokens = [[str(x).encode() for x in s] for s in lists]
    minhash_runs, sketch = [], {t: {"insert": [], "query": []} for t in peers.thresholds}
    for rep in range(reps):
        minhash_s, hashes = _minhashes(datasketch, tokens, peers.num_perm)
        minhash_runs.append(minhash_s)
        for t in peers.thresholds:
            got = _lsh_join(datasketch, hashes, t, peers.num_perm, n)
            sketch[t]["insert"].append(got.pop("insert_s"))
            sketch[t]["query"].append(got.pop("query_s"))
            sketch[t].update(got)
            log.info("peers: datasketch at %s, repetition %d: minhash %.2f s, insert %.2f s, query %.2f s, %d pairs", t,
                     rep + 1, minhash_s, sketch[t]["insert"][-1], sketch[t]["query"][-1], len(got["keys"]))
        del hashes

    rows = []
    for t in peers.thresholds:
        ds = dict(sketch[t], minhash=_median(minhash_runs), insert=_median(sketch[t]["insert"]),
                  query=_median(sketch[t]["query"]))
        timing = {"build": _median(builds), "join": _median(joins[t])}
        rows.append(_row(t, {"timing": timing, "keys": ours[t], "threads": threads},
                         {"timing": _median(sss_runs[t]), "keys": theirs[t]}, ties[t], ds,
                         _exact_jaccard(ours[t], batch, n), planted_keys, cfg, n))
    return {
        "benchmark": "settopk.bench.peers",
        "config": name,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": cfg.to_dict(),
        "environment": _environment(threads),
        "corpus": {"n_sets": n, "n_ids": int(len(batch.tokens)), "planted_pairs": len(planted), "min_len": peers.min_len,
                   "max_len": cfg.max_len, "edit_fraction": peers.edit_fraction, "generate_s": generate_s},
        "rows": rows,
    }


def format_peers_table(result: dict) -> str:
    """The printed summary of a peers result."""
    c, env = result["corpus"], result["environment"]
    lines = [f"settopk bench {result['config']}: threshold self-join (jaccard) against its peers; {c['n_sets']:,} sets of "
             f"{c['min_len']}-{c['max_len']} ids, {c['planted_pairs']:,} planted near-duplicates "
             f"({c['edit_fraction']:.0%} edits); settopk cpu on {env['threads']} thread(s), the peers on one; "
             f"{env['cpu_model']}"]
    for r in result["rows"]:
        s, p, d, x = r["settopk"], r["setsimilaritysearch"], r["datasketch"], r["exactness"]
        lsh, rt = r["lsh_expected"], r["ratios"]
        lines += [
            f"T = {r['threshold']}:",
            f"  settopk             {s['total_s']:>9.3f} s  (build {s['build']['median_s']:.3f} s + join "
            f"{s['join']['median_s']:.3f} s)  {s['pairs']:>9,} pairs",
            f"  SetSimilaritySearch {p['total']['median_s']:>9.3f} s  (index + query)  {p['pairs']:>22,} pairs   "
            f"{rt['setsimilaritysearch_over_settopk']:.1f}x settopk",
            f"  datasketch          {d['total_s']:>9.3f} s  (minhash {d['minhash']['median_s']:.2f} s + insert "
            f"{d['insert']['median_s']:.2f} s + query {d['query']['median_s']:.2f} s)  {d['candidate_pairs']:,} candidates, "
            f"b = {d['bands']}, r = {d['rows']}   {rt['datasketch_over_settopk']:.1f}x settopk",
            f"  exact: settopk's pairs identical to SetSimilaritySearch's ({x['ties_at_threshold']} pair(s) at exactly T "
            f"held by settopk only); settopk's recall of them {_fmt(x['settopk_recall_of_setsimilaritysearch'])}",
            f"  datasketch against the exact pairs: recall {_fmt(d['recall'])}, precision {_fmt(d['precision'])}",
            f"  planted pairs at T: {r['planted']['at_threshold']:,} of {r['planted']['pairs']:,}; LSH "
            f"{lsh['bands']} x {lsh['rows']} expected recall: {_fmt(lsh['recall_exact_pairs'])} of the exact pairs, "
            f"{_fmt(lsh['recall_planted_pairs'])} of the planted ones",
            "  targets: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in r["targets"].items()),
        ]
    return "\n".join(lines)


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"
