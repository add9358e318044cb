import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.output import RESULT_SCHEMA, OutputExistsError, check_output_dir, results_table, write_results, write_tsv
from kernels import TopK


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


def test_write_is_atomic_and_complete(tmp_path):
    out = tmp_path / "res"
    table = results_table(["a", "b"], np.array([2, 0]), _topk())
    write_results(out, table, {"counts": {"rows": 3}})
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "_manifest.json", "part-00000.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]  # no staging left behind
    back = pq.read_table(out / "part-00000.parquet")
    assert back.schema.equals(RESULT_SCHEMA) and back.num_rows == 3
    assert pq.read_metadata(out / "part-00000.parquet").row_group(0).column(0).compression == "ZSTD"
    assert json.loads((out / "_manifest.json").read_text()) == {"counts": {"rows": 3}}


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "res"

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", boom)
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
    with pytest.raises(OutputExistsError, match="not a finished settopk result"):
        check_output_dir(other, force=False)
    assert check_output_dir(tmp_path / "no" / "such", force=False) is False  # parents are created
    with pytest.raises(OutputExistsError, match="is a file"):
        check_output_dir(other / "x" / "res", force=False)


def test_rewrite_with_force_replaces_whole_result(tmp_path):
    out = tmp_path / "res"
    write_results(out, results_table(["a", "b"], np.array([2, 0]), _topk()), {"run": 1})
    write_results(out, results_table(["a", "b"], np.array([2, 0]), _topk()), {"run": 2})
    assert json.loads((out / "_manifest.json").read_text()) == {"run": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]


def test_tsv(tmp_path):
    write_tsv(tmp_path / "r.tsv", _topk())
    assert (tmp_path / "r.tsv").read_text() == "5\t2\n7\n"
