import datetime
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from settopk.jobs.output import (
    PartWriter,
    RESULT_SCHEMA,
    OutputExistsError,
    commit_results,
    manifest_path,
    open_results,
    partition_dir,
    read_manifest,
    record_dir,
    rejected_path,
    rejected_paths,
    results_table,
    write_part,
    write_results,
    write_tsv,
)
from settopk.jobs.target import check_dataset_root, check_output_dir
from settopk.kernels import TopK

pytestmark = pytest.mark.timeout(60)


def _topk():
    return TopK(
        np.array([[5, 2, -1], [7, -1, -1]], np.int64),
        np.array([[2, 1, 0], [0, 0, 0]], np.int16),
        np.array([[3, 4, 0], [0, 0, 0]], np.int16),
    )


def test_schema_is_the_documented_constant():
    assert [(f.name, f.type) for f in RESULT_SCHEMA] == [
        ("query_id", pa.string()),
        ("rank", pa.int16()),
        ("doc_id", pa.int64()),
        ("score", pa.float64()),
        ("overlap", pa.int16()),
        ("query_len", pa.int16()),
        ("doc_len", pa.int16()),
    ]


def test_results_table_rows_drop_padding():
    table = results_table(["a", "b"], np.array([2, 0]), _topk())
    assert table.schema.equals(RESULT_SCHEMA, check_metadata=False)
    assert table.to_pydict() == {
        "query_id": ["a", "a", "b"],
        "rank": [1, 2, 1],
        "doc_id": [5, 2, 7],
        "score": [2 / 3, 1 / 4, 0.0],
        "overlap": [2, 1, 0],
        "query_len": [2, 2, 0],
        "doc_len": [3, 4, 0],
    }


def test_query_ids_as_a_list_or_an_arrow_array_make_the_same_rows():
    from settopk.shards.results import query_id_column, query_id_values

    ids = pa.array(["10", "7"], pa.string())
    assert query_id_column(ids) is ids  # the job's chunks pass one array, never copied
    assert results_table(ids, np.array([2, 0]), _topk()).equals(results_table(["10", "7"], np.array([2, 0]), _topk()))
    for given in (ids, ["10", "7"]):
        values = query_id_values(given)
        assert values.dtype == np.int64 and values.tolist() == [10, 7]
    with pytest.raises(pa.ArrowInvalid):
        query_id_values(["10", "x"])


def test_write_is_atomic_and_complete(tmp_path):
    out = tmp_path / "res"
    table = results_table(["a", "b"], np.array([2, 0]), _topk())
    write_results(out, table, {"counts": {"rows": 3}})
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "part-00000.parquet"]  # all a reader sees
    assert (out / "_SUCCESS").stat().st_size == 0  # Polars skips empty files only
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res", "res.run"]  # the run record beside; no staging left
    assert manifest_path(out) == tmp_path / "res.run" / "manifest.json"
    back = pq.read_table(out / "part-00000.parquet")
    assert back.schema.equals(RESULT_SCHEMA) and back.num_rows == 3
    assert pq.read_metadata(out / "part-00000.parquet").row_group(0).column(0).compression == "ZSTD"
    assert read_manifest(out) == {"counts": {"rows": 3}}


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "res"

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", boom)
    with pytest.raises(OSError, match="disk full"):
        write_results(out, results_table(["a", "b"], np.array([2, 0]), _topk()), {})
    assert list(tmp_path.iterdir()) == []


def test_wrong_schema_rejected(tmp_path):
    with pytest.raises(ValueError, match="schema"):
        write_results(tmp_path / "x", pa.table({"a": [1]}), {})


def test_check_output_dir(tmp_path):
    assert check_output_dir(tmp_path / "new", force=False) is False
    (tmp_path / "empty").mkdir()
    assert check_output_dir(tmp_path / "empty", force=False) is False
    done = tmp_path / "done"
    write_results(done, results_table(["a", "b"], np.array([2, 0]), _topk()), {})
    assert check_output_dir(done, force=False) is True
    assert check_output_dir(done, force=True) is False
    other = tmp_path / "other"
    other.mkdir()
    (other / "x").write_text("")
    for force in (False, True):
        with pytest.raises(OutputExistsError, match="is not a settopk result .*no settopk run record.*it holds x\\)"):
            check_output_dir(other, force=force)
    assert check_output_dir(tmp_path / "no" / "such", force=False) is False  # parents are created
    with pytest.raises(OutputExistsError, match="is a file"):
        check_output_dir(other / "x" / "res", force=False)


def test_a_spark_output_is_never_replaced(tmp_path):
    """``_SUCCESS`` without a settopk run record: another tool's directory, refused with or without
    force, and by the commit itself; its files stay."""
    out = tmp_path / "spark"
    out.mkdir()
    (out / "_SUCCESS").write_bytes(b"")
    (out / "part-00000-c000.snappy.parquet").write_bytes(b"PAR1")
    (out / "important.txt").write_text("notes")
    for force in (False, True):
        with pytest.raises(OutputExistsError, match="is not a settopk result .*important.txt, part-00000-c000.snappy.parquet"):
            check_output_dir(out, force=force)
    with pytest.raises(OutputExistsError, match="no settopk run record"):
        write_results(out, results_table(["a", "b"], np.array([2, 0]), _topk()), {})
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "important.txt", "part-00000-c000.snappy.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark"]  # no staging, record or trash left


def test_force_never_deletes_files_added_to_a_settopk_result(tmp_path):
    out = tmp_path / "res"
    write_results(out, results_table(["a", "b"], np.array([2, 0]), _topk()), {"run": 1})
    (out / "notes.txt").write_text("mine")
    assert check_output_dir(out, force=False) is True
    with pytest.raises(OutputExistsError, match="which --force would delete; it holds notes.txt"):
        check_output_dir(out, force=True)
    with pytest.raises(OutputExistsError, match="notes.txt"):
        write_results(out, results_table(["a", "b"], np.array([2, 0]), _topk()), {"run": 2})
    assert read_manifest(out) == {"run": 1} and (out / "notes.txt").read_text() == "mine"


def test_rewrite_with_force_replaces_whole_result(tmp_path):
    out = tmp_path / "res"
    write_results(out, results_table(["a", "b"], np.array([2, 0]), _topk()), {"run": 1})
    write_results(out, results_table(["a", "b"], np.array([2, 0]), _topk()), {"run": 2})
    assert read_manifest(out) == {"run": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res", "res.run"]


def test_tsv(tmp_path):
    write_tsv(tmp_path / "r.tsv", [_topk().doc_ids])
    assert (tmp_path / "r.tsv").read_text() == "5\t2\n7\n"


def _big_table(n_queries, k):
    """``n_queries`` queries with ``k`` results each, ids in query order."""
    doc_ids = np.arange(n_queries * k, dtype=np.int64).reshape(n_queries, k)
    topk = TopK(doc_ids, np.ones((n_queries, k), np.int16), np.full((n_queries, k), 3, np.int16))
    return results_table([f"q{i:04d}" for i in range(n_queries)], np.full(n_queries, 2), topk)


def test_row_groups_hold_whole_queries_in_query_order(tmp_path):
    table = _big_table(n_queries=23, k=7)
    write_results(tmp_path / "res", table, {}, row_group_rows=30, metadata={"settopk.run_id": "r1", "settopk.k": "7"})
    meta = pq.ParquetFile(tmp_path / "res" / "part-00000.parquet").metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sizes == [28] * 5 + [21]  # 30 rounded down to 4 whole queries of 7 rows; the last group holds the rest
    assert all(meta.row_group(i).column(0).compression == "ZSTD" for i in range(meta.num_row_groups))
    back = pq.read_table(tmp_path / "res")
    assert back.equals(table)  # same rows, same order, same types


def test_schema_metadata_is_namespaced(tmp_path):
    write_results(tmp_path / "res", _big_table(2, 3), {}, metadata={"settopk.run_id": "r1", "settopk.k": "3"})
    meta = pq.read_schema(tmp_path / "res" / "part-00000.parquet").metadata
    assert meta[b"settopk.run_id"] == b"r1" and meta[b"settopk.k"] == b"3"
    assert meta[b"settopk.score"].startswith(b"Braun-Blanquet")
    with pytest.raises(ValueError, match="must start with 'settopk.'"):
        write_results(tmp_path / "other", _big_table(2, 3), {}, metadata={"run_id": "r1"})
    assert not (tmp_path / "other").exists()


def test_empty_result_still_has_a_schema(tmp_path):
    write_results(tmp_path / "res", _big_table(0, 3), {})
    back = pq.read_table(tmp_path / "res")
    assert back.num_rows == 0 and back.schema.equals(RESULT_SCHEMA)


def test_partition_is_staged_outside_the_dataset_root(tmp_path, monkeypatch):
    root = tmp_path / "results"
    renames = []
    real_rename = os.rename

    def spy(src, dst):
        renames.append((os.fspath(src), os.fspath(dst)))
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", spy)
    for day in (datetime.date(2026, 11, 19), datetime.date(2026, 11, 20)):
        write_results(partition_dir(root, day), _big_table(3, 2), {"dt": str(day)}, dataset_root=root)
    write_results(partition_dir(root, day), _big_table(3, 2), {"again": True}, dataset_root=root)  # replace, as --force
    finals = {str(partition_dir(root, d)) for d in (datetime.date(2026, 11, 19), datetime.date(2026, 11, 20))}
    moved = [path for pair in renames for path in pair]
    assert len(renames) == 4 and all(p in finals or os.path.dirname(p) == str(tmp_path) for p in moved)  # staging, trash beside the root
    assert sorted(p.name for p in root.iterdir()) == ["dt=2026-11-19", "dt=2026-11-20"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "results.run"]
    assert read_manifest(partition_dir(root, day)) == {"again": True}
    assert read_manifest(partition_dir(root, day), root) == {"again": True}
    assert manifest_path(partition_dir(root, day)) == tmp_path / "results.run" / "dt=2026-11-20" / "manifest.json"
    dataset = open_results(root)
    assert dataset.schema.field("dt").type == pa.date32()
    assert dataset.count_rows() == 12
    renames.clear()
    third = partition_dir(root, datetime.date(2026, 11, 21))
    write_results(third, _big_table(3, 2), {"default": "root"})  # a partition's root is its parent by default
    assert [os.path.dirname(src) for src, _ in renames] == [str(tmp_path)] and renames[0][1] == str(third)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "results.run"]
    assert manifest_path(third) == tmp_path / "results.run" / "dt=2026-11-21" / "manifest.json"
    with pytest.raises(ValueError, match="not inside the dataset root"):
        write_results(tmp_path / "elsewhere", _big_table(1, 1), {}, dataset_root=root)


def test_check_dataset_root(tmp_path):
    check_dataset_root(tmp_path / "new")  # created on write
    root = tmp_path / "root"
    write_results(partition_dir(root, datetime.date(2026, 1, 2)), _big_table(1, 1), {}, dataset_root=root)
    (root / "_notes").write_text("")  # hidden from readers: allowed
    check_dataset_root(root)
    flat = tmp_path / "flat"
    write_results(flat, _big_table(1, 1), {})
    with pytest.raises(OutputExistsError, match="only dt=YYYY-MM-DD partitions, found \\['part-00000.parquet'\\]"):
        check_dataset_root(flat)
    with pytest.raises(OutputExistsError, match="is a file"):
        check_dataset_root(flat / "part-00000.parquet")


def test_part_writer_streams_batches_into_uniform_row_groups_of_whole_queries(tmp_path):
    rng = np.random.default_rng(3)
    n, k = 23, 4
    topk = TopK(rng.integers(0, 1000, (n, k)), rng.integers(1, 9, (n, k)).astype(np.int16), rng.integers(1, 9, (n, k)).astype(np.int16))
    ids, qlen = [f"q{i}" for i in range(n)], rng.integers(1, 9, n)
    whole = results_table(ids, qlen, topk)
    writer = PartWriter(tmp_path, 3, metadata={"settopk.run_id": "r"}, row_group_rows=10)  # 2 queries per group
    for lo, hi in ((0, 5), (5, 6), (6, 17), (17, 23)):
        writer.write(results_table(ids[lo:hi], qlen[lo:hi], TopK(*(a[lo:hi] for a in topk))))
    assert not (tmp_path / "part-00003.parquet").exists()  # nothing under the part's name before close
    path = writer.close()
    assert path == tmp_path / "part-00003.parquet" and [p.name for p in tmp_path.iterdir()] == [path.name]
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [8] * 11 + [4]
    table = pq.read_table(path)
    assert table.equals(whole.replace_schema_metadata(table.schema.metadata))
    assert table.schema.metadata[b"settopk.run_id"] == b"r"


def test_part_writer_abort_leaves_nothing(tmp_path):
    writer = PartWriter(tmp_path, 0)
    writer.write(results_table(["a", "b"], np.array([2, 0]), _topk()))
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def _rejected(paths):
    from settopk.jobs.output import REJECTED_SCHEMA

    return pa.table({"input": ["queries"] * len(paths), "path": paths, "line": pa.array([None] * len(paths), pa.int64()),
                     "row": pa.array([None] * len(paths), pa.int64()), "reason": ["bad"] * len(paths)}, schema=REJECTED_SCHEMA)


def _stage(tmp_path, name="stage"):
    stage = tmp_path / name
    stage.mkdir()
    write_part(stage, 0, _big_table(2, 3))
    return stage


def test_manifest_is_written_after_the_old_result_goes_and_before_the_new_one_appears(tmp_path, monkeypatch):
    from settopk.shards.location import Location

    root = tmp_path / "results"
    out = partition_dir(root, datetime.date(2026, 11, 20))
    commit_results(_stage(tmp_path, "s1"), out, {"run": 1}, dataset_root=root)
    seen = []
    real = Location.write_bytes

    def spy(place, data):
        if place.name == "manifest.json":
            seen.append(((out / "_SUCCESS").exists(), place.path))
        real(place, data)

    monkeypatch.setattr(Location, "write_bytes", spy)
    commit_results(_stage(tmp_path, "s2"), out, {"run": 2}, dataset_root=root)  # replace, as --force
    assert seen == [(False, str(manifest_path(out)))]  # old result gone, new one not yet there
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "part-00000.parquet"]
    assert read_manifest(out) == {"run": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "results.run"]  # no staging or trash left


def test_a_commit_that_fails_after_the_manifest_leaves_no_result(tmp_path, monkeypatch):
    out = tmp_path / "res"
    commit_results(_stage(tmp_path, "s1"), out, {"run": 1})
    real_rename = os.rename

    def fail_on_publish(src, dst):
        if os.fspath(dst) == str(out):
            raise OSError("power cut")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", fail_on_publish)
    with pytest.raises(OSError, match="power cut"):
        commit_results(_stage(tmp_path, "s2"), out, {"run": 2})
    assert not out.exists()  # the old result went first: no _SUCCESS beside a newer manifest
    with pytest.raises(FileNotFoundError, match="no _SUCCESS"):
        read_manifest(out)
    assert check_output_dir(out, force=False) is False  # a rerun recomputes


def test_quarantined_lines_live_in_the_run_record(tmp_path):
    out = tmp_path / "res"
    commit_results(_stage(tmp_path, "s1"), out, {"run": 1}, rejected=_rejected(["q/a.txt"]))
    assert rejected_path(out) == tmp_path / "res.run" / "rejected.parquet"
    assert rejected_paths(out, "queries") == {"q/a.txt"} and rejected_paths(out, "docs") == set()
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "part-00000.parquet"]
    commit_results(_stage(tmp_path, "s2"), out, {"run": 2})  # a replacing run without quarantine
    assert not rejected_path(out).exists() and rejected_paths(out, "queries") == set()


def test_a_run_record_is_not_an_output(tmp_path):
    write_results(tmp_path / "res", _big_table(1, 1), {})
    with pytest.raises(OutputExistsError, match="run record"):
        check_output_dir(tmp_path / "res.run", force=False)
    with pytest.raises(OutputExistsError, match="run record"):
        check_dataset_root(tmp_path / "res.run")
    assert record_dir(tmp_path / "res") == tmp_path / "res.run"
    root = tmp_path / "root"
    assert record_dir(partition_dir(root, datetime.date(2026, 1, 2)), root) == tmp_path / "root.run" / "dt=2026-01-02"


def test_a_commit_never_moves_a_file_away(tmp_path):
    out = tmp_path / "res"
    out.write_text("a user's file")
    with pytest.raises(OutputExistsError, match="expected a result directory, found a file"):
        commit_results(_stage(tmp_path), out, {"run": 1})
    assert out.read_text() == "a user's file" and not (tmp_path / "res.run").exists()
