"""The real-data run's peers (:mod:`settopk.jobs.bench.real`): the C++ set-similarity joins as
subprocesses, SetSimilaritySearch in this process, and the digest every side's pairs are compared by.

The C++ peers are the ``set_sim_join`` binary of Mann, Augsten, Bouros, "An Empirical Evaluation of
Set Similarity Join Techniques", PVLDB 2016 (github.com/mshcruz/SSJOINLib, folder ``ssjoin-0.1``,
GPL-3; nothing of it is in this package: the user builds it and passes its path). Its default input is
raw numbers it does not prepare itself: one record per line, token ids renumbered by frequency
(rarest first), each record ascending, records by length ascending. :func:`prepare_peer_input` writes
that file (before any clock starts), records of one length in lexicographic order as the binary's own
preparation sorts them for GroupJoin (``frequencysorting.h``: GroupJoin groups only adjacent records of
equal prefix, so an input left in file order forms fewer groups and runs slower: docs/benchmarks.md); ``--timings`` prints each phase's user + system CPU time
(``getrusage``, whole milliseconds), of which ``algoindex`` and ``algojoin`` are the join; the
pairs (``--result FILE``, one `` (a, b)`` line each) name records by their 0-based line in the
prepared file, mapped back here to the dataset's lines.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
import time
from fractions import Fraction

import numpy as np

from settopk.kernels import SetBatch
from settopk.shards.inputs import InputError

from .pair_check import exact_jaccard

__all__ = ["CPP_ALGORITHMS", "PeerInput", "check_peer_binary", "pair_digest", "prepare_peer_input", "run_cpp",
           "run_sss", "sss_plan"]

#: The ``set_sim_join`` algorithms timed, by the name its command line takes.
CPP_ALGORITHMS = {"allpairs": "AllPairs", "ppjoin": "PPJoin", "groupjoin": "GroupJoin"}

_COUNT_RE = re.compile(rb"Result pair count: (\d+)")
_PHASE_RE = re.compile(rb"^\s*(algoindex|algojoin)\s+(\d+) ms", re.M)


def pair_digest(a: np.ndarray, b: np.ndarray) -> str:
    """SHA-1 of the sorted unordered pairs ``(min, max)``, as int64 ``(n_pairs, 2)`` C-order bytes.

    Parameters
    ----------
    a, b : numpy.ndarray of int, shape (n_pairs,)
        The two sides of each pair (dataset line numbers); a pair given twice changes the digest.
    """
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    pairs = np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1)
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    return hashlib.sha1(np.ascontiguousarray(pairs[order]).tobytes()).hexdigest()


class PeerInput:
    """The dataset's non-empty sets as the peers take them (host memory).

    Attributes
    ----------
    lines : numpy.ndarray of int64, shape (n_sets,)
        The dataset line of each non-empty set, in file order (SetSimilaritySearch's index order).
    lists : list of list of int
        Those sets' ids, for SetSimilaritySearch.
    raw_path : str or None
        The prepared ``set_sim_join`` input (None until :func:`prepare_peer_input`).
    raw_lines : numpy.ndarray of int64, shape (n_sets,)
        The dataset line of each record of ``raw_path``.
    """

    def __init__(self, sets: SetBatch, lines: np.ndarray):
        keep = np.flatnonzero(sets.lengths > 0)  # an empty set pairs with nothing (Jaccard 0/0 is 0)
        self.lines = np.asarray(lines, dtype=np.int64)[keep]
        self.sets = sets.take(keep)
        offsets, tokens = self.sets.offsets, self.sets.tokens
        self.lists = [tokens[offsets[i]:offsets[i + 1]].tolist() for i in range(self.sets.n_sets)]
        self.raw_path = None
        self.raw_lines = self.lines

    def jaccard(self, a: int, b: int) -> Fraction:
        """The exact Jaccard of the sets on dataset lines ``a`` and ``b`` (0 for a line without a set)."""
        rows = np.searchsorted(self.lines, [a, b])
        if not all(r < len(self.lines) and self.lines[r] == line for r, line in zip(rows.tolist(), (a, b))):
            return Fraction(0)
        return exact_jaccard(self.sets, *rows.tolist())


def prepare_peer_input(peer_input: PeerInput, directory: str) -> None:
    """Write ``set_sim_join``'s raw-number input under ``directory`` (sets ``raw_path`` and ``raw_lines``).

    Ids are renumbered by how many sets hold them, rarest first, ties by id
    (:func:`settopk.kernels.join.prepare.frequency_order`, the order the paper's algorithms use); each
    record is written ascending; records by length ascending, then lexicographically by their
    renumbered ids (identical records in file order), the order ``set_sim_join --whitespace``
    gives GroupJoin (its groups are runs of adjacent records with one prefix).
    """
    from settopk.kernels.join.prepare import frequency_order

    sets = peer_input.sets
    rank = frequency_order(sets.tokens, sets.id_bound)
    lengths = sets.lengths.astype(np.int64)
    ranked = rank[sets.tokens].astype(np.int64)
    row = np.repeat(np.arange(sets.n_sets, dtype=np.int64), lengths)
    ranked = ranked[np.lexsort((ranked, row))]  # ascending within each record
    offsets = sets.offsets
    by_order = []
    for length in np.unique(lengths).tolist():  # ascending; a few dozen lengths on market-basket data
        rows = np.flatnonzero(lengths == length)
        matrix = ranked[offsets[rows, None] + np.arange(length)]  # (n_rows, length), one record a row
        by_order.append(rows[np.lexsort(matrix[:, ::-1].T)])  # first column the primary key; stable
    by_order = np.concatenate(by_order) if by_order else np.zeros(0, dtype=np.int64)
    path = os.path.join(directory, "peer-input.txt")
    with open(path, "w") as f:
        for i in by_order.tolist():
            f.write(" ".join(map(str, ranked[offsets[i]:offsets[i + 1]].tolist())) + "\n")
    peer_input.raw_path = path
    peer_input.raw_lines = peer_input.lines[by_order]


def check_peer_binary(path: str) -> str:
    """``path`` as an absolute path if it is an executable file, else an :class:`InputError` saying how to build one."""
    full = os.path.abspath(os.path.expanduser(path))
    if not (os.path.isfile(full) and os.access(full, os.X_OK)):
        found = "nothing there" if not os.path.exists(full) else "a path that is not an executable file"
        raise InputError(full, "the set_sim_join binary of SSJOINLib (github.com/mshcruz/SSJOINLib, ssjoin-0.1)", found,
                         "build it outside this repository (docs/benchmarks.md, 'Real data') and pass its path to "
                         "--peer-binary, or leave --peer-binary out to skip the C++ peers")
    return full


def _run_binary(binary: str, args: list[str]) -> bytes:
    done = subprocess.run([binary, *args], capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{binary} {' '.join(args)} exited with {done.returncode}: "
                           f"{done.stderr.decode(errors='replace')[-500:]}")
    return done.stdout


def _read_result(path: str) -> np.ndarray:
    """The pairs of a ``--result`` file (one `` (a, b)`` line each), int64 of shape (n_pairs, 2):
    parsed by PyArrow's CSV reader once the parentheses and spaces are dropped, never as a Python
    object per number (a result of 10^8 pairs would take tens of GB so)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    with open(path, "rb") as f:
        data = f.read().translate(None, b"() ")
    if not data.strip():
        return np.zeros((0, 2), np.int64)
    table = pacsv.read_csv(pa.BufferReader(data), read_options=pacsv.ReadOptions(column_names=["a", "b"]),
                           convert_options=pacsv.ConvertOptions(column_types={"a": pa.int64(), "b": pa.int64()}))
    return np.stack([table.column(c).to_numpy() for c in ("a", "b")], axis=1)


def _count_and_ms(out: bytes, where: str) -> tuple[int, int]:
    count = _COUNT_RE.search(out)
    phases = dict((k.decode(), int(v)) for k, v in _PHASE_RE.findall(out))
    if count is None or set(phases) != {"algoindex", "algojoin"}:
        raise RuntimeError(f"{where}: no 'Result pair count' or algoindex/algojoin timings in its output: "
                           f"{out.decode(errors='replace')[-500:]}")
    return int(count.group(1)), phases["algoindex"] + phases["algojoin"]


def run_cpp(binary: str, peer_input: PeerInput, algorithm: str, threshold: float, warmup: int,
            repetitions: int) -> tuple[dict, tuple[np.ndarray, np.ndarray]]:
    """Time one ``set_sim_join`` algorithm at ``threshold``, then take its pairs once.

    Returns
    -------
    row : dict
        ``join_ms``: its own join timer (CPU ms, ``algoindex + algojoin``) of each timed run;
        ``wall_s``: each timed process's wall time, start to exit (reading the input included);
        ``pairs``, ``digest`` (:func:`pair_digest` over dataset lines).
    pairs : (numpy.ndarray of int64, numpy.ndarray of int64), each of shape (n_pairs,)
        The pairs' two dataset lines.

    Raises
    ------
    RuntimeError
        If the binary fails, prints no count or timers, or its pairs disagree with its count.
    """
    args = ["--timings", peer_input.raw_path, algorithm, repr(threshold)]
    join_ms, wall_s, count = [], [], None
    for rep in range(warmup + repetitions):
        start = time.perf_counter()
        out = _run_binary(binary, args)
        seconds = time.perf_counter() - start
        count, ms = _count_and_ms(out, f"{binary} {algorithm} {threshold!r}")
        if rep >= warmup:
            join_ms.append(ms)
            wall_s.append(seconds)
    with tempfile.TemporaryDirectory(prefix="settopk-peer-") as tmp:
        result = os.path.join(tmp, "pairs.txt")
        _run_binary(binary, ["--result", result, *args])
        ids = _read_result(result)
    if len(ids) != count:
        raise RuntimeError(f"{binary} {algorithm} at {threshold!r}: {len(ids)} pairs written, {count} counted")
    a, b = peer_input.raw_lines[ids[:, 0]], peer_input.raw_lines[ids[:, 1]]
    return {"join_ms": join_ms, "wall_s": [round(s, 6) for s in wall_s], "pairs": int(count),
            "digest": pair_digest(a, b)}, (a, b)


def sss_plan(thresholds: list[float], probe: float) -> tuple[list[float], list[float]]:
    """SetSimilaritySearch's order of thresholds after the probe: ``(above, below)``, each cheapest
    first (above: highest first; below: from the probe down), so that a run over the budget stops its
    side with every cheaper threshold already run."""
    above = sorted((t for t in thresholds if t > probe), reverse=True)
    below = sorted((t for t in thresholds if t < probe), reverse=True)
    return above, below


def run_sss(all_pairs, peer_input: PeerInput, threshold: float) -> tuple[dict, tuple[np.ndarray, np.ndarray]]:
    """One timed SetSimilaritySearch ``all_pairs`` (index and join, pure Python, one thread).

    Returns
    -------
    row : dict
        ``seconds``, ``pairs``, ``digest`` (:func:`pair_digest` over dataset lines).
    pairs : (numpy.ndarray of int64, numpy.ndarray of int64), each of shape (n_pairs,)
        The pairs' two dataset lines.
    """
    start = time.perf_counter()
    found = [(x, y) for x, y, _ in all_pairs(peer_input.lists, similarity_func_name="jaccard",
                                             similarity_threshold=threshold)]
    seconds = time.perf_counter() - start
    ids = np.array(found, dtype=np.int64).reshape(-1, 2)
    a, b = peer_input.lines[ids[:, 0]], peer_input.lines[ids[:, 1]]
    return {"seconds": seconds, "pairs": len(ids), "digest": pair_digest(a, b)}, (a, b)
