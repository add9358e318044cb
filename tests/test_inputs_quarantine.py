"""on_invalid="quarantine": bad lines, rows and files are set aside with their reason, never dropped silently."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from settopk.shards.inputs import InputError, SetLimits, read_corpus, read_queries
from tests.input_helpers import assert_error, write_parquet

LIMITS = SetLimits(vocab_size=100, max_len=3)


def test_text_corpus_bad_lines_set_aside_and_ids_keep_line_numbers(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text("1,2\nx\n3\n7e2\n4,5,5\n1,2,3,4\n\n")
    with pytest.raises(InputError, match=r"docs.txt:2"):
        read_corpus(path, LIMITS)
    corpus = read_corpus(path, LIMITS, on_invalid="quarantine")
    assert corpus.doc_ids.tolist() == [0, 2, 4, 6]
    assert corpus.docs.to_lists() == [[1, 2], [3], [4, 5], []]
    assert corpus.n_with_repeats == 1
    assert [(r.line, r.row) for r in corpus.rejected] == [(2, None), (4, None), (6, None)]
    assert "'x'" in corpus.rejected[0].reason and "7e2" in corpus.rejected[1].reason and "at most 3" in corpus.rejected[2].reason
    assert all(r.path == str(path) for r in corpus.rejected)
    in_range = read_corpus(path, LIMITS, length_range=(2, 3), on_invalid="quarantine")
    assert in_range.doc_ids.tolist() == [0, 4] and len(in_range.rejected) == 3


def test_parquet_corpus_bad_rows_and_repeated_ids_set_aside(tmp_path):
    table = pa.table(
        {
            "doc_id": pa.array([5, 3, None, -1, 8, 3, 9], pa.int64()),
            "tokens": pa.array([[1], [2, 2], [3], [4], [None], [5], [1, 2, 3, 4]], pa.list_(pa.int32())),
        }
    )
    pq.write_table(table, tmp_path / "docs.parquet")
    corpus = read_corpus(tmp_path / "docs.parquet", LIMITS, on_invalid="quarantine")
    assert corpus.doc_ids.tolist() == [3, 5]
    assert corpus.docs.to_lists() == [[2], [1]]
    assert sorted(r.row for r in corpus.rejected) == [2, 3, 4, 5, 6]
    reasons = {r.row: r.reason for r in corpus.rejected}
    assert "null" in reasons[2] and "-1" in reasons[3] and "null" in reasons[4] and "again" in reasons[5] and "at most 3" in reasons[6]


def test_query_dir_bad_files_set_aside(tmp_path):
    qdir = tmp_path / "q"
    qdir.mkdir()
    (qdir / "a").write_text("1,2\n")
    (qdir / "b").write_text("1,oops")
    (qdir / "c").write_text("3\n4\n")
    (qdir / "d").write_text("")
    queries = read_queries(qdir, LIMITS, on_invalid="quarantine")
    assert queries.query_ids == ["a", "d"] and queries.queries.to_lists() == [[1, 2], []]
    assert [(r.path.rsplit("/", 1)[-1], r.line) for r in queries.rejected] == [("b", 1), ("c", 2)]
    (qdir / "sub").mkdir()
    with pytest.raises(InputError, match="subdirectory"):  # structure problems still stop the run
        read_queries(qdir, LIMITS, on_invalid="quarantine")


def test_query_text_and_parquet(tmp_path):
    (tmp_path / "q.txt").write_text("1\n2,x\n3\n")
    queries = read_queries(tmp_path / "q.txt", LIMITS, on_invalid="quarantine")
    assert queries.query_ids == ["0", "2"] and [r.line for r in queries.rejected] == [2]
    pq.write_table(pa.table({"query_id": ["a", "b", "a", "c"], "tokens": [[1], [None], [2], [3]]}), tmp_path / "q.parquet")
    queries = read_queries(tmp_path / "q.parquet", LIMITS, on_invalid="quarantine")
    assert queries.query_ids == ["a", "c"] and queries.queries.to_lists() == [[1], [3]]
    assert sorted(r.row for r in queries.rejected) == [1, 2]


def test_unknown_policy():
    with pytest.raises(ValueError, match="on_invalid"):
        read_corpus(__file__, LIMITS, on_invalid="skip")


_line = st.one_of(
    st.lists(st.integers(0, 99), max_size=4).map(lambda s: ",".join(map(str, s))),
    st.sampled_from(["x", "1,,2", "100", "-1", "1 2", "1,2,3,4"]),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_line, max_size=30))
def test_property_quarantine_keeps_exactly_the_valid_lines(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("q") / "docs.txt"
    path.write_text("".join(line + "\n" for line in lines))
    corpus = read_corpus(path, LIMITS, on_invalid="quarantine")
    rejected = {r.line - 1 for r in corpus.rejected}
    assert set(corpus.doc_ids.tolist()) | rejected == set(range(len(lines)))
    assert not set(corpus.doc_ids.tolist()) & rejected
    for doc_id, doc in zip(corpus.doc_ids.tolist(), corpus.docs.to_lists()):
        assert doc == sorted({int(x) for x in lines[doc_id].split(",") if x})


@pytest.mark.parametrize("value_type", [pa.uint8(), pa.uint16(), pa.int16(), pa.uint32(), pa.int64(), pa.uint64()])
def test_quarantine_works_for_every_integer_list_type(tmp_path, value_type):
    """A null id is flagged in every integer list type."""
    from settopk.shards.inputs import QueryStream

    tokens = pa.array([[1, 2], [3, None], [250], None, [4]], pa.list_(value_type))
    limits = SetLimits(vocab_size=200 if value_type == pa.uint8() else 65536, max_len=8)
    docs = write_parquet(tmp_path / "d.parquet", {"doc_id": pa.array([0, 1, 2, 3, 4], pa.int64()), "tokens": tokens})
    corpus = read_corpus(docs, limits, on_invalid="quarantine")
    expect_bad = [1, 3]  # 250 is a token like any other (the job maps it to a dense id)
    assert sorted(r.row for r in corpus.rejected) == expect_bad
    queries = write_parquet(tmp_path / "q.parquet", {"query_id": ["a", "b", "c", "d", "e"], "tokens": tokens})
    assert sorted(r.row for r in read_queries(queries, limits, on_invalid="quarantine").rejected) == expect_bad
    stream = QueryStream(queries, limits, on_invalid="quarantine")
    assert sorted(r.row for r in stream.rejected) == expect_bad


def test_repeated_query_id_in_uint16_parquet_names_file_and_row(tmp_path):
    from settopk.shards.inputs import QueryStream

    tokens = pa.array([[1], [2], [3]], pa.list_(pa.uint16()))
    queries = write_parquet(tmp_path / "q.parquet", {"query_id": ["a", "b", "a"], "tokens": tokens})
    with pytest.raises(InputError) as excinfo:
        QueryStream(queries, SetLimits(vocab_size=65536, max_len=8))
    assert_error(excinfo, queries, "query_id", row=2)
