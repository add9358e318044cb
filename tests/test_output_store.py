"""The result dataset on an object store (moto's S3 server on localhost, no mocks): the same
layout as on a local disk, committed without an atomic rename.

The parts are moved (server-side copies) into the result prefix, then the run record is written,
then ``_SUCCESS`` last; a replaced result loses its ``_SUCCESS`` first. Work directories, locks
and run records sit beside the dataset root as on a local disk.
"""

from __future__ import annotations

import datetime
import json
import os
import socket

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from settopk.jobs.chunks import Chunk, check_parts, drop_resume_key, open_work_dir
from settopk.jobs.lock import lock_output, output_lock_path
from settopk.shards.location import Location
from settopk.jobs.output import (
    OutputExistsError,
    PartWriter,
    PathError,
    commit_results,
    manifest_path,
    open_results,
    partition_dir,
    read_manifest,
    read_part_doc_ids,
    rejected_paths,
    results_table,
    work_dir,
    write_part,
    write_results,
    write_tsv,
)
from settopk.jobs.target import check_dataset_root, check_output_dir, check_writable
from settopk.kernels import TopK

pytestmark = pytest.mark.timeout(120)


def _table(n_queries=3, k=2):
    doc_ids = np.arange(n_queries * k, dtype=np.int64).reshape(n_queries, k)
    topk = TopK(doc_ids, np.ones((n_queries, k), np.int16), np.full((n_queries, k), 3, np.int16))
    return results_table([f"q{i}" for i in range(n_queries)], np.full(n_queries, 2), topk)


def _names(s3, prefix):
    """Every object under ``prefix`` (a URI or its Location), relative to it."""
    path = os.fspath(prefix.full if isinstance(prefix, Location) else prefix).split("://", 1)[1]
    infos = s3.filesystem().get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path[len(path) + 1:] for i in infos if i.type == pafs.FileType.File)


def test_result_in_a_bucket_holds_parts_and_success_with_the_record_beside(s3):
    bucket = s3.bucket()
    out = f"{bucket}/results"
    assert write_results(out, _table(), {"run": 1}) == out
    assert _names(s3, out) == ["_SUCCESS", "part-00000.parquet"]
    assert manifest_path(out) == f"{bucket}/results.run/manifest.json"
    assert read_manifest(out) == {"run": 1}
    assert _names(s3, bucket) == ["results.run/manifest.json", "results/_SUCCESS", "results/part-00000.parquet"]  # no staging left
    assert open_results(out).to_table().equals(_table().replace_schema_metadata(open_results(out).schema.metadata))
    assert check_output_dir(out, force=False) is True and check_output_dir(out, force=True) is False


def test_replacing_a_result_on_a_store_drops_its_success_first_and_writes_success_last(s3, monkeypatch):
    bucket = s3.bucket()
    out = f"{bucket}/results"
    write_results(out, _table(), {"run": 1})
    stage = f"{bucket}/.results.staging-x"
    write_part(stage, 0, _table(4, 2))
    write_part(stage, 1, _table(1, 2))
    events = []
    for name in ("write_bytes", "delete", "move_to", "delete_tree"):
        real = getattr(Location, name)

        def spy(place, *args, _real=real, _name=name, **kwargs):
            events.append((_name, place.path.split("/", 1)[1]))
            return _real(place, *args, **kwargs)

        monkeypatch.setattr(Location, name, spy)
    commit_results(stage, out, {"run": 2}, rejected=None)
    ops = [e for e in events if not e[1].startswith(("results.run/.", ".results.staging-x/."))]
    assert ops[0] == ("delete", "results/_SUCCESS")  # readers stop taking the old result as finished
    manifest_at = ops.index(("write_bytes", "results.run/manifest.json"))
    moves = [i for i, e in enumerate(ops) if e[0] == "move_to" and e[1].startswith(".results.staging-x/part-")]
    assert ops[-2:] == [("write_bytes", "results/_SUCCESS"), ("delete_tree", ".results.staging-x")]
    assert 0 < manifest_at < min(moves) and len(moves) == 2
    monkeypatch.undo()
    assert _names(s3, out) == ["_SUCCESS", "part-00000.parquet", "part-00001.parquet"]
    assert read_manifest(out) == {"run": 2} and pq.read_table(out.split("://")[1], filesystem=s3.filesystem()).num_rows == 10


def test_a_cut_off_commit_on_a_store_is_taken_back_by_the_rerun(s3):
    bucket = s3.bucket()
    out = f"{bucket}/results"
    Location.of(manifest_path(out)).write_bytes(b"{}")  # the commit writes the run record before it moves parts
    write_part(out, 0, _table())  # parts moved, no _SUCCESS yet: the commit was cut off
    assert check_output_dir(out, force=False) is False
    with pytest.raises(FileNotFoundError, match="no _SUCCESS"):
        read_manifest(out)
    Location.of(f"{out}/notes.txt").write_bytes(b"x")
    with pytest.raises(OutputExistsError, match="is not a settopk result .*no _SUCCESS.*notes.txt"):
        check_output_dir(out, force=False)


def test_parts_without_a_run_record_are_not_taken_back(s3):
    """Part files alone are not a cut-off commit: the commit writes the run record first."""
    bucket = s3.bucket()
    out = f"{bucket}/results"
    write_part(out, 0, _table())
    with pytest.raises(OutputExistsError, match="is not a settopk result .*no settopk run record"):
        check_output_dir(out, force=False)


def _spark_prefix(out):
    for name, data in (("_SUCCESS", b""), ("part-00000-c000.snappy.parquet", b"PAR1 not settopk's PAR1"),
                       ("important.txt", b"the user's notes")):
        Location.of(f"{out}/{name}").write_bytes(data)


@pytest.mark.parametrize("force", [False, True])
def test_a_prefix_that_is_not_a_settopk_result_is_never_replaced(s3, tmp_path, caplog, force):
    """Another tool's prefix with ``_SUCCESS`` but no settopk run record: refused by the check, by
    the commit itself, and by the job (exit 2 before any Ray work), --force or not."""
    from settopk.jobs import score
    from tests.job_helpers import job_config, write_sets

    bucket = s3.bucket()
    out = f"{bucket}/spark"
    _spark_prefix(out)
    before = {name: Location.of(f"{bucket}/{name}").read_bytes() for name in _names(s3, bucket)}
    with pytest.raises(OutputExistsError, match="is not a settopk result .*important.txt"):
        check_output_dir(out, force=force)
    write_part(f"{bucket}/.spark.staging-x", 0, _table())
    with pytest.raises(OutputExistsError, match="is not a settopk result .*no settopk run record"):
        commit_results(f"{bucket}/.spark.staging-x", out, {"run": 1})
    Location.of(f"{bucket}/.spark.staging-x").delete_tree()
    docs = write_sets(tmp_path / "docs.txt", [[1, 2], [2, 3]])
    argv = ["--docs", docs, "--queries", docs, "--out", out, "--config", job_config(tmp_path), "--quiet"]
    with caplog.at_level("ERROR", logger="settopk"):
        assert score.main(argv + (["--force"] if force else [])) == 2
    assert "is not a settopk result" in caplog.text and "important.txt" in caplog.text, caplog.text
    assert "move those files away" in caplog.text and "could not be read" not in caplog.text
    assert {name: Location.of(f"{bucket}/{name}").read_bytes() for name in _names(s3, bucket)} == before


def test_force_never_deletes_files_added_to_a_settopk_result(s3):
    bucket = s3.bucket()
    out = f"{bucket}/results"
    write_results(out, _table(), {"run": 1})
    Location.of(f"{out}/important.txt").write_bytes(b"notes")
    assert check_output_dir(out, force=False) is True  # a no-op deletes nothing
    with pytest.raises(OutputExistsError, match="never writes, which --force would delete; it holds important.txt"):
        check_output_dir(out, force=True)
    with pytest.raises(OutputExistsError, match="important.txt"):
        write_results(out, _table(), {"run": 2})
    assert read_manifest(out) == {"run": 1} and Location.of(f"{out}/important.txt").read_bytes() == b"notes"


def test_nightly_partitions_on_a_store(s3):
    bucket = s3.bucket()
    root = f"{bucket}/nightly"
    check_dataset_root(root)  # nothing there yet
    for day in (datetime.date(2026, 11, 19), datetime.date(2026, 11, 20)):
        write_results(partition_dir(root, day), _table(), {"dt": day.isoformat()}, dataset_root=root)
    check_dataset_root(root)
    assert read_manifest(f"{root}/dt=2026-11-20") == {"dt": "2026-11-20"}
    assert manifest_path(f"{root}/dt=2026-11-20") == f"{bucket}/nightly.run/dt=2026-11-20/manifest.json"
    table = open_results(root).to_table()
    assert table.schema.field("dt").type == pa.date32() and table.num_rows == 12
    write_results(f"{bucket}/flat", _table(), {})
    with pytest.raises(OutputExistsError, match="only dt=YYYY-MM-DD partitions"):
        check_dataset_root(f"{bucket}/flat")
    with pytest.raises(OutputExistsError, match="run record"):
        check_dataset_root(f"{bucket}/flat.run")


def test_parts_quarantine_and_tsv_on_a_store(s3):
    bucket = s3.bucket()
    from settopk.jobs.output import REJECTED_SCHEMA

    writer = PartWriter(f"{bucket}/w", 0, row_group_rows=4)
    writer.write(_table(3, 2))
    writer.abort()
    assert _names(s3, f"{bucket}/w") == []  # an aborted part leaves nothing
    assert write_part(f"{bucket}/w", 0, _table(3, 2)) == f"{bucket}/w/part-00000.parquet"
    assert read_part_doc_ids(f"{bucket}/w", 0, 2).tolist() == [[0, 1], [2, 3], [4, 5]]
    write_tsv(f"{bucket}/r.tsv", [read_part_doc_ids(f"{bucket}/w", 0, 2)])
    assert Location.of(f"{bucket}/r.tsv").read_bytes() == b"0\t1\n2\t3\n4\t5\n"
    rejected = pa.table({"input": ["queries"], "path": ["q/a"], "line": pa.array([None], pa.int64()),
                         "row": pa.array([None], pa.int64()), "reason": ["bad"]}, schema=REJECTED_SCHEMA)
    commit_results(f"{bucket}/w", f"{bucket}/out", {}, rejected=rejected)
    assert rejected_paths(f"{bucket}/out", "queries") == {"q/a"}
    assert _names(s3, f"{bucket}/out.run") == ["manifest.json", "rejected.parquet"]


def test_work_directory_on_a_store_resumes_and_discards(s3):
    bucket = s3.bucket()
    work = work_dir(f"{bucket}/results")
    assert str(work).startswith(f"{bucket}/.results.work-")
    chunks = [Chunk(0, 0, 3), Chunk(1, 3, 4)]
    assert open_work_dir(work, "key-1", chunks, "run-a") == (set(), "run-a")
    write_part(work, 0, _table(3, 2))
    Location.of(f"{work}/.tmp-killed.parquet").write_bytes(b"partial")  # a killed writer's file
    assert open_work_dir(work, "key-1", chunks, "run-b") == ({0}, "run-a")  # resumed: the first run's id
    assert ".tmp-killed.parquet" not in _names(s3, work)
    write_part(work, 1, _table(1, 2))
    assert check_parts(work, chunks, 2) == 8
    drop_resume_key(work)
    assert _names(s3, work) == ["part-00000.parquet", "part-00001.parquet"]
    assert open_work_dir(work, "key-2", chunks, "run-c") == (set(), "run-c")  # other inputs: parts discarded


def test_lock_object_on_a_store(s3):
    bucket = s3.bucket()
    out = f"{bucket}/results"
    first = lock_output(out, out, "run-1")
    where = output_lock_path(out, out)
    assert str(where).startswith(f"{bucket}/.results.lock-")
    holder = json.loads(Location.of(where).read_bytes())
    assert holder["run_id"] == "run-1" and holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    with pytest.raises(PathError, match="found run run-1 .* holding its lock object"):
        lock_output(out, out, "run-2")
    first.release()
    assert not Location.of(where).exists()
    # A run killed on this host leaves its lock: a dead pid is taken over.
    Location.of(where).write_bytes(json.dumps({"run_id": "killed", "host": socket.gethostname(), "pid": _dead_pid()}).encode())
    lock_output(out, out, "run-3").release()
    # On another host the pid cannot be checked: refused, naming the way out.
    Location.of(where).write_bytes(json.dumps({"run_id": "far", "host": "elsewhere", "pid": 1}).encode())
    with pytest.raises(PathError, match="delete the lock object"):
        lock_output(out, out, "run-4")


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_missing_bucket_is_refused_before_any_work(s3):
    with pytest.raises(PathError, match="bucket"):
        check_writable("--out", "s3://no-such-bucket-here/results", file=False, creates_parents=True)
    bucket = s3.bucket()
    write_part(f"{bucket}/d", 0, _table())
    with pytest.raises(PathError, match="expected an object name"):
        check_writable("--tsv", f"{bucket}/d", file=True, creates_parents=False)
    check_writable("--tsv", f"{bucket}/r.tsv", file=True, creates_parents=False)
    assert _names(s3, bucket) == ["d/part-00000.parquet"]  # the probe is gone
