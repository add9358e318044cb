"""Formats chosen from the path, the files a Parquet directory holds, and a path that is not there
(settopk.shards.inputs.files)."""

from __future__ import annotations

import os

import pytest

from settopk.shards.inputs import InputError, SetLimits, corpus_format, queries_format, read_corpus, read_queries
from tests.input_helpers import assert_error, write, write_parquet

LIMITS = SetLimits()


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


def test_special_files_are_refused_for_every_input_path(tmp_path):
    import os

    from settopk.shards.inputs import InputError, corpus_format, queries_format, read_queries

    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    for check in (corpus_format, queries_format):
        with pytest.raises(InputError, match="FIFO"):
            check(fifo)
    pdir = tmp_path / "pq"
    pdir.mkdir()
    os.mkfifo(pdir / "a.parquet")
    with pytest.raises(InputError, match="FIFO"):
        read_queries(pdir)


def test_hidden_entries_of_a_query_directory_are_skipped(tmp_path):
    from settopk.shards.inputs import query_files, read_queries

    (tmp_path / "q1").write_text("1,2\n")
    (tmp_path / ".DS_Store").write_bytes(b"\x00\x01\n\x02\n")
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / ".hidden").write_text("3\n")
    queries = read_queries(tmp_path)
    assert queries.query_ids == ["q1"]
    assert query_files(tmp_path) == [str(tmp_path / "q1")]
