"""The host-path benchmark (``settopk.jobs.bench.host``): stand-in shards through the index seam, and
the ``host-smoke`` run end to end (the real driver, merge/write tasks and commit)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from settopk.configs import ConfigError
from settopk.jobs import bench
from settopk.jobs.bench.config import load_bench_config
from settopk.jobs.bench.standin import BACKEND, PACE_ENV, TEMPLATE_K, StandInIndex, register_standin
from settopk.jobs.chunks import plan_chunks
from settopk.kernels import SetBatch, brute_force_topk, build_index, registered_backends, score_key, unregister_backend


def _docs(n=300, seed=3):
    rng = np.random.default_rng(seed)
    return SetBatch.from_lists([sorted(rng.choice(200, size=rng.integers(1, 20), replace=False).tolist()) for _ in range(n)])


def test_standin_backend_comes_through_the_index_seam(monkeypatch):
    monkeypatch.setenv(PACE_ENV, "0")
    register_standin()
    try:
        register_standin()  # once per process, whatever the calls
        assert BACKEND in registered_backends()
        docs = _docs()
        index = build_index(BACKEND, np.arange(docs.n_sets, dtype=np.int64) * 3, docs, max_len=32)
        assert isinstance(index, StandInIndex) and index.n_docs == docs.n_sets
    finally:
        unregister_backend(BACKEND)  # the registry is per process: leave it as the other tests expect it


def test_standin_answers_each_query_with_the_real_result_of_its_length():
    docs = _docs()
    doc_ids = np.arange(docs.n_sets, dtype=np.int64)
    index = StandInIndex(doc_ids, docs, max_len=32, score="braun_blanquet", routing="scan", queries_per_s=0)
    queries = SetBatch.from_lists([[1, 2, 3], [4, 5, 6], [7, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])
    assert index.templates_searched == 33  # at build: one query of each length 0..32, ids 0..length - 1
    got = index.search(queries, 10)
    assert got.doc_ids.shape == (4, 10) and got.doc_ids.dtype == np.int64 and got.overlap.dtype == np.int16
    assert index.templates_searched == 33  # k = 10 <= TEMPLATE_K: the templates are cut, not searched again
    want = brute_force_topk(docs.to_lists(), [list(range(3)), list(range(2)), list(range(10))], 10)
    for row, template in ((0, 0), (1, 0), (2, 1), (3, 2)):
        assert [tuple(t) for t in zip(*(a[row].tolist() for a in got))] == want[template]
    wide = index.search(queries, TEMPLATE_K + 1)  # a larger k learns the lengths it meets again
    assert wide.doc_ids.shape == (4, TEMPLATE_K + 1) and index.templates_searched == 33 + 3
    # A floor drops the entries below it, as the real index does.
    keys = score_key(got.overlap, queries.lengths[:, None], got.doc_len, 32).astype(np.int64)
    floor = keys[:, 4]
    floored = index.search(queries, 10, floor_key=floor)
    assert ((floored.doc_ids >= 0) == (keys >= floor[:, None])).all()


def test_standin_keeps_its_pace():
    docs = _docs()
    index = StandInIndex(np.arange(docs.n_sets, dtype=np.int64), docs, max_len=32, score="braun_blanquet", routing="scan",
                         queries_per_s=2000)
    queries = SetBatch.from_lists([[1, 2, 3]] * 400)
    start = time.perf_counter()
    index.search(queries, 5)
    assert time.perf_counter() - start >= 0.2  # 400 queries at 2,000/s


def test_host_section_is_checked(tmp_path):
    path = tmp_path / "h.yaml"
    path.write_text("query_batch_size: 0\nhost:\n  shards: [1, 2]\n  replicas: [1]\n  queries_per_s_per_actor: 0\n")
    with pytest.raises(ConfigError) as err:
        load_bench_config(str(path))
    text = str(err.value)
    assert "host.replicas must list one count" in text and "queries_per_s_per_actor must be > 0" in text
    assert "query_batch_size must be >= 1" in text
    for name in ("host-smoke", "host-1m"):
        assert load_bench_config(name).host is not None


@pytest.mark.slow  # four job processes, each starting its own Ray: 80 to 140 s on 2 shared cores
def test_host_smoke_runs_every_layout_with_standins_and_checks_every_part(tmp_path, capsys):
    out = tmp_path / "host-smoke.json"
    assert bench.main(["--config", "host-smoke", "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    result = json.loads(out.read_text())
    cfg = load_bench_config("host-smoke")
    assert result["benchmark"] == "settopk.bench.host" and result["simulated"] is True
    assert result["simulated_queries_per_s_per_actor"] == cfg.host.queries_per_s_per_actor
    layouts = [(r["n_shards"], r["replicas"], r["ceiling"]) for r in result["runs"]]
    assert layouts == [(s, r, False) for s, r in cfg.host.layouts] + [(1, 2, True)]
    n_queries = cfg.synthetic.n_queries
    for run in result["runs"]:
        assert run["simulated"] and run["rows"] == run["rows_checked"] == n_queries * cfg.k
        assert run["parts"] == len(plan_chunks(n_queries, cfg.host.query_chunk_size)) and run["queries_per_s"] > 0
        assert run["cpus_left_to_host_path"] == run["node_cpus"] - run["n_actors"] * cfg.cpus_per_shard
        assert run["templates_searched"] > 0  # the stand-ins searched for real, once per length
        assert {"validate_s", "connect_s", "read_s", "load_s", "search_s"} <= set(run["phases_s"])
    assert result["runs"][0]["scaling"] == 1.0
    printed = [line for line in capsys.readouterr().out.splitlines() if line and not line.startswith("written:")]
    assert printed and all(line.startswith("simulated |") for line in printed)
