"""Input readers: every format read exactly, every bad input located (file, line or row, reason)."""

from __future__ import annotations

import os
import pickle
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shards.inputs import parquet as inputs_parquet
from shards.inputs import readers as inputs_readers
from shards.inputs import text as inputs_text
from shards.inputs import (
    InputError,
    SetLimits,
    corpus_format,
    queries_format,
    read_corpus,
    read_queries,
)

LIMITS = SetLimits()


def write(path, data: bytes | str):
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def corpus_text(tmp_path, data, limits=LIMITS, **kw):
    return read_corpus(write(tmp_path / "docs.txt", data), limits, **kw)


def write_parquet(path, columns: dict):
    pq.write_table(pa.table(columns), path)
    return path


def assert_error(excinfo, path, *parts, line=None, row=None):
    e = excinfo.value
    message = str(e)
    assert os.fspath(path) in message
    assert e.path == os.fspath(path)
    if line is not None:
        assert e.line == line and f"{os.fspath(path)}:{line}:" in message
    if row is not None:
        assert e.row == row and f"{os.fspath(path)} row {row}:" in message
    for part in parts:
        assert part in message, (part, message)
    assert "expected" in message and "found" in message and "fix:" in message


# --------------------------------------------------------------------------------------------------
# Text corpus


def test_text_corpus_reads_sets_sorted_with_ids(tmp_path):
    corpus = corpus_text(tmp_path, "3,1,2\n\n5\n7,7,6\n")
    assert corpus.fmt == "text" and corpus.files == (str(tmp_path / "docs.txt"),)
    assert corpus.doc_ids.dtype == np.int64 and corpus.doc_ids.tolist() == [0, 1, 2, 3]
    assert corpus.docs.to_lists() == [[1, 2, 3], [], [5], [6, 7]]
    assert corpus.docs.tokens.dtype == np.uint16
    assert corpus.n_with_repeats == 1


@pytest.mark.parametrize(
    "data, sets",
    [
        ("", []),
        ("\n", [[]]),
        ("1\n2\n", [[1], [2]]),
        ("1\n2", [[1], [2]]),  # no final newline
        ("1\n\n", [[1], []]),  # the empty line is a doc; the final newline is not
        ("\n\n1", [[], [], [1]]),
        ("1,2\r\n\r\n3\r\n", [[1, 2], [], [3]]),  # CRLF, including an empty CRLF line
        ("1,2\r", [[1, 2]]),  # CR at end of file ends the line too
        (" 1 ,\t2 \n \t\n", [[1, 2], []]),  # whitespace around ids; whitespace-only line = empty set
        ("007,0\n", [[0, 7]]),  # leading zeros are plain decimals
        ("65535,0\n", [[0, 65535]]),
        ("2,2,2,1,1\n", [[1, 2]]),
    ],
)
def test_text_corpus_line_rules(tmp_path, data, sets):
    corpus = corpus_text(tmp_path, data)
    assert corpus.docs.to_lists() == sets
    assert corpus.doc_ids.tolist() == list(range(len(sets)))


def test_text_corpus_repeats_counted_per_set(tmp_path):
    corpus = corpus_text(tmp_path, "1,1,2\n2,2\n3\n4,5,4,5\n")
    assert corpus.n_with_repeats == 3
    assert corpus.docs.to_lists() == [[1, 2], [2], [3], [4, 5]]


def test_text_corpus_length_range_filters_deduplicated_lengths(tmp_path):
    data = "\n".join(",".join(str(i) for i in range(n)) for n in range(6)) + "\n9,9,9,8\n"
    corpus = corpus_text(tmp_path, data, length_range=(2, 3))
    assert corpus.doc_ids.tolist() == [2, 3, 6]  # line 6 has 2 distinct ids
    assert corpus.docs.to_lists() == [[0, 1], [0, 1, 2], [8, 9]]
    assert corpus.n_with_repeats == 1
    assert corpus_text(tmp_path, data, length_range=(0, 0)).doc_ids.tolist() == [0]


def test_text_corpus_length_range_still_validates_every_line(tmp_path):
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, "1\n1,2,3\n1,x\n", length_range=(3, 3))
    assert_error(excinfo, tmp_path / "docs.txt", "'x'", line=3)


def test_text_corpus_across_small_blocks_matches_one_block(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    lines = []
    for n in rng.integers(0, 40, size=300):
        ids = [str(int(x)) for x in rng.integers(0, 65536, size=n)]
        lines.append(" , ".join(ids) if n % 3 == 0 else ",".join(ids))
    data = "\r\n".join(lines)
    whole = corpus_text(tmp_path, data)
    monkeypatch.setattr(inputs_text, "_BLOCK_BYTES", 16)  # lines longer than a block make it grow
    small = corpus_text(tmp_path, data)
    assert small.docs.to_lists() == whole.docs.to_lists()
    assert small.doc_ids.tolist() == list(range(300))
    assert whole.docs.to_lists() == [sorted({int(x) for x in line.split(",") if x.strip()}) for line in lines]


def test_text_corpus_line_longer_than_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs_text, "_BLOCK_BYTES", 16)
    monkeypatch.setattr(inputs_text, "_MAX_LINE_BYTES", 64)
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, "1\n2\n" + "3," * 100 + "3\n")
    assert_error(excinfo, tmp_path / "docs.txt", "longer line", line=3)


BAD_TEXT = [
    ("1,2\n1,,2\n", 2, "an empty field at id #2"),
    ("1,2,\n", 1, "an empty field at id #3"),
    (",1\n", 1, "an empty field at id #1"),
    (" , \n", 1, "an empty field"),
    ("1\n1.5\n", 2, "'1.5'"),
    ("abc\n", 1, "'abc'"),
    ("1,-3\n", 1, "negative id -3 at id #2"),
    ("-0\n", 1, "negative id -0"),
    ("+3\n", 1, "'+3'"),
    ("0x1F\n", 1, "'0x1F'"),  # Arrow's cast would read this as hex
    ("1 2\n", 1, "'1 2'"),
    ("65536\n", 1, "65536 at id #1"),
    ("0,65535,70000\n", 1, "70000 at id #3"),
    ("99999999999999999999999\n", 1, "99999999999999999999999"),
    ("1\n2\r3\n", 2, "carriage return"),
    ("1\r\r\n", 1, "carriage return"),
    ("1,\x1f2\n", 1, "'\\x1f2'"),
    ("1\x002\n", 1, "at id #1"),
    ("1,\xe9\n", 1, "'é'"),
    ("\xff\xfe1\n", 1, "at id #1"),
    ("1\n" + ",".join(str(i) for i in range(129)) + "\n", 2, "129 distinct ids"),
]


@pytest.mark.parametrize("data, line, reason", BAD_TEXT)
def test_text_corpus_bad_line(tmp_path, data, line, reason):
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, data.encode("latin-1") if "\xff" in data else data)
    assert_error(excinfo, tmp_path / "docs.txt", reason, line=line)


def test_text_corpus_vocab_and_max_len_limits(tmp_path):
    limits = SetLimits(vocab_size=100, max_len=3)
    assert corpus_text(tmp_path, "99,0,1\n", limits).docs.to_lists() == [[0, 1, 99]]
    assert corpus_text(tmp_path, "1,2,3,3,2,1\n", limits).docs.to_lists() == [[1, 2, 3]]  # 3 distinct
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, "99\n0,100\n", limits)
    assert_error(excinfo, tmp_path / "docs.txt", "[0, 100)", "100 at id #2", line=2)
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, "1,2\n1,2,3,4,4\n", limits)
    assert_error(excinfo, tmp_path / "docs.txt", "at most 3 distinct ids", "4 distinct ids", line=2)


def test_text_corpus_first_bad_line_deep_in_a_large_block(tmp_path):
    good = "\n".join(f"{i % 65536},{(i * 7) % 65536}" for i in range(20_000))
    data = f"{good}\n1,2\n{good}\n1,x\n{good}\n1,y\n"
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, data)
    assert_error(excinfo, tmp_path / "docs.txt", "'x'", line=40_002)


def test_text_corpus_bad_line_in_a_later_block(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs_text, "_BLOCK_BYTES", 64)
    data = "".join(f"{i},{i + 1}\n" for i in range(500)) + "5,,6\n"
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, data)
    assert_error(excinfo, tmp_path / "docs.txt", "empty field", line=501)


def test_text_corpus_parquet_without_suffix_gets_a_hint(tmp_path):
    write_parquet(tmp_path / "docs.bin", {"doc_id": [0], "tokens": [[1]]})
    with pytest.raises(InputError) as excinfo:
        read_corpus(tmp_path / "docs.bin", LIMITS)
    assert_error(excinfo, tmp_path / "docs.bin", ".parquet suffix", line=1)


def test_missing_path_is_an_input_error(tmp_path):
    missing = tmp_path / "nope.txt"
    for call in (lambda: corpus_format(missing), lambda: read_corpus(missing, LIMITS), lambda: read_queries(missing, LIMITS)):
        with pytest.raises(InputError) as excinfo:
            call()
        assert_error(excinfo, missing, "nothing at this path")


def test_formats(tmp_path):
    (tmp_path / "d").mkdir()
    write(tmp_path / "docs.txt", "1\n")
    write_parquet(tmp_path / "d" / "a.parquet", {"query_id": ["a"], "tokens": [[1]]})
    assert corpus_format(tmp_path / "docs.txt") == "text"
    assert corpus_format(tmp_path / "d") == "parquet"
    assert corpus_format(tmp_path / "d" / "a.parquet") == "parquet"
    assert queries_format(tmp_path / "docs.txt") == "text"
    assert queries_format(tmp_path / "d") == "parquet"
    write(tmp_path / "d" / "q1", "1\n")
    assert queries_format(tmp_path / "d") == "dir"


def test_input_error_pickles_with_its_attributes():
    error = InputError("docs.txt", "a", "b", "c", line=3)
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, ValueError)
    assert (copy.path, copy.line, copy.row, str(copy)) == ("docs.txt", 3, None, "docs.txt:3: expected a, found b; fix: c")
    assert str(InputError("x.parquet", "a", "b", "c", row=0)) == "x.parquet row 0: expected a, found b; fix: c"
    plain = pickle.loads(pickle.dumps(InputError("no docs; expected at least one")))
    assert (str(plain), plain.path, plain.line, plain.row) == ("no docs; expected at least one", None, None, None)


# --------------------------------------------------------------------------------------------------
# Parquet corpus


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
    ({"doc_id": [0], "tokens": [["1"]]}, None, "list<integer>", "type list<element: string>"),
    ({"doc_id": [0], "tokens": [1]}, None, "list<integer>", "type int64"),
    ({"doc_id": [0, None], "tokens": [[1], [2]]}, 1, "doc_id", "found null"),
    ({"doc_id": [0, 1, 2], "tokens": [[1], [2], None]}, 2, "tokens", "found null"),
    ({"doc_id": [0, 1], "tokens": [[1], [2, None]]}, 1, "without nulls", "a null at id #2"),
    ({"doc_id": [0, -1], "tokens": [[1], [2]]}, 1, "non-negative doc_id", "found -1"),
    ({"doc_id": pa.array([0, 2**63], pa.uint64()), "tokens": [[1], [2]]}, 1, "doc_id values in [0, 2**63)", str(2**63)),
    ({"doc_id": [0, 1, 2, 1], "tokens": [[1], [2], [3], [4]]}, 3, "unique doc_id", "doc_id 1 again (first at"),
    ({"doc_id": [0, 1], "tokens": [[1], [2, 65536]]}, 1, "token ids in [0, 65536)", "65536 at id #2"),
    ({"doc_id": [0, 1], "tokens": [[1, -5], [2]]}, 0, "token ids in [0, 65536)", "-5 at id #2"),
    ({"doc_id": [0, 1], "tokens": pa.array([[1], [2**64 - 1]], pa.list_(pa.uint64()))}, 1, "[0, 65536)", str(2**64 - 1)),
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


def test_parquet_corpus_vocab_limit(tmp_path):
    path = write_parquet(tmp_path / "docs.parquet", {"doc_id": [0, 1], "tokens": [[9], [10]]})
    with pytest.raises(InputError) as excinfo:
        read_corpus(path, SetLimits(vocab_size=10))
    assert_error(excinfo, path, "[0, 10)", "10 at id #1", row=1)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_parquet_corpus_corrupt_file(tmp_path, damage):
    path = write_parquet(tmp_path / "docs.parquet", {"doc_id": list(range(100)), "tokens": [[i] for i in range(100)]})
    data = path.read_bytes()
    write(path, {"garbage": b"not parquet at all\n" * 10, "truncated": data[: len(data) // 2], "empty": b""}[damage])
    with pytest.raises(InputError) as excinfo:
        read_corpus(path, LIMITS)
    assert_error(excinfo, path, "a readable Parquet file", "unreadable data")


def test_parquet_directory_problems(tmp_path):
    write_parquet(tmp_path / "a.parquet", {"doc_id": [0], "tokens": [[1]]})
    write(tmp_path / "notes.txt", "hello")
    with pytest.raises(InputError) as excinfo:
        read_corpus(tmp_path, LIMITS)
    assert_error(excinfo, tmp_path / "notes.txt", "without the .parquet suffix")
    os.remove(tmp_path / "notes.txt")
    (tmp_path / "part=1").mkdir()
    with pytest.raises(InputError) as excinfo:
        read_corpus(tmp_path, LIMITS)
    assert_error(excinfo, tmp_path / "part=1", "a subdirectory")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError) as excinfo:
        read_corpus(empty, LIMITS)
    assert_error(excinfo, empty, "no Parquet file")


# --------------------------------------------------------------------------------------------------
# Queries


def test_query_dir_sorted_names_and_files(tmp_path):
    qdir = tmp_path / "queries"
    qdir.mkdir()
    write(qdir / "q2", "5,4,4\n")
    write(qdir / "q10", "1,2")  # no newline
    write(qdir / "q1", "")  # empty query
    write(qdir / "q3.txt", " 9 ,8\r\n")
    queries = read_queries(qdir, LIMITS)
    assert queries.fmt == "dir"
    assert queries.query_ids == ["q1", "q10", "q2", "q3.txt"]
    assert queries.files == tuple(str(qdir / n) for n in queries.query_ids)
    assert queries.queries.to_lists() == [[], [1, 2], [4, 5], [8, 9]]
    assert queries.n_with_repeats == 1


def test_query_dir_empty(tmp_path):
    queries = read_queries(tmp_path, LIMITS)
    assert queries.query_ids == [] and queries.queries.n_sets == 0 and queries.fmt == "dir"


def test_golden_inputs(golden_dir):
    queries = read_queries(golden_dir / "sti2-small" / "queries", LIMITS)
    corpus = read_corpus(golden_dir / "sti2-small" / "docs.txt", LIMITS)
    assert len(queries.query_ids) == 48 and queries.query_ids == sorted(queries.query_ids)
    assert corpus.docs.n_sets == 5000


@pytest.mark.parametrize(
    "name, data, line, reason",
    [
        ("q2", "1,2\n3\n", 2, "a second line"),
        ("q2", "1,2\n\n", 2, "a second line"),
        ("q2", "1,x", 1, "'x'"),
        ("q2", "70000\n", 1, "70000"),
        ("q2", ",".join(str(i) for i in range(129)), 1, "129 distinct ids"),
    ],
)
def test_query_dir_bad_file(tmp_path, name, data, line, reason):
    write(tmp_path / "q1", "1\n")
    write(tmp_path / "q3", "1\n")
    write(tmp_path / name, data)
    with pytest.raises(InputError) as excinfo:
        read_queries(tmp_path, LIMITS)
    assert_error(excinfo, tmp_path / name, reason, line=line)


def test_query_dir_subdirectory_and_unreadable(tmp_path):
    write(tmp_path / "q1", "1\n")
    (tmp_path / "sub").mkdir()
    with pytest.raises(InputError) as excinfo:
        read_queries(tmp_path, LIMITS)
    assert_error(excinfo, tmp_path / "sub", "a subdirectory")
    os.rmdir(tmp_path / "sub")
    os.symlink(tmp_path / "gone", tmp_path / "q2")  # a dangling link cannot be read
    with pytest.raises(InputError) as excinfo:
        read_queries(tmp_path, LIMITS)
    assert_error(excinfo, tmp_path / "q2", "a readable query file")


def test_query_text_file(tmp_path):
    path = write(tmp_path / "queries.txt", "3,1\n\n2,2\r\n7")
    queries = read_queries(path, LIMITS)
    assert queries.fmt == "text" and queries.files == (str(path),)
    assert queries.query_ids == ["0", "1", "2", "3"]
    assert queries.queries.to_lists() == [[1, 3], [], [2], [7]]
    assert queries.n_with_repeats == 1
    write(path, "1\n2\n3,-1\n")
    with pytest.raises(InputError) as excinfo:
        read_queries(path, LIMITS)
    assert_error(excinfo, path, "negative id -1", line=3)


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
        ({"query_id": ["a", "b"], "tokens": [[1], [70000]]}, 1, "[0, 65536)", "70000"),
    ],
)
def test_query_parquet_bad(tmp_path, columns, row, expected, found):
    path = write_parquet(tmp_path / "q.parquet", columns)
    with pytest.raises(InputError) as excinfo:
        read_queries(path, LIMITS)
    assert_error(excinfo, path, expected, found, row=row)


# --------------------------------------------------------------------------------------------------
# Properties

id_lists = st.lists(st.lists(st.integers(0, 65535), max_size=12).map(lambda s: s + s[: len(s) // 3]), max_size=30)


@settings(max_examples=150, deadline=None)
@given(
    sets=id_lists,
    spaces=st.lists(st.sampled_from(["", " ", "\t", "  \t"]), min_size=1),
    crlf=st.booleans(),
    final_newline=st.booleans(),
    block=st.sampled_from([8, 64, 1 << 20]),
    data=st.data(),
)
def test_property_text_round_trip(sets, spaces, crlf, final_newline, block, data):
    shuffled = [data.draw(st.permutations(s)) for s in sets]
    pad = lambda i: spaces[i % len(spaces)]  # noqa: E731
    lines = [",".join(f"{pad(i)}{x}{pad(i + 1)}" for i, x in enumerate(s)) for s in shuffled]
    newline = "\r\n" if crlf else "\n"
    # A final newline is optional, except after a last empty line (the empty line would vanish).
    text = newline.join(lines) + (newline if lines and (final_newline or lines[-1] == "") else "")
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(inputs_text, "_BLOCK_BYTES", block)
        path = os.path.join(tmp, "docs.txt")
        with open(path, "w", newline="") as f:
            f.write(text)
        corpus = read_corpus(path, LIMITS)
    assert corpus.docs.to_lists() == [sorted(set(s)) for s in sets]
    assert corpus.doc_ids.tolist() == list(range(len(sets)))
    assert corpus.n_with_repeats == sum(len(set(s)) < len(s) for s in sets)


def reference_read(text: bytes, limits: SetLimits):
    """Line-by-line reading of the text format: (sets, None) or (None, 1-based bad line)."""
    lines = text.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    sets = []
    for number, line in enumerate(lines, start=1):
        if inputs_text.check_line(line, limits) is not None:
            return None, number
        line = line[:-1] if line.endswith(b"\r") else line
        sets.append(sorted({int(x) for x in line.split(b",") if x.strip(b" \t")}))
    return sets, None


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(st.sampled_from(["1", "2", "7", "9", "0", ",", " ", "\t", "\r", "\n", "-", "x", "\x00", "."]), max_size=60).map("".join),
    block=st.sampled_from([4, 32, 1 << 20]),
)
def test_property_vectorised_parser_agrees_with_line_checker(text, block):
    limits = SetLimits(vocab_size=80, max_len=3)
    expected_sets, expected_line = reference_read(text.encode(), limits)
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(inputs_text, "_BLOCK_BYTES", block)
        mp.setattr(inputs_text, "_SMALL_SLICE_LINES", 2)
        path = os.path.join(tmp, "docs.txt")
        with open(path, "wb") as f:
            f.write(text.encode())
        if expected_line is None:
            assert read_corpus(path, limits).docs.to_lists() == expected_sets
        else:
            with pytest.raises(InputError) as excinfo:
                read_corpus(path, limits)
            assert excinfo.value.line == expected_line
