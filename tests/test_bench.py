"""The benchmark job on CPU: the smoke config end to end, its JSON, and its exactness check (no timing asserts)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import jobs.bench as bench
from configs import ConfigError
from configs.benchmark import bench_config_names, load_bench_config
from kernels import TopK


def test_shipped_bench_configs_load():
    assert {"smoke", "sti2-zipf", "sti2-uniform"} <= set(bench_config_names())
    zipf, uniform = load_bench_config("sti2-zipf"), load_bench_config("sti2-uniform")
    for cfg in (zipf, uniform):
        assert cfg.synthetic.n_docs == 7_853_052 and cfg.synthetic.n_queries == 2000 and cfg.k == 100
        assert cfg.backend == "cupy" and cfg.repetitions == 5 and cfg.warmup == 1
    assert (zipf.synthetic.id_dist, uniform.synthetic.id_dist) == ("zipf", "uniform")
    assert load_bench_config("smoke").backend == "numpy"


@pytest.mark.parametrize(
    "text, match",
    [
        ("verify_queries: 0\n", "exactness check is always on"),
        ("baselines: [nope]\n", "baselines must be among"),
        ("repetitions: 0\n", "repetitions"),
        ("bogus: 1\n", r"unknown key\(s\) \['bogus'\]"),
    ],
)
def test_bad_bench_configs_are_rejected(tmp_path, text, match):
    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as err:
        load_bench_config(str(path))
    assert str(path) in str(err.value)


def test_smoke_config_end_to_end(ray_cluster, tmp_path, capsys):
    out = tmp_path / "smoke.json"
    assert bench.main(["--config", "smoke", "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    result = json.loads(out.read_text())
    cfg = load_bench_config("smoke")
    assert result["backend"] == "numpy" and len(result["shards"]) == 2
    assert set(result["phases"]) == {"read", "build", "search", "search_rpc", "merge", "write"}
    for stats in result["phases"].values():
        assert len(stats["runs_s"]) == cfg.repetitions
        assert 0 <= stats["min_s"] <= stats["median_s"]
    assert result["corpus"]["n_docs"] == cfg.synthetic.n_docs and result["corpus"]["n_queries"] == cfg.synthetic.n_queries
    assert result["checks"] == result["corpus"]["n_queries"] * result["corpus"]["n_tokens"]
    assert result["throughput_checks_per_s"] > 0 and result["total_s"] > 0
    exact = result["exactness"]
    assert exact["identical"] and exact["mismatches"] == []
    assert len(exact["sample"]) == cfg.verify_queries and exact["checked"][0] == "settopk"
    scipy = result["baselines"]["scipy"]
    try:
        import scipy as _  # noqa: F401  (the bench extra)

        assert "scipy" in exact["checked"] and scipy["speedup"] > 0
        assert len(scipy["search"]["runs_s"]) == cfg.repetitions
    except ImportError:
        assert scipy["skipped"].startswith("not run")
    printed = capsys.readouterr().out
    assert "exact: 16 sampled queries identical to the NumPy reference" in printed


def test_a_wrong_result_is_reported_and_no_timing_is_printed():
    want = TopK(np.array([[4, 2]]), np.array([[3, 1]], dtype=np.int16), np.array([[5, 5]], dtype=np.int16))
    got = TopK(np.array([[9, 9], [4, 3]]), np.zeros((2, 2), dtype=np.int16), np.zeros((2, 2), dtype=np.int16))
    got.overlap[1], got.doc_len[1] = [3, 1], [5, 5]
    mismatches = bench._compare("x", got, want, np.array([1]))
    assert mismatches == [{"implementation": "x", "query_index": 1, "rank": 2, "got": [3, 1, 5], "expected": [2, 1, 5]}]
    assert "query 1 rank 2" in str(bench.ExactnessError(mismatches))
    assert bench._compare("x", got, want, np.array([1]))  # still wrong
    good = TopK(want.doc_ids.copy(), want.overlap.copy(), want.doc_len.copy())
    assert bench._compare("x", good, want, np.array([0])) == []


def test_scaling_configs_load_and_the_smoke_scaling_run_is_exact(ray_cluster, tmp_path, capsys):
    weak, strong = load_bench_config("scale-weak"), load_bench_config("scale-strong")
    assert (weak.scaling.mode, weak.scaling.shards, weak.synthetic.n_queries) == ("weak", [1, 4], 2000)
    assert (strong.scaling.mode, strong.scaling.layouts, strong.synthetic.n_queries) == ("strong", [(1, 1), (4, 1), (1, 4), (2, 2)], 20000)
    out = tmp_path / "scale.json"
    assert bench.main(["--config", "scale-smoke", "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    result = json.loads(out.read_text())
    cfg = load_bench_config("scale-smoke")
    stages = result["stages"]
    assert [(st["n_shards"], st["replicas"]) for st in stages] == [(1, 1), (2, 1), (1, 2)] and result["mode"] == "weak"
    assert [st["n_docs"] for st in stages] == [cfg.synthetic.n_docs, 2 * cfg.synthetic.n_docs, cfg.synthetic.n_docs]
    assert [len(st["shards"]) for st in stages] == [1, 2, 1]
    for st in stages:
        assert len(st["search"]["runs_s"]) == cfg.repetitions and st["throughput_checks_per_s"] > 0
        assert len(st["exact_sample"]) == cfg.verify_queries
    assert stages[0]["throughput_ratio"] == 1.0
    assert "every layout's sampled queries identical to the NumPy reference" in capsys.readouterr().out


def test_bad_scaling_section_is_rejected(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("scaling:\n  mode: sideways\n  shards: [0]\n")
    with pytest.raises(ConfigError, match="scaling.mode must be 'strong' or 'weak'.*scaling.shards must list"):
        load_bench_config(str(path))
    path.write_text("scaling:\n  shards: [1, 4]\n  replicas: [1]\n")
    with pytest.raises(ConfigError, match=r"scaling.replicas must list one count >= 1 per scaling.shards entry, found \[1\]"):
        load_bench_config(str(path))


@pytest.mark.timeout(240)
def test_throughput_smoke_runs_the_job_on_each_layout_and_checks_it(ray_cluster, tmp_path, capsys):
    out = tmp_path / "job-smoke.json"
    assert bench.main(["--config", "job-smoke", "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    result = json.loads(out.read_text())
    cfg = load_bench_config("job-smoke")
    assert result["benchmark"] == "settopk.bench.throughput" and result["backend"] == "numpy"
    assert [(r["n_shards"], r["replicas"]) for r in result["runs"]] == cfg.throughput.layouts
    n_queries = cfg.synthetic.n_queries
    for run in result["runs"]:
        assert run["rows"] == n_queries * cfg.k and run["parts"] == -(-n_queries // cfg.throughput.query_chunk_size)
        assert run["bytes"] > 0 and run["driver_max_rss_bytes"] > 0
        assert run["search_s"] > 0 and run["queries_per_s"] == pytest.approx(n_queries / run["search_s"])
        assert run["kernel_only_s"] == pytest.approx(result["kernel_only_1_actor_s"] / run["n_actors"])
        assert run["host_overhead"] == pytest.approx(run["search_s"] / run["kernel_only_s"])
        assert 0 < run["gpu_busy"] <= 1.0 + 1e-9
        assert set(run["stages_s"]) == {"read_queries_s", "send_s", "merge_s", "write_s"}
    exact = result["exactness"]
    assert exact["identical"] and exact["layouts_identical"] and len(exact["sample"]) == cfg.verify_queries
    printed = capsys.readouterr().out
    assert "whole job" in printed and "exact:" in printed


def test_throughput_config_is_checked(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("query_batch_size: 0\nthroughput:\n  shards: [1, 2]\n  replicas: [1]\n")
    with pytest.raises(ConfigError) as err:
        load_bench_config(str(path))
    assert "throughput.replicas must list one count" in str(err.value) and "query_batch_size must be >= 1" in str(err.value)
