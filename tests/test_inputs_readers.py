"""The whole-input readers (settopk.shards.inputs.readers): a directory of one-query files, and the golden inputs."""

from __future__ import annotations

import os

import pytest

from settopk.shards.inputs import InputError, SetLimits, read_corpus, read_queries
from tests.input_helpers import assert_error, write

LIMITS = SetLimits()


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
        ("q2", "1,2.5\n", 1, "'2.5'"),
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
