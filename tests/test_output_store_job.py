"""``settopk.jobs.score`` writing its result to a bucket of moto's S3 server on localhost: the same parts
as a local run, the run record beside, a no-op rerun, a nightly partition, a TSV, a driver killed
mid-run that resumes from the parts in the store, and DuckDB and Polars reading the result there.

Each driver is its own process with its own local Ray cluster, started after the ``s3`` fixture
set the AWS settings: merge tasks open the store on their worker, and Ray workers keep the
environment their cluster started with (a session's shared cluster may predate the fixture).
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from settopk.shards.location import Location
from settopk.jobs.output import DT_PARTITIONING, manifest_path, open_results, read_manifest, work_dir
from tests.job_helpers import ROOT, write_sets

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

_DRIVER = """
import json, sys
import ray
from settopk.jobs import score

ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=256 * 2**20, log_to_driver=False)
print("RESULTS " + json.dumps([score.main(argv) for argv in json.loads(sys.argv[1])]), flush=True)
"""
NIGHTS = ("2026-11-19", "2026-11-20")
N_QUERIES = 500
N_PARTS = N_QUERIES // 25  # query_chunk_size 25


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    return env


def _driver(runs: list[list[str]]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _DRIVER, json.dumps(runs)], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run_all(runs: list[list[str]]) -> list[int]:
    proc = _driver(runs)
    stdout, stderr = proc.communicate(timeout=500)
    lines = [line for line in stdout.splitlines() if line.startswith("RESULTS ")]
    assert proc.returncode == 0 and lines, stdout[-3000:] + stderr[-5000:]
    return json.loads(lines[-1][len("RESULTS "):])


def _objects(s3, prefix) -> list[str]:
    """Every object under ``prefix`` (a URI or its Location), relative to it."""
    path = (prefix.full if isinstance(prefix, Location) else prefix).split("://", 1)[1]
    infos = s3.filesystem().get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path[len(path) + 1:] for i in infos if i.type == pafs.FileType.File)


@pytest.fixture(scope="module")
def job(s3, tmp_path_factory):
    """Inputs, a config, and the runs: local, to the bucket, the same again (a no-op), nightly."""
    tmp = tmp_path_factory.mktemp("store-job")
    rng = np.random.default_rng(5)
    docs = write_sets(tmp / "docs.txt", [rng.choice(40, size=rng.integers(0, 12), replace=False).tolist() for _ in range(3000)])
    queries = write_sets(tmp / "q.txt", [rng.choice(40, size=rng.integers(0, 12), replace=False).tolist() for _ in range(N_QUERIES)])
    cfg = tmp / "c.yaml"
    # One query per batch and 25 per chunk: many small parts, so a kill lands mid-run.
    cfg.write_text("backend: numpy\nn_shards: 2\ncpus_per_shard: 0.5\nquery_batch_size: 5\nquery_chunk_size: 25\n")
    nightly = tmp / "nightly.yaml"
    nightly.write_text("backend: numpy\nn_shards: 1\ncpus_per_shard: 0.5\nquery_chunk_size: 200\noutput:\n  partition: dt\n")
    bucket = s3.bucket("store-job")
    args = ["--docs", docs, "--queries", queries, "--k", "20", "--config", str(cfg), "--run-id", "run-1", "--quiet"]
    night = ["--docs", docs, "--queries", queries, "--k", "5", "--config", str(nightly), "--quiet", "--out", f"{bucket}/nightly"]
    codes = _run_all([
        args + ["--out", str(tmp / "local"), "--tsv", str(tmp / "local.tsv")],
        args + ["--out", f"{bucket}/results", "--tsv", f"{bucket}/results.tsv"],
        args + ["--out", f"{bucket}/results"],  # the same run again: a no-op
        *[night + ["--date", d] for d in NIGHTS],
    ])
    assert codes == [0] * 5
    return {"tmp": tmp, "bucket": bucket, "args": args}


def test_result_in_the_bucket_equals_the_local_result(s3, job):
    tmp, bucket = job["tmp"], job["bucket"]
    out = f"{bucket}/results"
    names = _objects(s3, out)
    assert names == ["_SUCCESS"] + [f"part-{i:05d}.parquet" for i in range(N_PARTS)]  # only parts and _SUCCESS
    for name in names[1:]:  # same run id, same rows: byte-identical parts
        assert Location.of(f"{out}/{name}").read_bytes() == (tmp / "local" / name).read_bytes(), name
    assert Location.of(f"{bucket}/results.tsv").read_bytes() == (tmp / "local.tsv").read_bytes()
    manifest = read_manifest(out)
    assert manifest_path(out) == f"{bucket}/results.run/manifest.json"
    assert manifest["output"]["path"] == out and manifest["counts"]["rows"] == N_QUERIES * 20
    assert manifest["counts"] == read_manifest(tmp / "local")["counts"]
    # Nothing else in the bucket: no work prefix, lock or staging left behind.
    top = {name.split("/", 1)[0] for name in _objects(s3, bucket)}
    assert top == {"results", "results.run", "results.tsv", "nightly", "nightly.run"}


def test_the_rerun_was_a_no_op_read_from_the_store(s3, job):
    bucket = job["bucket"]
    manifest = read_manifest(f"{bucket}/results")
    assert manifest["args"]["tsv"] == f"{bucket}/results.tsv"  # written by the first run, kept by the no-op
    assert manifest["counts"]["chunks_resumed"] == 0


def test_nightly_partitions_in_the_bucket(s3, job):
    bucket = job["bucket"]
    root = f"{bucket}/nightly"
    assert _objects(s3, root) == [f"dt={d}/{n}" for d in NIGHTS for n in ("_SUCCESS", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet")]
    assert _objects(s3, f"{bucket}/nightly.run") == [f"dt={d}/manifest.json" for d in NIGHTS]
    for d in NIGHTS:
        manifest = read_manifest(f"{root}/dt={d}")
        assert manifest["output"]["partition"] == {"dt": d} and manifest["output"]["dataset_root"] == root
    table = open_results(root).to_table()
    assert table.num_rows == len(NIGHTS) * N_QUERIES * 5
    assert sorted(set(table["dt"].to_pylist())) == [datetime.date.fromisoformat(d) for d in NIGHTS]


def test_duckdb_and_polars_read_the_result_from_the_bucket(s3, job):
    """Polars reads the bucket itself (its object store honours AWS_ENDPOINT_URL; a prefix needs
    its trailing ``/``). DuckDB's httpfs extension cannot be installed offline: DuckDB scans a
    pyarrow dataset on the bucket instead."""
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    bucket = job["bucket"]
    local = pq.read_table(job["tmp"] / "local").sort_by([("query_id", "ascending"), ("rank", "ascending")])
    frame = pl.read_parquet(f"{bucket}/results/").sort(["query_id", "rank"])
    assert frame["doc_id"].to_list() == local["doc_id"].to_pylist() and frame.height == N_QUERIES * 20
    nightly = pl.scan_parquet(f"{bucket}/nightly/")  # dt: Date, from the Hive directories
    assert nightly.collect_schema()["dt"] == pl.Date
    assert nightly.group_by("dt").len().sort("dt").collect().rows() == [(datetime.date.fromisoformat(d), N_QUERIES * 5) for d in NIGHTS]
    import pyarrow.dataset as ds

    results = ds.dataset(f"{bucket.split('://')[1]}/nightly", filesystem=s3.filesystem(), partitioning=DT_PARTITIONING)
    rows = duckdb.sql("SELECT dt, count(*) FROM results GROUP BY dt ORDER BY dt").fetchall()
    assert rows == [(datetime.date.fromisoformat(d), N_QUERIES * 5) for d in NIGHTS]


def test_killed_driver_resumes_from_the_parts_in_the_store(s3, job):
    bucket, args, tmp = job["bucket"], job["args"], job["tmp"]
    out = f"{bucket}/killed"
    work = work_dir(out)
    proc = _driver([args + ["--out", out]])
    deadline = time.monotonic() + 240
    while len([n for n in _objects(s3, work) if n.startswith("part-")]) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    committed = len([n for n in _objects(s3, work) if n.startswith("part-")])
    assert proc.returncode == -signal.SIGKILL and 3 <= committed < N_PARTS, "the driver must be killed mid-run"
    assert _objects(s3, out) == []  # no result yet
    lock = [n for n in _objects(s3, bucket) if n.startswith(".killed.lock-")]
    assert len(lock) == 1  # the killed run's lock object: its pid is gone, so the rerun takes it over

    assert _run_all([args + ["--out", out]]) == [0]  # same arguments: resume
    manifest = read_manifest(out)
    assert manifest["counts"]["chunks_resumed"] >= committed - 1 and manifest["run_id"] == "run-1"
    assert _objects(s3, work) == [] and not [n for n in _objects(s3, bucket) if n.startswith(".killed.")]
    names = _objects(s3, out)
    assert len(names) == N_PARTS + 1
    for name in names[1:]:
        assert Location.of(f"{out}/{name}").read_bytes() == (tmp / "local" / name).read_bytes(), name


def test_verify_checks_the_result_in_the_bucket(s3, job):
    from settopk.jobs import verify

    bucket, args = job["bucket"], job["args"]
    manifest = read_manifest(f"{bucket}/results")
    assert verify.main(["--docs", manifest["inputs"]["docs"]["path"], "--queries", manifest["inputs"]["queries"]["path"],
                        "--results", f"{bucket}/results", "--config", args[args.index("--config") + 1], "--sample", "20"]) == 0
