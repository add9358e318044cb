"""CupyShardIndex with the postings path (routing auto/postings) against NumpyShardIndex, every score.

Every test is marked ``gpu``; tests/conftest.py skips them where CuPy sees no GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from settopk.kernels import SCORES, NumpyShardIndex, SetBatch, score_key
from tests.gpu_helpers import assert_same_topk, cupy_index as _index

pytestmark = pytest.mark.gpu


def _sets(rng, n, vocab, max_len, min_len=0):
    lengths = rng.integers(min_len, max_len + 1, size=n)
    return SetBatch.from_lists(rng.choice(vocab, size=int(l), replace=False) for l in lengths)


def _near_duplicates(rng, docs: SetBatch, n, vocab):
    out = []
    for d in rng.integers(0, docs.n_sets, size=n):
        ids = docs[int(d)].tolist()
        keep = ids[: max(1, int(0.85 * len(ids)))]
        out.append(keep + rng.choice(vocab, size=len(ids) - len(keep)).tolist())
    return SetBatch.from_lists(out)


@pytest.mark.parametrize("score", SCORES)
def test_postings_path_matches_numpy_every_score(score):
    rng = np.random.default_rng(SCORES.index(score))
    vocab = 3000
    docs = _sets(rng, 140_000, vocab, 24)  # three tiles of 65,536 docs
    queries = SetBatch.from_lists(_sets(rng, 40, vocab, 24).to_lists() + _near_duplicates(rng, docs, 40, vocab).to_lists()
                                  + [[], [vocab + 5, vocab + 9]])  # an empty query, ids no doc holds
    ids = np.arange(docs.n_sets, dtype=np.int64) * 3 + 1
    want = NumpyShardIndex(docs, ids, 32, score).search(queries, 10)
    for routing in ("postings", "auto"):
        index = _index(docs, ids, 32, vocab_size=vocab + 10, score=score, routing=routing, capacity=512)
        got = index.search(queries, 10)
        assert_same_topk(got, want)
        if routing == "postings":
            assert index.last_routing["postings"] > 0 and index.postings_bytes > 0
            r = index.last_routing
            assert r["scan"] + r["postings"] + r["filled"] == queries.n_sets
            assert r["filled"] >= 2  # the empty query, and the one whose ids no doc holds


@pytest.mark.parametrize("score", ["braun_blanquet", "jaccard", "cosine"])
def test_postings_with_floors_ties_and_overflow(score):
    rng = np.random.default_rng(7)
    vocab = 200  # heavy ties: many docs share overlaps
    docs = _sets(rng, 70_000, vocab, 12, min_len=1)
    queries = SetBatch.from_lists(_sets(rng, 30, vocab, 12, min_len=1).to_lists() + _near_duplicates(rng, docs, 30, vocab).to_lists())
    ids = np.arange(docs.n_sets, dtype=np.int64)
    reference = NumpyShardIndex(docs, ids, 16, score)
    plain = reference.search(queries, 20)
    kth = score_key(plain.overlap[:, -1], queries.lengths, plain.doc_len[:, -1], 16, score).astype(np.int64)
    floors = np.where(np.arange(queries.n_sets) % 2 == 0, kth, -1)
    want = reference.search(queries, 20, floor_key=floors)
    for capacity in (64, 4096):  # 64: most queries overflow their buffer and are re-emitted
        index = _index(docs, ids, 16, vocab_size=vocab, score=score, routing="postings", capacity=capacity)
        assert_same_topk(index.search(queries, 20, floor_key=floors), want)
        assert_same_topk(index.search(queries, 20), plain)
        assert index.last_routing["postings"] > 0
    assert index.rescans >= 0


@pytest.mark.parametrize("capacity", [8, 4096])
def test_postings_fill_queries_sharing_ids_with_fewer_than_k_docs(capacity):
    """Rare ids: most queries share an id with fewer than k docs, so their top-k ends with the first other
    docs by position (key 0, ties by doc id); with a capacity below k their candidates overflow and they
    are scanned instead. Identical to the NumPy index either way."""
    rng = np.random.default_rng(11)
    vocab = 60_000
    docs = SetBatch.from_lists(np.unique(rng.integers(0, vocab, int(n))) for n in rng.integers(1, 7, 70_000))
    queries = SetBatch.from_lists(_sets(rng, 30, vocab, 6).to_lists() + _near_duplicates(rng, docs, 10, vocab).to_lists())
    ids = np.arange(docs.n_sets, dtype=np.int64) * 2
    index = _index(docs, ids, 8, vocab_size=vocab, score="dice", routing="postings", capacity=capacity)
    assert_same_topk(index.search(queries, 30), NumpyShardIndex(docs, ids, 8, "dice").search(queries, 30))
    assert index.last_routing["filled" if capacity > 30 else "scan"] > 20


def test_routing_choice_is_logged_per_batch(caplog):
    rng = np.random.default_rng(3)
    docs = _sets(rng, 70_000, 500, 12, min_len=1)
    queries = _sets(rng, 20, 500, 12, min_len=1)
    index = _index(docs, np.arange(docs.n_sets), 16, vocab_size=500, routing="postings", capacity=512, query_batch=8)
    with caplog.at_level("DEBUG", logger="settopk.kernels"):
        index.search(queries, 5)
    lines = [r.getMessage() for r in caplog.records if r.name == "settopk.kernels"]
    assert len(lines) == 3 and all(line.startswith("routing postings: ") for line in lines)  # batches of 8, 8, 4
    assert "4 of 4 queries to the postings" in lines[-1]


def test_routing_is_refused_when_unknown_and_scan_builds_no_postings():
    docs = SetBatch.from_lists([[1, 2], [3]])
    with pytest.raises(ValueError, match="routing"):
        _index(docs, np.arange(2), 8, routing="fast")
    index = _index(docs, np.arange(2), 8)
    assert index.postings_bytes == 0
    index.search(docs, 1)
    assert index.last_routing["postings"] == 0 and index.last_routing["scan"] == 2


def test_launcher_checks_dtypes():
    import cupy

    from settopk.kernels.cuda.postings import GpuPostings

    offsets = cupy.asarray(np.array([0, 2, 3], np.int64))
    tokens = cupy.asarray(np.array([1, 2, 3], np.uint16))
    p = GpuPostings(offsets, tokens, 4)
    assert p.doc_freq.tolist() == [0, 1, 1, 1] and p.nbytes == 2 * 3 + 8 * (4 * 1 + 1)
    z = cupy.zeros(1, np.int32)
    def emit(rows, limit):
        p.emit(rows, limit, offsets, tokens, z, cupy.zeros((1, 3), np.uint8), 2, cupy.zeros(1, np.int64), z,
               cupy.zeros(2, np.uint8), 4, 0, z, z, cupy.zeros(1, np.int64), z, cupy.zeros(1, np.uint64))

    with pytest.raises(ValueError, match="rows"):
        emit(cupy.zeros(1, np.int64), 2)
    with pytest.raises(ValueError, match="limit"):
        emit(z, 3)  # beyond the shard's 2 docs
    with pytest.raises(ValueError, match="cosine_keys"):
        p.emit(z, 2, offsets, tokens, z, cupy.zeros((1, 3), np.uint8), 2, cupy.zeros(1, np.int64), z,
               cupy.zeros(2, np.uint8), 4, 0, cupy.zeros(1, np.int64), z, cupy.zeros(1, np.int64), z,
               cupy.zeros(1, np.uint64))
    lengths = cupy.asarray(np.array([2, 1], np.int32))
    assert p.entries(offsets, tokens, lengths).tolist() == [2, 1]  # the "queries" {1, 2} and {3}: a doc per id
    with pytest.raises(ValueError, match="offsets"):
        GpuPostings(offsets.astype(np.int32), tokens, 4)
