"""The Parquet format (settopk.shards.inputs.parquet): columns of any integer type, docs sorted by doc_id,
every bad row located within its file."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from settopk.shards.inputs import InputError, SetLimits, read_corpus, read_queries
from settopk.shards.inputs import parquet as inputs_parquet
from settopk.shards.inputs import readers as inputs_readers
from tests.input_helpers import assert_error, write, write_parquet

LIMITS = SetLimits()


def test_parquet_corpus_sorted_by_doc_id(tmp_path):
    path = write_parquet(
        tmp_path / "docs.parquet",
        {"doc_id": pa.array([30, 10, 20, 5], pa.int32()), "tokens": pa.array([[3, 1], [], [2, 2, 9], [65535]], pa.large_list(pa.uint16()))},
    )
    corpus = read_corpus(path, LIMITS)
    assert corpus.fmt == "parquet" and corpus.files == (str(path),)
    assert corpus.doc_ids.dtype == np.int64 and corpus.doc_ids.tolist() == [5, 10, 20, 30]
    assert corpus.docs.to_lists() == [[65535], [], [2, 9], [1, 3]]
    assert corpus.n_with_repeats == 1
    filtered = read_corpus(path, LIMITS, length_range=(1, 1))
    assert filtered.doc_ids.tolist() == [5] and filtered.docs.to_lists() == [[65535]]
    assert filtered.n_with_repeats == 1


def test_parquet_corpus_directory(tmp_path):
    write_parquet(tmp_path / "b.parquet", {"doc_id": [1, 3], "tokens": [[1], [3]]})
    write_parquet(tmp_path / "a.parquet", {"doc_id": pa.array([2], pa.uint64()), "tokens": pa.array([[2, 1]], pa.list_(pa.int8()))})
    write(tmp_path / "_SUCCESS", "")
    write(tmp_path / ".a.parquet.crc", "junk")
    corpus = read_corpus(tmp_path, LIMITS)
    assert corpus.files == (str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"))
    assert corpus.doc_ids.tolist() == [1, 2, 3]
    assert corpus.docs.to_lists() == [[1], [1, 2], [3]]


def test_parquet_corpus_empty(tmp_path):
    path = write_parquet(tmp_path / "docs.parquet", {"doc_id": pa.array([], pa.int64()), "tokens": pa.array([], pa.list_(pa.int64()))})
    corpus = read_corpus(path, LIMITS)
    assert corpus.docs.n_sets == 0 and corpus.doc_ids.tolist() == []


def test_parquet_corpus_many_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs_parquet, "_PARQUET_BATCH_ROWS", 7)
    monkeypatch.setattr(inputs_readers, "_TAKE_ROWS", 5)
    rng = np.random.default_rng(2)
    ids = rng.permutation(100)
    sets = [sorted(set(rng.integers(0, 50, size=int(n)).tolist())) for n in rng.integers(0, 10, size=100)]
    path = write_parquet(tmp_path / "docs.parquet", {"doc_id": ids, "tokens": sets})
    corpus = read_corpus(path, LIMITS)
    assert corpus.doc_ids.tolist() == list(range(100))
    assert corpus.docs.to_lists() == [sets[i] for i in np.argsort(ids)]
    ids[60] = ids[3]
    write_parquet(path, {"doc_id": ids, "tokens": sets})
    with pytest.raises(InputError) as excinfo:
        read_corpus(path, LIMITS)
    assert_error(excinfo, path, f"doc_id {ids[3]} again (first at {path} row 3)", row=60)


BAD_PARQUET = [
    ({"id": [0], "tokens": [[1]]}, None, "a column 'doc_id'", "columns ['id', 'tokens']"),
    ({"doc_id": [0]}, None, "a column 'tokens'", "columns ['doc_id']"),
    ({"doc_id": ["a"], "tokens": [[1]]}, None, "column 'doc_id' of type integer", "type string"),
    ({"doc_id": [0.5], "tokens": [[1]]}, None, "column 'doc_id' of type integer", "type double"),
    ({"doc_id": [0], "tokens": [[1.5]]}, None, "list<integer>, list<string> or list<binary>", "type list<element: double>"),
    ({"doc_id": [0], "tokens": [[[1]]]}, None, "list<integer>", "type list<element: list<element: int64>>"),
    ({"doc_id": [0], "tokens": [1]}, None, "list<integer>", "type int64"),
    ({"doc_id": [0, None], "tokens": [[1], [2]]}, 1, "doc_id", "found null"),
    ({"doc_id": [0, 1, 2], "tokens": [[1], [2], None]}, 2, "tokens", "found null"),
    ({"doc_id": [0, 1], "tokens": [[1], [2, None]]}, 1, "without nulls", "a null at id #2"),
    ({"doc_id": [0, -1], "tokens": [[1], [2]]}, 1, "non-negative doc_id", "found -1"),
    ({"doc_id": pa.array([0, 2**63], pa.uint64()), "tokens": [[1], [2]]}, 1, "doc_id values in [0, 2**63)", str(2**63)),
    ({"doc_id": [0, 1, 2, 1], "tokens": [[1], [2], [3], [4]]}, 3, "unique doc_id", "doc_id 1 again (first at"),
    ({"doc_id": [0, 1], "tokens": [["a"], ["b", None]]}, 1, "without nulls", "a null at id #2"),
    ({"doc_id": [0, 1], "tokens": [[1], list(range(129))]}, 1, "at most 128 distinct ids", "129 distinct ids"),
]


@pytest.mark.parametrize("columns, row, expected, found", BAD_PARQUET)
def test_parquet_corpus_bad_input(tmp_path, columns, row, expected, found):
    path = write_parquet(tmp_path / "docs.parquet", columns)
    with pytest.raises(InputError) as excinfo:
        read_corpus(path, LIMITS)
    assert_error(excinfo, path, expected, found, row=row)
    if row is None:
        assert excinfo.value.row is None and excinfo.value.line is None


def test_parquet_corpus_duplicate_across_files(tmp_path):
    write_parquet(tmp_path / "a.parquet", {"doc_id": [4, 7], "tokens": [[1], [2]]})
    write_parquet(tmp_path / "b.parquet", {"doc_id": [9, 8, 7], "tokens": [[1], [2], [3]]})
    with pytest.raises(InputError) as excinfo:
        read_corpus(tmp_path, LIMITS)
    assert_error(excinfo, tmp_path / "b.parquet", f"doc_id 7 again (first at {tmp_path / 'a.parquet'} row 1)", row=2)


def test_parquet_corpus_ids_outside_the_vocabulary_are_token_values(tmp_path):
    """Ids outside [0, vocab_size) are read as token values (the job maps them to dense ids)."""
    path = write_parquet(tmp_path / "docs.parquet", {"doc_id": [0, 1], "tokens": [[9], [10, -5]]})
    docs = read_corpus(path, SetLimits(vocab_size=10)).docs
    assert type(docs).__name__ == "WideSets" and docs.to_lists() == [[9], [-5, 10]]
    path = write_parquet(tmp_path / "docs.parquet", {"doc_id": [0, 1], "tokens": pa.array([[1], [2**64 - 1]], pa.list_(pa.uint64()))})
    assert read_corpus(path).docs.to_lists() == [[1], [2**64 - 1]]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_parquet_corpus_corrupt_file(tmp_path, damage):
    path = write_parquet(tmp_path / "docs.parquet", {"doc_id": list(range(100)), "tokens": [[i] for i in range(100)]})
    data = path.read_bytes()
    write(path, {"garbage": b"not parquet at all\n" * 10, "truncated": data[: len(data) // 2], "empty": b""}[damage])
    with pytest.raises(InputError) as excinfo:
        read_corpus(path, LIMITS)
    assert_error(excinfo, path, "a readable Parquet file", "unreadable data")


@pytest.mark.parametrize("ids, expected", [(["b", "a", "c"], ["b", "a", "c"]), (pa.array([20, 3, -1], pa.int16()), ["20", "3", "-1"])])
def test_query_parquet(tmp_path, ids, expected):
    path = write_parquet(tmp_path / "q.parquet", {"query_id": ids, "tokens": [[2, 1, 1], [], [65535]]})
    queries = read_queries(path, LIMITS)
    assert queries.fmt == "parquet"
    assert queries.query_ids == expected
    assert queries.queries.to_lists() == [[1, 2], [], [65535]]
    assert queries.n_with_repeats == 1


@pytest.mark.parametrize(
    "columns, row, expected, found",
    [
        ({"query_id": ["a", "b", "a"], "tokens": [[1], [2], [3]]}, 2, "unique query_id", "query_id 'a' again"),
        ({"query_id": [1, 2, 1], "tokens": [[1], [2], [3]]}, 2, "unique query_id", "query_id '1' again"),
        ({"query_id": ["a", None], "tokens": [[1], [2]]}, 1, "query_id", "null"),
        ({"query_id": [1.5], "tokens": [[1]]}, None, "string or integer", "type double"),
        ({"qid": ["a"], "tokens": [[1]]}, None, "a column 'query_id'", "columns ['qid', 'tokens']"),
        ({"query_id": ["a", "b"], "tokens": [["x"], [None]]}, 1, "without nulls", "a null at id #1"),
    ],
)
def test_query_parquet_bad(tmp_path, columns, row, expected, found):
    path = write_parquet(tmp_path / "q.parquet", columns)
    with pytest.raises(InputError) as excinfo:
        read_queries(path, LIMITS)
    assert_error(excinfo, path, expected, found, row=row)
