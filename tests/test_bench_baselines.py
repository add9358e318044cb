"""The benchmark's baselines give the NumPy index's exact top-k (ties to the lower doc id)."""

from __future__ import annotations

import numpy as np
import pytest

from jobs.bench.baselines import Popc4Baseline, ScipyBaseline, SpmmBaseline
from kernels import NumpyShardIndex
from tests.gpu_helpers import assert_same_topk, random_set_batch

_MAX_LEN, _VOCAB = 24, 60  # a small vocabulary: many equal scores, so the tie order is tested


def _data(seed: int):
    rng = np.random.default_rng(seed)
    docs = random_set_batch(rng, 700, _VOCAB, _MAX_LEN)
    queries = random_set_batch(rng, 37, _VOCAB, _MAX_LEN, min_len=1)
    doc_ids = np.arange(docs.n_sets, dtype=np.int64) * 3 + 5
    return docs, queries, doc_ids


def _check(baseline_cls, k: int) -> None:
    docs, queries, doc_ids = _data(k)
    want = NumpyShardIndex(docs, doc_ids, _MAX_LEN).search(queries, k)
    got = baseline_cls(docs, doc_ids, _MAX_LEN, _VOCAB).search(queries, k)
    assert_same_topk(got, want)


@pytest.mark.parametrize("k", [1, 10, 100])
def test_scipy_baseline_equals_the_numpy_index(k):
    pytest.importorskip("scipy")
    _check(ScipyBaseline, k)


@pytest.mark.gpu
@pytest.mark.parametrize("baseline_cls", [Popc4Baseline, SpmmBaseline])
@pytest.mark.parametrize("k", [1, 100])
def test_gpu_baselines_equal_the_numpy_index(baseline_cls, k):
    pytest.importorskip("torch")  # the GPU baselines select with torch.topk
    _check(baseline_cls, k)
