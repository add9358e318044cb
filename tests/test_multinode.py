"""The job on a two-node Ray cluster (``ray.cluster_utils.Cluster``, simulated on this machine):
the same rows as a one-node run and as the brute-force oracle, with the two shard actors on
different nodes.

The two-node run happens in a subprocess (``tests/multinode_run.py``): a ``Cluster`` must not be
started in this process, which holds the session's Ray cluster (``ray_cluster`` fixture).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile

import pyarrow.parquet as pq
import pytest

from settopk.jobs import score
from settopk.jobs.synthetic import SyntheticSpec, generate_docs, generate_queries, write_parquet
from tests.test_job import _as_rows, _expected_rows, _read_rows
from settopk.jobs.output import read_manifest

pytestmark = pytest.mark.slow  # a two-node cluster started in a subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
K = 20
RUN_TIMEOUT_S = 200  # the two-node subprocess (cluster start, a second head start where the first misses Ray's 30 s, job, shutdown) on a loaded machine
# Two shards of one CPU each: on two one-CPU nodes they cannot share a node. Small batches and
# chunks so several batches and part files go through the cluster.
CONFIG = "backend: numpy\nn_shards: 2\ncpus_per_shard: 1.0\nquery_batch_size: 8\nquery_chunk_size: 16\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """3,000 STI2-shaped docs over a small vocabulary (many overlaps and ties) and 48 queries,
    half of them near-duplicates of docs; Parquet files, doc id = position."""
    spec = SyntheticSpec(n_docs=3000, n_queries=48, seed=11, vocab_size=1000)
    docs = generate_docs(spec, workers=1)
    docs_path, queries_path = write_parquet(docs, generate_queries(spec, docs, workers=1), tmp_path_factory.mktemp("multinode-corpus"))
    return str(docs_path), str(queries_path)


def _job_args(corpus, config, out):
    docs_path, queries_path = corpus
    return ["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", str(K), "--config", str(config), "--run-id", "multinode"]


def run_cluster_script(script: str, args: list, what: str, timeout_s: float, extra_env: dict | None = None) -> str:
    """Run ``tests/<script>`` with ``args`` in a subprocess of its own session and Ray temp dir;
    fail the test (with the end of its log) unless it exits 0 within ``timeout_s``; its log."""
    ray_tmp = tempfile.mkdtemp(prefix="ray-mn-", dir="/tmp")  # short: Ray's socket paths live under it
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=ray_tmp, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(ROOT),
               **(extra_env or {}))
    cmd = [sys.executable, str(ROOT / "tests" / script), *args]
    # Own session, so a timeout can stop the script and every Ray process it started, and only those.
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        pytest.fail(f"{what} did not finish within {timeout_s} s; its log ends:\n{log[-6000:]}")
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, f"{what} exited {proc.returncode}; its log ends:\n{log[-6000:]}"
    return log


@pytest.fixture(scope="module")
def runs(tmp_path_factory, corpus, ray_cluster):
    """Output directories of the one-node run (in this process, on the session cluster) and of
    the two-node run (subprocess), and the two-node run's report (its cluster's node ids)."""
    tmp = tmp_path_factory.mktemp("multinode")
    config = tmp / "c.yaml"
    config.write_text(CONFIG)

    one = tmp / "one-node"
    assert score.main(_job_args(corpus, config, one) + ["--quiet"]) == 0

    two, report = tmp / "two-nodes", tmp / "report.json"
    run_cluster_script("multinode_run.py", [str(report), *_job_args(corpus, config, two)], "two-node run", RUN_TIMEOUT_S)
    return one, two, json.loads(report.read_text())


@pytest.mark.timeout(300)
def test_two_node_run_matches_one_node_run_and_oracle(corpus, runs):
    one, two, _ = runs
    two_table = _read_rows(two)
    assert two_table.equals(_read_rows(one))
    docs_path, queries_path = corpus
    docs = pq.read_table(docs_path)["tokens"].to_pylist()
    queries = pq.read_table(queries_path).to_pydict()
    rows = _as_rows(two_table)
    assert len(rows) == 48 * K
    assert rows == _expected_rows(docs, queries["tokens"], queries["query_id"], K)
    assert sorted(p.name for p in two.glob("part-*.parquet")) == [f"part-{i:05d}.parquet" for i in range(3)]


@pytest.mark.timeout(300)
def test_two_node_run_puts_one_shard_on_each_node(runs):
    _, two, report = runs
    assert len(report["node_ids"]) == 2
    shards = read_manifest(two)["shards"]
    assert len(shards) == 2 and all(s["n_docs"] > 0 for s in shards)
    node_ids = [s.get("node_id") for s in shards]
    assert None not in node_ids, f"the manifest's shards carry no node_id: {shards}"
    assert node_ids[0] != node_ids[1] and set(node_ids) == set(report["node_ids"])
