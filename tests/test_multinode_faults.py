"""The job on a head and three worker nodes (``ray.cluster_utils.Cluster``, CPU backend) losing a
worker node mid-run: once the job has gone on, or been resumed, its rows are those of a one-node
run; and the reader and merge tasks run on the worker nodes, not only on the head.

The cluster runs in a subprocess (``tests/multinode_faults_run.py``): a ``Cluster`` must not be
started in this process, which holds the session's Ray cluster (``ray_cluster`` fixture).
"""

from __future__ import annotations

import json
import pathlib

import pyarrow.parquet as pq
import pytest

from settopk.jobs import score
from tests.test_job import _read_rows
from tests.test_multinode import K, _job_args, corpus, run_cluster_script  # noqa: F401  (corpus: the module fixture)
from settopk.jobs.output import read_manifest

pytestmark = pytest.mark.slow  # a four-node cluster started in a subprocess, a node lost, a resume

ROOT = pathlib.Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 240  # four nodes' start, the job, perhaps its resume, and shutdown, on a loaded machine
# Two one-CPU shards on one-CPU nodes: they sit on two nodes, and two nodes are left to take one
# over. Small batches and chunks: several parts are committed before and after the node is lost.
CONFIG = "backend: numpy\nn_shards: 2\ncpus_per_shard: 1.0\nquery_batch_size: 8\nquery_chunk_size: 8\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, corpus, ray_cluster):  # noqa: F811
    """The one-node run's output, the four-node run's output and its report. The corpus is cut
    into four Parquet files, so that it is read in four pieces (a piece never spans files)."""
    tmp = tmp_path_factory.mktemp("multinode-faults")
    docs_dir = tmp / "docs"
    docs_dir.mkdir()
    table = pq.read_table(corpus[0])
    step = -(-table.num_rows // 4)
    for i in range(4):
        pq.write_table(table.slice(i * step, step), docs_dir / f"docs-{i}.parquet")
    corpus = (str(docs_dir), corpus[1])
    config = tmp / "c.yaml"
    config.write_text(CONFIG)
    one = tmp / "one-node"
    assert score.main(_job_args(corpus, config, one) + ["--quiet"]) == 0

    four, report, marks = tmp / "four-nodes", tmp / "report.json", tmp / "marks"
    marks.mkdir()
    log = run_cluster_script("multinode_faults_run.py", [str(report), *_job_args(corpus, config, four), "--quiet"],
                             "four-node run", RUN_TIMEOUT_S, {"SETTOPK_MN_MARKS": str(marks)})
    return one, four, json.loads(report.read_text()), log


@pytest.mark.timeout(300)
def test_losing_a_worker_node_mid_run_gives_the_one_node_rows(runs):
    one, four, report, log = runs
    print(json.dumps(report, indent=1))  # shown with -rP: whether the job went on or was resumed
    assert report["removed"].get("node_id") in report["workers"], f"no worker node was removed mid-run: {report}\n{log[-3000:]}"
    start, end = report["first_run_s"]
    assert start < report["removed"]["at"] < end  # while the first run was going
    assert report["exit_codes"][-1] == 0 and len(report["exit_codes"]) <= 2
    assert _read_rows(four).equals(_read_rows(one))
    manifest = read_manifest(four)
    assert manifest["counts"]["rows"] == 48 * K
    if len(report["exit_codes"]) == 2:  # the job failed with the node and was resumed
        assert manifest["counts"]["chunks_resumed"] >= report["removed"]["parts_committed"] >= 1


@pytest.mark.timeout(300)
def test_reader_and_merge_tasks_run_on_worker_nodes(runs):
    _, _, report, _ = runs
    workers = set(report["workers"])
    readers, merges = report["tasks"].get("_read_piece_parts", []), report["tasks"].get("merge_and_write_chunk", [])
    assert readers and merges, f"Ray's state API lists no reader or merge task: {report['tasks']}"
    assert len(readers) >= 4, f"the corpus's four files were read by {len(readers)} reader task(s)"
    assert workers & set(readers), f"every reader task ran on the head: {readers}"
    assert workers & set(merges), f"every merge task ran on the head: {merges}"
