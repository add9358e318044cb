"""The benchmark's peers run (issue 32): settopk's exact threshold self-join against SetSimilaritySearch
and datasketch, its corpus with planted near-duplicates, and the expected recall of banded LSH."""

from __future__ import annotations

import json
import sys
from fractions import Fraction

import numpy as np
import pytest

from settopk.configs import ConfigError
from settopk.jobs.bench.config import load_bench_config
from settopk.jobs.bench.lsh import lsh_recall
from settopk.jobs.bench.pair_check import float_ties, pair_keys
from settopk.jobs.bench.peers import MissingPeerError, run_peers
from settopk.jobs.bench.peers_corpus import planted_corpus


@pytest.mark.timeout(30)
def test_lsh_recall_is_the_mean_of_the_s_curve():
    assert lsh_recall([1.0]) == 1.0 and lsh_recall([0.0]) == 0.0
    # P(J) = 1 - (1 - J**13)**20 at J = 4/5, exactly in fractions: 1 - (1 - 4**13 / 5**13)**20
    exact = 1 - (1 - Fraction(4, 5) ** 13) ** 20
    assert lsh_recall([0.8]) == pytest.approx(float(exact), rel=1e-12)
    assert float(exact) == pytest.approx(0.677254192877757, rel=1e-12)
    assert lsh_recall([0.8, 1.0, 0.0]) == pytest.approx((float(exact) + 1.0) / 3, rel=1e-12)
    assert lsh_recall([0.5], bands=1, rows=1) == 0.5  # one hash: P(J) = J
    assert np.isnan(lsh_recall([]))
    for bad in ({"bands": 0}, {"rows": 0}):
        with pytest.raises(ValueError, match="bands and rows"):
            lsh_recall([0.5], **bad)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        lsh_recall([1.5])


@pytest.mark.timeout(60)
def test_planted_corpus_has_the_shape_and_its_pairs():
    batch, planted = planted_corpus(2000, 32, 128, 65536, "zipf", 1.0, 0.1, 0.1, 7)
    assert batch.n_sets == 2000 and planted.shape == (200, 2)
    assert batch.lengths.min() >= 32 and batch.lengths.max() <= 128
    assert len(np.unique(planted)) == 400  # every source copied once, no copy of a copy
    for a, b in planted.tolist():
        x, y = set(batch[a].tolist()), set(batch[b].tolist())
        n, e = len(x), max(1, int(np.rint(0.1 * len(x))))
        assert len(y) == n and len(x & y) == n - e  # e ids replaced by ids the source does not hold
    for i in range(0, 2000, 37):
        assert (np.diff(batch[i].astype(np.int64)) > 0).all()
    again, planted_again = planted_corpus(2000, 32, 128, 65536, "zipf", 1.0, 0.1, 0.1, 7)
    assert np.array_equal(again.tokens, batch.tokens) and np.array_equal(planted_again, planted)


@pytest.mark.timeout(30)
def test_only_pairs_at_exactly_t_held_by_settopk_may_differ():
    lists = [[0, 1, 2, 3], [0, 1, 2, 3, 4], [5, 6], [5, 6, 7]]  # Jaccard(0, 1) = 4/5, Jaccard(2, 3) = 2/3
    n = len(lists)
    ours, theirs = pair_keys([0], [1], n), pair_keys([], [], n)

    def jaccard(a, b):
        x, y = set(lists[a]), set(lists[b])
        return Fraction(len(x & y), len(x | y))

    assert float_ties(ours, theirs, jaccard, 0.8, n, "sss") == (1, [])  # a tie at T, held by settopk: allowed
    ties, wrong = float_ties(theirs, ours, jaccard, 0.8, n, "sss")  # the tie missing from settopk: wrong
    assert ties == 0 and wrong[0]["pair"] == [0, 1] and wrong[0]["peer"] and not wrong[0]["settopk"]
    ties, wrong = float_ties(pair_keys([2], [3], n), theirs, jaccard, 0.6, n, "sss")  # 2/3 is not T: wrong
    assert ties == 0 and wrong == [{"threshold": "0.6", "implementation": "sss", "pair": [2, 3], "jaccard": "2/3",
                                    "settopk": True, "peer": False}]


@pytest.mark.timeout(30)
def test_peers_configs_load_and_bad_sections_are_refused(tmp_path):
    cfg = load_bench_config("threshold-peers")
    assert cfg.synthetic.n_docs == 50_000 and cfg.peers.thresholds == [0.8, 0.5] and cfg.score == "jaccard"
    assert (cfg.peers.min_len, cfg.max_len, cfg.vocab_size, cfg.synthetic.near_duplicate_fraction) == (32, 128, 65536, 0.1)
    assert load_bench_config("threshold-peers-smoke").synthetic.n_docs < 10_000
    for text, match in [("score: jaccard\npeers: {thresholds: [0.0]}\n", "peers.thresholds"),
                        ("score: jaccard\npeers: {min_len: 200}\n", "peers.min_len"),
                        ("score: jaccard\npeers: {bogus: 1}\n", "peers.thresholds"),
                        ("score: overlap\npeers: {}\n", "score 'jaccard'"),
                        ("score: jaccard\npeers: {}\nlibrary: {}\n", "not several")]:
        path = tmp_path / "p.yaml"
        path.write_text("backend: cpu\ncpus_per_shard: 1.0\nbaselines: []\n" + text)
        with pytest.raises(ConfigError, match=match):
            load_bench_config(str(path))


@pytest.mark.timeout(30)
def test_a_missing_peer_stops_the_run_naming_the_test_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasketch", None)  # import datasketch now raises ImportError
    with pytest.raises(MissingPeerError, match=r"datasketch not installed: install the test extra"):
        run_peers(load_bench_config("threshold-peers-smoke"), "threshold-peers-smoke")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_threshold_peers_smoke_end_to_end(tmp_path, capsys):
    ssearch = pytest.importorskip("SetSimilaritySearch")
    pytest.importorskip("datasketch")
    from settopk.cli import main

    out = tmp_path / "peers.json"
    assert main(["bench", "--config", "threshold-peers-smoke", "--out", str(out), "--quiet"]) == 0
    result = json.loads(out.read_text())
    cfg = load_bench_config("threshold-peers-smoke")
    assert result["benchmark"] == "settopk.bench.peers" and result["corpus"]["n_sets"] == cfg.synthetic.n_docs
    assert [r["threshold"] for r in result["rows"]] == ["0.8", "0.5"]
    syn = cfg.synthetic
    batch, _ = planted_corpus(syn.n_docs, cfg.peers.min_len, cfg.max_len, syn.vocab_size, syn.id_dist, syn.zipf_s,
                              syn.near_duplicate_fraction, cfg.peers.edit_fraction, syn.seed)
    sets = [set(batch[i].tolist()) for i in range(batch.n_sets)]
    for row, t in zip(result["rows"], cfg.peers.thresholds):
        assert row["exactness"]["identical_to_setsimilaritysearch"]
        assert row["exactness"]["settopk_recall_of_setsimilaritysearch"] == 1.0
        assert row["settopk"]["pairs"] == row["setsimilaritysearch"]["pairs"] + row["exactness"]["ties_at_threshold"] > 0
        assert 0.0 <= row["datasketch"]["recall"] <= 1.0 and 0.0 <= row["datasketch"]["precision"] <= 1.0
        assert row["settopk"]["total_s"] > 0 and row["ratios"]["setsimilaritysearch_over_settopk"] > 0
        # The 20 x 13 LSH recall by hand, from SetSimilaritySearch's own pairs and Python sets.
        js = [len(sets[a] & sets[b]) / len(sets[a] | sets[b]) for a, b, _ in
              ssearch.all_pairs([sorted(s) for s in sets], similarity_func_name="jaccard", similarity_threshold=t)]
        by_hand = sum(1 - (1 - j**13) ** 20 for j in js) / len(js)
        assert row["lsh_expected"]["recall_exact_pairs"] == pytest.approx(by_hand, rel=1e-9)
    printed = capsys.readouterr().out
    assert "settopk's pairs identical to SetSimilaritySearch's" in printed and "LSH 20 x 13 expected recall" in printed
