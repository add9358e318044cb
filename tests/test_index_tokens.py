"""settopk.Index over token values (strings, bytes, 64-bit, negative and unsigned ints): exact
against the brute-force oracle on the values themselves, every score, k and host backend, every
input form; the same result as the job for a Parquet file of string tokens; what is still refused."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import settopk
from settopk.kernels import SCORES, SetBatch, brute_force_topk
from settopk.shards.inputs import InputError
from tests.job_helpers import job_config, score_apart

HOST_BACKENDS = ["numpy", "cpu"]

# Token pools: the first value of each is never an id in [0, 65536), and every corpus holds it, so
# the index is built over token values; the others mix edge values with small ids.
POOLS = {
    "str": ["\u00e9t\u00e9", "", "a", "A", "ab", "a\x00b", "\u65e5\u672c", "\U0001f600", " ", "b", "aa", "z"],
    "bytes": [b"\xff", b"", b"\x00", b"a", b"ab", b"\xc3\xa9", b"\x00\x00", b"z", b"\xfe\xff", b"A", b"b", b"ba"],
    "int64": [-(2**63), 2**63 - 1, -(2**63) + 1, 2**63 - 2, -1, 0, 1, 10**12, 10**12 + 1, -5, 65535, 65536],
    "uint64": [2**64 - 1, 2**63, 2**63 + 1, 2**64 - 2, 0, 1, 5, 10**19, 65536, 2**63 - 1, 12, 7],
}
ARROW_TYPES = {"str": pa.list_(pa.string()), "bytes": pa.list_(pa.binary()), "int64": pa.list_(pa.int64()),
               "uint64": pa.list_(pa.uint64())}
# Values of each kind no corpus holds: query tokens absent from the docs.
ABSENT = {"str": ["never", "\u00e9"], "bytes": [b"never", b"\x01"], "int64": [-7, 2**40], "uint64": [2**63 + 7, 3]}


def _token(value):
    """A token as the oracle compares it: a string is its UTF-8 bytes (the job reads a string column so)."""
    return value.encode() if isinstance(value, str) else value


def _rows(top):
    return [[(int(d), int(o), int(l)) for d, o, l in zip(*row) if d >= 0] for row in zip(top.doc_ids, top.overlap, top.doc_len)]


def check_against_oracle(top, docs, queries, k, score, doc_ids=None):
    """``top`` equals the brute-force oracle over the token values: ids, overlaps, lengths, scores, padding."""
    expected = brute_force_topk([[_token(t) for t in d] for d in docs], [[_token(t) for t in q] for q in queries], k,
                                doc_ids=doc_ids, score=score)
    assert top.doc_ids.shape == (len(queries), k)
    assert _rows(top) == expected
    for i, (query, rows) in enumerate(zip(queries, expected)):
        qlen = len({_token(t) for t in query})
        assert top.query_len[i] == qlen
        assert top.scores[i, : len(rows)].tolist() == [score_apart(ov, qlen, dl, score) for _, ov, dl in rows]
        assert np.isneginf(top.scores[i, len(rows):]).all()


@st.composite
def _case(draw):
    kind = draw(st.sampled_from(sorted(POOLS)))
    pool = POOLS[kind]
    one = st.lists(st.sampled_from(pool), max_size=6)  # repeats inside a set count once
    base = draw(st.lists(one, min_size=1, max_size=6))
    docs = draw(st.lists(st.sampled_from(base), max_size=12)) + [[pool[0]]]  # identical docs: ties
    queries = draw(st.lists(st.one_of(st.sampled_from(base), st.lists(st.sampled_from(pool + ABSENT[kind]), max_size=7)),
                            min_size=1, max_size=6))
    if kind == "str" and draw(st.booleans()):  # a str and its UTF-8 bytes are one token
        queries = [[t.encode() if i % 2 else t for i, t in enumerate(q)] for q in queries]
    return kind, docs, queries


def _form(sets, kind, form, id_column=None, ids=None):
    if form == "lists":
        return sets
    if form == "arrays":
        return [np.array(s, dtype=object if kind in ("str", "bytes") else (np.uint64 if kind == "uint64" else np.int64))
                for s in sets]
    columns = {"tokens": pa.array(sets, ARROW_TYPES[kind])}
    if ids is not None:
        columns[id_column] = ids
    return pa.table(columns)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", HOST_BACKENDS + [pytest.param("cupy", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("score", SCORES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_case(), k_pick=st.sampled_from(["1", "3", "beyond"]), form=st.sampled_from(["lists", "arrays", "arrow"]),
       renumber=st.booleans())
def test_search_over_token_values_equals_the_oracle(backend, score, case, k_pick, form, renumber):
    kind, docs, queries = case
    k = {"1": 1, "3": 3, "beyond": len(docs) + 4}[k_pick]
    doc_ids = [3 * (len(docs) - i) for i in range(len(docs))] if renumber else None
    if form == "arrow" and kind == "str" and any(isinstance(t, bytes) for q in queries for t in q):
        form = "lists"  # an Arrow column holds one of the two types
    if form == "arrow":
        index = settopk.Index.build(_form(docs, kind, form, "doc_id", doc_ids), backend=backend, score=score)
    else:
        index = settopk.Index.build(_form(docs, kind, form), backend=backend, score=score, doc_ids=doc_ids)
    assert index.token_values is not None
    values = index.token_values.to_pylist()
    assert values == sorted({_token(t) for d in docs for t in d}) and index.vocab_size == len(values) + index.max_len
    top = index.search(_form(queries, kind, form), k)
    check_against_oracle(top, docs, queries, k, score, doc_ids)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_integer_queries_are_values_of_an_integer_index(backend):
    docs = [[10**12, 3, 4], [3, 70000], [-2, 5], [], [4, 3]]
    index = settopk.Index.build(docs, backend=backend, score="jaccard")
    assert index.token_values.to_pylist() == [-2, 3, 4, 5, 70000, 10**12]
    queries = [[3, 4], [5, 6, 7], [70000], [], [10**12, 2**40]]
    want = brute_force_topk(docs, queries, 3, score="jaccard")
    small = [[3, 4], [5, 6, 7]]
    for form in (queries, SetBatch.from_lists(small), pa.table({"tokens": pa.array(queries, pa.list_(pa.int64()))})):
        got = index.search(form, 3)
        assert _rows(got) == want[: got.n_queries]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_more_than_65536_distinct_tokens_take_uint32_ids(backend):
    rng = np.random.default_rng(5)
    docs = [rng.choice(10**6, size=15000, replace=False) + 10**12 for _ in range(6)]
    index = settopk.Index.build(docs, backend=backend, max_len=15000, score="containment")
    assert len(index.token_values) > 65536 and index.kernel is not None
    queries = [docs[2][:50].tolist() + [5, 6], docs[4][::100].tolist(), [int(docs[0][0]), int(docs[5][0])]]
    got = index.search(queries, 4)
    check_against_oracle(got, [d.tolist() for d in docs], queries, 4, "containment")


@pytest.mark.timeout(120)
def test_parquet_and_text_paths_of_token_values(tmp_path):
    docs = [["caf\u00e9", "th\u00e9"], ["", "x"], ["x", "th\u00e9", "y"], []]
    queries = [["th\u00e9", "zzz"], [""], ["caf\u00e9", "th\u00e9", "x", "y"]]
    pq.write_table(pa.table({"doc_id": [7, 2, 9, 4], "tokens": docs}), tmp_path / "docs.parquet")
    pq.write_table(pa.table({"query_id": ["p", "q", "r"], "tokens": queries}), tmp_path / "queries.parquet")
    index = settopk.Index.build(tmp_path / "docs.parquet", backend="numpy", score="dice")
    top = index.search(tmp_path / "queries.parquet", 10)
    assert top.query_ids == ("p", "q", "r")
    order = np.argsort([7, 2, 9, 4])
    check_against_oracle(top, [docs[i] for i in order], queries, 10, "dice", doc_ids=[[7, 2, 9, 4][i] for i in order])
    (tmp_path / "docs.txt").write_text("1000000000000,-4\n5\n-4,5,7\n")
    index = settopk.Index.build(tmp_path / "docs.txt", backend="cpu")
    got = index.search([[-4], [5, 1000000000000]], 3)
    check_against_oracle(got, [[10**12, -4], [5], [-4, 5, 7]], [[-4], [5, 10**12]], 3, "braun_blanquet")


@pytest.mark.slow  # a job run; test_index_api compares the Index with the job on ids in the fast loop
@pytest.mark.timeout(300)
def test_index_equals_the_jobs_result_for_string_tokens(ray_cluster, tmp_path):
    from settopk.jobs import score as job

    rng = np.random.default_rng(3)
    words = ["", "\u00e9", "a", "b", "\u65e5", "cc", "dd", "e", "f", "g"]
    docs = [[words[i] for i in rng.choice(10, size=rng.integers(0, 6), replace=False)] for _ in range(40)]
    queries = [[words[i] for i in rng.choice(10, size=rng.integers(0, 6), replace=False)] + ["absent"] * (j % 2)
               for j in range(9)]
    pq.write_table(pa.table({"doc_id": np.arange(40, dtype=np.int64) * 5, "tokens": docs}), tmp_path / "docs.parquet")
    pq.write_table(pa.table({"query_id": [f"q{j}" for j in range(9)], "tokens": queries}), tmp_path / "queries.parquet")
    out = tmp_path / "out"
    assert job.main(["--docs", str(tmp_path / "docs.parquet"), "--queries", str(tmp_path / "queries.parquet"),
                     "--out", str(out), "--k", "7", "--score", "jaccard", "--config", job_config(tmp_path), "--quiet"]) == 0
    expected = pq.read_table(out)
    for backend in HOST_BACKENDS:
        index = settopk.Index.build(tmp_path / "docs.parquet", backend=backend, score="jaccard")
        got = index.search(tmp_path / "queries.parquet", 7).to_arrow()
        assert got.equals(expected), backend


# ---- what is refused ----------------------------------------------------------------------------

def test_a_query_of_another_kind_of_token_is_refused(tmp_path):
    ints = settopk.Index.build([[10**12, 1]], backend="numpy")
    with pytest.raises(InputError, match=r"<sets> row 1 .*expected integer tokens, as the index's docs hold, found string or bytes"):
        ints.search([[], ["a"]], 1)
    pq.write_table(pa.table({"query_id": ["a", "b"], "tokens": [[], ["x"]]}), tmp_path / "q.parquet")
    with pytest.raises(InputError, match=r"q.parquet: expected integer tokens.*found string or bytes tokens in query 'b'"):
        ints.search(tmp_path / "q.parquet", 1)
    strings = settopk.Index.build([["a"]], backend="numpy")
    with pytest.raises(InputError, match=r"<arrow table> row 0 .*expected string or bytes tokens.*found integer tokens"):
        strings.search(pa.table({"tokens": [[1]]}), 1)
    assert ints.search([[2**63, 1]], 1).overlap.tolist() == [[1]]  # no negative doc id: 2**63 is just absent
    with pytest.raises(InputError, match=r"<sets> row 0 .*all signed or all unsigned.*found 9223372036854775808 beside negative"):
        settopk.Index.build([[-3, 1]], backend="numpy").search([[2**63, 1]], 1)
    negative = settopk.Index.build([[2**63, 4]], backend="numpy")
    assert negative.token_values.type == pa.uint64()
    with pytest.raises(InputError, match=r"found -1 beside ids of 2\*\*63 and more in the docs"):
        negative.search([[4, -1]], 1)


@pytest.mark.parametrize(
    "docs, match",
    [
        ([["a"], [1, "b"]], r"<sets> row 1 .*tokens of one kind.*found integer token 1 after text token 'a' at id #1"),
        ([[1, 2**63], [-1]], r"row 0 .*9223372036854775808 beside negative ids"),
        ([["a", None]], r"row 0 .*found NoneType None at id #2"),
        ([["a"], [1.5]], r"row 1 .*found float 1.5"),
        ([[2**64]], r"row 0 .*beyond 64 bits"),
        (pa.table({"tokens": pa.array([["a"], ["b", None]])}), r"<arrow table> row 1 .*a null at id #2"),
        ([["a", "b", "c"]], r"row 0 .*at most 2 distinct ids"),
    ],
)
def test_bad_docs_of_token_values_are_refused(docs, match):
    with pytest.raises(InputError, match=match):
        settopk.Index.build(docs, backend="numpy", max_len=2)


def test_null_tokens_in_a_parquet_file_name_the_file_and_row(tmp_path):
    pq.write_table(pa.table({"doc_id": [0, 1], "tokens": pa.array([["a"], ["b", None]])}), tmp_path / "d.parquet")
    with pytest.raises(InputError, match=r"d.parquet row 1 \(0-based row\).*a null"):
        settopk.Index.build(tmp_path / "d.parquet", backend="numpy")


def test_too_many_distinct_doc_tokens_are_refused(monkeypatch):
    import settopk.index.tokens as tokens

    monkeypatch.setattr(tokens, "MAX_VOCAB", 20)  # 2**24 distinct tokens would take seconds to build
    with pytest.raises(InputError, match=r"expected at most 16 distinct doc tokens .*max_len 4.*found 17 distinct tokens"):
        settopk.Index.build([[f"t{i}" for i in range(j, j + 4)] for j in range(0, 16, 4)] + [["t16"]], backend="numpy", max_len=4)


def test_ids_in_range_keep_the_id_path():
    index = settopk.Index.build([[1, 2], [3]], backend="numpy", vocab_size=100)
    assert index.token_values is None and index.vocab_size == 100
    with pytest.raises(InputError, match=r"token ids in \[0, 100\).*built over token ids"):
        index.search(pa.table({"tokens": [[100]]}), 1)
    with pytest.raises(InputError, match=r"token ids in \[0, 100\), found 100"):
        index.search([[100]], 1)
