from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from settopk.kernels import NumpyShardIndex, SetBatch, order_candidates
from settopk.shards import merge_topk


@pytest.mark.parametrize("n_parts", [1, 2, 5])
def test_merge_of_any_partition_equals_global_topk(n_parts):
    rng = np.random.default_rng(n_parts)
    docs = [rng.choice(15, size=rng.integers(0, 9), replace=False).tolist() for _ in range(400)]
    queries = SetBatch.from_lists([rng.choice(15, size=rng.integers(0, 9), replace=False).tolist() for _ in range(30)])
    k = 50
    whole = NumpyShardIndex(SetBatch.from_lists(docs), np.arange(len(docs)), 16).search(queries, k)
    owner = rng.integers(0, n_parts, size=len(docs))  # any partition, not only by length
    parts = []
    for p in range(n_parts):
        rows = np.flatnonzero(owner == p)
        index = NumpyShardIndex(SetBatch.from_lists([docs[i] for i in rows]), rows, 16)
        parts.append(index.search(queries, k))
    merged = merge_topk(parts, queries.lengths, k, 16)
    for a, b in zip(merged, whole):
        assert np.array_equal(a, b)


def test_merge_pads_when_corpus_smaller_than_k():
    q = SetBatch.from_lists([[1]])
    a = NumpyShardIndex(SetBatch.from_lists([[1]]), np.array([4]), 8).search(q, 3)
    b = NumpyShardIndex(SetBatch.from_lists([[1, 2]]), np.array([2]), 8).search(q, 3)
    merged = merge_topk([a, b], q.lengths, 3, 8)
    assert merged.doc_ids.tolist() == [[4, 2, -1]]


def test_merge_rejects_mismatched_parts():
    q = SetBatch.from_lists([[1]])
    a = NumpyShardIndex(SetBatch.from_lists([[1]]), np.array([0]), 8).search(q, 2)
    with pytest.raises(ValueError):
        merge_topk([], q.lengths, 2, 8)
    with pytest.raises(ValueError):
        merge_topk([a], np.array([1, 1]), 2, 8)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 6), st.integers(1, 12), st.integers(1, 14),
    st.sampled_from([40, 2**40, 2**60]),  # the last does not pack with the key: the lexsort path
    st.integers(0, 2**32 - 1),
)
def test_order_candidates_matches_a_plain_sort_with_ties_and_padding(n_queries, n_cand, k, id_range, seed):
    rng = np.random.default_rng(seed)
    max_len = 8
    doc_ids = np.stack([rng.choice(id_range, size=n_cand, replace=False) for _ in range(n_queries)]).astype(np.int64)
    doc_ids[rng.random((n_queries, n_cand)) < 0.2] = -1  # unused slots anywhere in a row
    doc_len = rng.integers(0, max_len + 1, (n_queries, n_cand))
    overlap = np.minimum(rng.integers(0, max_len + 1, (n_queries, n_cand)), doc_len)  # few values: many ties
    query_len = rng.integers(0, max_len + 1, n_queries)
    got = order_candidates(doc_ids, overlap, doc_len, query_len, k, max_len)
    for q in range(n_queries):
        keys = [(-Fraction(int(o), max(int(query_len[q]), int(d), 1)), int(i), int(o), int(d))
                for i, o, d in zip(doc_ids[q], overlap[q], doc_len[q]) if i >= 0]
        want = sorted(keys)[:k]
        want_ids = [w[1] for w in want] + [-1] * (k - len(want))
        assert got.doc_ids[q].tolist() == want_ids
        assert got.overlap[q].tolist() == [w[2] for w in want] + [0] * (k - len(want))
        assert got.doc_len[q].tolist() == [w[3] for w in want] + [0] * (k - len(want))
