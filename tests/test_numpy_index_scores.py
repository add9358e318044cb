"""Every score on the NumPy backend against the brute-force oracle: plain searches, floors, the
exact merge, and the two-round threshold exchange through the shard searchers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settopk.kernels import SCORES, NumpyShardIndex, SetBatch, brute_force_topk, max_key, order_candidates, score_key
from settopk.shards import floors_from, merge_topk, plan_shards
from settopk.shards.inputs import Corpus, SetLimits
from settopk.shards.searcher import ShardSearcher
from tests.shard_helpers import search_two_rounds

_SETS = st.lists(st.lists(st.integers(0, 9), max_size=8), max_size=40)  # small vocab: many ties; empty sets
_QUERIES = st.lists(st.lists(st.integers(0, 9), max_size=8), min_size=1, max_size=8)


def _rows(topk):
    return [
        [(int(d), int(o), int(l)) for d, o, l in zip(ids, ov, dl) if d >= 0]
        for ids, ov, dl in zip(topk.doc_ids, topk.overlap, topk.doc_len)
    ]


def test_oracle_ranks_a_worked_example_by_each_score():
    """q = {1, 2} against a = {1}, b = {1..6}, c = {1, 3}: values worked out by hand."""
    docs, queries = [[1], [1, 2, 3, 4, 5, 6], [1, 3]], [[1, 2]]
    expected = {
        "braun_blanquet": [0, 2, 1],  # 1/2, 1/3, 1/2: a and c tie, a has the lower id
        "jaccard": [0, 1, 2],  # 1/2, 2/6, 1/3: b and c tie at 1/3
        "cosine": [0, 1, 2],  # 0.707, 0.577, 0.5
        "dice": [0, 1, 2],  # 2/3, 1/2, 1/2
        "overlap": [1, 0, 2],  # 1, 2, 1
        "containment": [1, 0, 2],  # 1/2, 1, 1/2
    }
    for score in SCORES:
        assert [d for d, _, _ in brute_force_topk(docs, queries, 3, score=score)[0]] == expected[score], score
    with pytest.raises(ValueError, match="score must be one of"):
        brute_force_topk(docs, queries, 3, score="tanimoto")


@pytest.mark.parametrize("score", SCORES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=_SETS, queries=_QUERIES, k=st.integers(1, 45), id_step=st.integers(1, 3))
def test_numpy_backend_equals_oracle(score, docs, queries, k, id_step):
    """k up to beyond n_docs (padding), empty docs and queries (0/0), sparse ids."""
    ids = [id_step * i for i in range(len(docs))]
    index = NumpyShardIndex(SetBatch.from_lists(docs), np.array(ids, dtype=np.int64), 8, score)
    got = index.search(SetBatch.from_lists(queries), k)
    assert got.doc_ids.shape == (len(queries), k)
    assert _rows(got) == brute_force_topk(docs, queries, k, doc_ids=ids, score=score)


@pytest.mark.parametrize("score", SCORES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=_SETS, queries=_QUERIES, k=st.integers(1, 45), data=st.data())
def test_floors_keep_exactly_the_oracle_entries_at_or_above_them(score, docs, queries, k, data):
    """With a floor F per query, a row is the oracle's top-k with the entries whose key is below F removed."""
    max_len = 8
    top = max_key(max_len, score)
    floors = data.draw(st.lists(st.integers(-1, top + 1), min_size=len(queries), max_size=len(queries)))
    index = NumpyShardIndex(SetBatch.from_lists(docs), np.arange(len(docs), dtype=np.int64), max_len, score)
    got = _rows(index.search(SetBatch.from_lists(queries), k, floor_key=np.array(floors)))
    for q, floor, row, want in zip(queries, floors, got, brute_force_topk(docs, queries, k, score=score)):
        keep = [(d, o, l) for d, o, l in want if int(score_key(o, len(set(q)), l, max_len, score)) >= floor]
        assert row == keep


@pytest.mark.parametrize("score", SCORES)
def test_order_candidates_and_merge_follow_the_score(score):
    rng = np.random.default_rng(SCORES.index(score))
    max_len, k = 12, 9
    docs = [rng.choice(14, size=int(rng.integers(0, max_len + 1)), replace=False).tolist() for _ in range(60)]
    queries = [rng.choice(14, size=int(rng.integers(0, max_len + 1)), replace=False).tolist() for _ in range(15)]
    want = brute_force_topk(docs, queries, k, score=score)
    q = SetBatch.from_lists(queries)
    # Three "shards" of interleaved ids, merged exactly.
    parts = []
    for s in range(3):
        ids = np.arange(s, len(docs), 3)
        parts.append(NumpyShardIndex(SetBatch.from_lists([docs[i] for i in ids]), ids, max_len, score).search(q, k))
    assert _rows(merge_topk(parts, q.lengths, k, max_len, score)) == want
    # Shuffled candidate columns with unused slots.
    all_ids = np.concatenate([p.doc_ids for p in parts], axis=1)
    perm = rng.permutation(all_ids.shape[1])
    cols = [np.concatenate([getattr(p, f) for p in parts], axis=1)[:, perm] for f in ("doc_ids", "overlap", "doc_len")]
    assert _rows(order_candidates(*cols, q.lengths, k, max_len, score)) == want


def _protocol(docs, queries, k, n_shards, max_len, score):
    """Two rounds through ShardSearcher (floors from the home shards), scattered and merged as the job does."""
    ids = np.arange(len(docs), dtype=np.int64)
    batch = SetBatch.from_lists(docs)
    pieces = [Corpus(ids, batch, 0, "parquet", ())]
    plan = plan_shards(batch.lengths, n_shards, max_len)
    searchers = [ShardSearcher(spec, pieces, SetLimits(65536, max_len), "numpy", score=score) for spec in plan]
    q = SetBatch.from_lists(queries)
    merged, home_rows, home_results = search_two_rounds(searchers, plan, q, k, max_len, score)
    return merged, sum(s.skipped for s in searchers), floors_from(home_results, home_rows, q.lengths, k, max_len, score)


@pytest.mark.parametrize("score", SCORES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=_SETS.filter(len), queries=_QUERIES, k=st.integers(1, 45), n_shards=st.integers(1, 4))
def test_two_round_threshold_exchange_equals_oracle(score, docs, queries, k, n_shards):
    merged, _, _ = _protocol(docs, queries, k, n_shards, 8, score)
    assert _rows(merged) == brute_force_topk(docs, queries, k, score=score)


@pytest.mark.parametrize("score", SCORES)
def test_threshold_exchange_prunes_and_stays_exact(score):
    """Enough docs of every length that the home floors let other shards skip queries."""
    rng = np.random.default_rng(7)
    max_len, k = 10, 3
    docs = [rng.choice(12, size=n, replace=False).tolist() for n in rng.integers(0, max_len + 1, 400)]
    docs += [list(range(n)) for n in range(max_len + 1)] * 4  # exact matches of prefix queries
    queries = [list(range(n)) for n in range(max_len + 1)]
    merged, skipped, floors = _protocol(docs, queries, k, 4, max_len, score)
    assert _rows(merged) == brute_force_topk(docs, queries, k, score=score)
    assert (floors >= 0).any() and skipped > 0
