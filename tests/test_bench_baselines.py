"""The benchmark's baselines give the NumPy index's exact top-k (ties to the lower doc id); sparse_dot_topn
gives its scores (the multiset of scores per query), with true overlaps and lengths for the docs it keeps."""

from __future__ import annotations

import numpy as np
import pytest

from settopk.jobs.bench.baselines import NumpyIndexBaseline, Popc4Baseline, ScipyBaseline, SparseDotTopnBaseline, SpmmBaseline
from settopk.kernels import SCORES, NumpyShardIndex, SetBatch, score_key
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


@pytest.mark.parametrize("score", SCORES)
def test_scipy_and_numpy_baselines_rank_by_every_score(score):
    pytest.importorskip("scipy")
    docs, queries, doc_ids = _data(SCORES.index(score))
    for k in (7, 1000):  # 1000 > n_docs: padded rows
        want = NumpyShardIndex(docs, doc_ids, _MAX_LEN, score).search(queries, k)
        assert_same_topk(ScipyBaseline(docs, doc_ids, _MAX_LEN, _VOCAB, score=score).search(queries, k), want)
        assert_same_topk(NumpyIndexBaseline(docs, doc_ids, _MAX_LEN, _VOCAB, score=score).search(queries, k), want)


@pytest.mark.parametrize("score", ["overlap", "cosine"])
@pytest.mark.parametrize("threads", [1, 2])
def test_sparse_dot_topn_gives_the_numpy_index_scores(score, threads):
    pytest.importorskip("sparse_dot_topn")
    docs, queries, doc_ids = _data(threads)
    sets = [set(docs.tokens[docs.offsets[i]:docs.offsets[i + 1]].tolist()) for i in range(docs.n_sets)]
    # An empty query: the product has no entry, every doc scores 0 (the lowest ids come back).
    queries = SetBatch.from_lists([queries.tokens[queries.offsets[i]:queries.offsets[i + 1]].tolist()
                                   for i in range(queries.n_sets)] + [[]])
    position = {int(d): i for i, d in enumerate(doc_ids)}
    ids_differ = 0
    for k in (1, 10, 100, 1000):
        want = NumpyShardIndex(docs, doc_ids, _MAX_LEN, score).search(queries, k)
        got = SparseDotTopnBaseline(docs, doc_ids, _MAX_LEN, _VOCAB, score=score, threads=threads).search(queries, k)
        for f in want._fields:
            assert getattr(got, f).dtype == getattr(want, f).dtype and getattr(got, f).shape == getattr(want, f).shape
        qlen = queries.lengths[:, None]
        keys = [np.where(t.doc_ids >= 0, score_key(t.overlap, qlen, t.doc_len, _MAX_LEN, score).astype(np.int64), -1)
                for t in (got, want)]
        np.testing.assert_array_equal(np.sort(keys[0], axis=1), np.sort(keys[1], axis=1))
        np.testing.assert_array_equal(keys[0], -np.sort(-keys[0], axis=1))  # best first
        for r in range(queries.n_sets):
            q = set(queries.tokens[queries.offsets[r]:queries.offsets[r + 1]].tolist())
            for d, o, n in zip(got.doc_ids[r].tolist(), got.overlap[r].tolist(), got.doc_len[r].tolist()):
                if d >= 0:  # each doc's overlap and length are its own
                    assert (o, n) == (len(q & sets[position[d]]), len(sets[position[d]]))
            assert len(set(got.doc_ids[r][got.doc_ids[r] >= 0].tolist())) == int((got.doc_ids[r] >= 0).sum())
        ids_differ += int((got.doc_ids != want.doc_ids).any(axis=1).sum())
    assert ids_differ > 0  # the library keeps other docs among ties: the check above is the one that holds


def test_sparse_dot_topn_refuses_other_scores():
    pytest.importorskip("sparse_dot_topn")
    docs, _, doc_ids = _data(0)
    with pytest.raises(ValueError, match="ranks by overlap or cosine, found score 'jaccard'"):
        SparseDotTopnBaseline(docs, doc_ids, _MAX_LEN, _VOCAB, score="jaccard")


@pytest.mark.gpu
@pytest.mark.parametrize("baseline_cls", [Popc4Baseline, SpmmBaseline])
@pytest.mark.parametrize("k", [1, 100])
def test_gpu_baselines_equal_the_numpy_index(baseline_cls, k):
    pytest.importorskip("torch")  # the GPU baselines select with torch.topk
    _check(baseline_cls, k)
