"""Wide vocabularies on the GPU (issue 31): CupyShardIndex over ids up to 2**24 - 1, each query batch
searched through its own dense ids (settopk/kernels/cuda/wide.py), against the brute-force oracle for
every score, ties included, with batches cut down to a few distinct ids as well. The batch planning
(dense numbers, cuts) is plain NumPy and is tested here without a GPU."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settopk.kernels import SCORES, NumpyShardIndex, SetBatch, brute_force_threshold, brute_force_topk, parse_threshold
from settopk.kernels.cuda import wide
from settopk.kernels.cuda.wide import batch_dense_ids, split_by_distinct
from settopk.kernels.sets import MAX_VOCAB
from tests.gpu_helpers import assert_same_topk, cupy_index
from tests.test_wide_ids import MIXES, POOLS, _batches, _picks, _sets, _topk_rows


def test_batch_dense_ids_number_distinct_ids_from_one():
    tokens = np.array([70000, 5, MAX_VOCAB - 1, 5, 70000], dtype=np.uint32)
    distinct, dense = batch_dense_ids(tokens)
    assert distinct.tolist() == [5, 70000, MAX_VOCAB - 1]
    assert dense.dtype == np.uint16 and dense.tolist() == [2, 1, 3, 1, 2]
    with pytest.raises(ValueError, match="at most 65535 distinct ids, found 65536"):
        batch_dense_ids(np.arange(65536, dtype=np.uint32))


def test_split_by_distinct_cuts_the_longest_runs_in_order_within_the_limit():
    queries = SetBatch.from_lists([[1, 2], [3, 4], [1, 2], [5, 6, 7], [8], [9, 10], [1, 9]])
    cuts = split_by_distinct(queries.offsets, queries.tokens, 4)
    assert cuts == [(0, 3), (3, 5), (5, 7)]  # {1,2,3,4}, {5,6,7,8}, {9,10,1}
    assert split_by_distinct(queries.offsets, queries.tokens, 100) == [(0, 7)]
    assert split_by_distinct(queries.offsets, queries.tokens, 3) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 6), (6, 7)]
    empty = SetBatch.from_lists([])
    assert split_by_distinct(empty.offsets, empty.tokens, 4) == []


@given(sets=st.lists(st.lists(st.integers(0, 30), min_size=0, max_size=6, unique=True), max_size=25),
       limit=st.integers(6, 20))
def test_split_by_distinct_runs_are_maximal(sets, limit):
    batch = SetBatch.from_lists(sets)
    cuts = split_by_distinct(batch.offsets, batch.tokens, limit)
    assert [lo for lo, _ in cuts] == [0] * bool(sets) + [hi for _, hi in cuts[:-1]]
    assert (cuts[-1][1] if cuts else 0) == len(sets)
    distinct = lambda lo, hi: len({x for s in sets[lo:hi] for x in s})  # noqa: E731
    for lo, hi in cuts:
        assert distinct(lo, hi) <= limit
        assert hi == len(sets) or distinct(lo, hi + 1) > limit


def _index(docs, ids, max_len, score, routing, batch_ids=None, **options):
    index = cupy_index(docs, ids, max_len, MAX_VOCAB, score=score, routing=routing, **options)
    if batch_ids is not None:  # cut every batch to a few distinct ids (the device's table holds ~54,000)
        index._batch_ids = batch_ids
    return index


@pytest.mark.gpu
@pytest.mark.parametrize("score", SCORES)
@given(doc_picks=_picks, query_picks=_picks, pool=st.sampled_from(sorted(POOLS)), mix=st.sampled_from(MIXES),
       k=st.sampled_from([1, 3, 20]), routing=st.sampled_from(["scan", "auto", "postings"]),
       batch_ids=st.sampled_from([None, 8, 12]), query_batch=st.sampled_from([3, 4096]))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_topk_with_wide_ids_matches_oracle(score, doc_picks, query_picks, pool, mix, k, routing, batch_ids, query_batch):
    docs, queries = _sets(doc_picks, POOLS[pool]), _sets(query_picks, POOLS[pool])
    d, q = _batches(docs, queries, mix)
    ids = np.arange(len(docs), dtype=np.int64) * 2 + 5
    index = _index(d, ids, 8, score, routing, batch_ids, query_batch=query_batch)
    assert _topk_rows(index.search(q, k)) == brute_force_topk(docs, queries, k, doc_ids=list(ids), score=score)


@pytest.mark.gpu
@pytest.mark.parametrize("score", SCORES)
@given(doc_picks=_picks, query_picks=_picks, pool=st.sampled_from(sorted(POOLS)), mix=st.sampled_from(MIXES),
       text=st.sampled_from(["0", "1", "0.5", "1/3", "2/3", "0.75"]), k=st.sampled_from([None, 2]),
       batch_ids=st.sampled_from([None, 8]), routing=st.sampled_from(["scan", "postings"]))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_threshold_with_wide_ids_matches_oracle(score, doc_picks, query_picks, pool, mix, text, k, batch_ids, routing):
    docs, queries = _sets(doc_picks, POOLS[pool]), _sets(query_picks, POOLS[pool])
    d, q = _batches(docs, queries, mix)
    t = parse_threshold(text if score != "overlap" else str(Fraction(text) * 3), score)
    ids = [3 * i + 1 for i in range(len(docs))]
    index = _index(d, np.asarray(ids, dtype=np.int64), 8, score, routing, batch_ids, query_batch=5)
    got = index.threshold_search(q, t, k=k)
    assert [got.row(i) for i in range(got.n_queries)] == brute_force_threshold(docs, queries, t, doc_ids=ids,
                                                                               score=score, k=k)


@pytest.mark.gpu
@pytest.mark.parametrize("id_dist", ["zipf", "uniform"])
def test_large_wide_corpus_matches_the_numpy_index(id_dist):
    """Thousands of docs over all of [0, 2**24) (or Zipf-skewed into it), several tiles and sampling levels,
    batches cut at 2,000 distinct ids: identical TopK to the NumPy index, with and without floors."""
    rng = np.random.default_rng(31)
    max_len, k = 64, 25
    if id_dist == "zipf":
        vocab = rng.permutation(MAX_VOCAB)[:20_000]
        weights = 1.0 / np.arange(1, len(vocab) + 1)
        weights /= weights.sum()
        draw = lambda n: rng.choice(vocab, size=n, p=weights)  # noqa: E731
    else:
        draw = lambda n: rng.integers(0, MAX_VOCAB, size=n)  # noqa: E731
    docs = SetBatch.from_lists([np.unique(draw(int(rng.integers(1, max_len + 1)))) for _ in range(40_000)])
    queries = SetBatch.from_lists([np.unique(draw(int(rng.integers(1, max_len + 1)))) for _ in range(150)]
                                  + docs.take(np.arange(0, 40_000, 400)).to_lists())
    ids = np.arange(docs.n_sets, dtype=np.int64)
    want = NumpyShardIndex(docs, ids, max_len).search(queries, k)
    floor = np.full(queries.n_sets, -1, dtype=np.int64)
    floor[::3] = 1
    want_floor = NumpyShardIndex(docs, ids, max_len).search(queries, k, floor_key=floor)
    for routing in ("auto", "postings"):
        for batch_ids in (None, 2000):
            index = _index(docs, ids, max_len, "braun_blanquet", routing, batch_ids, tile_docs=4096)
            assert_same_topk(index.search(queries, k), want)
        assert_same_topk(index.search(queries, k, floor_key=floor), want_floor)


@pytest.mark.gpu
def test_wide_postings_span_several_tiles_and_chunks():
    """More docs than one postings tile (65,536 positions), queries in chunks of 16: a wide shard's
    postings, built per chunk from the layout, give the NumPy index's TopK and threshold pairs. The
    random queries share ids with fewer than k docs: their top-k is filled with the first other docs
    by position (key 0)."""
    rng = np.random.default_rng(7)
    max_len, k = 24, 5
    docs = SetBatch.from_lists([np.unique(rng.integers(0, MAX_VOCAB, int(rng.integers(1, max_len + 1))))
                                for _ in range(150_000)])
    queries = SetBatch.from_lists(docs.take(rng.choice(docs.n_sets, 60, replace=False)).to_lists()
                                  + [np.unique(rng.integers(0, MAX_VOCAB, 10)) for _ in range(20)])
    ids = np.arange(docs.n_sets, dtype=np.int64) * 3
    numpy_index = NumpyShardIndex(docs, ids, max_len, score="jaccard")
    index = _index(docs, ids, max_len, "jaccard", "postings", 300, query_batch=16)
    assert_same_topk(index.search(queries, k), numpy_index.search(queries, k))
    assert index.last_routing["postings"] > 0 and index.last_routing["filled"] > 0
    t = parse_threshold("0.3", "jaccard")
    got = index.threshold_search(queries, t)
    want = numpy_index.threshold_search(queries, t)
    assert [got.row(i) for i in range(got.n_queries)] == [want.row(i) for i in range(want.n_queries)]
    n_ids = int(docs.tokens.max()) + 1
    assert index.postings_bytes == 4 * n_ids and index._postings.build_passes == 2
    assert np.array_equal(index._postings._docs_per_id.get(), np.bincount(docs.tokens, minlength=n_ids))


@pytest.mark.gpu
@pytest.mark.parametrize("every_doc", [False, True])
@pytest.mark.parametrize("cursors", ["uint32", "uint64"])
def test_wide_postings_keep_their_counts_per_id_and_tile_where_they_fit(every_doc, cursors, monkeypatch):
    """Ids up to 68,536 over two postings tiles: the shard keeps its postings' counts per (id, tile) from
    its build (2 bytes each; 4 where a full tile's docs all hold one id) and each chunk's build places
    the entries in one pass, with 32-bit cursors or (past 2**32 entries, forced here) 64-bit ones.
    Identical to the NumPy index for top-k and threshold pairs."""
    if cursors == "uint64":
        monkeypatch.setattr(wide, "_UINT32_CURSOR_ENTRIES", 0)
    rng = np.random.default_rng(5)
    base, n_docs = 65_536, 70_000
    sets = [np.unique(rng.integers(base, base + 3_000, int(rng.integers(1, 12)))) for _ in range(n_docs)]
    if every_doc:
        sets = [np.union1d(s, [base]) for s in sets]
    docs = SetBatch.from_lists(sets)
    queries = SetBatch.from_lists(docs.take(rng.choice(n_docs, 20, replace=False)).to_lists()
                                  + [np.unique(rng.integers(base, base + 3_000, 5)) for _ in range(20)])
    ids = np.arange(n_docs, dtype=np.int64) * 5
    index = _index(docs, ids, 16, "cosine", "postings")
    n_ids = int(docs.tokens.max()) + 1
    assert index._postings.build_passes == 1
    assert np.array_equal(index._postings._docs_per_id.get(), np.bincount(docs.tokens, minlength=n_ids))
    assert index.postings_bytes == 4 * n_ids + (4 if every_doc else 2) * n_ids * 2  # 2 tiles
    numpy_index = NumpyShardIndex(docs, ids, 16, score="cosine")
    assert_same_topk(index.search(queries, 10), numpy_index.search(queries, 10))
    assert index.last_routing["postings"] == queries.n_sets
    t = parse_threshold("0.4", "cosine")
    got, want = index.threshold_search(queries, t), numpy_index.threshold_search(queries, t)
    assert [got.row(i) for i in range(got.n_queries)] == [want.row(i) for i in range(want.n_queries)]


@pytest.mark.gpu
@pytest.mark.parametrize("capacity", [8, 4096])
def test_a_chunk_sent_wholly_to_the_postings_is_one_batch(capacity):
    """A chunk whose queries all go to the postings is searched as one batch, neither cut for the count
    kernel's table (here 50 distinct ids) nor numbered. With a capacity below k, the queries whose
    candidates overflow it before their bound reaches key 1 (rare ids) cannot be finished there; they
    are scanned afterwards in batches of their own. Identical to the NumPy index either way."""
    rng = np.random.default_rng(11)
    pool = rng.choice(MAX_VOCAB, 60_000, replace=False)  # about 4 docs per id: most queries share ids with < k docs
    docs = SetBatch.from_lists(np.unique(rng.choice(pool, int(n))) for n in rng.integers(1, 7, 70_000))
    queries = SetBatch.from_lists([np.unique(rng.choice(pool, 6)) for _ in range(30)]
                                  + docs.take(rng.choice(docs.n_sets, 10, replace=False)).to_lists())
    ids = np.arange(docs.n_sets, dtype=np.int64) * 2
    index = _index(docs, ids, 8, "dice", "postings", 50, capacity=capacity)
    batches = []
    search_batch = index._search_batch
    index._search_batch = lambda batch, *args: batches.append(batch.n_sets) or search_batch(batch, *args)
    assert_same_topk(index.search(queries, 30), NumpyShardIndex(docs, ids, 8, "dice").search(queries, 30))
    assert batches[0] == queries.n_sets
    if capacity > 30:
        assert batches == [queries.n_sets] and index.last_routing["filled"] > 20
    else:  # the rows left unfinished, scanned in batches cut at 50 distinct ids
        assert len(batches) > 2 and sum(batches[1:]) == index.last_routing["scan"] > 0


@pytest.mark.gpu
def test_wide_and_narrow_gpu_indexes_give_the_same_results():
    """The same corpus as uint16 ids (a narrow index) and shifted to the top of [0, 2**24) (a wide one)."""
    rng = np.random.default_rng(3)
    docs = [sorted(set(rng.integers(0, 300, rng.integers(0, 20)).tolist())) for _ in range(400)]
    queries = [sorted(set(rng.integers(0, 300, rng.integers(0, 20)).tolist())) for _ in range(40)] + docs[:10]
    shift = MAX_VOCAB - 65536
    narrow = cupy_index(SetBatch.from_lists(docs), np.arange(len(docs)), 32, score="jaccard")
    wide = cupy_index(SetBatch.from_lists([[x + shift for x in s] for s in docs]), np.arange(len(docs)), 32,
                      MAX_VOCAB, score="jaccard")
    assert_same_topk(wide.search(SetBatch.from_lists([[x + shift for x in s] for s in queries]), 10),
                     narrow.search(SetBatch.from_lists(queries), 10))




def _wide_corpus_and_query_halves(seed: int):
    """A wide corpus (ids over all of [0, 2**24)) and two query batches over disjoint ids, so each
    batch's dense numbering of the layout differs from the other's everywhere."""
    rng = np.random.default_rng(seed)
    max_len = 48
    docs = SetBatch.from_lists([np.unique(rng.integers(0, MAX_VOCAB, int(rng.integers(1, max_len + 1))))
                                for _ in range(20_000)])
    halves = []
    for parity in (0, 1):
        sampled = docs.take(rng.choice(docs.n_sets, 200, replace=False)).to_lists()
        halves.append(SetBatch.from_lists([[x for x in s if x % 2 == parity] for s in sampled]))
    return docs, np.arange(docs.n_sets, dtype=np.int64), max_len, halves


@pytest.mark.gpu
@pytest.mark.parametrize("routing", ["scan", "postings"])
def test_two_threads_searching_one_wide_index_get_their_own_results(routing):
    """A GPU actor runs two searches at once: on a wide shard each batch remaps the shard's one
    layout (or builds its one set of postings) in its own ids, so the batches must take turns
    (CupyShardIndex._batch_turn), or one batch's kernels read the layout in the other's numbers."""
    import threading

    docs, ids, max_len, halves = _wide_corpus_and_query_halves(5)
    k = 10
    want = [NumpyShardIndex(docs, ids, max_len).search(q, k) for q in halves]
    index = _index(docs, ids, max_len, "braun_blanquet", routing, 3000, query_batch=50)  # 4 batches a search
    got, failures = [[], []], []

    def search(which: int) -> None:
        try:
            for _ in range(6):
                got[which].append(index.search(halves[which], k))
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=search, args=(which,)) for which in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not failures and not any(t.is_alive() for t in threads), failures
    for which in (0, 1):
        assert len(got[which]) == 6
        for result in got[which]:
            assert_same_topk(result, want[which])
