"""The real-data run: settopk's exact Jaccard threshold self-join on a FIMI dataset against the C++
set-similarity joins and SetSimilaritySearch, and its top-k self-join against sparse_dot_topn (issue 46).

Run by ``python -m settopk bench --config real-retail [--peer-binary PATH]`` (any config with a
``real`` section). One process, one dataset (``real.dataset``, FIMI: one set per line,
whitespace-separated ids, read by :func:`settopk.shards.inputs.read_corpus`; RETAIL by default, or
a synthetic stand-in for a dataset not shipped, :mod:`settopk.jobs.bench.stand_ins`), and for each
threshold ``T`` of ``real.thresholds``:

- **settopk**: :meth:`settopk.Index.self_join` of an index built once, untimed (backend ``cpu``,
  ``real.threads`` threads, default every CPU of this process): every unordered pair of lines with
  Jaccard ``>= T``, exactly. Timed: the whole call (filters, verification, the pairs ordered, the
  :class:`settopk.Pairs` with their scores); the corpus's frequency order and identical-set groups
  are made by the first call (a warm-up, at least one) and kept by the index for every threshold,
  as the C++ input is prepared untimed. ``warmup`` untimed runs, then the min of ``repetitions``.
- **C++** (with ``--peer-binary``): SSJOINLib's ``set_sim_join`` AllPairs, PPJoin and GroupJoin, one
  thread each, as subprocesses on the input prepared for them (:mod:`settopk.jobs.bench.real_peers`);
  their own join timer (CPU time of ``algoindex + algojoin``; frequency order and sorting done
  before, untimed), min of ``repetitions`` after ``warmup``.
- **SetSimilaritySearch** ``all_pairs`` (exact, pure Python, one thread), ``baseline_repetitions``
  (default 1) runs: first at ``real.sss_probe``; then the thresholds above it, highest (cheapest)
  first, and those below it, from the probe down, each side stopping after a run over
  ``real.sss_budget_s`` (the probe's run gates the side below); the cells it skips say so.

Every side's pair count and :func:`settopk.jobs.bench.real_peers.pair_digest` must equal settopk's.
The peers compare floats (SetSimilaritySearch its scores, the C++ joins ``ceil`` of float products
in their bounds), so a peer may lack a pair whose exact Jaccard is ``T``; where the digests differ,
every pair that one side holds is checked from the sets' exact overlaps
(:func:`settopk.jobs.bench.pair_check.float_ties`): such ties that settopk holds are counted in the
peer's ``ties_missed`` and noted under the table, and any other difference raises
:class:`settopk.jobs.bench.common.ExactnessError` (the result JSON then holds the differences).

Ids of 2^16 and more (a dataset's item numbers) are read through a
:class:`settopk.index.tokens.TokenDictionary` into dense ids, as :meth:`settopk.Index.build` reads
them; the peers get the same dense sets (a renaming of ids changes no overlap).

The top-k self-join (``real.topk_k > 0``): ``settopk.Index.search`` of every set, ``k = topk_k``,
score ``real.topk_score`` (cosine or overlap), against ``sparse_dot_topn`` on the same threads
(:class:`settopk.jobs.bench.baselines.SparseDotTopnBaseline`), each built once untimed, searches
timed (min of ``repetitions``); the sorted exact score keys of every query must agree (the library
may keep other docs among ties at the k-th score; the queries where it did are counted).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import List, Optional

import numpy as np

from settopk.index import Index
from settopk.index.tokens import TokenDictionary
from settopk.shards.inputs.vocabulary import WideSets

from .pair_check import float_ties, pair_keys
from .real_peers import CPP_ALGORITHMS, PeerInput, check_peer_binary, pair_digest, prepare_peer_input, run_cpp, run_sss, sss_plan

__all__ = ["RealConfig", "format_real_table", "run_real", "section_fields"]

log = logging.getLogger("settopk.bench")

#: The repository root: ``real.dataset`` is relative to it.
REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class RealConfig:
    """A real-data run (:mod:`settopk.jobs.bench.real`).

    Attributes
    ----------
    dataset : str
        A FIMI ``*.dat`` file (one set per line, whitespace-separated non-negative ids); a relative
        path is taken from the repository root. Default: RETAIL (88,162 market baskets, FIMI repository).
        ``stand-in:NAME``: a synthetic stand-in of :mod:`settopk.jobs.bench.stand_ins`, written once
        into ``--data-dir`` (default ``synthetic.cache_dir``).
    thresholds : list of float
        Jaccard thresholds in ``(0, 1]``, run in order (each read as its shortest decimal: 0.8 is 4/5).
    threads : int, optional
        settopk's threads (join and top-k) and sparse_dot_topn's; default every CPU of this process.
    sss_probe : float
        The threshold SetSimilaritySearch runs at first.
    sss_budget_s : float
        SetSimilaritySearch runs at a further threshold only while its previous run took less.
    topk_k : int
        ``k`` of the top-k self-join; 0 skips it.
    topk_score : str
        Its score: ``cosine`` or ``overlap`` (those sparse_dot_topn ranks by).
    peer_binary : str, optional
        SSJOINLib's ``set_sim_join`` (``--peer-binary`` sets it); None runs no C++ peer.
    """

    dataset: str = "../shared/data/retail.dat"
    thresholds: List[float] = field(default_factory=lambda: [0.5, 0.6, 0.7, 0.8, 0.9])
    threads: Optional[int] = None
    sss_probe: float = 0.7
    sss_budget_s: float = 60.0
    topk_k: int = 10
    topk_score: str = "cosine"
    peer_binary: Optional[str] = None

    def problems(self, cfg) -> list[str]:
        """What is wrong with the section, given the whole config ``cfg`` (empty if nothing)."""
        from .stand_ins import STAND_INS, stand_in_name

        problems = []
        name = stand_in_name(self.dataset)
        if name is not None and name not in STAND_INS:
            problems.append(f"real.dataset names stand-in {name!r}; the stand-ins are "
                            f"{', '.join('stand-in:' + n for n in sorted(STAND_INS))}")
        if not self.thresholds or not all(0.0 < t <= 1.0 for t in self.thresholds):
            problems.append(f"real.thresholds must list Jaccard thresholds in (0, 1], found {self.thresholds}")
        if not 0.0 < self.sss_probe <= 1.0 or self.sss_budget_s <= 0:
            problems.append(f"real.sss_probe must be in (0, 1] and real.sss_budget_s > 0, found {self.sss_probe} and "
                            f"{self.sss_budget_s}")
        if self.threads is not None and self.threads < 1:
            problems.append(f"real.threads must be >= 1 (or left out: every CPU), found {self.threads}")
        if self.topk_k < 0 or self.topk_score not in ("cosine", "overlap"):
            problems.append(f"real.topk_k must be >= 0 (0: no top-k run) and real.topk_score cosine or overlap, found "
                            f"{self.topk_k} and {self.topk_score!r}")
        return problems


def section_fields() -> list[str]:
    """The section's keys, for the config loader's list of valid keys."""
    return [f"real.{f.name}" for f in dataclasses.fields(RealConfig)]


def dataset_path(real: RealConfig, data_dir: str) -> Path:
    """``real.dataset`` as a path (a relative one from the repository root), checked to exist; a
    stand-in's file under ``data_dir``, written there first where it is not
    (:func:`settopk.jobs.bench.stand_ins.stand_in_path`).

    Raises
    ------
    settopk.shards.inputs.InputError
        If no file is there.
    """
    from settopk.shards.inputs import InputError

    from .stand_ins import stand_in_name, stand_in_path

    name = stand_in_name(real.dataset)
    if name is not None:
        return stand_in_path(name, data_dir)
    path = Path(os.path.expanduser(real.dataset))
    path = path if path.is_absolute() else (REPO_ROOT / path).resolve()
    if not path.is_file():
        raise InputError(str(path), "the dataset of real.dataset (a FIMI .dat file, one set per line)", "no file there",
                         "download RETAIL (http://fimi.uantwerpen.be/data/retail.dat) to ../shared/data/ beside the "
                         "repository, or set real.dataset in the config to a FIMI file")
    return path


def _time_settopk(index, threshold, warmup, repetitions) -> tuple[dict, tuple[np.ndarray, np.ndarray]]:
    """``index.self_join(T)`` timed: the in-process API, as a user calls it (its first call, a
    warm-up, prepares the corpus for every threshold: the frequency order and identical sets);
    its row and its pairs' two dataset lines."""
    runs = []
    for rep in range(warmup + repetitions):
        start = time.perf_counter()
        pairs = index.self_join(repr(threshold))
        seconds = time.perf_counter() - start
        if rep >= warmup:
            runs.append(seconds)
    return {"runs_s": [round(s, 6) for s in runs], "min_s": min(runs), "pairs": len(pairs),
            "digest": pair_digest(pairs.query_index, pairs.doc_ids)}, (pairs.query_index, pairs.doc_ids)


def _sss_rows(cfg, peer_input: PeerInput, thresholds: list[float], check) -> dict:
    """SetSimilaritySearch's runs by threshold: a measurement, or ``{"skipped": reason}``
    (``check(t, name, row, pairs)`` compares each measured run's pairs with settopk's)."""
    from .peers import _import_peers

    all_pairs, _ = _import_peers()
    real, reps = cfg.real, cfg.baseline_repetitions or 1
    out = {}

    def measure(t):
        runs = [run_sss(all_pairs, peer_input, t) for _ in range(reps)]
        row = dict(runs[-1][0], min_s=min(r["seconds"] for r, _ in runs), runs_s=[round(r["seconds"], 3) for r, _ in runs])
        log.info("real: SetSimilaritySearch at %s: %.1f s, %d pairs", t, row["min_s"], row["pairs"])
        check(t, "setsimilaritysearch", row, runs[-1][1])
        return row

    out[real.sss_probe] = measure(real.sss_probe)
    above, below = sss_plan(thresholds, real.sss_probe)
    # Above the probe each run is cheaper than the probe's, so those start afresh from the highest;
    # below it each costs more than the one before, so the probe's time gates the first.
    for side, last, last_t in ((above, 0.0, None), (below, out[real.sss_probe]["min_s"], real.sss_probe)):
        for t in side:
            if last > real.sss_budget_s:
                out[t] = {"skipped": f"its run at {last_t} took {last:.0f} s, over the {real.sss_budget_s:.0f} s budget"}
                continue
            out[t] = measure(t)
            last, last_t = out[t]["min_s"], t
    return out


def _topk(cfg, docs, ids, max_len: int, vocab_size: int) -> dict:
    """settopk's top-k self-join against sparse_dot_topn's: search times, exact score keys compared
    (``docs``: the dataset's sets in dense ids below ``vocab_size``, ``ids`` their lines)."""
    import settopk

    from .baselines import SparseDotTopnBaseline
    from .common import compare_scores

    real = cfg.real
    index = settopk.Index.build(docs, score=real.topk_score, backend="cpu", max_len=max_len, doc_ids=ids,
                                threads=real.threads, vocab_size=vocab_size)
    peer = SparseDotTopnBaseline(docs, ids, max_len, docs.id_bound, score=real.topk_score,
                                 threads=real.threads or len(os.sched_getaffinity(0)))
    ours, theirs = [], []
    for rep in range(cfg.warmup + cfg.repetitions):
        start = time.perf_counter()
        top = index.search(docs, k=real.topk_k)
        mid = time.perf_counter()
        their = peer.search(docs, real.topk_k)
        end = time.perf_counter()
        if rep >= cfg.warmup:
            ours.append(mid - start)
            theirs.append(end - mid)
    everyone = np.arange(docs.n_sets)
    settings = SimpleNamespace(score=real.topk_score, max_len=max_len)
    mismatches, ids_differ = compare_scores("sparse_dot_topn", their, top, everyone, docs.lengths, settings)
    return {"k": real.topk_k, "score": real.topk_score, "settopk_min_s": min(ours), "settopk_runs_s": ours,
            "sparse_dot_topn_min_s": min(theirs), "sparse_dot_topn_runs_s": theirs, "mismatches": mismatches[:10],
            "n_mismatches": len(mismatches), "queries_with_other_tied_ids": ids_differ}


def run_real(cfg, name: str, data_dir: str) -> dict:
    """Read the dataset, time settopk and the peers at each threshold, check every pair set; returns the result.

    Parameters
    ----------
    cfg : settopk.jobs.bench.config.BenchConfig
        With a ``real`` section; uses ``warmup``, ``repetitions``, ``baseline_repetitions``.
    name : str
        The config's name, for the result.
    data_dir : str
        Where a stand-in dataset is written once (``--data-dir``, else ``synthetic.cache_dir``).

    Raises
    ------
    settopk.shards.inputs.InputError
        If the dataset is missing or malformed, or ``real.peer_binary`` is not an executable file.
    MissingPeerError
        If SetSimilaritySearch (or sparse_dot_topn, for the top-k run) is not installed.
    ExactnessError
        If a peer's pairs differ from settopk's by more than ties at ``T`` that settopk holds.
    """
    from settopk.shards.inputs import SetLimits, read_corpus

    from .common import ExactnessError

    real = cfg.real
    path = dataset_path(real, data_dir)
    binary = check_peer_binary(real.peer_binary) if real.peer_binary else None
    start = time.perf_counter()
    corpus = read_corpus(str(path), SetLimits(vocab_size=cfg.vocab_size, max_len=cfg.max_len))
    read_s = time.perf_counter() - start
    sets, lines = corpus.docs, corpus.doc_ids
    vocab_size = cfg.vocab_size
    if isinstance(sets, WideSets):  # item numbers of 2^16 and more: dense ids, as Index.build makes them
        dictionary, sets = TokenDictionary.build(sets, cfg.max_len, str(path))
        vocab_size = dictionary.vocab_size
    max_len = max(int(sets.lengths.max()) if sets.n_sets else 1, 1)
    log.info("real: %s: %d sets, %d ids, longest %d, read in %.1f s", path, sets.n_sets, len(sets.tokens), max_len, read_s)
    peer_input = PeerInput(sets, lines)
    threads = real.threads or len(os.sched_getaffinity(0))

    # Built once, untimed (as the C++ input is prepared untimed); every threshold joins the same index.
    index = Index.build(sets, score="jaccard", backend="cpu", max_len=max_len, doc_ids=lines, threads=real.threads,
                        vocab_size=vocab_size)
    rows, ours, mismatches = {}, {}, []
    n_keys = int(lines[-1]) + 1 if len(lines) else 1

    def check(t, who, row, pairs):
        """Compare a peer's pairs with settopk's: equal, or differing only by ties at T that settopk holds."""
        want = rows[t]["settopk"]
        if (row["pairs"], row["digest"]) == (want["pairs"], want["digest"]):
            return
        row["ties_missed"], wrong = float_ties(ours[t], pair_keys(*pairs, n_keys), peer_input.jaccard, t, n_keys, who)
        mismatches.extend(wrong)
        if row["ties_missed"]:
            log.warning("real: %s at %s lacks %d pair(s) of Jaccard exactly %s that settopk holds (it compares floats)",
                        who, t, row["ties_missed"], t)

    for t in real.thresholds:
        row, pairs = _time_settopk(index, t, max(cfg.warmup, 1), cfg.repetitions)
        rows[t], ours[t] = {"threshold": repr(t), "settopk": row, "cpp": {}}, pair_keys(*pairs, n_keys)
        log.info("real: settopk at %s: %.3f s, %d pairs", t, row["min_s"], row["pairs"])
    if binary is not None:
        with tempfile.TemporaryDirectory(prefix="settopk-real-") as tmp:
            prepare_peer_input(peer_input, tmp)
            for t in real.thresholds:
                for algo in CPP_ALGORITHMS:
                    got, pairs = run_cpp(binary, peer_input, algo, t, cfg.warmup, cfg.repetitions)
                    rows[t]["cpp"][algo] = dict(got, min_ms=min(got["join_ms"]))
                    log.info("real: %s at %s: %d ms, %d pairs", algo, t, min(got["join_ms"]), got["pairs"])
                    check(t, f"cpp {algo}", rows[t]["cpp"][algo], pairs)
    sss = _sss_rows(cfg, peer_input, real.thresholds, check)
    for t in real.thresholds:
        rows[t]["setsimilaritysearch"] = sss[t]

    for t, row in rows.items():
        best = min((r["min_ms"] for r in row["cpp"].values()), default=None)
        row["best_cpp_ms"] = best
        row["settopk_over_best_cpp"] = row["settopk"]["min_s"] * 1000 / best if best else None
    result = {
        "benchmark": "settopk.bench.real", "config": name,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": cfg.to_dict(), "environment": _environment(threads, binary),
        "dataset": {"path": str(path), "n_sets": sets.n_sets, "n_tokens": len(sets.tokens), "longest": max_len,
                    "read_s": read_s},
        "rows": list(rows.values()),
    }
    if mismatches:
        raise ExactnessError(mismatches[:100], dict(result, mismatches=mismatches[:100], n_mismatches=len(mismatches)))
    if real.topk_k:
        result["topk"] = _topk(cfg, sets, lines, max_len, vocab_size)
        if result["topk"]["n_mismatches"]:
            raise ExactnessError(result["topk"]["mismatches"], result)
    return result


def _environment(threads: int, binary: str | None) -> dict:
    import numba

    from .machine import cpu_model

    return {"cpu_model": cpu_model(), "cpus_visible": len(os.sched_getaffinity(0)), "load_average": os.getloadavg(),
            "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
            "threads": threads, "peer_binary": binary}


def _cell(r: dict) -> str:
    if "skipped" in r:
        return "skipped"
    return f"{r['min_s']:.1f} s"


def format_real_table(result: dict) -> str:
    """The printed summary of a real-data result."""
    d, env = result["dataset"], result["environment"]
    algos = [a for a in CPP_ALGORITHMS if any(a in r["cpp"] for r in result["rows"])]
    lines = [f"settopk bench {result['config']}: exact Jaccard threshold self-join on {d['path']} ({d['n_sets']:,} sets, "
             f"{d['n_tokens']:,} ids in all); settopk cpu on {env['threads']} thread(s) (whole call, wall, min), C++ and "
             f"SetSimilaritySearch on one (C++: its own join timer, CPU ms of algoindex + algojoin on prepared input); "
             f"{env['cpu_model']}, load average {', '.join(f'{x:.1f}' for x in env['load_average'])}",
             f"{'T':>5} {'pairs':>10} {'settopk ms':>11} " + " ".join(f"{CPP_ALGORITHMS[a] + ' ms':>13}" for a in algos)
             + f" {'settopk/best C++':>17} {'SetSimSearch':>13}"]
    notes, ties = [], False
    for r in result["rows"]:
        s = r["settopk"]
        ratio = (f"{r['settopk_over_best_cpp']:.1f}x" if r["settopk_over_best_cpp"]
                 else "C++ < 1 ms" if r["cpp"] else "no C++ run")
        lines.append(f"{r['threshold']:>5} {s['pairs']:>10,} {s['min_s'] * 1000:>11.0f} "
                     + " ".join(f"{r['cpp'][a]['min_ms']:>13}" for a in algos)
                     + f" {ratio:>17} {_cell(r['setsimilaritysearch']):>13}")
        if "skipped" in r["setsimilaritysearch"]:
            notes.append(f"SetSimilaritySearch at {r['threshold']} skipped: {r['setsimilaritysearch']['skipped']}")
        sides = [(CPP_ALGORITHMS[a], c) for a, c in r["cpp"].items()] + [("SetSimilaritySearch", r["setsimilaritysearch"])]
        tied = [(who, c["ties_missed"]) for who, c in sides if c.get("ties_missed")]
        notes += [f"{who} at {r['threshold']} lacks {n:,} pair(s) of Jaccard exactly {r['threshold']} (it compares "
                  f"floats); checked exactly, they are settopk's only difference from it" for who, n in tied]
        ties = ties or bool(tied)
    lines += notes
    lines.append("pair counts and digests (sha1 of the sorted (min_line, max_line) pairs) equal across every side run"
                 + (", but for the ties noted" if ties else ""))
    if "topk" in result:
        t = result["topk"]
        lines.append(f"top-k self-join (k = {t['k']}, {t['score']}, every set a query): settopk Index.search "
                     f"{t['settopk_min_s']:.3f} s, sparse_dot_topn {t['sparse_dot_topn_min_s']:.3f} s "
                     f"({t['sparse_dot_topn_min_s'] / t['settopk_min_s']:.1f}x settopk); exact scores equal on every "
                     f"query ({t['queries_with_other_tied_ids']:,} keep other docs among ties)")
    return "\n".join(lines)
