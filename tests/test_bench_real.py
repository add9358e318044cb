"""The real-data benchmark run (settopk.jobs.bench.real) on the first 3,000 lines of RETAIL with
SetSimilaritySearch as its one peer: pair counts and digests agree, the digest is that of the
oracle's pairs, and a missing dataset or peer binary is a clear error."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from settopk.jobs.bench import cli
from settopk.jobs.bench.real_peers import pair_digest
from settopk.shards.inputs import InputError

N_LINES = 3000


def _config(tmp_path, dataset, **real) -> str:
    values = {"dataset": str(dataset), "thresholds": "[0.5, 0.8]", "sss_probe": 0.8, "topk_k": 0, **real}
    path = tmp_path / "real.yaml"
    path.write_text("backend: cpu\ncpus_per_shard: 2.0\nscore: jaccard\nwarmup: 0\nrepetitions: 1\nbaselines: []\n"
                    "real:\n" + "".join(f"  {k}: {v}\n" for k, v in values.items()))
    return str(path)


def _head(tmp_path, retail: Path) -> Path:
    with open(retail) as f:
        head = [next(f) for _ in range(N_LINES)]
    path = tmp_path / "retail-head.dat"
    path.write_text("".join(head))
    return path


def _oracle_digest(path: Path, threshold: str) -> tuple[int, str]:
    """Every pair of lines with Jaccard >= T, from exact integer overlaps (a sparse product)."""
    import scipy.sparse

    sets = [sorted({int(t) for t in line.split()}) for line in path.read_text().splitlines()]
    lengths = np.array([len(s) for s in sets], dtype=np.int64)
    m = scipy.sparse.csr_matrix((np.ones(int(lengths.sum()), np.int64), np.concatenate(sets),
                                 np.concatenate([[0], np.cumsum(lengths)])))
    inter = scipy.sparse.triu(m @ m.T, k=1).tocoo()  # i < j, overlap > 0
    t = Fraction(threshold)
    union = lengths[inter.row] + lengths[inter.col] - inter.data
    keep = inter.data * t.denominator >= t.numerator * union
    return int(keep.sum()), pair_digest(inter.row[keep], inter.col[keep])


def test_real_run_agrees_with_setsimilaritysearch_and_the_oracle(tmp_path, retail_dat):
    path = _head(tmp_path, retail_dat)
    out = tmp_path / "real.json"
    result = cli.run(cli.build_parser().parse_args(["--config", _config(tmp_path, path), "--out", str(out), "--quiet"]))
    rows = {r["threshold"]: r for r in result["rows"]}
    assert sorted(rows) == ["0.5", "0.8"] and result["dataset"]["n_sets"] == N_LINES
    for t, row in rows.items():
        s, p = row["settopk"], row["setsimilaritysearch"]
        assert (p["pairs"], p["digest"]) == (s["pairs"], s["digest"])
        assert (s["pairs"], s["digest"]) == _oracle_digest(path, t) and s["pairs"] > 0
        assert row["cpp"] == {} and row["settopk_over_best_cpp"] is None
    assert out.is_file() and "topk" not in result


def test_item_numbers_past_two_to_the_sixteen_are_read_through_a_dictionary(tmp_path, retail_dat):
    """A FIMI file of large item numbers (KOSARAK's, click-streams') runs as RETAIL's ids would: the
    same pairs, the top-k run too."""
    head = _head(tmp_path, retail_dat)
    wide = tmp_path / "retail-wide.dat"
    wide.write_text("".join(" ".join(str(int(t) * 1009 + 70_001) for t in line.split()) + "\n"
                            for line in head.read_text().splitlines()))
    config = _config(tmp_path, wide, topk_k=5, thresholds="[0.7]", sss_probe=0.7)
    result = cli.run(cli.build_parser().parse_args(["--config", config, "--quiet"]))
    row = result["rows"][0]
    assert (row["settopk"]["pairs"], row["settopk"]["digest"]) == _oracle_digest(head, "0.7")
    assert (row["setsimilaritysearch"]["pairs"], row["setsimilaritysearch"]["digest"]) == _oracle_digest(head, "0.7")
    assert result["topk"]["n_mismatches"] == 0 and result["topk"]["k"] == 5


def test_a_peer_may_lack_only_ties_at_t_that_settopk_holds():
    """The C++ joins bound lengths and prefixes by ceil of float products and lose some pairs of
    Jaccard exactly T: those are counted; any other difference is a mismatch, named by its pair."""
    from settopk.jobs.bench.common import ExactnessError
    from settopk.jobs.bench.pair_check import float_ties, pair_keys
    from settopk.jobs.bench.real_peers import PeerInput
    from settopk.kernels import SetBatch

    # lines 10-14, line 12 empty: J(10, 11) = 9/10, J(13, 14) = 8/10
    lists = [list(range(9)) + [20], list(range(9)) + [21], [], [30, 31, 32, 33], [30, 31, 32, 33, 34]]
    peer_input = PeerInput(SetBatch.from_lists(lists), np.arange(10, 15, dtype=np.int64))
    assert peer_input.jaccard(10, 11) == Fraction(9, 11) and peer_input.jaccard(13, 14) == Fraction(4, 5)
    assert peer_input.jaccard(10, 12) == 0 and peer_input.jaccard(12, 99) == 0
    n = 15
    ours, none = pair_keys([13], [14], n), pair_keys([], [], n)
    assert float_ties(ours, none, peer_input.jaccard, 0.8, n, "cpp allpairs") == (1, [])
    ties, wrong = float_ties(none, ours, peer_input.jaccard, 0.8, n, "cpp allpairs")  # settopk lacks the tie
    assert ties == 0 and wrong == [{"threshold": "0.8", "implementation": "cpp allpairs", "pair": [13, 14],
                                    "jaccard": "4/5", "settopk": False, "peer": True}]
    ties, wrong = float_ties(pair_keys([10, 13], [11, 14], n), none, peer_input.jaccard, 0.8, n, "cpp ppjoin")
    assert ties == 1 and [w["pair"] for w in wrong] == [[10, 11]]  # 9/11 is not T: the peer must hold it
    with pytest.raises(ExactnessError, match=r"1 result\(s\) differ; first: .*cpp ppjoin.*\[10, 11\]"):
        raise ExactnessError(wrong)


def test_a_missing_dataset_and_a_missing_peer_binary_are_input_errors(tmp_path):
    missing = tmp_path / "nowhere.dat"
    with pytest.raises(InputError, match="real.dataset"):
        cli.run(cli.build_parser().parse_args(["--config", _config(tmp_path, missing), "--quiet"]))
    path = tmp_path / "tiny.dat"
    path.write_text("1 2\n1 2 3\n")
    args = ["--config", _config(tmp_path, path), "--peer-binary", str(tmp_path / "set_sim_join"), "--quiet"]
    with pytest.raises(InputError, match="set_sim_join"):
        cli.run(cli.build_parser().parse_args(args))
    assert cli.main(args) == cli.EXIT_BAD_INPUT


def test_peer_binary_without_a_real_section_is_a_config_error():
    assert cli.main(["--config", "threshold-peers", "--peer-binary", "/bin/true", "--quiet"]) == cli.EXIT_BAD_INPUT


def test_setsimilaritysearch_runs_cheapest_first_on_each_side_of_the_probe():
    from settopk.jobs.bench.real_peers import sss_plan

    assert sss_plan([0.5, 0.6, 0.7, 0.8, 0.9], 0.7) == ([0.9, 0.8], [0.6, 0.5])
    assert sss_plan([0.9, 0.5], 0.7) == ([0.9], [0.5]) and sss_plan([0.7], 0.7) == ([], [])


def test_the_peer_input_is_ranked_by_frequency_and_ordered_by_length_then_lexicographically(tmp_path):
    from settopk.kernels import SetBatch
    from settopk.jobs.bench.real_peers import PeerInput, prepare_peer_input

    # id 0 in every set, 1 and 2 in four, 3 and 4 once: rarest first, ties by id: 3, 4, 1, 2, 0
    lists = [[0, 1, 2], [], [0, 2, 3], [0, 1], [0, 1, 2], [0, 4], [0, 1, 2]]
    peer_input = PeerInput(SetBatch.from_lists([sorted(s) for s in lists]), np.arange(len(lists), dtype=np.int64) + 100)
    prepare_peer_input(peer_input, str(tmp_path))
    records = [list(map(int, line.split())) for line in Path(peer_input.raw_path).read_text().splitlines()]
    assert records == [[1, 4], [2, 4], [0, 3, 4], [2, 3, 4], [2, 3, 4], [2, 3, 4]]
    assert peer_input.raw_lines.tolist() == [105, 103, 102, 100, 104, 106]  # identical records in file order
    rank = {3: 0, 4: 1, 1: 2, 2: 3, 0: 4}
    assert all(sorted(rank[t] for t in lists[line - 100]) == rec for rec, line in zip(records, peer_input.raw_lines))


def test_a_stand_in_is_written_once_and_is_the_measured_file(tmp_path, monkeypatch):
    """``real.dataset: stand-in:clickstream``: the file under ``--data-dir`` has the recorded SHA-1 (the
    bytes docs/benchmarks.md measured), is written whole, and is read again, not rewritten."""
    import hashlib

    from settopk.jobs.bench import stand_ins
    from settopk.jobs.bench.real import RealConfig, dataset_path

    path = dataset_path(RealConfig(dataset="stand-in:clickstream"), str(tmp_path))
    assert path == tmp_path / "stand-ins" / "clickstream.dat"
    assert hashlib.sha1(path.read_bytes()).hexdigest() == stand_ins.STAND_INS["clickstream"][1]
    lines = path.read_text().splitlines()
    assert len(lines) == 36683 and all(lines) and max(len(line.split()) for line in lines) == 305
    assert [p.name for p in path.parent.iterdir()] == ["clickstream.dat"]  # no temporary left
    monkeypatch.setitem(stand_ins.STAND_INS, "clickstream", (None, "unused"))  # written: never made again
    assert dataset_path(RealConfig(dataset="stand-in:clickstream"), str(tmp_path)) == path


def test_a_stand_in_that_draws_other_numbers_is_refused(tmp_path, monkeypatch):
    from settopk.jobs.bench import stand_ins

    monkeypatch.setitem(stand_ins.STAND_INS, "clickstream", (lambda: ["1 2", "3"], "0" * 40))
    with pytest.raises(RuntimeError, match="expected 0000"):
        stand_ins.stand_in_path("clickstream", str(tmp_path))
    assert not (tmp_path / "stand-ins" / "clickstream.dat").exists()


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name, n_sets, longest", [("kosarak", 990_002, 605), ("dblp", 100_000, 381),
                                                   ("enron", 100_000, 2030), ("bms", 515_597, 101),
                                                   ("aol", 2_000_000, 100)])
def test_the_larger_stand_ins_are_the_measured_files(tmp_path, name, n_sets, longest):
    import hashlib

    from settopk.jobs.bench import stand_ins

    path = stand_ins.stand_in_path(name, str(tmp_path))
    assert hashlib.sha1(path.read_bytes()).hexdigest() == stand_ins.STAND_INS[name][1]
    lengths = [len(line.split()) for line in path.read_text().splitlines()]
    assert len(lengths) == n_sets and max(lengths) == longest and min(lengths) >= 1


def test_an_unknown_stand_in_is_a_config_error(tmp_path):
    config = _config(tmp_path, "stand-in:nope")
    assert cli.main(["--config", config, "--quiet"]) == cli.EXIT_BAD_INPUT
    from settopk.configs import ConfigError

    with pytest.raises(ConfigError, match="stand-in 'nope'; the stand-ins are stand-in:aol, stand-in:bms, stand-in:clickstream, stand-in:dblp, "
                       "stand-in:enron, stand-in:kosarak"):
        cli.run(cli.build_parser().parse_args(["--config", config, "--quiet"]))


def test_a_peer_result_file_is_read_as_pairs_of_lines(tmp_path):
    from settopk.jobs.bench.real_peers import _read_result

    path = tmp_path / "pairs.txt"
    path.write_text(" (12, 6)\n (21, 6)\n (4294967296, 0)\n")
    assert _read_result(str(path)).tolist() == [[12, 6], [21, 6], [4294967296, 0]]
    path.write_text("")
    assert _read_result(str(path)).shape == (0, 2)
