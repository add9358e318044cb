"""The postings path (settopk.kernels.postings) and NumpyShardIndex's routing against the brute-force oracle."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from settopk.kernels import SCORES, NumpyShardIndex, SetBatch, brute_force_topk, score_key
from settopk.kernels.postings import build_postings, check_routing, postings_cost, postings_search


def _rows(topk):
    return [
        [(int(d), int(o), int(l)) for d, o, l in zip(ids, ov, dl) if d >= 0]
        for ids, ov, dl in zip(topk.doc_ids, topk.overlap, topk.doc_len)
    ]


def _oracle(docs, queries, k, ids, score, floor=None):
    """brute_force_topk with the floor applied (the top-k of {key >= floor} is the top-k cut at the floor)."""
    want = brute_force_topk(docs, queries, k, doc_ids=list(ids), score=score)
    if floor is None:
        return want
    out = []
    for q, row, f in zip(queries, want, floor):
        ql = len(set(q))
        out.append([(d, o, l) for d, o, l in row if int(score_key(o, ql, l, 8, score)) >= f])
    return out


def _check(docs, queries, k, score, floor=None, bound=None, ids=None):
    ids = np.arange(len(docs)) * 5 + 3 if ids is None else np.asarray(ids)
    d, q = SetBatch.from_lists(docs), SetBatch.from_lists(queries)
    got, paths = postings_search(d, ids, build_postings(d, 64), q, k, 8, score, floor_key=floor, bound_key=bound)
    assert got.doc_ids.shape == (len(queries), k)
    assert sum(paths.values()) == (len(queries) if len(docs) else 0)
    assert _rows(got) == _oracle(docs, queries, k, ids, score, floor)
    for routing in ("auto", "postings"):
        index = NumpyShardIndex(d, ids, 8, score, routing=routing)
        again = index.search(q, k, floor_key=floor)
        for a, b in zip(again, got):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    return paths


def test_ties_empty_sets_and_zero_fill():
    docs = [[], [1, 2], [1, 2], [3], [], [1, 2, 3, 4], [7]]
    for score in SCORES:
        paths = _check(docs, [[1, 2], [], [9], [1, 2, 3, 4, 5, 6, 7, 8]], 6, score)
        assert paths["scancount"] == 4  # no bound, no floor: every query counts its lists


def test_the_largest_id_65535():
    """uint16 ids: the postings of id 65535 end at offsets[65536] (an id + 1 that must not wrap to 0)."""
    docs = SetBatch.from_lists([[0, 65535], [65535], [1, 2], [0]])
    postings = build_postings(docs)
    assert postings.lists(np.array([65535, 0], dtype=np.uint16)).tolist() == [0, 1, 0, 3]
    queries = SetBatch.from_lists([[65535], [0, 65535], [2, 65535]])
    want = NumpyShardIndex(docs, np.arange(4), 8).search(queries, 3)
    got = NumpyShardIndex(docs, np.arange(4), 8, routing="postings").search(queries, 3)
    for a, b in zip(got, want):
        assert np.array_equal(a, b)


def test_prefix_filter_with_exact_and_too_high_bounds():
    rng = np.random.default_rng(1)
    docs = [rng.choice(30, size=rng.integers(0, 9), replace=False).tolist() for _ in range(120)]
    queries = [docs[5], docs[17][:6], [0, 1, 2, 3, 4, 5, 6, 7], []]
    for score in SCORES:
        d = SetBatch.from_lists(docs)
        truth = NumpyShardIndex(d, np.arange(120) * 5 + 3, 8, score).search(SetBatch.from_lists(queries), 3)
        ql = np.array([len(q) for q in queries])
        kth = score_key(truth.overlap[:, -1], ql, truth.doc_len[:, -1], 8, score).astype(np.int64)
        _check(docs, queries, 3, score, bound=kth)  # exact bound: prefix filtering where it pays
        _check(docs, queries, 3, score, bound=kth + 1)  # above the k-th best: detected, answered without it
        _check(docs, queries, 3, score, floor=kth, bound=kth + 5)


def test_near_duplicate_query_is_prefix_filtered():
    rng = np.random.default_rng(2)
    docs = [rng.choice(64, size=8, replace=False).tolist() for _ in range(400)]
    query = docs[10]
    d = SetBatch.from_lists(docs)
    got, paths = postings_search(d, np.arange(400), build_postings(d, 64), SetBatch.from_lists([query]), 1, 8,
                                 bound_key=np.array([64]))
    assert paths == {"scancount": 0, "prefix": 1}
    assert got.doc_ids[0, 0] == 10 and got.overlap[0, 0] == 8


def test_bad_arguments_raise():
    d = SetBatch.from_lists([[1, 2]])
    with pytest.raises(ValueError, match="routing"):
        check_routing("fast")
    with pytest.raises(ValueError, match="routing"):
        NumpyShardIndex(d, np.arange(1), 8, routing="fast")
    with pytest.raises(ValueError, match="vocab_size"):
        build_postings(d, 2)
    with pytest.raises(ValueError, match="k must be"):
        postings_search(d, np.arange(1), build_postings(d), d, 0, 8)
    with pytest.raises(ValueError, match="floor_key"):
        postings_search(d, np.arange(1), build_postings(d), d, 1, 8, bound_key=np.array([-2]))


def test_cost_and_empty_shard():
    d = SetBatch.from_lists([[1, 2], [2], []])
    p = build_postings(d, 4)
    assert p.doc_freq.tolist() == [0, 1, 2, 0] and p.positions.tolist() == [0, 0, 1]
    assert postings_cost(SetBatch.from_lists([[2, 1], [], [3]]), p.doc_freq).tolist() == [3, 0, 0]
    empty = SetBatch.from_lists([])
    got, paths = postings_search(empty, np.zeros(0, np.int64), build_postings(empty), d, 2, 8)
    assert np.all(got.doc_ids == -1) and sum(paths.values()) == 0


def test_routing_choice_is_logged_per_search(caplog):
    docs = SetBatch.from_lists([[1, 2, 3], [2, 3], [4], [1, 4]])
    queries = SetBatch.from_lists([[1, 2], [4]])
    with caplog.at_level("DEBUG", logger="settopk.kernels"):
        NumpyShardIndex(docs, np.arange(4), 8, routing="postings").search(queries, 2)
    assert "routing postings: 2 of 2 queries to the postings" in caplog.text


def test_routing_report_and_its_reset_when_every_query_is_skipped():
    docs = SetBatch.from_lists([[1, 2, 3], [2, 3], [4], [1, 4]])
    queries = SetBatch.from_lists([[1, 2], [4], [9]])
    index = NumpyShardIndex(docs, np.arange(4), 8, routing="postings")
    assert index.postings_bytes == index.postings.nbytes > 0
    index.search(queries, 2)
    r = index.last_routing
    assert r["postings"] == r["scancount"] + r["prefix"] == 3 and r["scan"] == 0
    long = SetBatch.from_lists([[1, 2, 3, 4, 5, 6]] * 2)  # docs of at most 3 ids reach 3/6 at best
    index.search(long, 2, floor_key=np.full(2, score_key(1, 1, 1, 8)))  # a floor of 1.0: both skipped
    assert index.last_skipped == 2 and index.last_routing == {"scan": 0, "postings": 0, "scancount": 0, "prefix": 0}
    assert NumpyShardIndex(docs, np.arange(4), 8).postings_bytes == 0


_sets = st.lists(st.lists(st.integers(0, 14), max_size=8), max_size=40)


@settings(max_examples=200, deadline=None)
@given(docs=_sets, queries=st.lists(st.lists(st.integers(0, 14), max_size=8), min_size=1, max_size=6),
       k=st.integers(1, 12), score=st.sampled_from(SCORES), data=st.data())
def test_property_matches_oracle(docs, queries, k, score, data):
    n_q = len(queries)
    top = 64 * 4 if score not in ("cosine", "overlap") else (8**4 if score == "cosine" else 8)
    floor = np.array(data.draw(st.lists(st.integers(-1, top + 1), min_size=n_q, max_size=n_q))) \
        if data.draw(st.booleans()) else None
    bound = np.array(data.draw(st.lists(st.integers(-1, top + 1), min_size=n_q, max_size=n_q))) \
        if data.draw(st.booleans()) else None
    _check(docs, queries, k, score, floor=floor, bound=bound)
