"""Chaos: a driver killed mid-run (SIGKILL) resumes from its committed query chunks, with the
same result as an uninterrupted run, byte for byte."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from jobs import score
from jobs.output import read_manifest, work_dir
from tests.job_helpers import kill_driver_mid_run, write_sets as _write


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_killed_driver_resumes_to_an_identical_result(tmp_path, ray_cluster):
    rng = np.random.default_rng(5)
    docs = _write(tmp_path / "docs.txt", [rng.choice(40, size=rng.integers(0, 12), replace=False).tolist() for _ in range(3000)])
    queries = _write(tmp_path / "q.txt", [rng.choice(40, size=rng.integers(0, 12), replace=False).tolist() for _ in range(1500)])
    cfg = tmp_path / "c.yaml"
    # One query per batch and 25 per chunk: many small commits, so the kill lands mid-run.
    cfg.write_text("backend: numpy\nn_shards: 2\ncpus_per_shard: 0.5\nquery_batch_size: 1\nquery_chunk_size: 25\n")
    args = ["--docs", docs, "--queries", queries, "--k", "20", "--config", str(cfg), "--run-id", "nightly-1", "--quiet"]

    out = tmp_path / "out"
    committed = kill_driver_mid_run(args, out)
    work = work_dir(out)
    assert 3 <= committed < 60

    assert score.main(args + ["--out", str(out)]) == 0  # same arguments: resume
    manifest = read_manifest(out)
    assert manifest["counts"]["chunks_resumed"] >= committed - 1 and manifest["run_id"] == "nightly-1"
    assert not work.exists()

    clean = tmp_path / "clean"
    assert score.main(args + ["--out", str(clean)]) == 0
    assert pq.read_table(out).equals(pq.read_table(clean))
    parts = sorted(p.name for p in out.glob("part-*.parquet"))
    assert parts == sorted(p.name for p in clean.glob("part-*.parquet")) and len(parts) == 60
    for name in parts:  # same run id, same rows: the files are byte-identical
        assert (out / name).read_bytes() == (clean / name).read_bytes()


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
