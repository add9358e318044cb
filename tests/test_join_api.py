"""The in-process threshold join (issue 46): ``Index.threshold_search``, ``Index.self_join``,
``settopk.Pairs`` and ``settopk.dedup``, against the oracle (every score, ties at ``T``, k caps,
the self-join rule, token values), their errors, and the job's own rows and ``--dedup`` tables."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import settopk
from settopk.index.join import JoinArgumentError
from settopk.jobs.output import RESULT_SCHEMA
from settopk.kernels import SCORES, brute_force_threshold, score_value
from settopk.shards.components import components, group_tables
from tests.job_helpers import job_config, write_sets

HOST_BACKENDS = ("numpy", "cpu")
THRESHOLDS = {"overlap": ("0", "2", "3"), "containment": ("0", "1/2", "2/3", "1")}


def _thresholds(score):
    return THRESHOLDS.get(score, ("0", "1/2", "2/3", "0.8", "1"))


def _corpus(seed, n=90, vocab=12):
    """Zipf-skewed tokens, many identical sets, empty sets: ties under every score."""
    rng = np.random.default_rng(seed)
    weights = 1 / np.arange(1, vocab + 1)
    base = [rng.choice(vocab, size=int(rng.integers(0, 7)), replace=False, p=weights / weights.sum()).tolist()
            for _ in range(n // 3)]
    docs = base + [base[i] for i in rng.integers(0, len(base), n - len(base))] + [[], []]
    return docs


def _expected_pairs(docs, queries, t, score, k=None, self_join=None, doc_ids=None):
    """Oracle rows ``(query, doc_id, overlap, query_len, doc_len)``; ``self_join`` as the job's rule."""
    ids = list(range(len(docs))) if doc_ids is None else list(doc_ids)
    size = [len(set(d)) for d in docs]
    rows = []
    for qi, found in enumerate(brute_force_threshold(docs, queries, t, doc_ids=ids, score=score)):
        ql = len(set(queries[qi]))
        if self_join is not None:
            me = ids[qi]
            found = [p for p in found if (p[0] != me or self_join == "include")
                     and (score == "containment" or (p[2], p[0]) >= (size[qi], me))]
        if k is not None:
            found = found[:k]
        rows += [(ids[qi] if self_join is not None else qi, d, o, ql, dl) for d, o, dl in found]
    return rows


def _rows(pairs):
    return list(zip(pairs.query_index.tolist(), pairs.doc_ids.tolist(), pairs.overlap.tolist(),
                    pairs.query_len.tolist(), pairs.doc_len.tolist()))


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("score", SCORES)
def test_threshold_search_and_self_join_equal_the_oracle(backend, score):
    docs = _corpus(1)
    queries = _corpus(2, n=25)[:25] + [[], [3, 1, 3]]
    index = settopk.Index.build(docs, score=score, backend=backend)
    for text in _thresholds(score):
        t = Fraction(text)
        for k in (None, 2):
            got = index.threshold_search(queries, text, k=k)
            assert _rows(got) == _expected_pairs(docs, queries, t, score, k), (text, k)
            assert got.scores.tolist() == score_value(got.overlap, got.query_len, got.doc_len, score).tolist()
            assert got.n_queries == len(queries) and got.threshold == str(t) and got.k == k
            for include in (False, True):
                joined = index.self_join(text, include_self=include, k=k)
                want = _expected_pairs(docs, docs, t, score, k, self_join="include" if include else "exclude")
                assert _rows(joined) == want, (text, k, include)
                assert joined.n_queries == len(docs) and len(joined) == joined.n_pairs == len(want)


def test_doc_ids_and_token_values():
    docs = [["a", "b", "c"], ["b", "c"], ["a", "b", "c"], ["x"], []]
    ids = [40, 7, 12, 3, 99]
    index = settopk.Index.build(docs, doc_ids=ids, score="jaccard", backend="cpu")
    pairs = index.threshold_search([["b", "c", "zz"], ["a", "b", "c"]], "1/2")
    assert _rows(pairs) == [(0, 7, 2, 3, 2), (0, 12, 2, 3, 3), (0, 40, 2, 3, 3), (1, 12, 3, 3, 3), (1, 40, 3, 3, 3),
                            (1, 7, 2, 3, 2)]
    joined = index.self_join(Fraction(2, 3))  # ids sorted by the index: 3, 7, 12, 40, 99
    assert _rows(joined) == [(7, 12, 2, 2, 3), (7, 40, 2, 2, 3), (12, 40, 3, 3, 3)]
    assert joined.to_arrow()["query_id"].to_pylist() == ["7", "7", "12"]
    names = joined.to_arrow(query_ids=["d3", "d7", "d12", "d40", "d99"])
    assert names["query_id"].to_pylist() == ["d7", "d7", "d12"] and names["rank"].to_pylist() == [1, 2, 1]


def test_to_arrow_schema_ranks_names_and_metadata(tmp_path):
    index = settopk.Index.build([[1, 2], [1, 2, 3], [2]], backend="numpy")
    queries = pa.table({"query_id": ["x", "y"], "tokens": pa.array([[1, 2], [9]], pa.list_(pa.int64()))})
    pairs = index.threshold_search(queries, 0.5, k=5)
    table = pairs.to_arrow()
    assert table.schema.equals(RESULT_SCHEMA, check_metadata=False)
    assert table.to_pydict() == {"query_id": ["x", "x", "x"], "rank": [1, 2, 3], "doc_id": [0, 1, 2],
                                 "score": [1.0, 2 / 3, 0.5], "overlap": [2, 2, 1], "query_len": [2, 2, 2],
                                 "doc_len": [2, 3, 1]}
    meta = table.schema.metadata
    assert meta[b"settopk.threshold"] == b"1/2" and meta[b"settopk.k"] == b"5" and meta[b"settopk.score"].startswith(b"Braun-Blanquet")
    assert pairs.to_arrow(query_ids=["a", "b"])["query_id"].to_pylist() == ["a", "a", "a"]
    with pytest.raises(JoinArgumentError, match="unique"):
        pairs.to_arrow(query_ids=["a", "a"])
    empty = settopk.Index.build([], backend="numpy").threshold_search([[1]], 0)
    assert empty.n_pairs == 0 and empty.to_arrow().num_rows == 0 and "n_pairs=0" in repr(empty)


def test_to_arrow_names_and_ranks_equal_a_plain_count_per_query():
    rng = np.random.default_rng(11)
    docs = [sorted(set(rng.integers(0, 9, rng.integers(1, 6)).tolist())) for _ in range(300)]
    pairs = settopk.Index.build(docs, backend="cpu", score="jaccard").self_join("0.5")
    table = pairs.to_arrow()
    seen: dict[int, int] = {}
    want_rank = []
    for q in pairs.query_index.tolist():
        seen[q] = seen.get(q, 0) + 1
        want_rank.append(seen[q])
    assert len(seen) > 100 and max(want_rank) > 20
    assert table["query_id"].to_pylist() == [str(q) for q in pairs.query_index.tolist()]
    assert table["rank"].to_pylist() == want_rank


def test_a_query_over_the_rank_column_is_refused_by_to_arrow_not_by_the_search():
    index = settopk.Index.build([[1]] * 32768, backend="numpy")
    pairs = index.threshold_search([[1]], 1)
    assert pairs.n_pairs == 32768
    with pytest.raises(JoinArgumentError, match="k="):
        pairs.to_arrow()
    assert index.threshold_search([[1]], 1, k=3).to_arrow()["rank"].to_pylist() == [1, 2, 3]


@pytest.mark.parametrize("call, match", [
    (lambda i: i.threshold_search([[1]], "abc"), "threshold must be a finite number"),
    (lambda i: i.threshold_search([[1]], -0.1), "threshold must be >= 0"),
    (lambda i: i.threshold_search([[1]], "3/2"), "threshold must be <= 1"),
    (lambda i: i.threshold_search([[1]], float("nan")), "threshold must be a finite number"),
    (lambda i: i.threshold_search([[1]], 0.5, k=0), "k must be an integer >= 1"),
    (lambda i: i.self_join(True), "threshold must be a number"),
    (lambda i: i.self_join(0.5, include_self="yes"), "include_self must be True or False"),
    (lambda i: settopk.dedup(i, 0.5, score="cosine"), "score must be the index's"),
])
def test_bad_arguments_raise_settopk_errors_naming_them(call, match):
    index = settopk.Index.build([[1, 2], [2]], backend="numpy")
    with pytest.raises(JoinArgumentError, match=match) as info:
        call(index)
    assert isinstance(info.value, ValueError) and isinstance(info.value, settopk.errors.SettopkError)


def _dedup_by_all_pairs(docs, t, score):
    """The job's rule written out: components of every self-join pair (no identical-set shortcut)."""
    rows = _expected_pairs(docs, docs, t, score, self_join="exclude")
    return group_tables(*components(np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], np.int64)))


@pytest.mark.parametrize("backend", [*HOST_BACKENDS, pytest.param("cupy", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("score", SCORES)
def test_dedup_equals_the_components_of_every_pair(backend, score):
    for seed in (3, 4):
        docs = _corpus(seed, n=120, vocab=9)
        index = settopk.Index.build(docs, score=score, backend=backend)
        for text in _thresholds(score):
            got = settopk.dedup(index, text, score=score)
            want = _dedup_by_all_pairs(docs, Fraction(text), score)
            assert got[0].equals(want[0]) and got[1].equals(want[1]), (seed, text)


def test_dedup_builds_an_index_from_docs():
    groups, duplicates = settopk.dedup([[1, 2, 3], [1, 2, 3], [1, 2], [7], [7, 8]], "2/3", backend="numpy")
    assert groups.to_pydict() == {"doc_id": [0, 1, 2], "group_id": [0, 0, 0], "group_size": [3, 3, 3]}
    assert duplicates.to_pydict() == {"doc_id": [1, 2], "kept_doc_id": [0, 0]}


@pytest.mark.parametrize("score", ["jaccard", "containment"])
def test_pairs_and_dedup_equal_the_jobs_rows(ray_cluster, tmp_path, score):
    from settopk.jobs import score as job

    rng = np.random.default_rng(5)
    docs = _corpus(6, n=60)
    queries = [rng.choice(12, size=int(rng.integers(0, 6)), replace=False).tolist() for _ in range(8)] + [[]]
    docs_path, queries_path = write_sets(tmp_path / "docs.txt", docs), write_sets(tmp_path / "q.txt", queries)
    cfg = job_config(tmp_path, n_shards=2, query_batch_size=4)
    index = settopk.Index.build(docs_path, score=score, backend="cpu")
    out = tmp_path / "search"
    assert job.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--threshold", "2/3",
                     "--score", score, "--config", cfg, "--quiet"]) == 0
    expected = pq.read_table(out)
    got = index.threshold_search(queries_path, "2/3").to_arrow()
    assert got.num_rows > 0 and got.equals(expected)
    assert got.schema.metadata[b"settopk.score"] == expected.schema.metadata[b"settopk.score"]
    out = tmp_path / "dedup"
    assert job.main(["--docs", docs_path, "--self-join", "--dedup", "--out", str(out), "--threshold", "0.5",
                     "--score", score, "--config", cfg, "--quiet"]) == 0
    assert index.self_join("0.5").to_arrow().equals(pq.read_table(out / "pairs"))
    groups, duplicates = settopk.dedup(index, "0.5", score=score)
    assert groups.num_rows > 0 and groups.equals(pq.read_table(out / "groups"))
    assert duplicates.equals(pq.read_table(out / "duplicates"))


def test_self_joins_at_several_thresholds_share_the_prepared_corpus():
    import settopk
    from settopk.kernels import SetBatch
    from settopk.kernels.join import self_join as kernel_self_join

    rng = np.random.default_rng(5)
    docs = [sorted(set(rng.integers(0, 12, rng.integers(1, 6)).tolist())) for _ in range(60)]
    docs += docs[:25]
    index = settopk.Index.build(docs, score="jaccard", backend="cpu")
    prepared = None
    for t in ("0.5", "2/3", "1/3"):
        pairs = index.self_join(t)
        prepared = prepared or index.join_corpus  # made by the first self-join, then the same object
        assert index.join_corpus is prepared
        want = kernel_self_join(SetBatch.from_lists(docs), np.arange(len(docs)), t, "jaccard", index.max_len)
        assert pairs.n_pairs == len(want.doc_ids)
        assert pairs.doc_ids.tolist() == want.doc_ids.tolist()


@pytest.mark.parametrize("threads", [1, 3])
def test_pair_columns_equal_score_value_bit_for_bit(threads):
    from settopk.kernels.numba_pairs import pair_columns

    rng = np.random.default_rng(5)
    counts = rng.integers(0, 17, 40_000)  # 320,000 pairs: over _PARALLEL_PAIRS, so three threads write them
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(offsets[-1])
    row_key, row_len = rng.integers(0, 10**12, 40_000), rng.integers(0, 4097, 40_000).astype(np.int32)
    doc_len = rng.integers(0, 4097, n).astype(np.int32)
    rows = np.repeat(np.arange(40_000), counts)
    overlap = np.minimum(rng.integers(0, 4097, n), np.minimum(doc_len, row_len[rows])).astype(np.int32)
    for score in SCORES:
        key, length, scores = pair_columns(offsets, row_key, row_len, overlap, doc_len, score, threads)
        assert np.array_equal(key, row_key[rows]) and np.array_equal(length, row_len[rows])
        want = score_value(overlap, row_len[rows], doc_len, score)
        assert scores.dtype == np.float64 and np.array_equal(scores.view(np.int64), want.view(np.int64)), score


@pytest.mark.parametrize("backend", [*HOST_BACKENDS, pytest.param("cupy", marks=pytest.mark.gpu)])
def test_a_self_join_past_the_available_memory_is_refused_before_its_pairs_are_written(backend, monkeypatch):
    """Counted from the lists (cpu) or the groups' sizes (numpy, cupy; with k, n_docs * k):
    refused with the count and the ways around it, not left to run out of memory; with room for
    exactly its pairs it runs."""
    from settopk.index import ResultTooLarge
    from settopk.index import join as index_join

    docs = _corpus(9)
    index = settopk.Index.build(docs, score="jaccard", backend=backend)
    n_pairs = index.self_join("1/2").n_pairs
    n_capped = index.self_join("1/2", k=1).n_pairs
    assert n_pairs > len(docs)  # identical sets: more pairs than docs
    monkeypatch.setattr(index_join, "_available_bytes", lambda: n_pairs * index_join.PAIR_BYTES)
    assert index.self_join("1/2").n_pairs == n_pairs
    monkeypatch.setattr(index_join, "_available_bytes", lambda: (n_pairs - 1) * index_join.PAIR_BYTES)
    with pytest.raises(ResultTooLarge, match=rf"has {n_pairs} pairs.*raise the threshold.*k=.*settopk score"):
        index.self_join("1/2")
    with pytest.raises(MemoryError):
        index.self_join("1/2")
    assert index.self_join("1/2", k=1).n_pairs == n_capped  # at most n_docs pairs
