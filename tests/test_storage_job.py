"""``settopk.jobs.score`` with ``--docs`` and ``--queries`` in a bucket of moto's S3 server on localhost,
and end to end with ``--out`` and ``--tsv`` in buckets too, against the same runs on local copies.

The runs share one driver process with its own local Ray cluster, started after the ``s3``
fixture set the AWS settings: reader and merge tasks open the store themselves on their worker,
and Ray workers keep the environment their cluster started with (a session's shared cluster may
predate the fixture).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from settopk.jobs.output import open_results, read_manifest, rejected_path
from settopk.shards.location import Location
from tests.job_helpers import ROOT, job_config, result_rows
from tests.piece_helpers import random_sets
from tests.test_storage_inputs import upload

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Runs each argv through settopk.jobs.score.main in one process (one Ray start), collecting the exit
# code and the settopk log lines of each.
_DRIVER = """
import json, logging, os, sys
import ray
from settopk.jobs import score

runs = json.loads(sys.argv[1])
ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=256 * 2**20, log_to_driver=False)
out = []
for argv in runs:
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logging.getLogger("settopk").addHandler(handler)
    logging.getLogger("settopk").setLevel(logging.INFO)  # info lines too, whatever --quiet set on the root
    code = score.main(argv)
    logging.getLogger("settopk").removeHandler(handler)
    out.append({"code": code, "log": records})
print("RESULTS " + json.dumps(out))
"""


def _run_all(runs: list[list[str]]) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(runs)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(lines[-1][len("RESULTS "):])


def _inputs(local: pathlib.Path) -> pathlib.Path:
    """Write the inputs under ``local``: a Parquet corpus directory ``docs/`` (3 files, row
    groups of 40, a ``_SUCCESS``), the same docs as ``docs.txt``, queries as ``queries.txt`` and
    as a directory ``qdir/`` of one-query files, and ``bad.txt`` (a non-integer id on line 3)."""
    rng = np.random.default_rng(7)
    (local / "docs").mkdir(parents=True)
    sets = random_sets(rng, 300, vocab=30)
    ids = np.arange(300) * 3
    for i, (lo, hi) in enumerate(((0, 100), (100, 220), (220, 300))):
        table = pa.table({"doc_id": pa.array(ids[lo:hi], pa.int64()), "tokens": pa.array(sets[lo:hi], pa.list_(pa.int32()))})
        pq.write_table(table, local / "docs" / f"part-{i}.parquet", row_group_size=40)
    (local / "docs" / "_SUCCESS").write_text("")
    (local / "docs.txt").write_text("".join(",".join(map(str, s)) + "\n" for s in sets))
    queries = random_sets(rng, 25, vocab=30)
    (local / "queries.txt").write_text("".join(",".join(map(str, q)) + "\n" for q in queries))
    (local / "qdir").mkdir()
    for i, q in enumerate(queries):
        (local / "qdir" / f"q{i:02d}").write_text(",".join(map(str, q)))
    (local / "bad.txt").write_text("1,2\n3\n4,5.5\n")
    return local


def _rows(table) -> list[tuple]:
    return sorted(zip(*(table[name].to_pylist() for name in table.column_names)))


@pytest.fixture(scope="module")
def all_runs(s3, tmp_path_factory):
    """Every job run of this module, made at once in one driver: ``(inputs_runs, e2e_runs, tmp, uri, out)``,
    where ``inputs_runs`` maps a name to ``(result, out_dir)`` (local outputs) and ``e2e_runs`` a name
    to a result (outputs in the bucket ``out``, or beside it locally under ``tmp``)."""
    tmp = tmp_path_factory.mktemp("storage-job")
    local = _inputs(tmp / "in")
    (local / "quarantine.txt").write_text("1,2\n3\nnot,ids\n4\n")
    bucket = s3.bucket("job-inputs")
    uri = upload(s3, local, f"{bucket}/in")
    out = s3.bucket("e2e-results")
    config = job_config(tmp, k=5)
    plan = {
        "parquet_dir+text": ("docs", "queries.txt"),
        "text+query_dir": ("docs.txt", "qdir"),
    }
    argvs, names = [], []
    for name, (docs, queries) in plan.items():
        for where, base in (("local", str(local)), ("uri", uri)):
            out_dir = tmp / f"out-{name}-{where}"
            names.append((f"{name}/{where}", str(out_dir)))
            argvs.append(["--docs", f"{base}/{docs}", "--queries", f"{base}/{queries}", "--config", config, "--out", str(out_dir), "--quiet"])
    names.append(("rerun", names[1][1]))  # the URI run again: a finished result of the same inputs
    argvs.append(argvs[1])
    for name, docs in (("bad_docs", f"{uri}/bad.txt"), ("missing_bucket", "s3://no-such-bucket/docs.txt"), ("missing_key", f"{uri}/nothing")):
        out_dir = tmp / f"out-{name}"
        names.append((name, str(out_dir)))
        argvs.append(["--docs", docs, "--queries", f"{uri}/queries.txt", "--config", config, "--out", str(out_dir), "--quiet"])
    self_join = job_config(tmp, "self", k=5, self_join="true")
    quarantine = job_config(tmp, "quarantine", k=5, on_invalid="quarantine")
    e2e_plan = {
        "local": ["--docs", f"{local}/docs", "--queries", f"{local}/qdir", "--config", config, "--out", str(tmp / "local"),
                  "--tsv", str(tmp / "local.tsv")],
        "store": ["--docs", f"{uri}/docs", "--queries", f"{uri}/qdir", "--config", config, "--out", f"{out}/results",
                  "--tsv", f"{out}/results.tsv"],
        "self_local": ["--docs", f"{local}/docs.txt", "--config", self_join, "--out", str(tmp / "self")],
        "self_store": ["--docs", f"{uri}/docs.txt", "--config", self_join, "--out", f"{out}/self"],
        "quarantine": ["--docs", f"{uri}/quarantine.txt", "--queries", f"{uri}/queries.txt", "--config", quarantine,
                       "--out", f"{out}/quarantine"],
        "out_in_input": ["--docs", f"{uri}/docs", "--queries", f"{uri}/qdir", "--config", config, "--out", f"{uri}/docs/results"],
    }
    results = _run_all(argvs + [argv + ["--quiet"] for argv in e2e_plan.values()])
    inputs_runs = {name: (result, out_dir) for (name, out_dir), result in zip(names, results)}
    return inputs_runs, dict(zip(e2e_plan, results[len(argvs):])), tmp, uri, out


@pytest.fixture(scope="module")
def runs(all_runs):
    """The runs with inputs in the bucket: ``({name: (result, out_dir)}, uri)``."""
    inputs_runs, _, _, uri, _ = all_runs
    return inputs_runs, uri


@pytest.fixture(scope="module")
def e2e(all_runs):
    """The runs with inputs and outputs in buckets: ``({name: result}, tmp, uri, out)``."""
    _, e2e_runs, tmp, uri, out = all_runs
    return e2e_runs, tmp, uri, out


@pytest.mark.parametrize("name", ["parquet_dir+text", "text+query_dir"])
def test_inputs_in_a_bucket_give_the_local_result(runs, name):
    by_name, _ = runs
    (local, local_out), (there, there_out) = by_name[f"{name}/local"], by_name[f"{name}/uri"]
    assert local["code"] == 0 and there["code"] == 0, (local, there)
    rows = result_rows(there_out)
    assert rows and rows == result_rows(local_out)


def test_a_rerun_on_the_same_objects_is_a_no_op(runs):
    result, _ = runs[0]["rerun"]
    assert result["code"] == 0
    assert any("already holds a finished result of these inputs and settings; nothing to do" in line for line in result["log"]), result["log"]


def test_manifest_names_the_input_uris(runs):
    by_name, uri = runs
    _, out = by_name["parquet_dir+text/uri"]
    text = json.dumps(read_manifest(out))
    assert f"{uri}/docs/part-0.parquet" in text and f"{uri}/queries.txt" in text


def test_a_bad_line_in_a_bucket_is_exit_2_naming_the_uri_and_line(runs):
    by_name, uri = runs
    result, out = by_name["bad_docs"]
    assert result["code"] == 2
    assert any(f"{uri}/bad.txt:3 (1-based line): expected comma-separated token ids" in line for line in result["log"]), result["log"]
    assert not os.path.exists(out)


def test_a_missing_bucket_is_exit_2_naming_it(runs):
    result, out = runs[0]["missing_bucket"]
    assert result["code"] == 2
    assert any("s3://no-such-bucket/docs.txt: expected an existing file or directory, found no bucket named 'no-such-bucket'" in line
               for line in result["log"]), result["log"]


def test_a_missing_key_is_exit_2_naming_it(runs):
    by_name, uri = runs
    result, _ = by_name["missing_key"]
    assert result["code"] == 2
    assert any(f"{uri}/nothing: expected an existing file or directory, found no object or prefix" in line for line in result["log"]), result["log"]


def test_inputs_and_output_in_buckets_give_the_local_result(e2e):
    runs, tmp, uri, out = e2e
    assert runs["local"]["code"] == 0 and runs["store"]["code"] == 0, (runs["local"], runs["store"])
    there = open_results(f"{out}/results").to_table()
    assert there.num_rows > 0 and _rows(there) == _rows(pq.read_table(tmp / "local"))
    assert Location.of(f"{out}/results.tsv").read_bytes() == (tmp / "local.tsv").read_bytes()


def test_the_manifest_names_the_input_and_output_uris(e2e):
    _, _, uri, out = e2e
    manifest = read_manifest(f"{out}/results")
    assert manifest["inputs"]["docs"]["path"] == f"{uri}/docs"
    assert manifest["inputs"]["docs"]["files"] == [f"{uri}/docs/part-{i}.parquet" for i in range(3)]
    assert manifest["inputs"]["queries"]["path"] == f"{uri}/qdir"
    assert manifest["output"]["path"] == f"{out}/results"


def test_a_self_join_in_buckets_gives_the_local_result(e2e):
    runs, tmp, _, out = e2e
    assert runs["self_local"]["code"] == 0 and runs["self_store"]["code"] == 0, (runs["self_local"], runs["self_store"])
    assert _rows(open_results(f"{out}/self").to_table()) == _rows(pq.read_table(tmp / "self"))


def test_quarantined_lines_in_a_bucket_are_listed_by_uri(e2e):
    runs, _, uri, out = e2e
    assert runs["quarantine"]["code"] == 0, runs["quarantine"]
    where = Location.of(rejected_path(f"{out}/quarantine"))
    fs, path = where.fs, where.path
    rejected = pq.read_table(path, filesystem=fs).to_pylist()
    assert [(r["input"], r["path"], r["line"]) for r in rejected] == [("docs", f"{uri}/quarantine.txt", 3)]
    assert read_manifest(f"{out}/quarantine")["counts"]["rejected_docs"] == 1


def test_an_output_inside_an_input_prefix_is_exit_2(e2e):
    runs, _, uri, _ = e2e
    result = runs["out_in_input"]
    assert result["code"] == 2
    assert any(f"--out {uri}/docs/results: expected an output apart from the inputs" in line for line in result["log"]), result["log"]


def test_verify_rechecks_a_result_with_everything_in_buckets(e2e):
    from settopk.jobs import verify

    _, tmp, uri, out = e2e
    assert verify.main(["--docs", f"{uri}/docs", "--queries", f"{uri}/qdir", "--results", f"{out}/results",
                        "--config", str(tmp / "c.yaml"), "--sample", "10"]) == 0
