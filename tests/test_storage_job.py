"""``jobs.score`` with ``--docs`` and ``--queries`` in a bucket of moto's S3 server on localhost.

The runs share one driver process with its own local Ray cluster, started after the ``s3``
fixture set the AWS settings: reader tasks open the store themselves on their worker, and Ray
workers keep the environment their cluster started with (a session's shared cluster may
predate the fixture).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.output import read_manifest
from tests.job_helpers import ROOT, job_config, result_rows
from tests.piece_helpers import random_sets
from tests.test_storage_inputs import upload

pytestmark = pytest.mark.slow

# Runs each argv through jobs.score.main in one process (one Ray start), collecting the exit
# code and the settopk log lines of each.
_DRIVER = """
import json, logging, os, sys
import ray
from jobs import score

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
    as a directory ``qdir/`` of one-query files, and ``bad.txt`` (a negative id on line 3)."""
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
    (local / "bad.txt").write_text("1,2\n3\n4,-5\n")
    return local


@pytest.fixture(scope="module")
def runs(s3, tmp_path_factory):
    """Every job run of this module, made at once: ``{name: (result, out_dir)}``."""
    tmp = tmp_path_factory.mktemp("storage-job")
    local = _inputs(tmp / "in")
    bucket = s3.bucket("job-inputs")
    uri = upload(s3, local, f"{bucket}/in")
    config = job_config(tmp, k=5)
    plan = {
        "parquet_dir+text": ("docs", "queries.txt"),
        "text+query_dir": ("docs.txt", "qdir"),
    }
    argvs, names = [], []
    for name, (docs, queries) in plan.items():
        for where, base in (("local", str(local)), ("uri", uri)):
            out = tmp / f"out-{name}-{where}"
            names.append((f"{name}/{where}", str(out)))
            argvs.append(["--docs", f"{base}/{docs}", "--queries", f"{base}/{queries}", "--config", config, "--out", str(out), "--quiet"])
    names.append(("rerun", names[1][1]))  # the URI run again: a finished result of the same inputs
    argvs.append(argvs[1])
    for name, docs in (("bad_docs", f"{uri}/bad.txt"), ("missing_bucket", "s3://no-such-bucket/docs.txt"), ("missing_key", f"{uri}/nothing")):
        out = tmp / f"out-{name}"
        names.append((name, str(out)))
        argvs.append(["--docs", docs, "--queries", f"{uri}/queries.txt", "--config", config, "--out", str(out), "--quiet"])
    results = _run_all(argvs)
    return {name: (result, out) for (name, out), result in zip(names, results)}, uri


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
    assert any(f"{uri}/bad.txt:3 (1-based line): expected token ids in [0," in line for line in result["log"]), result["log"]
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
