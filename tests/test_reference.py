"""The NumPy backend against the brute-force oracle (exact fractions on Python sets)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import NumpyShardIndex, SetBatch, brute_force_topk


def _rows(topk):
    return [
        [(int(d), int(o), int(l)) for d, o, l in zip(ids, ov, dl) if d >= 0]
        for ids, ov, dl in zip(topk.doc_ids, topk.overlap, topk.doc_len)
    ]


def _check(docs, queries, k, max_len=128, doc_ids=None):
    ids = np.arange(len(docs)) if doc_ids is None else np.asarray(doc_ids)
    index = NumpyShardIndex(SetBatch.from_lists(docs), ids, max_len)
    got = index.search(SetBatch.from_lists(queries), k)
    assert got.doc_ids.shape == (len(queries), k)
    assert _rows(got) == brute_force_topk(docs, queries, k, doc_ids=list(ids))
    # padding only where the shard has fewer than k docs
    assert np.all((got.doc_ids >= 0).sum(axis=1) == min(k, len(docs)))


def test_ties_break_by_lower_doc_id():
    docs = [[1, 2], [1, 2], [3], [1, 2], [1, 2, 3, 4]]
    _check(docs, [[1, 2]], k=3)
    _check(docs, [[1, 2, 3]], k=5)


def test_empty_sets_and_zero_over_zero():
    docs = [[], [0], [], [5, 6]]
    _check(docs, [[], [0], [7]], k=4)


def test_extreme_ids_and_max_len_set():
    full = list(range(65536 - 128, 65536))
    docs = [full, [0], [0, 65535], list(range(128))]
    _check(docs, [full, [0, 65535], list(range(128))], k=4)


def test_k_larger_than_corpus_and_sparse_doc_ids():
    docs = [[1, 2, 3], [2, 3], [9]]
    _check(docs, [[2, 3], [9]], k=10, doc_ids=[7, 100, 2**40])


def test_max_len_above_255_uses_wide_lanes():
    docs = [list(range(300)), list(range(150, 400)), [1]]
    _check(docs, [list(range(300)), [1, 2]], k=3, max_len=400)


def test_zero_docs():
    index = NumpyShardIndex(SetBatch.from_lists([]), np.zeros(0, np.int64), 128)
    got = index.search(SetBatch.from_lists([[1]]), 5)
    assert np.all(got.doc_ids == -1)


def test_rejects_bad_construction():
    with pytest.raises(ValueError, match="strictly increasing"):
        NumpyShardIndex(SetBatch.from_lists([[1], [2]]), np.array([3, 3]), 128)
    with pytest.raises(ValueError, match="max_len"):
        NumpyShardIndex(SetBatch.from_lists([[1, 2, 3]]), np.array([0]), 2)


def test_random_many_query_groups_with_heavy_ties():
    rng = np.random.default_rng(7)
    docs = [rng.choice(12, size=rng.integers(0, 8), replace=False).tolist() for _ in range(300)]
    queries = [rng.choice(12, size=rng.integers(0, 8), replace=False).tolist() for _ in range(21)]
    _check(docs, queries, k=37, max_len=8)


_sets = st.lists(st.lists(st.integers(0, 20), max_size=10), max_size=40)


@settings(max_examples=150, deadline=None)
@given(docs=_sets, queries=st.lists(st.lists(st.integers(0, 20), max_size=10), min_size=1, max_size=12), k=st.integers(1, 50))
def test_property_matches_oracle(docs, queries, k):
    # Repeated ids inside a set count once: from_lists de-duplicates, the oracle uses sets.
    _check(docs, queries, k, max_len=21)
