"""The benchmark job on CPU: the smoke config end to end, its JSON, and its exactness check (no timing asserts)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import numpy as np
import pytest

import settopk.jobs.bench as bench
import settopk.configs
from settopk.configs import ConfigError
from settopk.jobs.bench.common import compare_topk
from settopk.jobs.bench.config import bench_config_names, load_bench_config
from settopk.kernels import TopK


def test_shipped_bench_configs_load():
    assert {"smoke", "sti2-zipf", "sti2-uniform"} <= set(bench_config_names())
    zipf, uniform = load_bench_config("sti2-zipf"), load_bench_config("sti2-uniform")
    for cfg in (zipf, uniform):
        assert cfg.synthetic.n_docs == 7_853_052 and cfg.synthetic.n_queries == 2000 and cfg.k == 100
        assert cfg.backend == "cupy" and cfg.repetitions == 5 and cfg.warmup == 1
    assert (zipf.synthetic.id_dist, uniform.synthetic.id_dist) == ("zipf", "uniform")
    assert load_bench_config("smoke").backend == "cpu"


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


@pytest.mark.slow
def test_smoke_config_end_to_end(ray_cluster, tmp_path, capsys):
    out = tmp_path / "smoke.json"
    assert bench.main(["--config", "smoke", "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    result = json.loads(out.read_text())
    cfg = load_bench_config("smoke")
    assert result["backend"] == "cpu" and len(result["shards"]) == 2
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
    assert "numpy" in exact["checked"] and result["baselines"]["numpy"]["speedup"] > 0  # the NumPy index, beside
    scipy = result["baselines"]["scipy"]
    try:
        import scipy as _  # noqa: F401  (the bench extra)

        assert "scipy" in exact["checked"] and scipy["speedup"] > 0
        assert len(scipy["search"]["runs_s"]) == cfg.repetitions
    except ImportError:
        assert scipy["skipped"].startswith("not run")
    printed = capsys.readouterr().out
    assert "exact: 16 sampled queries identical to the NumPy reference" in printed


@pytest.mark.slow
def test_token_values_are_mapped_in_the_read_and_searched_exactly(ray_cluster, tmp_path):
    """String tokens (the ids shifted by 10**12, as text): the bench maps them as the job does and its
    search equals the NumPy reference on the mapped sets; the shared vocabulary fits uint16."""
    cfg = dedent("""\
        backend: cpu
        n_shards: 2
        cpus_per_shard: 1.0
        k: 10
        max_len: 128
        vocab_size: 65536
        warmup: 0
        repetitions: 1
        verify_queries: 16
        baselines: []
        synthetic:
          n_docs: 3000
          n_queries: 40
          vocab_size: 5000
          id_dist: zipf
          token_type: string
          token_offset: 1000000000000
        """)
    path, out = tmp_path / "tokens.yaml", tmp_path / "tokens.json"
    path.write_text(cfg)
    assert bench.main(["--config", str(path), "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    result = json.loads(out.read_text())
    assert result["exactness"]["identical"] and len(result["exactness"]["sample"]) == 16
    assert result["corpus"]["n_docs"] == 3000 and result["corpus"]["n_queries"] == 40
    tokens = result["corpus"]["tokens"]
    assert tokens["dense_ids"] == "shared-first" and 0 < tokens["distinct_shared_tokens"] <= 5000, tokens


def test_a_wrong_result_is_reported_and_no_timing_is_printed():
    want = TopK(np.array([[4, 2]]), np.array([[3, 1]], dtype=np.int16), np.array([[5, 5]], dtype=np.int16))
    got = TopK(np.array([[9, 9], [4, 3]]), np.zeros((2, 2), dtype=np.int16), np.zeros((2, 2), dtype=np.int16))
    got.overlap[1], got.doc_len[1] = [3, 1], [5, 5]
    mismatches = compare_topk("x", got, want, np.array([1]))
    assert mismatches == [{"implementation": "x", "query_index": 1, "rank": 2, "got": [3, 1, 5], "expected": [2, 1, 5]}]
    assert "query 1 rank 2" in str(bench.ExactnessError(mismatches))
    assert compare_topk("x", got, want, np.array([1]))  # still wrong
    good = TopK(want.doc_ids.copy(), want.overlap.copy(), want.doc_len.copy())
    assert compare_topk("x", good, want, np.array([0])) == []
    # The whole-job run reports layouts and queries, not implementations.
    err = bench.ExactnessError([{"layout": [2, 1], "parts_differing": [0, 3]}])
    assert "1 result(s) differ" in str(err) and "parts_differing" in str(err) and err.result is None


def test_module_and_subcommand_run_the_bench_cli():
    from settopk.cli import COMMANDS

    assert importlib.import_module(COMMANDS["bench"][0]).main is bench.main
    done = subprocess.run([sys.executable, "-m", "settopk", "bench", "--config", "no-such-config"], capture_output=True, text=True)
    assert done.returncode == 2 and "not a shipped config name" in done.stderr


@pytest.mark.slow
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


@pytest.mark.slow
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


def test_cpu_configs_load_with_their_shape():
    from settopk.kernels import SCORES

    shapes = {"cpu-zipf": (200_000, 500, "zipf"), "cpu-uniform": (200_000, 500, "uniform"),
              "cpu-quickstart": (1_000_000, 2000, "zipf"), "cpu-quickstart-uniform": (1_000_000, 2000, "uniform")}
    for name, (n_docs, n_queries, id_dist) in shapes.items():
        cfg = load_bench_config(name)
        s = cfg.synthetic
        assert (s.n_docs, s.n_queries, s.id_dist, s.seed, s.vocab_size, s.near_duplicate_fraction) == (
            n_docs, n_queries, id_dist, 0, 50001, 0.5)  # the data of settopk.jobs.make_corpus with its defaults
        assert (cfg.backend, cfg.k, cfg.score, cfg.routing, cfg.n_shards, cfg.cpus_per_shard) == ("cpu", 100, "overlap", "auto", 1, 2.0)
        assert sorted(cfg.compare_scores) == sorted(SCORES) and cfg.compare_routings == ["scan"]
        assert cfg.peak_checks_per_s == 1e11 and "AVX2" in cfg.peak_basis
        assert "sparse_dot_topn" in cfg.baselines
    assert load_bench_config("cpu-zipf").baselines == ["numpy", "scipy", "sparse_dot_topn", "sparse_dot_topn_1t"]


@pytest.mark.parametrize(
    "text, match",
    [
        ("compare_scores: [tanimoto]\n", r"compare_scores must be among"),
        ("compare_routings: [sideways]\n", r"compare_routings must be among \('scan', 'auto', 'postings'\)"),
        ("peak_checks_per_s: 1.0e+11\n", "must be > 0 and come with peak_basis"),
        ("peak_checks_per_s: -1.0\npeak_basis: guess\n", "must be > 0"),
    ],
)
def test_bad_cpu_bench_keys_are_rejected(tmp_path, text, match):
    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_bench_config(str(path))


def test_score_multisets_allow_other_ids_only_among_ties():
    from settopk.jobs.bench.common import compare_scores

    cfg = load_bench_config("cpu-zipf")  # score overlap: the key is the overlap
    want = TopK(np.array([[7, 3, 4]]), np.array([[5, 2, 2]], dtype=np.int16), np.array([[9, 9, 9]], dtype=np.int16))
    tie = TopK(np.array([[0, 0, 0], [7, 8, 3]]), np.zeros((2, 3), dtype=np.int16), np.zeros((2, 3), dtype=np.int16))
    tie.overlap[1], tie.doc_len[1] = [5, 2, 2], [9, 9, 9]
    qlen = np.array([5, 5])
    assert compare_scores("x", tie, want, np.array([1]), qlen, cfg) == ([], 1)
    assert compare_scores("x", TopK(*(np.concatenate([getattr(want, f)] * 2) for f in TopK._fields)), want,
                          np.array([1]), qlen, cfg) == ([], 0)
    tie.overlap[1, 2] = 1  # a lower score
    assert compare_scores("x", tie, want, np.array([1]), qlen, cfg) == (
        [{"implementation": "x", "query_index": 1, "rank": 3, "got": [1], "expected": [2]}], 0)


def _tiny_cpu_zipf_run(tmp_path, **settings) -> dict:
    """``python -m settopk bench`` on the cpu-zipf config with ``settings`` and 3000 docs x 24 queries; its JSON."""
    import yaml

    data = yaml.safe_load((Path(settopk.configs.__file__).parent / "bench" / "cpu-zipf.yaml").read_text())
    data.update(settings)
    data["synthetic"].update(n_docs=3000, n_queries=24)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "tiny.json"
    assert bench.main(["--config", str(config), "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    return json.loads(out.read_text())


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_a_tiny_gpu_run_holds_every_variant_and_times_them_in_turn(ray_cluster, tmp_path):
    """The per-score and per-routing variants on the GPU: all their indexes on the device at once,
    each search checked against the NumPy reference."""
    from settopk.kernels import SCORES

    result = _tiny_cpu_zipf_run(tmp_path, backend="cupy", cpus_per_shard=1.0, warmup=1, repetitions=2, baselines=[],
                                verify_queries=8)
    assert result["backend"] == "cupy" and set(result["scores"]) == set(SCORES) and set(result["routings"]) == {"auto", "scan"}
    assert all(len(v["search"]["runs_s"]) == 2 for v in list(result["scores"].values()) + list(result["routings"].values()))
    exact = result["exactness"]
    assert exact["identical"] and {f"settopk[{s}, auto]" for s in SCORES} | {"settopk[overlap, scan]"} <= set(exact["checked"])


@pytest.mark.slow
def test_a_tiny_cpu_zipf_run_times_scores_routings_and_baselines(ray_cluster, tmp_path, capsys):
    from settopk.kernels import SCORES

    pytest.importorskip("sparse_dot_topn")
    pytest.importorskip("scipy")
    result = _tiny_cpu_zipf_run(tmp_path, warmup=0, repetitions=1, baseline_repetitions=1, verify_queries=8)
    assert result["backend"] == "cpu" and result["environment"]["threads"] == 2
    assert set(result["scores"]) == set(SCORES) and result["scores"]["overlap"]["ratio_to_overlap"] == 1.0
    assert set(result["routings"]) == {"auto", "scan"} and result["routings"]["scan"]["ratio_to_scan"] == 1.0
    assert result["peak"]["checks_per_s"] == 1e11 and result["peak"]["routing"] == "scan" and result["peak"]["ratio"] > 0
    assert result["peak"]["measured_checks_per_s"] == result["routings"]["scan"]["checks_per_s"]
    assert set(result["baselines"]) == {"numpy", "scipy", "sparse_dot_topn", "sparse_dot_topn_1t"}
    exact = result["exactness"]
    assert exact["identical"] and exact["scores_checked"] == ["sparse_dot_topn", "sparse_dot_topn_1t"]
    assert {"settopk", "numpy", "scipy", "settopk[overlap, scan]", "settopk[cosine, auto]"} <= set(exact["checked"])
    printed = capsys.readouterr().out
    assert "ratio_to_overlap" in printed and "ratio_to_scan" in printed and "x the estimate 1.00e+11 checks/s" in printed
    assert "equal scores: sparse_dot_topn: the multiset of scores of every sampled query identical" in printed


def test_every_mode_is_a_field_of_the_config():
    # Registering a mode is a line in MODES and a field of BenchConfig: the two must agree.
    import dataclasses

    from settopk.jobs.bench.config import BenchConfig
    from settopk.jobs.bench.modes import MODES

    fields = {f.name: f for f in dataclasses.fields(BenchConfig)}
    for mode in MODES:
        assert mode.key in fields and fields[mode.key].default is None, mode.key
        assert fields[mode.key].type == f"Optional[{mode.section.__name__}]", (mode.key, fields[mode.key].type)
        assert mode.corpus in ("cached", "data_dir", "none")
