"""Large inputs checked while the cluster works, and ``--gpus N``.

The queries' validating pass runs while the corpus is read and loaded; a large corpus is read
while the shard actors start. Bad input found while the shard actors start or load stops them,
exits 2 and writes nothing; the manifest records each phase's time and the driver's memory in
it; ``--gpus`` sets the GPU layout or refuses one that does not fit, naming the flag.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading

import pytest

from settopk.jobs import run as job_run
from settopk.jobs import score
from settopk.jobs import validate as validate_module
from settopk.jobs.output import read_manifest
from tests.job_helpers import ROOT, job_config, write_sets

DOCS = [[1, 2, 3], [2, 3], [3, 4, 5], [1, 5], [7], [2, 7, 9]]


@pytest.fixture
def overlapped(monkeypatch):
    """Every query input validated beside the cluster work, as large ones are."""
    monkeypatch.setattr(job_run, "_OVERLAP_FROM_BYTES", 0)


def _record_started(monkeypatch, started: threading.Event | None = None) -> list:
    """Have ``job_run.start_shards`` record the actors it starts (and their inputs' actor) in the
    returned list, and set ``started`` once it has."""
    actors = []
    real_start = job_run.start_shards

    def start_and_record(*args, **kwargs):
        out = real_start(*args, **kwargs)
        actors.extend(out[0] + [out[1]])
        if started is not None:
            started.set()
        return out

    monkeypatch.setattr(job_run, "start_shards", start_and_record)
    return actors


def _assert_stopped_and_nothing_written(actors: list, tmp_path) -> None:
    """Every started actor is dead, the shard bundles are freed, and ``tmp_path`` holds only the inputs."""
    import ray

    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.info.remote() if hasattr(actor, "info") else actor.__ray_ready__.remote(), timeout=60)
    assert all(g["state"] == "REMOVED" for g in ray.util.placement_group_table().values())
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "docs.txt", "q.txt"], "nothing may be written"


@pytest.mark.slow
def test_bad_queries_found_while_the_corpus_loads_stop_the_actors_and_write_nothing(tmp_path, monkeypatch, caplog, ray_cluster, overlapped):
    docs = write_sets(tmp_path / "docs.txt", DOCS)
    queries = tmp_path / "q.txt"
    queries.write_text("1,2\n3\n1,x\n")
    started = threading.Event()
    actors = _record_started(monkeypatch, started)
    real_validate = validate_module.validate

    def validate_once_loading(*args, **kwargs):
        # The pass ends only once the actors are loading: the failure then has actors to stop.
        assert started.wait(120), "the shard actors never started"
        return real_validate(*args, **kwargs)

    monkeypatch.setattr(validate_module, "validate", validate_once_loading)
    with caplog.at_level(logging.ERROR, logger="settopk"):
        code = score.main(["--docs", docs, "--queries", str(queries), "--out", str(tmp_path / "out"),
                           "--config", job_config(tmp_path), "--quiet"])
    assert code == 2, caplog.text
    assert "q.txt:3" in caplog.text and "'x'" in caplog.text
    assert actors, "the actors were not started before the validation failed"
    _assert_stopped_and_nothing_written(actors, tmp_path)


@pytest.mark.slow
def test_a_large_corpus_is_read_while_the_actors_start_and_gives_the_oracle_rows(tmp_path, monkeypatch, ray_cluster, overlapped):
    """The actors start before the read and wait for their shards. The plan finds 3 distinct
    lengths for 4 shards asked, so 2 of the 8 actors started are stopped unused."""
    import pyarrow.parquet as pq

    from settopk.kernels import brute_force_topk

    docs = write_sets(tmp_path / "docs.txt", DOCS)
    queries = [[1, 2], [3, 7], [9], [2, 3, 5]]
    calls = []
    real_start, real_read = job_run.start_shards, job_run.read_corpus_pieces

    def start(*args, **kwargs):
        calls.append("start")
        return real_start(*args, **kwargs)

    def read(*args, **kwargs):
        calls.append("read")
        return real_read(*args, **kwargs)

    monkeypatch.setattr(job_run, "start_shards", start)
    monkeypatch.setattr(job_run, "read_corpus_pieces", read)
    out = tmp_path / "out"
    cfg = job_config(tmp_path, n_shards=4, replicas=2, cpus_per_shard=0.25)
    assert score.main(["--docs", docs, "--queries", write_sets(tmp_path / "q.txt", queries), "--out", str(out),
                       "--k", "4", "--config", cfg, "--quiet"]) == 0
    assert calls == ["start", "read"]
    manifest = read_manifest(out)
    assert [(s["shard_id"], s["replica"]) for s in manifest["shards"]] == [(i % 3, i // 3) for i in range(6)]
    rows = pq.read_table(out).to_pydict()
    got = [(int(q), d, o) for q, d, o in zip(rows["query_id"], rows["doc_id"], rows["overlap"])]
    expected = [(i, d, o) for i, result in enumerate(brute_force_topk(DOCS, queries, 4)) for d, o, _ in result]
    assert got == expected


def test_a_bad_large_corpus_stops_the_started_actors_and_writes_nothing(tmp_path, monkeypatch, caplog, ray_cluster, overlapped):
    docs = tmp_path / "docs.txt"
    docs.write_text("1,2\n3,4\n5,x\n")
    actors = _record_started(monkeypatch)
    with caplog.at_level(logging.ERROR, logger="settopk"):
        code = score.main(["--docs", str(docs), "--queries", write_sets(tmp_path / "q.txt", [[1]]), "--out",
                           str(tmp_path / "out"), "--config", job_config(tmp_path), "--quiet"])
    assert code == 2, caplog.text
    assert "docs.txt:3" in caplog.text and "'x'" in caplog.text
    assert actors, "the actors were not started before the read"
    _assert_stopped_and_nothing_written(actors, tmp_path)


def test_bad_queries_are_reported_before_a_bad_corpus(tmp_path, caplog, ray_cluster, overlapped):
    docs = write_sets(tmp_path / "docs.txt", DOCS)
    (tmp_path / "docs.txt").write_text(open(docs).read() + "4,y\n")
    queries = tmp_path / "q.txt"
    queries.write_text("1,2\n3.5\n")
    with caplog.at_level(logging.ERROR, logger="settopk"):
        code = score.main(["--docs", docs, "--queries", str(queries), "--out", str(tmp_path / "out"),
                           "--config", job_config(tmp_path), "--quiet"])
    assert code == 2
    assert "q.txt:2" in caplog.text and "docs.txt" not in caplog.text
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_manifest_times_the_overlapped_pass_and_each_phase_memory(tmp_path, caplog, ray_cluster, overlapped):
    docs = write_sets(tmp_path / "docs.txt", DOCS)
    queries = write_sets(tmp_path / "q.txt", [[1, 2], [3, 7], [9]])
    out = tmp_path / "out"
    with caplog.at_level(logging.INFO, logger="settopk"):
        assert score.main(["--docs", docs, "--queries", queries, "--out", str(out), "--config", job_config(tmp_path)]) == 0
    phases = [r.getMessage().split(":")[0] for r in caplog.records if r.name == "settopk" and r.getMessage().startswith("phase ")]
    assert phases == ["phase connect", "phase read", "phase validate", "phase load", "phase search", "phase commit"]
    manifest = read_manifest(out)
    timings = manifest["timings_s"]
    assert {"validate_s", "validate_wait_s", "connect_s", "read_s", "load_s", "search_s"} <= set(timings)
    by_phase = manifest["driver_max_rss_bytes_by_phase"]
    assert set(by_phase) == {"connect", "read", "validate", "load", "search"}  # the manifest is written in the commit
    for phase in by_phase.values():
        assert 0 < phase["start"] and 0 < phase["end"] and max(phase["start"], phase["end"]) <= phase["peak"]
        assert phase["peak"] <= manifest["driver_max_rss_bytes"]


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--backend", "cpu", "--gpus", "2"], "--gpus 2 needs backend cupy or auto, found backend 'cpu' (--backend)"),
        (["--gpus", "3", "--replicas", "2"], "--gpus 3 is not a whole number of shards of 2 replica(s)"),
        (["--gpus", "2", "--shards", "3"], "--gpus 2 with --shards 3 x 1 replica(s)"),
    ],
)
def test_gpus_that_do_not_fit_the_layout_are_refused_before_any_work(tmp_path, caplog, flags, needle):
    docs = write_sets(tmp_path / "docs.txt", DOCS)
    cfg = job_config(tmp_path, backend="auto")
    with caplog.at_level(logging.ERROR, logger="settopk"):
        code = score.main(["--docs", docs, "--queries", docs, "--out", str(tmp_path / "out"), "--config", cfg, "--quiet", *flags])
    # settle refuses these, before the queries are read or Ray starts
    assert code == 2 and needle in caplog.text, caplog.text
    assert not (tmp_path / "out").exists()


_GPU_CLUSTER_SCRIPT = """
import contextlib, io, json, logging, sys
import ray
ray.init(address="local", num_cpus=2, num_gpus=2, object_store_memory=256 * 2**20, include_dashboard=False,
         log_to_driver=False, logging_level=logging.ERROR)
from settopk.jobs import score
results = []
for flags in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = score.main(flags)
    results.append({"code": code, "stdout": out.getvalue()})
print("RESULTS " + json.dumps(results))
"""


@pytest.mark.slow
def test_gpus_sets_the_shards_and_a_cluster_without_them_fails_naming_the_flag(tmp_path):
    docs = write_sets(tmp_path / "docs.txt", DOCS)
    cfg = job_config(tmp_path, backend="auto", cpus_per_shard=0)
    base = ["--docs", docs, "--queries", docs, "--out", str(tmp_path / "out"), "--config", cfg, "--dry-run", "--quiet"]
    runs = [base + ["--gpus", "2"], base + ["--gpus", "2", "--replicas", "2"], base + ["--gpus", "4"]]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", _GPU_CLUSTER_SCRIPT, json.dumps(runs)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    two, replicated, four = json.loads(lines[0][len("RESULTS "):])
    assert two["code"] == 0 and "backend cupy, 2 shard(s)" in two["stdout"], two
    assert replicated["code"] == 0 and "backend cupy, 1 shard(s) x 2 replicas" in replicated["stdout"], replicated
    assert four["code"] == 2 and "--gpus 4: expected a Ray cluster with at least 4 GPU(s), found 2" in done.stderr, done.stderr[-3000:]
