"""End to end: ``settopk.jobs.score.main`` on a local Ray cluster, against the brute-force oracle."""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from settopk.jobs import run as job_run
from settopk.jobs import score
from settopk.jobs.cluster import resolve_backend, resolve_cpus_per_shard
from settopk.jobs.output import RESULT_SCHEMA, manifest_path, read_manifest, rejected_path
from settopk.kernels import brute_force_topk
from settopk.shards.inputs import InputError
from tests.fault_helpers import crashing_searcher
from tests.job_helpers import job_config as _config

pytestmark = pytest.mark.usefixtures("ray_cluster")


def _write_text_sets(path, sets):
    path.write_text("".join(",".join(map(str, s)) + "\n" for s in sets))
    return str(path)


def _random_sets(rng, n, vocab, max_len):
    return [rng.choice(vocab, size=rng.integers(0, max_len + 1), replace=False).tolist() for _ in range(n)]


def _read_rows(out):
    table = pq.read_table(out)
    assert table.schema.equals(RESULT_SCHEMA, check_metadata=False)
    return table


def _expected_rows(docs, queries, query_ids, k):
    rows = []
    for qid, q, result in zip(query_ids, queries, brute_force_topk(docs, queries, k)):
        qlen = len(set(q))
        for rank, (doc_id, ov, dl) in enumerate(result, start=1):
            rows.append((qid, rank, doc_id, ov / max(qlen, dl, 1), ov, qlen, dl))
    return rows


def _as_rows(table):
    d = table.to_pydict()
    return list(zip(*(d[name] for name in RESULT_SCHEMA.names)))


@pytest.fixture(scope="module")
def tie_corpus(tmp_path_factory):
    """Small vocab, many ties, empty sets, a repeated id, ids 0 and the largest."""
    rng = np.random.default_rng(3)
    tmp = tmp_path_factory.mktemp("corpus")
    docs = _random_sets(rng, 700, 14, 9) + [[], [0, 65535], list(range(128))]
    queries = _random_sets(rng, 40, 14, 9) + [[], [0, 65535], list(range(128))]
    queries[5] = [3, 1, 3]  # unsorted, with a repeated id
    return docs, queries, _write_text_sets(tmp / "docs.txt", docs), _write_text_sets(tmp / "queries.txt", queries)


@pytest.mark.parametrize("n_shards", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_text_inputs_match_oracle_with_any_shard_count(tmp_path, tie_corpus, n_shards):
    docs, queries, docs_path, queries_path = tie_corpus
    k = 30
    out = tmp_path / "out"
    cfg = _config(tmp_path, n_shards=n_shards, query_batch_size=7)
    assert score.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", str(k), "--config", cfg, "--quiet"]) == 0
    table = _read_rows(out)
    assert _as_rows(table) == _expected_rows(docs, queries, [str(i) for i in range(len(queries))], k)
    manifest = read_manifest(out)
    assert manifest["counts"]["rows"] == table.num_rows and manifest["counts"]["queries_with_repeated_ids"] == 1
    assert len(manifest["shards"]) == n_shards and manifest["backend"] == "numpy"
    assert {"validate_s", "load_s", "search_s", "merge_s"} <= set(manifest["timings_s"])
    assert (out / "_SUCCESS").exists()


@pytest.mark.slow
def test_many_shards_and_one_shard_give_identical_output(tmp_path, tie_corpus):
    _, _, docs_path, queries_path = tie_corpus
    tables = []
    for n in (1, 3):
        out = tmp_path / f"out{n}"
        cfg = _config(tmp_path, name=f"c{n}", n_shards=n, query_batch_size=16)
        assert score.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--config", cfg, "--quiet"]) == 0
        tables.append(pq.read_table(out))
    assert tables[0].equals(tables[1])


@pytest.mark.slow
def test_chunks_cut_smaller_near_the_end_give_the_oracle_rows(tmp_path, tie_corpus, monkeypatch):
    """The run's chunks shrink toward its end (parts written at once at the end of the search);
    the parts hold the oracle's rows, in query order."""
    from settopk.jobs import chunks

    monkeypatch.setattr(chunks, "TAIL_MIN_QUERIES", 5)  # 43 queries in windows of 20
    docs, queries, docs_path, queries_path = tie_corpus
    out = tmp_path / "out"
    cfg = _config(tmp_path, query_chunk_size=20, query_batch_size=4)
    assert score.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", "10", "--config", cfg, "--quiet"]) == 0
    parts = sorted(p.name for p in out.glob("part-*.parquet"))
    assert len(parts) == 8 and read_manifest(out)["output"]["parts"] == 8  # [0, 8), [8, 15), [15, 20), then 5 each, [40, 43)
    sizes = [pq.read_metadata(out / p).num_rows for p in parts]
    assert sizes == [8 * 10, 7 * 10, 5 * 10, 5 * 10, 5 * 10, 5 * 10, 5 * 10, 3 * 10]
    assert _as_rows(_read_rows(out)) == _expected_rows(docs, queries, [str(i) for i in range(len(queries))], 10)


@pytest.mark.parametrize("n_shards, replicas", [pytest.param(1, 3, marks=pytest.mark.slow), (2, 2)])
def test_replicas_split_the_queries_and_give_the_oracle_rows(tmp_path, tie_corpus, n_shards, replicas):
    """Every shard held by several actors; batches take turns among the replicas (with the
    threshold exchange on, as numpy's auto does), and the table is still the oracle's."""
    docs, queries, docs_path, queries_path = tie_corpus
    k = 25
    out = tmp_path / "out"
    cfg = _config(tmp_path, n_shards=n_shards, replicas=replicas, cpus_per_shard=0.25, query_batch_size=1000)
    assert score.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", str(k), "--config", cfg, "--quiet"]) == 0
    assert _as_rows(_read_rows(out)) == _expected_rows(docs, queries, [str(i) for i in range(len(queries))], k)
    shards = read_manifest(out)["shards"]
    assert [(s["shard_id"], s["replica"]) for s in shards] == [(i % n_shards, i // n_shards) for i in range(n_shards * replicas)]
    # A chunk is cut into one batch per replica at least, so every actor searched queries.
    assert all(s["queries_searched"] > 0 for s in shards)
    assert sum(s["queries_searched"] for s in shards if s["shard_id"] == 0) >= len(queries)


@pytest.mark.parametrize("routing", [pytest.param("auto", marks=pytest.mark.slow), "postings"])
def test_routing_to_the_postings_gives_the_oracle_rows(tmp_path, tie_corpus, routing, capsys):
    docs, queries, docs_path, queries_path = tie_corpus
    k = 30
    out = tmp_path / "out"
    cfg = _config(tmp_path, n_shards=2, query_batch_size=9, routing=routing)
    assert score.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", str(k), "--config", cfg, "--quiet"]) == 0
    assert _as_rows(_read_rows(out)) == _expected_rows(docs, queries, [str(i) for i in range(len(queries))], k)
    shards = read_manifest(out)["shards"]
    assert all(s["routing"] == routing for s in shards)
    plan_out = tmp_path / "plan"
    assert score.main(["--docs", docs_path, "--queries", queries_path, "--out", str(plan_out), "--config", cfg, "--dry-run"]) == 0
    assert f"routing {routing}" in capsys.readouterr().out and not plan_out.exists()
    if routing == "postings":
        assert sum(s["queries_postings"] for s in shards) > 0


def test_unknown_routing_is_a_config_error(tmp_path, tie_corpus, caplog):
    _, _, docs_path, queries_path = tie_corpus
    out = tmp_path / "out"
    cfg = _config(tmp_path, routing="fastest")
    assert score.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--config", cfg, "--quiet"]) == 2
    assert "routing must be one of scan, auto, postings" in caplog.text and not out.exists()


def test_parquet_and_directory_inputs(tmp_path):
    rng = np.random.default_rng(11)
    docs = _random_sets(rng, 300, 30, 12)
    doc_ids = rng.permutation(10_000)[:300]  # sparse, unordered ids
    queries = _random_sets(rng, 9, 30, 12)
    pq.write_table(pa.table({"doc_id": pa.array(doc_ids, pa.int64()), "tokens": pa.array(docs, pa.list_(pa.int32()))}), tmp_path / "docs.parquet")
    pq.write_table(pa.table({"query_id": pa.array(np.arange(9) * 10, pa.int64()), "tokens": pa.array(queries, pa.list_(pa.uint16()))}), tmp_path / "q.parquet")
    qdir = tmp_path / "qdir"
    qdir.mkdir()
    for i, q in enumerate(queries):
        (qdir / f"q{i:02d}.txt").write_text(",".join(map(str, q)))  # no trailing newline
    cfg = _config(tmp_path, n_shards=2)
    order = np.argsort(doc_ids)
    expected = brute_force_topk([docs[i] for i in order], queries, 20, doc_ids=list(doc_ids[order]))
    for name, qpath, qids in [("pq", tmp_path / "q.parquet", [str(i * 10) for i in range(9)]), ("dir", qdir, [f"q{i:02d}.txt" for i in range(9)])]:
        out = tmp_path / name
        assert score.main(["--docs", str(tmp_path / "docs.parquet"), "--queries", str(qpath), "--out", str(out), "--k", "20", "--config", cfg, "--quiet"]) == 0
        d = pq.read_table(out).to_pydict()
        got = {}
        for qid, doc_id in zip(d["query_id"], d["doc_id"]):
            got.setdefault(qid, []).append(doc_id)
        assert [got.get(q, []) for q in qids] == [[r[0] for r in e] for e in expected]


@pytest.mark.slow
def test_k_larger_than_corpus(tmp_path):
    docs_path = _write_text_sets(tmp_path / "docs.txt", [[1, 2], [2], []])
    q_path = _write_text_sets(tmp_path / "q.txt", [[2], [7]])
    out = tmp_path / "out"
    assert score.main(["--docs", docs_path, "--queries", q_path, "--out", str(out), "--k", "100", "--config", _config(tmp_path, n_shards=2), "--tsv", str(tmp_path / "r.tsv"), "--quiet"]) == 0
    assert pq.read_table(out).num_rows == 6
    assert (tmp_path / "r.tsv").read_text() == "1\t0\t2\n0\t1\t2\n"


def test_golden_corpus_matches_expected(tmp_path, golden_dir):
    gold = golden_dir / "sti2-small"
    out, tsv = tmp_path / "out", tmp_path / "r.tsv"
    cfg = _config(tmp_path, n_shards=2, vocab_size=65536)
    assert score.main(["--docs", str(gold / "docs.txt"), "--queries", str(gold / "queries"), "--out", str(out), "--tsv", str(tsv), "--config", cfg, "--quiet"]) == 0
    assert tsv.read_text().splitlines() == (gold / "expected.tsv").read_text().splitlines()
    d = pq.read_table(out).to_pydict()
    got = [f"{o}/{max(q, l)}" for o, q, l in zip(d["overlap"], d["query_len"], d["doc_len"])]
    expected = [x for line in (gold / "expected_scores.tsv").read_text().splitlines() for x in line.split("\t")]
    assert got == expected


@pytest.mark.parametrize(
    "docs_text, where, reason",
    [
        ("1,2\n3,x\n", ":2", "x"),
        ("1,2\n\n7.5\n", ":3", "7.5"),
        ("1,18446744073709551616\n", ":1", "18446744073709551616"),
    ],
)
def test_bad_input_fails_before_actors_and_writes_nothing(tmp_path, monkeypatch, caplog, docs_text, where, reason):
    docs = tmp_path / "docs.txt"
    docs.write_text(docs_text)
    q = _write_text_sets(tmp_path / "q.txt", [[1]])

    def no_actors(*a, **kw):
        raise AssertionError("an actor was started for bad input")

    monkeypatch.setattr(job_run, "start_shards", no_actors)
    with caplog.at_level(logging.ERROR, logger="settopk"):
        code = score.main(["--docs", str(docs), "--queries", q, "--out", str(tmp_path / "out"), "--config", _config(tmp_path), "--quiet"])
    assert code == 2
    import ray

    groups = ray.util.placement_group_table().values()  # the shard bundles reserved before the read are released
    assert groups and all(g["state"] == "REMOVED" for g in groups)
    message = caplog.text
    assert f"docs.txt{where}" in message and reason in message
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_a_cluster_that_cannot_hold_the_shards_fails_before_reading(tmp_path, monkeypatch, caplog):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from settopk.jobs import shard_pool

    def no_read(*a, **kw):
        raise AssertionError("the corpus was read although the shards had no room")

    monkeypatch.setattr(shard_pool, "_PLACEMENT_TIMEOUT_S", 1.0)
    monkeypatch.setattr(job_run, "read_corpus_pieces", no_read)
    docs = _write_text_sets(tmp_path / "docs.txt", [[1, 2]])
    busy = placement_group([{"CPU": 2.0}])  # another job holding every CPU of the 2-CPU cluster
    ray.get(busy.ready(), timeout=60)
    try:
        with caplog.at_level(logging.ERROR, logger="settopk"):
            code = score.main(["--docs", docs, "--queries", docs, "--out", str(tmp_path / "out"), "--config", _config(tmp_path), "--quiet"])
    finally:
        remove_placement_group(busy)
    assert code == 1 and "could not place 1 shard bundle(s) of {'CPU': 0.5} within 1 s" in caplog.text
    assert not (tmp_path / "out").exists()


def test_too_long_set_and_empty_corpus_are_errors(tmp_path, caplog):
    q = _write_text_sets(tmp_path / "q.txt", [list(range(5))])
    docs = _write_text_sets(tmp_path / "docs.txt", [[1]])
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    cfg = _config(tmp_path, max_len=4)
    with caplog.at_level(logging.ERROR, logger="settopk"):
        assert score.main(["--docs", docs, "--queries", q, "--out", str(tmp_path / "o1"), "--config", cfg, "--quiet"]) == 2
        assert score.main(["--docs", str(empty), "--queries", docs, "--out", str(tmp_path / "o2"), "--config", _config(tmp_path, "c2"), "--quiet"]) == 2
    assert "q.txt:1" in caplog.text and "no docs" in caplog.text
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_cupy_backend_without_gpu_fails_at_start(tmp_path, caplog):
    from tests.conftest import HAS_GPU

    if HAS_GPU:
        pytest.skip("this cluster has a GPU")
    docs = _write_text_sets(tmp_path / "docs.txt", [[1]])
    with caplog.at_level(logging.ERROR, logger="settopk"):
        code = score.main(["--docs", docs, "--queries", docs, "--out", str(tmp_path / "o"), "--config", _config(tmp_path, backend="cupy"), "--quiet"])
    assert code == 2 and "no GPU" in caplog.text and not (tmp_path / "o").exists()


def test_dry_run_prints_plan_and_writes_nothing(tmp_path, tie_corpus, capsys):
    _, _, docs_path, queries_path = tie_corpus
    out = tmp_path / "out"
    assert score.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--config", _config(tmp_path, n_shards=3), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "3 shard(s)" in printed and "shard 2: lengths" in printed
    assert not out.exists()


def test_rerun_is_a_no_op_unless_forced(tmp_path, tie_corpus):
    _, _, docs_path, queries_path = tie_corpus
    out = tmp_path / "out"
    args = ["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--config", _config(tmp_path), "--quiet"]
    assert score.main(args) == 0
    stamp = manifest_path(out).stat().st_mtime_ns
    assert score.main(args) == 0
    assert manifest_path(out).stat().st_mtime_ns == stamp
    assert score.main(args + ["--force"]) == 0
    assert manifest_path(out).stat().st_mtime_ns != stamp


@pytest.mark.slow
def test_synthetic_default_corpus(tmp_path):
    cfg = _config(tmp_path, n_shards=2, synthetic={"n_docs": 3000, "n_queries": 25, "seed": 1, "cache_dir": str(tmp_path / "cache")})
    out = tmp_path / "out"
    assert score.main(["--out", str(out), "--config", cfg, "--k", "10", "--quiet"]) == 0
    table = pq.read_table(out)
    assert table.num_rows == 250
    manifest = read_manifest(out)
    assert manifest["inputs"]["docs"]["synthetic"] is True and manifest["counts"]["n_docs"] == 3000


def _run_both_backends(tmp_path, docs_path, queries_path, k, **extra):
    tables = {}
    for backend in ("numpy", "cupy"):
        out = tmp_path / f"out-{backend}"
        cfg = _config(tmp_path, name=backend, backend=backend, n_shards=2, gpus_per_shard=0.5, **extra)
        args = ["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", str(k), "--config", cfg, "--quiet"]
        assert score.main(args) == 0
        assert read_manifest(out)["backend"] == backend
        tables[backend] = pq.read_table(out)
    return tables


@pytest.mark.gpu
def test_cupy_job_matches_numpy_job_with_ties(tmp_path, tie_corpus):
    _, _, docs_path, queries_path = tie_corpus
    tables = _run_both_backends(tmp_path, docs_path, queries_path, 30, query_batch_size=7)
    assert tables["cupy"].equals(tables["numpy"])


@pytest.mark.gpu
def test_cupy_job_routed_to_the_postings_matches_numpy(tmp_path, tie_corpus):
    _, _, docs_path, queries_path = tie_corpus
    tables = _run_both_backends(tmp_path, docs_path, queries_path, 30, query_batch_size=7, routing="postings")
    assert tables["cupy"].equals(tables["numpy"])


@pytest.mark.gpu
def test_cupy_job_on_golden_corpus(tmp_path, golden_dir):
    gold = golden_dir / "sti2-small"
    tables = _run_both_backends(tmp_path, str(gold / "docs.txt"), str(gold / "queries"), 100)
    assert tables["cupy"].equals(tables["numpy"])


@pytest.mark.gpu
def test_cupy_job_on_synthetic_corpus(tmp_path):
    from settopk.jobs.synthetic import SyntheticSpec, ensure_synthetic

    docs, queries = ensure_synthetic(SyntheticSpec(n_docs=60_000, n_queries=150, seed=5), tmp_path / "cache")
    tables = _run_both_backends(tmp_path, str(docs), str(queries), 100, query_batch_size=64)
    assert tables["cupy"].equals(tables["numpy"])
    assert tables["cupy"].num_rows == 150 * 100


@pytest.mark.slow
def test_nightly_partition_date_rerun_and_default_today(tmp_path, tie_corpus):
    import datetime

    _, _, docs_path, queries_path = tie_corpus
    root = tmp_path / "results"
    cfg = _config(tmp_path, output={"partition": "dt"})
    args = ["--docs", docs_path, "--queries", queries_path, "--out", str(root), "--config", cfg, "--k", "5", "--quiet"]
    assert score.main(args + ["--date", "2026-11-20"]) == 0
    part = root / "dt=2026-11-20"
    manifest = read_manifest(part)
    assert manifest["output"]["partition"] == {"dt": "2026-11-20"} and manifest["output"]["dataset_root"] == str(root)
    stamp = manifest_path(part).stat().st_mtime_ns
    assert score.main(args + ["--date", "2026-11-20"]) == 0  # finished partition: a no-op
    assert manifest_path(part).stat().st_mtime_ns == stamp
    today = datetime.datetime.now(datetime.timezone.utc).date()
    assert score.main(args) == 0
    assert sorted(p.name for p in root.iterdir()) == sorted({"dt=2026-11-20", f"dt={today.isoformat()}"})
    assert pq.read_table(part).equals(pq.read_table(root / f"dt={today.isoformat()}"))


def test_date_needs_a_partitioned_config_and_a_valid_date(tmp_path, tie_corpus, caplog, capsys):
    _, _, docs_path, queries_path = tie_corpus
    args = ["--docs", docs_path, "--queries", queries_path, "--out", str(tmp_path / "o"), "--quiet"]
    with caplog.at_level(logging.ERROR, logger="settopk"):
        assert score.main(args + ["--config", _config(tmp_path), "--date", "2026-11-20"]) == 2
    assert "output.partition is 'dt'" in caplog.text and not (tmp_path / "o").exists()
    with pytest.raises(SystemExit) as err:
        score.main(args + ["--date", "2026-13-01"])
    assert err.value.code == 2 and "expected a date YYYY-MM-DD" in capsys.readouterr().err


@pytest.mark.slow
def test_partitioned_run_refuses_a_root_holding_other_files(tmp_path, tie_corpus, caplog):
    _, _, docs_path, queries_path = tie_corpus
    flat = tmp_path / "flat"
    base = ["--docs", docs_path, "--queries", queries_path, "--out", str(flat), "--quiet"]
    assert score.main(base + ["--config", _config(tmp_path)]) == 0
    with caplog.at_level(logging.ERROR, logger="settopk"):
        assert score.main(base + ["--config", _config(tmp_path, "n", output={"partition": "dt"})]) == 2
    assert "only dt=YYYY-MM-DD partitions" in caplog.text
    assert not [p for p in flat.iterdir() if p.name.startswith("dt=")]


@pytest.mark.slow
def test_manifest_run_id_fingerprint_and_file_metadata(tmp_path, tie_corpus):
    _, _, docs_path, queries_path = tie_corpus
    out = tmp_path / "out"
    args = ["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--config", _config(tmp_path), "--k", "4", "--quiet"]
    assert score.main(args + ["--run-id", "nightly-2026-11-20"]) == 0
    first = read_manifest(out)
    assert first["run_id"] == "nightly-2026-11-20"
    meta = pq.read_schema(out / "part-00000.parquet").metadata
    assert meta[b"settopk.run_id"] == b"nightly-2026-11-20" and meta[b"settopk.k"] == b"4"
    assert {"validate_s", "load_s", "search_s", "merge_s", "total_s"} <= set(first["timings_s"])
    assert first["versions"]["ray"] and first["config"]["k"] == 4 and first["started_utc"].endswith("Z")
    assert first["fingerprint"]["docs"]["files"] == 1 and len(first["fingerprint"]["corpus"]) == 64

    assert score.main(args + ["--force"]) == 0  # same inputs: same fingerprint, a new run id
    second = read_manifest(out)
    assert second["fingerprint"] == first["fingerprint"] and second["run_id"] != first["run_id"]

    copy = tmp_path / "docs-copy.txt"
    copy.write_text(open(docs_path).read() + "1,2\n")  # the corpus changed
    assert score.main(["--docs", str(copy), "--queries", queries_path, "--out", str(out), "--config", _config(tmp_path), "--k", "4", "--quiet", "--force"]) == 0
    third = read_manifest(out)
    assert third["fingerprint"]["corpus"] != first["fingerprint"]["corpus"]
    assert third["fingerprint"]["queries"] == first["fingerprint"]["queries"]


def test_bad_run_id_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        score.main(["--run-id", "../../etc", "--out", str(tmp_path / "o")])
    assert err.value.code == 2 and "--run-id" in capsys.readouterr().err


def test_phase_logs_and_final_summary_line(tmp_path, tie_corpus, caplog):
    _, _, docs_path, queries_path = tie_corpus
    out = tmp_path / "out"
    with caplog.at_level(logging.INFO, logger="settopk"):
        assert score.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--config", _config(tmp_path), "--run-id", "r-1"]) == 0
    messages = [r.getMessage() for r in caplog.records if r.name == "settopk"]
    phases = [m.split(":")[0] for m in messages if m.startswith("phase ")]
    assert phases == ["phase validate", "phase connect", "phase read", "phase load", "phase search", "phase commit"]
    assert messages[-1].startswith("done: run r-1: 43 queries x 703 docs, k=100,") and "total_s=" in messages[-1]


def test_unexpected_failure_exits_1_and_writes_nothing(tmp_path, tie_corpus, monkeypatch, caplog):
    _, _, docs_path, queries_path = tie_corpus

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(job_run, "check_parts", full_disk)
    with caplog.at_level(logging.ERROR, logger="settopk"):
        code = score.main(["--docs", docs_path, "--queries", queries_path, "--out", str(tmp_path / "out"), "--config", _config(tmp_path), "--quiet"])
    assert code == 1 and "failed: the result dataset was not written" in caplog.text and "No space left" in caplog.text
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exit", "hang"])
def test_crashed_or_hung_shard_actor_is_restarted_and_the_output_is_unchanged(tmp_path, tie_corpus, mode):
    """Chaos: shard 0's process dies (or stops answering) at its 2nd search; the run recovers."""
    _, _, docs_path, queries_path = tie_corpus
    base = ["--docs", docs_path, "--queries", queries_path, "--k", "10", "--quiet"]
    clean = _config(tmp_path, name="clean", n_shards=2, query_batch_size=8)
    assert score.main(base + ["--config", clean, "--out", str(tmp_path / "clean")]) == 0
    marker = tmp_path / "crashed"
    crashing = crashing_searcher(shard=0, after=2, marker=str(marker), mode=mode)
    # A hang is seen after search_timeout_s times the calls an actor has in flight (6 batches here);
    # the restarted actor gets as long for the calls it takes over (the 5 left).
    chaos = _config(tmp_path, name="chaos", n_shards=2, query_batch_size=8, faults={"search_timeout_s": 3, "retry_backoff_s": 0.1})
    assert score.main(base + ["--config", chaos, "--out", str(tmp_path / "crashed-run")], searcher_cls=crashing) == 0
    assert marker.exists()  # the fault happened, and the run still finished
    assert pq.read_table(tmp_path / "crashed-run").equals(pq.read_table(tmp_path / "clean"))
    shards = read_manifest(tmp_path / "crashed-run")["shards"]
    assert [s["restarted"] for s in shards] == [True, False]


@pytest.mark.slow
def test_shard_that_keeps_failing_stops_the_run_naming_node(tmp_path, tie_corpus, caplog):
    _, _, docs_path, queries_path = tie_corpus
    crashing = crashing_searcher(shard=1, after=1)  # no marker: the fault hits on every life of the actor
    cfg = _config(tmp_path, n_shards=2, faults={"actor_restarts": 0, "search_attempts": 2, "retry_backoff_s": 0.1})
    with caplog.at_level(logging.ERROR, logger="settopk"):
        code = score.main(["--docs", docs_path, "--queries", queries_path, "--out", str(tmp_path / "out"), "--config", cfg, "--quiet"],
                          searcher_cls=crashing)
    assert code == 1 and not (tmp_path / "out").exists()
    assert "failed 2 time(s) on shard 1 (node " in caplog.text


def test_quarantine_sets_bad_lines_aside_and_reports_them(tmp_path, caplog):
    docs = [[1, 2], [2, 3], [3], [1, 2, 3]]
    (tmp_path / "docs.txt").write_text("1,2\nbad\n2,3\n3\n1.5\n1,2,3\n")  # lines 2 and 5 are bad
    (tmp_path / "q.txt").write_text("2\n1,2\n7e4\n")
    cfg = _config(tmp_path, on_invalid="quarantine", n_shards=2)
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="settopk"):
        assert score.main(["--docs", str(tmp_path / "docs.txt"), "--queries", str(tmp_path / "q.txt"), "--out", str(out), "--k", "3", "--config", cfg, "--quiet"]) == 0
    assert "set aside 2 doc line(s)" in caplog.text
    doc_ids = [0, 2, 3, 5]  # doc ids stay line numbers
    expected = _expected_rows(docs, [[2], [1, 2]], ["0", "1"], 3)
    expected = [(q, r, doc_ids[d], s, o, ql, dl) for q, r, d, s, o, ql, dl in expected]
    assert _as_rows(_read_rows(out)) == expected
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "part-00000.parquet"]  # the rejected lines live in the run record
    rejected = pq.read_table(rejected_path(out)).to_pydict()
    assert list(zip(rejected["input"], rejected["line"])) == [("docs", 2), ("docs", 5), ("queries", 3)]
    counts = read_manifest(out)["counts"]
    assert counts["rejected_docs"] == 2 and counts["rejected_queries"] == 1


def _touch_after(monkeypatch, name: str, path) -> None:
    """Make ``settopk.jobs.run.<name>`` move ``path``'s modification time a second ahead once it returns."""
    real = getattr(job_run, name)

    def call_then_touch(*args, **kwargs):
        result = real(*args, **kwargs)
        os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
        return result

    monkeypatch.setattr(job_run, name, call_then_touch)


def test_input_modified_while_the_driver_reads_it_is_refused(tmp_path, monkeypatch, caplog):
    docs = _write_text_sets(tmp_path / "docs.txt", [[1, 2], [3]])
    q = _write_text_sets(tmp_path / "q.txt", [[1]])
    _touch_after(monkeypatch, "read_corpus_pieces", docs)  # a writer still at work
    with caplog.at_level(logging.ERROR, logger="settopk"):
        code = score.main(["--docs", docs, "--queries", q, "--out", str(tmp_path / "out"), "--config", _config(tmp_path), "--quiet"])
    assert code == 2 and "docs.txt: expected input files that stay unchanged" in caplog.text
    assert not (tmp_path / "out").exists()


def test_corpus_changed_before_the_readers_read_it_stops_the_run(tmp_path, monkeypatch, caplog):
    docs = _write_text_sets(tmp_path / "docs.txt", [[1, 2], [3]])
    q = _write_text_sets(tmp_path / "q.txt", [[1]])
    _touch_after(monkeypatch, "pieces_for_cluster", docs)  # same bytes, new mtime
    with caplog.at_level(logging.ERROR, logger="settopk"):
        code = score.main(["--docs", docs, "--queries", q, "--out", str(tmp_path / "out"), "--config", _config(tmp_path), "--quiet"])
    assert code == 2 and "docs.txt: expected input files that stay unchanged while the job runs, found files changed while the job listed them" in caplog.text
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_threshold_exchange_off_gives_the_same_table_on_parquet_pieces_out_of_id_order(tmp_path, monkeypatch):
    """Docs in descending doc id order over 3 files of small row groups, read as 6 pieces whose id
    ranges overlap; 3 shards. Two rounds with floors and one round without give the same table, the
    oracle's rows."""
    from settopk.shards import reading

    rng = np.random.default_rng(21)
    docs = _random_sets(rng, 597, 14, 9) + [[], list(range(128)), [3, 1, 3]]  # lengths 0..9 and 128
    ids = np.arange(len(docs))[::-1] * 2 + 1  # descending, sparse
    root = tmp_path / "docs"
    root.mkdir()
    for f in range(3):
        part = slice(200 * f, 200 * (f + 1))
        table = pa.table({"doc_id": pa.array(ids[part], pa.int64()), "tokens": pa.array(docs[part], pa.list_(pa.int32()))})
        pq.write_table(table, root / f"part-{f}.parquet", row_group_size=25)
    # Home-shard lengths, lengths between the shards' doc lengths (10..127), empty and max_len queries.
    queries = _random_sets(rng, 30, 14, 9) + [[], list(range(128)), list(range(20)), list(range(60, 100)), [13]]
    queries_path = _write_text_sets(tmp_path / "q.txt", queries)
    monkeypatch.setattr(reading, "_MIN_PIECE_ROWS", 1)
    monkeypatch.setattr(reading, "_PIECES_PER_CPU", 2)  # pieces of about 600 rows / (2 per CPU * 2 CPUs): files split in two
    reads = []

    def read_and_keep(*args, **kwargs):
        reads.append(real(*args, **kwargs))
        return reads[-1]

    real = job_run.read_corpus_pieces
    monkeypatch.setattr(job_run, "read_corpus_pieces", read_and_keep)
    k, tables, skipped = 15, {}, {}
    for exchange in (True, False):
        out = tmp_path / f"out-{exchange}"
        cfg = _config(tmp_path, name=f"x{exchange}", n_shards=3, query_batch_size=8, threshold_exchange=exchange)
        assert score.main(["--docs", str(root), "--queries", queries_path, "--out", str(out), "--k", str(k), "--config", cfg, "--quiet"]) == 0
        tables[exchange] = _read_rows(out)
        shards = read_manifest(out)["shards"]
        assert len(shards) == 3
        skipped[exchange] = sum(s["queries_skipped"] for s in shards)
    assert [len(r.pieces) for r in reads] == [6, 6] and not any(r.ordered for r in reads)
    assert skipped[True] > 0 and skipped[False] == 0  # the floors did skip searches, and only when on
    assert tables[True].equals(tables[False])
    order = np.argsort(ids)
    expected = _expected_rows([docs[i] for i in order], queries, [str(i) for i in range(len(queries))], k)
    assert _as_rows(tables[True]) == [(q, r, int(ids[order][d]), s, o, ql, dl) for q, r, d, s, o, ql, dl in expected]


def test_resolve_backend_counts_replicas_in_the_actors_it_needs():
    from settopk.configs import ConfigError, JobConfig

    gpus = {"GPU": 8.0, "CPU": 64.0}
    assert resolve_backend(JobConfig(backend="cupy"), gpus, 1) == ("cupy", 8)
    assert resolve_backend(JobConfig(backend="cupy"), gpus, 4) == ("cupy", 2)
    assert resolve_backend(JobConfig(backend="numpy", cpus_per_shard=2.0), gpus, 2) == ("numpy", 16)
    with pytest.raises(InputError, match=r"3 shard\(s\) x 3 replica\(s\) need 9 GPU\(s\) and 9 CPU\(s\), the Ray cluster has 8"):
        resolve_backend(JobConfig(backend="cupy", n_shards=3), gpus, 3)
    with pytest.raises(ConfigError, match="replicas must be an integer >= 1, found 0"):
        JobConfig(replicas=0)


def test_cpus_per_shard_auto_gives_the_cpu_backend_whole_nodes():
    from settopk.configs import ConfigError, JobConfig

    auto = JobConfig(backend="cpu", cpus_per_shard="auto")
    cluster = {"CPU": 40.0}
    nodes = [0.0, 16.0, 24.0]  # a head without CPUs, two workers
    assert resolve_cpus_per_shard(auto, "cpu", nodes) == 16.0  # the smallest node with CPUs
    assert resolve_cpus_per_shard(auto, "cpu", nodes, replicas=2) == 8.0
    assert resolve_backend(auto, cluster, 1, nodes) == ("cpu", 2)  # one shard per 16 CPUs
    assert resolve_backend(auto, cluster, 2, nodes) == ("cpu", 2)  # 2 x 2 actors of 8 CPUs
    assert resolve_cpus_per_shard(auto, "cpu", [2.0]) == 2.0  # a laptop: one shard, two threads
    assert resolve_cpus_per_shard(JobConfig(backend="numpy", cpus_per_shard="auto"), "numpy", nodes) == 1.0
    assert resolve_cpus_per_shard(JobConfig(backend="auto", cpus_per_shard="auto"), "cupy", nodes) == 1.0
    assert resolve_cpus_per_shard(JobConfig(cpus_per_shard=3.0), "cpu", nodes) == 3.0
    with pytest.raises(ConfigError, match="cpus_per_shard must be 'auto' or a number >= 0, found 'all'"):
        JobConfig(cpus_per_shard="all")



@pytest.mark.parametrize("routing", ["scan", pytest.param("auto", marks=pytest.mark.slow)])
def test_compiled_cpu_backend_gives_the_oracle_rows(tmp_path, tie_corpus, routing):
    """``backend: cpu`` (the Numba index, one thread per actor here) end to end, ties included."""
    docs, queries, docs_path, queries_path = tie_corpus
    k = 30
    out = tmp_path / "out"
    cfg = _config(tmp_path, backend="cpu", n_shards=2, query_batch_size=9, routing=routing)
    assert score.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", str(k), "--config", cfg, "--quiet"]) == 0
    assert _as_rows(_read_rows(out)) == _expected_rows(docs, queries, [str(i) for i in range(len(queries))], k)
    assert {s["backend"] for s in read_manifest(out)["shards"]} == {"cpu"}
