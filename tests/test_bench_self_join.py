"""The self-join benchmark (issue 32): the threshold self-join, its components and the top-k self-join
on one index, checked against the NumPy reference and a union-find (no timing asserts)."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

import settopk.jobs.bench as bench
from settopk.configs import ConfigError
from settopk.jobs.bench.config import load_bench_config
from settopk.jobs.bench.self_join import lsh_recall


def test_lsh_recall_is_the_s_curve_mean():
    assert lsh_recall([1.0, 1.0]) == 1.0 and lsh_recall([0.0]) == 0.0
    assert np.isnan(lsh_recall([]))
    j = Fraction(4, 5)
    by_hand = 1 - (1 - j**13) ** 20  # exact, then compared as a float
    assert lsh_recall([0.8]) == pytest.approx(float(by_hand), rel=1e-12)
    assert lsh_recall([0.8, 1.0], bands=20, rows=13) == pytest.approx((float(by_hand) + 1) / 2, rel=1e-12)
    assert lsh_recall([0.5], bands=1, rows=1) == 0.5


def test_the_sti2_config_has_the_issue_shape():
    cfg = load_bench_config("self-join-sti2")
    assert cfg.synthetic.n_docs + cfg.synthetic.n_queries == 7_853_052
    assert cfg.synthetic.near_duplicate_fraction == 1.0 and cfg.score == "jaccard" and cfg.backend == "cupy"
    assert cfg.self_join.threshold == "0.8" and (cfg.self_join.lsh_bands, cfg.self_join.lsh_rows) == (20, 13)


def test_bad_self_join_sections_are_rejected(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("self_join:\n  threshold: '1.5'\n  n_queries: 0\n")
    with pytest.raises(ConfigError, match="self_join.threshold.*self_join.n_queries"):
        load_bench_config(str(bad))


@pytest.mark.parametrize("backend", ["cpu", pytest.param("numpy", marks=pytest.mark.slow),
                                     pytest.param("cupy", marks=pytest.mark.gpu)])
def test_smoke_run_is_exact_on_every_backend(tmp_path, capsys, backend):
    config = tmp_path / f"self-join-{backend}.yaml"
    text = (bench.config.BENCH_DIR / "self-join-smoke.yaml").read_text().replace("backend: cpu", f"backend: {backend}")
    config.write_text(text)
    out = tmp_path / "r.json"
    assert bench.main(["--config", str(config), "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    result = json.loads(out.read_text())
    assert result["backend"] == backend and result["n_docs"] == 4000 and result["n_planted"] == 400
    assert result["exactness"]["identical"] is True and len(result["exactness"]["sample"]) == 8
    assert result["pairs"] > 100 and result["duplicates"] > 0 and result["groups"] <= result["pairs"]
    assert 0 < result["lsh"]["recall"] < 1
    assert result["ratio"] == result["threshold"]["median_s"] / result["topk"]["median_s"]
    assert "ratio threshold / top-k" in capsys.readouterr().out
