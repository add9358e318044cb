import numpy as np
import pytest

from kernels import NumpyShardIndex, SetBatch
from shards import merge_topk


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
