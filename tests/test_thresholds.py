"""Threshold exchange (settopk.shards.thresholds): home shards, the two rounds, floors, and exactness of the
two-round protocol against the brute-force oracle and against one round without floors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settopk.kernels import NumpyShardIndex, SetBatch, TopK, brute_force_topk, empty_topk, key_scale, score_key
from settopk.shards import (
    floors_from,
    home_shards,
    merge_topk,
    plan_shards,
    scatter_rounds,
    split_rounds,
)
from settopk.shards.inputs import Corpus, SetLimits
from settopk.shards.searcher import ShardSearcher
from tests.shard_helpers import search_two_rounds


def _rows(topk):
    return [
        [(int(d), int(o), int(l)) for d, o, l in zip(ids, ov, dl) if d >= 0]
        for ids, ov, dl in zip(topk.doc_ids, topk.overlap, topk.doc_len)
    ]


def _same(a: TopK, b: TopK):
    for name in TopK._fields:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


# --------------------------------------------------------------------------------------------------
# Home shards and rounds


def test_home_shard_is_the_shard_whose_range_holds_the_query_length():
    max_len = 12
    lengths = np.array([1, 1, 1, 3, 3, 3, 3, 7, 7, 10, 10, 10])  # gaps at 0, 2, 4-6, 8-9, 11-12
    for n_shards in range(1, 6):
        plan = plan_shards(lengths, n_shards, max_len)
        every = np.arange(max_len + 1)
        home = home_shards(plan, every)
        assert home.dtype == np.int64 and home.shape == every.shape
        for q, h in zip(every.tolist(), home.tolist()):
            assert [s.shard_id for s in plan if s.min_len <= q <= s.max_len] == [h]
        assert home[0] == 0 and home[max_len] == len(plan) - 1


def test_split_rounds_partitions_every_shard_between_the_rounds():
    rng = np.random.default_rng(0)
    max_len = 16
    lengths = rng.choice([0, 2, 5, 6, 11, 16], size=80)
    plan = plan_shards(lengths, 4, max_len)
    assert len(plan) == 4
    query_len = np.array([0, max_len, 3, 7, 12, 5, 5, 1, 16, 9, 0])  # includes lengths no doc has
    first, second = split_rounds(plan, query_len)
    home = home_shards(plan, query_len)
    assert len(first) == len(second) == len(plan)
    every = np.arange(len(query_len))
    for s in range(len(plan)):
        assert first[s].dtype == second[s].dtype == np.int64
        assert first[s].tolist() == every[home == s].tolist()
        assert second[s].tolist() == every[home != s].tolist()
        assert sorted(first[s].tolist() + second[s].tolist()) == every.tolist()
    assert sorted(np.concatenate(first).tolist()) == every.tolist()  # each query has one home
    empty_first, empty_second = split_rounds(plan, np.zeros(0, np.int64))
    assert all(len(r) == 0 for r in empty_first + empty_second)


def test_single_shard_plan_has_no_second_round():
    plan = plan_shards(np.array([2, 3, 4]), 1, 8)
    first, second = split_rounds(plan, np.array([0, 8, 3]))
    assert first[0].tolist() == [0, 1, 2] and second[0].tolist() == []


# --------------------------------------------------------------------------------------------------
# Floors and scatter


def test_floors_from_takes_the_kth_key_and_no_floor_for_short_lists():
    max_len, k = 8, 3
    query_len = np.array([4, 2, 6, 5, 3])
    # shard A covers rows 0 and 2, shard B covers row 3; rows 1 and 4 have no first-round result
    a = TopK(
        np.array([[10, 11, 12], [20, -1, -1]]),
        np.array([[4, 3, 2], [5, 0, 0]], dtype=np.int16),
        np.array([[4, 4, 6], [5, 0, 0]], dtype=np.int16),
    )
    b = TopK(np.array([[7, 8, 9]]), np.array([[2, 2, 0]], dtype=np.int16), np.array([[2, 3, 0]], dtype=np.int16))
    floors = floors_from([a, b], [np.array([0, 2]), np.array([3])], query_len, k, max_len)
    assert floors.dtype == np.int64
    assert floors.tolist() == [int(score_key(2, 4, 6, max_len)), -1, -1, 0, -1]  # row 2: 1 < k entries
    assert floors[0] == key_scale(max_len) * 2 // 6
    # a list of exactly k entries has a floor (a shorter one has none: row 2 above)
    full = TopK(np.array([[1, 2]]), np.array([[1, 1]], dtype=np.int16), np.array([[1, 2]], dtype=np.int16))
    assert floors_from([full], [np.array([0])], np.array([1]), 2, max_len).tolist() == [key_scale(max_len) // 2]
    assert floors_from([], [], np.array([1, 2]), 2, max_len).tolist() == [-1, -1]
    assert floors_from([empty_topk(0, 2)], [np.zeros(0, np.int64)], np.array([3]), 2, max_len).tolist() == [-1]
    with pytest.raises(ValueError, match="shape"):
        floors_from([full], [np.array([0])], np.array([1]), 3, max_len)  # a result of k=2 for k=3


def test_scatter_rounds_places_rows_and_pads_the_rest():
    k = 2
    one = TopK(np.array([[5, 6]]), np.array([[2, 1]], dtype=np.int16), np.array([[2, 3]], dtype=np.int16))
    two = TopK(np.array([[7, -1], [8, 9]]), np.array([[1, 0], [3, 3]], dtype=np.int16), np.array([[1, 0], [4, 5]], dtype=np.int16))
    out = scatter_rounds(4, k, [(np.array([2]), one), (np.array([0, 3]), two)])
    assert out.doc_ids.tolist() == [[7, -1], [-1, -1], [5, 6], [8, 9]]
    assert out.overlap.tolist() == [[1, 0], [0, 0], [2, 1], [3, 3]]
    assert out.doc_len.tolist() == [[1, 0], [0, 0], [2, 3], [4, 5]]
    assert out.overlap.dtype == np.int16 and out.doc_ids.dtype == np.int64
    _same(scatter_rounds(3, k, []), empty_topk(3, k))


# --------------------------------------------------------------------------------------------------
# Exactness of the two-round protocol


def _shard_docs(spec, doc_ids, docs):
    """The docs of ``spec``'s length range, in id order."""
    lengths = np.array([len(set(d)) for d in docs], dtype=np.int64)
    inside = np.flatnonzero((lengths >= spec.min_len) & (lengths <= spec.max_len))
    inside = inside[np.argsort(np.asarray(doc_ids)[inside], kind="stable")]
    return np.asarray(doc_ids, dtype=np.int64)[inside], SetBatch.from_lists([docs[i] for i in inside])


def _two_rounds_with_indexes(plan, doc_ids, docs, queries: SetBatch, k, max_len):
    """Round 1 (home rows, no floor), floors, round 2 (the other rows with floors), scatter, merge."""
    indexes = [NumpyShardIndex(b, i, max_len) for i, b in (_shard_docs(spec, doc_ids, docs) for spec in plan)]
    first, second = split_rounds(plan, queries.lengths)
    round_one = [ix.search(queries.take(rows), k) for ix, rows in zip(indexes, first)]
    floors = floors_from(round_one, first, queries.lengths, k, max_len)
    parts, skipped = [], 0
    for ix, rows_one, result_one, rows_two in zip(indexes, first, round_one, second):
        result_two = ix.search(queries.take(rows_two), k, floor_key=floors[rows_two])
        skipped += ix.last_skipped
        parts.append(scatter_rounds(queries.n_sets, k, [(rows_one, result_one), (rows_two, result_two)]))
    return merge_topk(parts, queries.lengths, k, max_len), skipped


def _two_rounds_with_searchers(plan, doc_ids, docs, queries: SetBatch, k, max_len):
    """The same through ShardSearcher, built from two corpus pieces as the reader tasks leave them, and
    called as settopk.jobs.search does (only shards with rows; round 2 gets every first-round result)."""
    order = np.argsort(doc_ids, kind="stable")
    ids = np.asarray(doc_ids, dtype=np.int64)[order]
    batch = SetBatch.from_lists([docs[i] for i in order])
    half = len(ids) // 2
    pieces = [
        Corpus(ids[:half], batch.take(np.arange(half)), 0, "parquet", ()),
        Corpus(ids[half:], batch.take(np.arange(half, len(ids))), 0, "parquet", ()),
    ]
    limits = SetLimits(vocab_size=65536, max_len=max_len)
    searchers = [ShardSearcher(spec, pieces, limits, "numpy") for spec in plan]
    merged, _, _ = search_two_rounds(searchers, plan, queries, k, max_len)
    infos = [s.info() for s in searchers]
    assert sum(i["queries_searched"] for i in infos) == queries.n_sets * len(plan)
    return merged, sum(i["queries_skipped"] for i in infos)


def _one_round(plan, doc_ids, docs, queries: SetBatch, k, max_len):
    parts = []
    for spec in plan:
        ids, batch = _shard_docs(spec, doc_ids, docs)
        parts.append(NumpyShardIndex(batch, ids, max_len).search(queries, k))
    return merge_topk(parts, queries.lengths, k, max_len)


def _check_protocol(docs, doc_ids, queries, k, n_shards, max_len):
    """All three ways equal the oracle; returns the (query, shard) searches the floors skipped."""
    lengths = np.array([len(set(d)) for d in docs], dtype=np.int64)
    plan = plan_shards(lengths, n_shards, max_len)
    q = SetBatch.from_lists(queries)
    expected = brute_force_topk(docs, queries, k, doc_ids=list(doc_ids))
    two, skipped = _two_rounds_with_indexes(plan, doc_ids, docs, q, k, max_len)
    via_searchers, skipped_searchers = _two_rounds_with_searchers(plan, doc_ids, docs, q, k, max_len)
    one = _one_round(plan, doc_ids, docs, q, k, max_len)
    assert _rows(two) == expected
    _same(two, one)
    _same(via_searchers, one)
    assert skipped == skipped_searchers
    return skipped


def _random_case(rng, max_len):
    """Small vocab (many equal scores), lengths with gaps, empty docs, docs of max_len, equal sets."""
    vocab = max_len + int(rng.integers(0, 4))
    doc_lengths = rng.choice(max_len + 1, size=int(rng.integers(2, 6)), replace=False)
    docs = [rng.choice(vocab, size=int(rng.choice(doc_lengths)), replace=False).tolist() for _ in range(int(rng.integers(5, 120)))]
    docs += [[], list(range(max_len)), list(range(max_len))[::-1], [1, 2], [2, 1, 1]]  # equal sets: ties by id
    doc_ids = rng.permutation(len(docs) * 4)[: len(docs)]  # sparse ids, not in length order
    absent = [n for n in range(max_len + 1) if n not in set(len(set(d)) for d in docs)]
    query_lengths = list(rng.integers(0, max_len + 1, size=12)) + absent + [0, max_len]
    queries = [rng.choice(vocab, size=int(n), replace=False).tolist() for n in query_lengths]
    return docs, doc_ids, queries


@pytest.mark.parametrize("seed", range(8))
def test_two_rounds_equal_oracle_and_one_round(seed):
    rng = np.random.default_rng(seed)
    max_len = int(rng.choice([6, 8, 10]))
    docs, doc_ids, queries = _random_case(rng, max_len)
    skipped = 0
    for n_shards in range(1, 6):
        for k in (1, 3, 17, len(docs) + 2):
            skipped += _check_protocol(docs, doc_ids, queries, k, n_shards, max_len)
    assert skipped > 0  # the floors did prune some (query, shard) searches


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(st.lists(st.integers(0, 9), max_size=8), min_size=1, max_size=50),
    queries=st.lists(st.lists(st.integers(0, 9), max_size=8), min_size=1, max_size=10),
    k=st.integers(1, 55),
    n_shards=st.integers(1, 5),
    id_step=st.integers(1, 3),
)
def test_property_two_rounds_equal_oracle(docs, queries, k, n_shards, id_step):
    max_len = 8
    doc_ids = [id_step * i for i in range(len(docs))][::-1]  # descending ids: id order is not input order
    _check_protocol(docs, doc_ids, queries, k, n_shards, max_len)


def test_shard_that_cannot_reach_the_floor_skips_the_query():
    """Each query's home shard has k exact matches, so its floor is the top key; the other shard's
    lengths cannot reach it, so it skips the query (padding only), and the result stays exact."""
    max_len, k = 8, 3
    docs = [[1, 2]] * 4 + [list(range(8))] * 3 + [[1]]
    doc_ids = list(range(len(docs)))
    plan = plan_shards(np.array([len(d) for d in docs]), 2, max_len)
    assert [(s.min_len, s.max_len) for s in plan] == [(0, 7), (8, 8)]
    queries = [[1, 2], list(range(8))]
    q = SetBatch.from_lists(queries)
    merged, skipped = _two_rounds_with_searchers(plan, np.array(doc_ids), docs, q, k, max_len)
    assert skipped == 2  # each query on the other shard: neither reaches the other's top key
    assert _rows(merged) == brute_force_topk(docs, queries, k, doc_ids=doc_ids)
    assert merged.doc_ids[0].tolist() == [0, 1, 2]
