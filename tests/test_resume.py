"""Resume: an interrupted run's work directory is reused only for the same inputs and settings.

A driver killed mid-run (SIGKILL) that resumes to an uninterrupted run's result, byte for byte, is
tested on a local disk with a self-join (``tests/test_self_join.py``) and with the output in a
bucket (``tests/test_output_store_job.py``): the same chunks and work directory as here."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from settopk.jobs import score
from settopk.jobs.output import read_manifest, work_dir
from tests.job_helpers import write_sets as _write


@pytest.mark.slow
def test_changed_inputs_discard_an_interrupted_run(tmp_path, ray_cluster):
    docs = _write(tmp_path / "docs.txt", [[1, 2], [2, 3], [4]])
    queries = _write(tmp_path / "q.txt", [[2], [4], [1, 2]])
    cfg = tmp_path / "c.yaml"
    cfg.write_text("backend: numpy\nn_shards: 1\ncpus_per_shard: 0.5\nquery_chunk_size: 1\n")
    out = tmp_path / "out"
    work = work_dir(out)
    work.mkdir()
    (work / "_resume.json").write_text(json.dumps({"key": "from-other-inputs", "run_id": "old"}))
    (work / "part-00000.parquet").write_text("stale")
    assert score.main(["--docs", docs, "--queries", queries, "--out", str(out), "--config", str(cfg), "--quiet"]) == 0
    assert pq.read_table(out).num_rows == 9
    assert read_manifest(out)["counts"]["chunks_resumed"] == 0
