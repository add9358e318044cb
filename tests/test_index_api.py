"""settopk.Index and settopk.TopK: exact against the brute-force oracle on every backend, score
and k (ties included), every input form, the errors, the job's own result, and a cheap import."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import settopk
from settopk.jobs.output import RESULT_SCHEMA
from settopk.kernels import SCORES, SetBatch, brute_force_topk
from settopk.kernels.postings import ROUTINGS
from settopk.shards.inputs import InputError
from tests.conftest import HAS_GPU
from tests.job_helpers import job_config, score_apart, write_sets

HOST_BACKENDS = ["numpy", "cpu"]
BACKENDS = HOST_BACKENDS + [pytest.param("cupy", marks=pytest.mark.gpu)]


def check_against_oracle(top, docs, queries, k, score, doc_ids=None):
    """``top`` equals the brute-force oracle: ids, overlaps, lengths, scores and the padding."""
    expected = brute_force_topk(docs, queries, k, doc_ids=doc_ids, score=score)
    assert top.doc_ids.shape == top.scores.shape == top.overlap.shape == top.doc_len.shape == (len(queries), k)
    assert (top.doc_ids.dtype, top.scores.dtype, top.overlap.dtype, top.query_len.dtype, top.doc_len.dtype) == (
        np.int64, np.float64, np.int16, np.int16, np.int16)
    for i, (query, rows) in enumerate(zip(queries, expected)):
        qlen = len(set(query))
        assert top.query_len[i] == qlen
        n = len(rows)
        assert top.doc_ids[i, :n].tolist() == [r[0] for r in rows], (i, query)
        assert top.overlap[i, :n].tolist() == [r[1] for r in rows]
        assert top.doc_len[i, :n].tolist() == [r[2] for r in rows]
        assert top.scores[i, :n].tolist() == [score_apart(ov, qlen, dl, score) for _, ov, dl in rows]
        assert (top.doc_ids[i, n:] == -1).all() and (top.overlap[i, n:] == 0).all() and (top.doc_len[i, n:] == 0).all()
        assert np.isneginf(top.scores[i, n:]).all()


# Small vocabularies and repeated sets make ties common; sets may be empty and hold repeated ids.
_set = st.lists(st.integers(0, 11), max_size=7)


@st.composite
def _corpus(draw):
    base = draw(st.lists(_set, min_size=1, max_size=12))
    docs = draw(st.lists(st.sampled_from(base), min_size=0, max_size=30))  # many identical sets
    queries = draw(st.lists(st.one_of(st.sampled_from(base), _set), min_size=1, max_size=8))
    return docs, queries


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(corpus=_corpus(), k=st.integers(1, 35), score=st.sampled_from(SCORES), routing=st.sampled_from(ROUTINGS),
       renumber=st.booleans(), data=st.data())
def test_search_equals_the_oracle(backend, corpus, k, score, routing, renumber, data):
    docs, queries = corpus
    doc_ids = None
    if renumber:  # ids unique, in any order, not from 0
        doc_ids = data.draw(st.lists(st.integers(0, 10**12), min_size=len(docs), max_size=len(docs), unique=True))
    index = settopk.Index.build(docs, backend=backend, score=score, routing=routing, doc_ids=doc_ids)
    assert index.backend == backend and index.n_docs == len(docs)
    assert index.max_len == 128
    check_against_oracle(index.search(queries, k), docs, queries, k, score, doc_ids)


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("score", SCORES)
def test_every_score_with_ties_and_k_beyond_the_corpus(backend, score):
    rng = np.random.default_rng(7)
    docs = [rng.choice(9, size=rng.integers(0, 6), replace=False).tolist() for _ in range(60)] + [[1, 2, 3]] * 20
    queries = [[1, 2, 3], [], [8], [0, 1, 2, 3, 4, 5]] + [rng.choice(9, size=4, replace=False).tolist() for _ in range(10)]
    index = settopk.Index.build(docs, backend=backend, score=score, max_len=6)
    for k in (1, 7, 80, 81, 200):
        check_against_oracle(index.search(queries, k), docs, queries, k, score)


def test_max_len_defaults_to_the_jobs_or_the_longest_doc_and_bounds_the_queries():
    assert settopk.Index.build([[1, 2]], backend="numpy").max_len == 128
    index = settopk.Index.build([[1, 2], list(range(200))], backend="numpy")
    assert index.max_len == 200 and index.search([list(range(200))], 1).overlap[0, 0] == 200
    with pytest.raises(InputError, match=r"<sets> row 1 .*at most 200 distinct ids per set, found 201 .*max_len >= 201"):
        index.search([[1], list(range(201))], 1)
    assert settopk.Index.build([[1, 2]], backend="numpy", max_len=5).max_len == 5


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_batches_give_the_one_call_result(backend, monkeypatch):
    rng = np.random.default_rng(1)
    docs = [rng.choice(30, size=rng.integers(0, 8), replace=False).tolist() for _ in range(300)]
    queries = [rng.choice(30, size=rng.integers(0, 8), replace=False).tolist() for _ in range(41)]
    index = settopk.Index.build(docs, backend=backend, max_len=8, score="dice")
    whole = index.search(queries, 9, batch_size=1000)
    monkeypatch.setattr("settopk.index.api._PARALLEL_FILL", 1)  # scores filled by threads, in slices of 4 rows
    monkeypatch.setattr("settopk.index.api._FILL_ROWS", 4)
    for batched in (index.search(queries, 9, batch_size=4), index.search(queries, 9)):
        for name in ("doc_ids", "scores", "overlap", "query_len", "doc_len"):
            assert np.array_equal(getattr(whole, name), getattr(batched, name))
    check_against_oracle(whole, docs, queries, 9, "dice")


# ---- input forms ----------------------------------------------------------------------------

@pytest.fixture
def small(tmp_path):
    """Docs with ids 10, 20, ... given in shuffled order, and queries, in every input form."""
    rng = np.random.default_rng(5)
    docs = [rng.choice(12, size=rng.integers(0, 6), replace=False).tolist() for _ in range(25)] + [[3, 4]] * 5
    ids = (np.arange(len(docs)) * 10 + 10)[::-1].copy()  # descending: the index sorts them
    queries = [[3, 4], [], [0, 11, 5], [7, 7, 2]]
    return docs, ids, queries


def test_arrow_table_list_setbatch_and_files_give_one_result(tmp_path, small):
    docs, ids, queries = small
    table = pa.table({"doc_id": pa.array(ids, pa.int32()), "tokens": pa.array(docs, pa.list_(pa.int64()))})
    pq.write_table(table, tmp_path / "docs.parquet", row_group_size=7)
    forms = [
        settopk.Index.build(table, backend="numpy"),
        settopk.Index.build(table.to_batches()[0], backend="numpy"),
        settopk.Index.build(tmp_path / "docs.parquet", backend="numpy"),
        settopk.Index.build(str(tmp_path / "docs.parquet"), backend="numpy"),
        settopk.Index.build(docs, doc_ids=ids, backend="numpy"),
        settopk.Index.build(SetBatch.from_lists(docs), doc_ids=ids, backend="numpy"),
        settopk.Index.build(({*d} for d in docs), doc_ids=ids, backend="numpy"),  # a generator of Python sets
        settopk.Index.build([np.array(d, np.uint16) for d in docs], doc_ids=ids, backend="numpy"),
    ]
    tops = [index.search(queries, k=12) for index in forms]
    for top in tops:
        assert np.array_equal(top.doc_ids, tops[0].doc_ids) and np.array_equal(top.scores, tops[0].scores)
    check_against_oracle(tops[0], docs, queries, 12, "braun_blanquet", doc_ids=ids.tolist())
    assert forms[0].doc_ids.tolist() == sorted(ids.tolist())


def test_a_table_without_doc_id_numbers_its_rows(small):
    docs, _, queries = small
    index = settopk.Index.build(pa.table({"tokens": docs}), backend="numpy")
    check_against_oracle(index.search(queries, 5), docs, queries, 5, "braun_blanquet")


def test_text_files_and_query_ids(tmp_path, small):
    docs, _, queries = small
    index = settopk.Index.build(write_sets(tmp_path / "docs.txt", docs), backend="cpu")
    top = index.search(write_sets(tmp_path / "queries.txt", queries), 5)
    assert top.query_ids == ("0", "1", "2", "3")
    check_against_oracle(top, docs, queries, 5, "braun_blanquet")
    named = pa.table({"query_id": ["a", "b", "c", "d"], "tokens": queries})
    pq.write_table(named, tmp_path / "q.parquet")
    query_dir = tmp_path / "qdir"
    query_dir.mkdir()
    for name, q in zip("abcd", queries):
        (query_dir / name).write_text(",".join(map(str, q)))
    for form in (named, tmp_path / "q.parquet", query_dir):
        got = index.search(form, 5)
        assert got.query_ids == ("a", "b", "c", "d") and np.array_equal(got.doc_ids, top.doc_ids)
        assert got.to_arrow().column("query_id").to_pylist()[:5] == ["a"] * 5


def test_to_arrow_is_the_result_schema_and_drops_padding(small):
    docs, ids, queries = small
    top = settopk.Index.build(docs, backend="numpy", score="jaccard").search(queries, k=40)  # 30 docs: 10 padding each
    table = top.to_arrow()
    assert table.schema.equals(RESULT_SCHEMA, check_metadata=False)
    assert table.schema.metadata[b"settopk.score"].startswith(b"Jaccard") and table.schema.metadata[b"settopk.k"] == b"40"
    assert table.num_rows == 30 * len(queries)
    assert table.column("rank").to_pylist()[:3] == [1, 2, 3] and table.column("query_id").to_pylist()[0] == "0"
    assert table.column("score").to_pylist()[:30] == top.scores[0, :30].tolist()
    renamed = top.to_arrow(query_ids=["w", "x", "y", "z"])
    assert renamed.column("query_id").to_pylist()[-1] == "z"
    with pytest.raises(ValueError, match="must name each of the 4 queries"):
        top.to_arrow(query_ids=["w"])
    with pytest.raises(ValueError, match="unique"):
        top.to_arrow(query_ids=["w", "x", "w", "z"])


def test_an_empty_corpus_pads_every_row_and_no_queries_give_no_rows():
    index = settopk.Index.build([], backend="cpu")
    top = index.search([[1], []], k=3)
    assert (top.doc_ids == -1).all() and np.isneginf(top.scores).all() and top.to_arrow().num_rows == 0
    none = settopk.Index.build([[1, 2]], backend="numpy").search([], k=4)
    assert none.doc_ids.shape == (0, 4) and none.query_len.shape == (0,)


# ---- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "queries, match",
    [
        ([[1, 2], list(range(12))], r"<sets> row 1 \(0-based row\): expected at most 11 distinct ids.*max_len >= 12"),
        ([[1], [2], [3, 100]], r"row 2 .*token ids in \[0, 100\), found 100 at id #2"),
        ([[-1]], r"row 0 .*found -1"),
        ([[1], [2.5]], r"row 1 .*integer token ids, found 2.5"),
        ([[1], ["7"]], r"row 1 .*integer token ids"),
        ([[1], 5], r"row 1 .*an iterable of integer token ids"),
        ([[1], [2, 2**70]], r"row 1 .*integer token ids, found 1180591620717411303424 at id #2"),
        ([[True]], r"row 0 .*integer token ids, found True"),
        ([np.array([1, 2]), np.array([3, 100])], r"row 1 .*found 100 at id #2"),
        (pa.table({"query_id": ["a", "a"], "tokens": [[1], [2]]}), r"unique query_id values, found query_id 'a' again"),
        (pa.table({"tokens": [[1], [None]]}), r"<arrow table> row 1 .*a null"),
        (pa.table({"ids": [1]}), r"a column 'tokens'"),
        (SetBatch(np.array([0, 2], np.int64), np.array([5, 3], np.uint16)), r"row 0 .*ascending and distinct"),
    ],
)
def test_bad_queries_raise_input_errors_naming_the_row(queries, match):
    index = settopk.Index.build([[1, 2, 3], [4, 5, 6, 7, 8, 9]], backend="numpy", vocab_size=100, max_len=11)
    with pytest.raises(InputError, match=match):
        index.search(queries, 2)


def test_bad_docs_raise_input_errors(tmp_path):
    with pytest.raises(InputError, match=r"<arrow table> row 2 .*doc_id 1 again \(first at <arrow table> row 0\)"):
        settopk.Index.build(pa.table({"doc_id": [1, 2, 1], "tokens": [[1], [2], [3]]}), backend="numpy")
    with pytest.raises(InputError, match=r"docs.txt:2 \(1-based line\)"):
        settopk.Index.build(write_sets(tmp_path / "docs.txt", [[1], ["x"]]), backend="numpy")
    with pytest.raises(InputError, match="at most 3 distinct ids"):
        settopk.Index.build([[1, 2, 3, 4]], backend="numpy", max_len=3)
    with pytest.raises(InputError, match="nothing|exist|not found|No such"):
        settopk.Index.build(tmp_path / "missing.txt", backend="numpy")
    with pytest.raises(InputError, match="at most 4096 distinct ids"):  # cosine's key table goes to max_len 4096
        settopk.Index.build([list(range(4097))], backend="numpy", score="cosine")
    with pytest.raises(TypeError, match="found int"):
        settopk.Index.build(42, backend="numpy")
    with pytest.raises(TypeError, match="doc_ids= is for"):
        settopk.Index.build(pa.table({"tokens": [[1]]}), doc_ids=[3], backend="numpy")
    with pytest.raises(ValueError, match="one id per doc"):
        settopk.Index.build([[1], [2]], doc_ids=[3], backend="numpy")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"score": "tanimoto"}, "score must be one of"),
        ({"backend": "tpu"}, "backend must be one of"),
        ({"routing": "fast"}, "routing must be one of"),
        ({"max_len": 0}, r"max_len must be an integer in \[1, 32767\]"),
        ({"max_len": 4097, "score": "cosine"}, r"\[1, 4096\]"),
        ({"vocab_size": 2**24 + 1}, r"vocab_size must be an integer in \[1, 16777216\]"),  # 70000 is valid on numpy (issue 31)
        ({"threads": 0}, "threads"),
    ],
)
def test_bad_build_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        settopk.Index.build([[1, 2]], **{"backend": "numpy", **kwargs})


@pytest.mark.parametrize("k", [0, -1, 32768, 2.0, True])
def test_bad_k(k):
    with pytest.raises(ValueError, match="k must be an integer"):
        settopk.Index.build([[1]], backend="numpy").search([[1]], k)


@pytest.mark.skipif(HAS_GPU, reason="checks the machine without a GPU")
def test_cupy_without_a_gpu_fails_at_build_and_auto_takes_the_cpu():
    with pytest.raises((ImportError, RuntimeError), match="backend 'cupy'"):
        settopk.Index.build([[1]], backend="cupy")
    assert settopk.Index.build([[1]]).backend == "cpu"


# ---- the job's result, and a cheap import -------------------------------------------------------

@pytest.mark.parametrize("score, k", [("braun_blanquet", 15), pytest.param("cosine", 60, marks=pytest.mark.slow)])
def test_index_equals_the_jobs_parquet(ray_cluster, tmp_path, score, k):
    from settopk.jobs import score as job

    rng = np.random.default_rng(11)
    docs = [rng.choice(14, size=rng.integers(0, 8), replace=False).tolist() for _ in range(50)] + [[0, 65535], [2, 3]] * 3
    queries = [rng.choice(14, size=rng.integers(0, 8), replace=False).tolist() for _ in range(9)] + [[3, 1, 3], []]
    docs_path, queries_path = write_sets(tmp_path / "docs.txt", docs), write_sets(tmp_path / "queries.txt", queries)
    out = tmp_path / "out"
    cfg = job_config(tmp_path, n_shards=2, query_batch_size=4)
    assert job.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", str(k), "--score", score,
                     "--config", cfg, "--quiet"]) == 0
    expected = pq.read_table(out)
    for backend in HOST_BACKENDS:
        got = settopk.Index.build(docs_path, backend=backend, score=score).search(queries_path, k).to_arrow()
        assert got.equals(expected), backend
        assert got.schema.metadata[b"settopk.score"] == expected.schema.metadata[b"settopk.score"]


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_golden_corpus_matches_expected(golden_dir, backend):
    gold = golden_dir / "sti2-small"
    top = settopk.Index.build(gold / "docs.txt", backend=backend).search(gold / "queries", k=100)
    assert top.query_ids == tuple(sorted(p.name for p in (gold / "queries").iterdir()))
    got = ["\t".join(map(str, row[row >= 0].tolist())) for row in top.doc_ids]
    assert got == (gold / "expected.tsv").read_text().splitlines()
    fractions = [f"{o}/{max(q, d)}" for o, q, d in zip(top.overlap.ravel(), np.repeat(top.query_len, 100), top.doc_len.ravel())]
    expected = [x for line in (gold / "expected_scores.tsv").read_text().splitlines() for x in line.split("\t")]
    assert fractions == expected


def test_import_settopk_imports_no_ray_cupy_or_numba():
    code = (
        "import sys\n"
        "heavy = ('ray', 'cupy', 'numba')\n"
        "import settopk\n"
        "settopk.Index, settopk.TopK\n"
        "assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]\n"
        "settopk.Index.build([[1, 2], [2]], backend='numpy').search([[2]], 2).to_arrow()\n"
        "assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]\n"
        "settopk.Index.build([[1, 2], [2]], backend='cpu')\n"
        "assert 'numba' in sys.modules and 'ray' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=240)


# ---- the benchmark's library run -------------------------------------------------------------

@pytest.mark.slow
def test_library_bench_smoke_times_index_search_against_the_kernel(tmp_path, capsys):
    import json

    import settopk.jobs.bench as bench
    from settopk.jobs.bench.config import load_bench_config

    assert load_bench_config("library-1m").library is not None
    out = tmp_path / "library.json"
    assert bench.main(["--config", "library-smoke", "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    result = json.loads(out.read_text())
    assert result["benchmark"] == "settopk.bench.library" and result["backend"] == "cpu" and result["n_queries"] == 1000
    assert len(result["kernel"]["runs_s"]) == len(result["index_search"]["runs_s"]) == 2 and result["ratio"] > 0
    assert result["exactness"]["identical"] and "ratio Index.search / kernel alone" in capsys.readouterr().out


@pytest.mark.parametrize("text, match", [("library: {batch_size: 0}\n", "library.batch_size"),
                                         ("library: {bogus: 1}\n", "library.batch_size"),
                                         ("library: {}\nthroughput: {}\nquery_batch_size: 5\n", "not several")])
def test_bad_library_sections_are_rejected(tmp_path, text, match):
    from settopk.configs import ConfigError
    from settopk.jobs.bench.config import load_bench_config

    path = tmp_path / "b.yaml"
    path.write_text("backend: cpu\ncpus_per_shard: 1.0\nbaselines: []\n" + text)
    with pytest.raises(ConfigError, match=match):
        load_bench_config(str(path))
