"""CupyShardIndex against NumpyShardIndex for every score: identical TopK, with and without floors,
through the overflow path, the sampling levels, both table widths and the widest keys.

Every test is marked ``gpu``; tests/conftest.py skips them where CuPy sees no GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from settopk.kernels import SCORES, NumpyShardIndex, SetBatch
from tests.gpu_helpers import assert_same_topk, check_floors, cupy_index as _index, random_set_batch as _random_sets

pytestmark = pytest.mark.gpu


def _zipf_sets(rng, lengths, vocab) -> SetBatch:
    """Sets of the given lengths with Zipf-like ids (many shared ids, many near-ties)."""
    sets = []
    for n in lengths.tolist():
        ids = np.unique(np.minimum(rng.zipf(1.3, size=3 * n + 8) - 1, vocab - 1))
        sets.append(rng.permutation(ids)[:n])
    return SetBatch.from_lists(sets)


def _check(docs, queries, k, max_len, score, doc_ids=None, **options):
    """Search with both backends, assert identical results, return the GPU index."""
    if doc_ids is None:
        doc_ids = np.arange(docs.n_sets, dtype=np.int64)
    gpu = _index(docs, doc_ids, max_len, score=score, **options)
    assert_same_topk(gpu.search(queries, k), NumpyShardIndex(docs, doc_ids, max_len, score).search(queries, k))
    return gpu


def _check_floors(docs, queries, k, max_len, score, rng, **options):
    """Every floor case of check_floors on a GPU and a NumPy index of ``docs``; returns the GPU's rescans."""
    doc_ids = np.arange(docs.n_sets, dtype=np.int64)
    cpu = NumpyShardIndex(docs, doc_ids, max_len, score)
    return check_floors(_index(docs, doc_ids, max_len, score=score, **options), cpu, queries, k, max_len, rng, score)


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("vocab", [5, 16, 40])
def test_random_small_corpora_with_heavy_ties(score, vocab):
    rng = np.random.default_rng(vocab + 100 * SCORES.index(score))
    max_len = 12
    docs = _random_sets(rng, int(rng.integers(50, 700)), vocab, max_len)
    queries = _random_sets(rng, 23, vocab, max_len)
    for k in (1, 7, 64, 800):
        _check(docs, queries, k, max_len, score)


@pytest.mark.parametrize("score", SCORES)
def test_empty_sets_overflow_and_rescans(score):
    rng = np.random.default_rng(SCORES.index(score))
    docs = SetBatch.from_lists(_random_sets(rng, 700, 8, 6).to_lists() + [[], [], [0, 1, 2, 3, 4, 5]])
    queries = SetBatch.from_lists(_random_sets(rng, 40, 8, 6).to_lists() + [[], [7]])
    rescans = 0
    for capacity in (1, 3, 8):
        for k in (1, 5, 30):
            rescans += _check(docs, queries, k, 6, score, capacity=capacity, tile_docs=700, redo_bytes=1).rescans
    assert rescans > 0  # the path this test is about


@pytest.mark.parametrize("score", SCORES)
def test_sampling_levels_with_small_buffers_and_ratios(score):
    rng = np.random.default_rng(40 + SCORES.index(score))
    docs = _zipf_sets(rng, rng.integers(0, 11, size=30_000), 300)
    queries = SetBatch.from_lists(_zipf_sets(rng, rng.integers(0, 11, size=70), 300).to_lists())
    for capacity, ratio in ((64, 2), (1024, None)):
        for k in (1, 10, 50):
            gpu = _check(docs, queries, k, 10, score, capacity=capacity, sample_ratio=ratio)
            assert len(gpu._levels(k, gpu._capacity(k))) >= 2


@pytest.mark.parametrize("score", SCORES)
def test_floors_on_tie_heavy_and_zipf_corpora(score):
    rng = np.random.default_rng(70 + SCORES.index(score))
    docs = _random_sets(rng, 600, 16, 12)
    queries = _random_sets(rng, 37, 16, 12)
    for k in (1, 9, 100):
        _check_floors(docs, queries, k, 12, score, rng)
    docs = _zipf_sets(rng, rng.integers(0, 41, size=20_000), 2000)
    queries = SetBatch.from_lists(_zipf_sets(rng, rng.integers(0, 41, size=80), 2000).to_lists())
    _check_floors(docs, queries, 20, 40, score, rng)
    _check_floors(docs, queries, 20, 40, score, rng, capacity=64, sample_ratio=2, redo_bytes=1)


@pytest.mark.parametrize("score", SCORES)
def test_widest_max_len_and_keys(score):
    """max_len 255, the widest of 8 counter planes: full-length and near-full sets, with floors."""
    rng = np.random.default_rng(255 + SCORES.index(score))
    base = rng.choice(400, size=255, replace=False)
    sets = [base] + [rng.permutation(base)[: int(n)] for n in rng.integers(200, 256, size=300)]
    sets += [rng.choice(400, size=int(n), replace=False) for n in rng.integers(0, 256, size=300)]
    docs = SetBatch.from_lists(sets)
    queries = SetBatch.from_lists([base, base[:254], base[:1], []] + [s for s in sets[1:40]])
    for k in (1, 8, 60):
        _check(docs, queries, k, 255, score)
    _check_floors(docs, queries, 8, 255, score, rng)


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("top_id, per_block", [(50_000, 32), (65_535, 16)])
def test_both_table_widths(score, top_id, per_block):
    rng = np.random.default_rng(top_id + SCORES.index(score))
    sets = _random_sets(rng, 3000, 3000, 40).to_lists()
    sets = [sorted({t * (top_id // 3000) for t in s}) for s in sets] + [[top_id]]
    docs = SetBatch.from_lists(sets)
    queries = SetBatch.from_lists(sets[:40] + [[top_id, 0]] + _random_sets(rng, 30, top_id + 1, 40).to_lists())
    assert _check(docs, queries, 20, 40, score).queries_per_block == per_block


@pytest.mark.parametrize("score", SCORES)
def test_medium_zipf_corpus_with_near_duplicate_queries(score):
    rng = np.random.default_rng(2024)
    vocab, max_len, k = 65536, 128, 100
    docs = _zipf_sets(rng, rng.integers(1, max_len + 1, size=60_000), vocab)
    doc_ids = np.cumsum(rng.integers(1, 4, size=docs.n_sets)).astype(np.int64)
    picks = rng.choice(docs.n_sets, size=60, replace=False)
    queries = [docs[i].tolist() for i in picks[:30]]
    queries += [[t for t in docs[i].tolist() if rng.random() > 0.1] + rng.integers(0, vocab, 3).tolist() for i in picks[30:]]
    queries += _zipf_sets(rng, rng.integers(1, max_len + 1, size=40), vocab).to_lists()
    queries = SetBatch.from_lists(queries)
    queries = queries.take(np.flatnonzero(queries.lengths <= max_len))
    _check(docs, queries, k, max_len, score, doc_ids=doc_ids)


def test_unknown_score_is_refused():
    docs = SetBatch.from_lists([[1, 2]])
    with pytest.raises(ValueError, match="score must be one of"):
        _index(docs, np.arange(1), 8, score="tanimoto")
    with pytest.raises(ValueError, match="for score 'cosine'"):
        _index(docs, np.arange(1), 4097, score="cosine")
