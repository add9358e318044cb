"""CupyShardIndex against NumpyShardIndex: identical TopK on every shape of input.

Every test is marked ``gpu``; tests/conftest.py skips them where CuPy sees no GPU.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from settopk.kernels import NumpyShardIndex, SetBatch, score_key
from tests.gpu_helpers import assert_same_topk, check_floors, cupy_index as _index, random_set_batch as _random_sets

pytestmark = pytest.mark.gpu


def _check(docs, queries, k, max_len, doc_ids=None, vocab_size=65536, **options):
    """Search with both backends, assert identical results, return the GPU index."""
    if doc_ids is None:
        doc_ids = np.arange(docs.n_sets, dtype=np.int64)
    gpu = _index(docs, doc_ids, max_len, vocab_size, **options)
    want = NumpyShardIndex(docs, doc_ids, max_len).search(queries, k)
    assert_same_topk(gpu.search(queries, k), want)
    return gpu


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("vocab", [5, 16, 40])
def test_random_small_corpora_with_heavy_ties(seed, vocab):
    rng = np.random.default_rng(seed * 100 + vocab)
    max_len = 12
    docs = _random_sets(rng, int(rng.integers(50, 700)), vocab, max_len)
    queries = _random_sets(rng, 23, vocab, max_len)
    for k in (1, 7, 64):
        _check(docs, queries, k, max_len, vocab_size=vocab)
        _check(docs, queries, k, max_len)  # full 65536-id bitsets


@pytest.mark.parametrize("cuts", [[0, 300], [0, 3, 3, 250, 300], [0, 100, 299, 300]])
def test_docs_given_as_pieces_are_concatenated_on_the_gpu(cuts):
    """The pieces a shard takes from the readers (some empty) give the index of their concatenation."""
    rng = np.random.default_rng(len(cuts))
    docs = _random_sets(rng, 300, 40, 12)
    queries = _random_sets(rng, 17, 40, 12)
    doc_ids = np.arange(300, dtype=np.int64) * 3 + 1
    pieces = [docs.take(np.arange(lo, hi)) for lo, hi in zip(cuts[:-1], cuts[1:])]
    want = NumpyShardIndex(docs, doc_ids, 12).search(queries, 20)
    assert_same_topk(_index(pieces, doc_ids, 12).search(queries, 20), want)
    with pytest.raises(ValueError, match="doc_ids must have shape"):
        _index(pieces, doc_ids[:-1], 12)


def test_empty_docs_and_empty_queries():
    rng = np.random.default_rng(1)
    sets = _random_sets(rng, 300, 30, 6).to_lists()
    for i in (0, 7, 8, 150, 299):
        sets[i] = []
    docs = SetBatch.from_lists(sets)
    queries = SetBatch.from_lists([[], [1, 2, 3], [], [5], list(range(6)), []])
    _check(docs, queries, 10, 6)
    _check(docs, queries, 1, 6)
    only_empty = SetBatch.from_lists([[]] * 9)
    _check(only_empty, queries, 4, 6)
    _check(only_empty, queries, 20, 6)


@pytest.mark.parametrize("vocab_size", [100, 65536])
def test_full_length_sets_and_extreme_ids(vocab_size):
    rng = np.random.default_rng(vocab_size)
    max_len = 40
    top = vocab_size - 1
    full = sorted(rng.choice(np.arange(1, top), size=max_len - 2, replace=False).tolist() + [0, top])
    sets = _random_sets(rng, 200, vocab_size, max_len).to_lists()
    sets[3] = full
    sets[50] = [0]
    sets[51] = [top]
    sets[52] = [0, top]
    sets[120] = full[: max_len - 1]
    docs = SetBatch.from_lists(sets)
    queries = SetBatch.from_lists([full, [0], [top], [0, top], full[1:], full[::2]])
    gpu = _check(docs, queries, 5, max_len, vocab_size=vocab_size)
    assert gpu.search(queries, 1).doc_ids[0, 0] == 3  # the identical full-length set wins


def test_k_larger_than_shard():
    rng = np.random.default_rng(2)
    docs = _random_sets(rng, 5, 20, 4)
    queries = _random_sets(rng, 9, 20, 4)
    _check(docs, queries, 12, 4, doc_ids=np.array([3, 10, 11, 40, 41]))
    _check(docs, queries, 5, 4)


def test_empty_shard():
    docs = SetBatch.from_lists([])
    queries = SetBatch.from_lists([[1, 2], [], [3]])
    gpu = _check(docs, queries, 3, 8)
    assert gpu.n_docs == 0
    assert (gpu.search(queries, 3).doc_ids == -1).all()


def test_no_queries():
    rng = np.random.default_rng(3)
    docs = _random_sets(rng, 20, 50, 5)
    got = _index(docs, np.arange(20), 5).search(SetBatch.from_lists([]), 4)
    assert got.doc_ids.shape == (0, 4)


def test_non_contiguous_doc_ids():
    rng = np.random.default_rng(4)
    docs = _random_sets(rng, 400, 25, 8)
    doc_ids = np.sort(rng.choice(10**12, size=400, replace=False)).astype(np.int64)
    queries = _random_sets(rng, 17, 25, 8)
    _check(docs, queries, 9, 8, doc_ids=doc_ids)
    _check(docs, queries, 9, 8, doc_ids=np.arange(400, dtype=np.int32) * 3 + 7)  # int32 ids are accepted too


@pytest.mark.parametrize("capacity", [1, 3, 8])
def test_candidate_buffer_overflow_is_exact(capacity):
    """A tiny buffer overflows on nearly every chunk; re-scans (in tiny sub-batches) keep it exact."""
    rng = np.random.default_rng(capacity)
    docs = _random_sets(rng, 3000, 12, 6)
    queries = _random_sets(rng, 30, 12, 6)
    rescans = 0
    for k in (1, 10, 40):
        rescans += _check(docs, queries, k, 6, capacity=capacity, tile_docs=700, redo_bytes=1).rescans
    assert rescans > 0
    # Sub-batches of several queries (redo_bytes large enough for a few at once).
    gpu = _check(docs, queries, 10, 6, capacity=capacity, tile_docs=700, redo_bytes=3 * 8 * 710 * 6)
    assert gpu.rescans > 0


def test_overflow_with_default_capacity_when_good_docs_come_late():
    """Good docs all come after unrelated ones (a scan in doc order overflowed here); the sampled bound is exact too."""
    rng = np.random.default_rng(5)
    unrelated = _random_sets(rng, 3000, 100, 8).to_lists()  # ids 0..99
    related = [sorted(set(rng.choice(np.arange(200, 230), size=6, replace=False).tolist())) for _ in range(5000)]
    docs = SetBatch.from_lists(unrelated + related)
    queries = SetBatch.from_lists([list(range(200, 206)), list(range(210, 230, 3)), [5, 201], []])
    _check(docs, queries, 10, 8)  # the sampled bound keeps the candidates within the buffer here


@pytest.mark.parametrize("n_queries", [1, 2, 3, 5, 7, 13, 33])
def test_query_batch_sizes(n_queries):
    rng = np.random.default_rng(n_queries)
    docs = _random_sets(rng, 600, 60, 10)
    queries = _random_sets(rng, n_queries, 60, 10)
    _check(docs, queries, 6, 10)
    _check(docs, queries, 6, 10, query_batch=6)  # several internal batches, the last one ragged


def _zipf_sets(rng, lengths, vocab, skew=3.0) -> SetBatch:
    """Sets of distinct ids drawn from a Zipf-like law (id = vocab * u**skew), one per entry of ``lengths``.

    A set ends up shorter than asked when the draws repeat too much.
    """
    width = 2 * int(lengths.max())
    kept_rows = []
    for lo in range(0, len(lengths), 20000):
        want = lengths[lo : lo + 20000]
        ids = np.sort((vocab * rng.random((len(want), width)) ** skew).astype(np.int64), axis=1)
        repeat = np.zeros_like(ids, dtype=bool)
        repeat[:, 1:] = ids[:, 1:] == ids[:, :-1]
        # Keep a random subset of the distinct ids: repeats get priority 2, beyond any random one.
        priority = np.where(repeat, 2.0, rng.random(ids.shape))
        order = np.argsort(priority, axis=1)
        n_keep = np.minimum(want, (~repeat).sum(axis=1))
        keep = np.arange(width)[None, :] < n_keep[:, None]
        chosen = np.where(keep, np.take_along_axis(ids, order, axis=1), vocab)
        chosen.sort(axis=1)
        kept_rows.extend(row[: n] for row, n in zip(chosen, n_keep))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in kept_rows], out=offsets[1:])
    return SetBatch(offsets, np.concatenate(kept_rows).astype(np.uint16))


def test_medium_corpus_against_numpy():
    rng = np.random.default_rng(2024)
    vocab, max_len, k = 65536, 128, 100
    docs = _zipf_sets(rng, rng.integers(1, max_len + 1, size=200_000), vocab)
    doc_ids = np.cumsum(rng.integers(1, 4, size=docs.n_sets)).astype(np.int64)
    picks = rng.choice(docs.n_sets, size=200, replace=False)
    queries = [docs[i].tolist() for i in picks[:100]]  # exact duplicates of docs
    for i in picks[100:]:  # near-duplicates: drop a tenth, add a few ids
        kept = [t for t in docs[i].tolist() if rng.random() > 0.1]
        queries.append(kept + rng.integers(0, vocab, size=3).tolist())
    queries += _zipf_sets(rng, rng.integers(1, max_len + 1, size=100), vocab).to_lists()
    queries = SetBatch.from_lists(queries)
    queries = queries.take(np.flatnonzero(queries.lengths <= max_len))
    assert queries.n_sets == 300

    started = time.perf_counter()
    gpu = _index(docs, doc_ids, max_len)
    built = time.perf_counter()
    got = gpu.search(queries, k)
    searched = time.perf_counter()
    again = gpu.search(queries, k)
    searched_again = time.perf_counter()
    want = NumpyShardIndex(docs, doc_ids, max_len).search(queries, k)
    cpu_done = time.perf_counter()
    print(
        f"\nTIMING medium corpus ({docs.n_sets} docs, {queries.n_sets} queries, k={k}): "
        f"build {built - started:.3f}s, first search {searched - built:.3f}s, "
        f"second search {searched_again - searched:.3f}s, numpy oracle {cpu_done - searched_again:.3f}s, "
        f"rescans {gpu.rescans}"
    )
    assert_same_topk(got, want)
    assert_same_topk(again, want)
    assert (got.overlap[:100, 0] == queries.lengths[:100]).all()  # duplicates find a full-overlap doc


def _with_fields(offsets, tokens) -> SetBatch:
    """A SetBatch holding arrays its constructor would refuse (to test the launcher's own checks)."""
    batch = object.__new__(SetBatch)
    object.__setattr__(batch, "offsets", offsets)
    object.__setattr__(batch, "tokens", tokens)
    return batch


def test_bad_inputs_raise_value_error():
    docs = SetBatch.from_lists([[1, 2], [3], [70, 99]])
    ids = np.arange(3)
    with pytest.raises(ValueError, match="doc_ids"):
        _index(docs, ids.astype(np.float64), 4)
    with pytest.raises(ValueError, match="doc_ids"):
        _index(docs, ids[:2], 4)
    with pytest.raises(ValueError, match="increasing"):
        _index(docs, np.array([0, 2, 2]), 4)
    with pytest.raises(ValueError, match="vocab_size"):
        _index(docs, ids, 4, vocab_size=50)  # doc id 70 and 99 are out of vocabulary
    with pytest.raises(ValueError, match="max_len"):
        _index(docs, ids, 1)
    with pytest.raises(ValueError, match="offsets"):
        _index(_with_fields(docs.offsets.astype(np.int32), docs.tokens), ids, 4)
    with pytest.raises(ValueError, match="tokens"):
        _index(_with_fields(docs.offsets, docs.tokens.astype(np.int32)), ids, 4)

    index = _index(docs, ids, 4, vocab_size=100)
    with pytest.raises(ValueError, match="vocab_size"):
        index.search(SetBatch.from_lists([[1], [100]]), 2)
    with pytest.raises(ValueError, match="vocab_size"):
        index.search(SetBatch.from_lists([[65535]]), 2)
    with pytest.raises(ValueError, match="tokens"):
        index.search(_with_fields(np.array([0, 2], dtype=np.int64), np.array([1, 2], dtype=np.int64)), 2)
    strided = np.array([1, 0, 2, 0], dtype=np.uint16)[::2]
    with pytest.raises(ValueError, match="contiguous"):
        index.search(SetBatch(np.array([0, 2], dtype=np.int64), strided), 2)
    with pytest.raises(ValueError, match="max_len"):
        index.search(SetBatch.from_lists([[1, 2, 3, 4, 5]]), 2)
    with pytest.raises(ValueError, match="k must"):
        index.search(SetBatch.from_lists([[1]]), 0)
    with pytest.raises(ValueError, match="SetBatch"):
        index.search([[1, 2]], 2)


# ---- sampling levels, bounds, overflow and kernel variants


def test_sampling_levels_with_small_buffers_and_ratios():
    """Many levels (small capacity and ratio); intermediate buffers overflow on the tie-heavy vocabulary."""
    rng = np.random.default_rng(7)
    docs = _random_sets(rng, 30_000, 30, 10)
    queries = _random_sets(rng, 70, 30, 10)
    for capacity, ratio in ((64, 2), (256, 3), (1024, None), (16384, 32)):
        for k in (1, 10, 50):
            if capacity < k:
                continue
            _check(docs, queries, k, 10, capacity=capacity, sample_ratio=ratio)


def test_all_docs_tie_and_the_lowest_ids_win():
    """Every doc is the same set: every key ties, so the bound's position decides (no rescan needed)."""
    docs = SetBatch.from_lists([[3, 9, 27, 81]] * 40_000)
    queries = SetBatch.from_lists([[3, 9, 27, 81], [3, 5], [100], []])
    doc_ids = np.arange(40_000, dtype=np.int64) * 2 + 1
    gpu = _check(docs, queries, 100, 8, doc_ids=doc_ids)
    assert gpu.rescans == 0
    assert (gpu.search(queries, 100).doc_ids[:, :3] == [[1, 3, 5]] * 4).all()


def test_overflow_when_the_sample_misses_the_good_docs():
    """The sampled chunks (every 32nd chunk of 32 slots) hold only bad docs: the last level overflows and is re-scanned."""
    sets = [[1000 + i % 900, 2000] if (i // 32) % 32 else [5000 + i % 50, 6000] for i in range(8000)]
    docs = SetBatch.from_lists(sets)  # one length, so slot order is position order
    queries = SetBatch.from_lists([[2000, 7000], list(range(1000, 1100)), [5000, 6000]])
    gpu = _check(docs, queries, 10, 128, sample_ratio=32)
    assert gpu.rescans >= 1  # [2000, 7000]: 7744 docs beat the sample's bound, more than 4096 slots


def test_rescans_longer_than_the_shared_memory_sort():
    """Capacity below k: one level emits every doc, and each re-scan (20,000 candidates) is sorted in global memory."""
    rng = np.random.default_rng(8)
    docs = _random_sets(rng, 20_000, 50, 6)
    queries = _random_sets(rng, 5, 50, 6)
    gpu = _check(docs, queries, 5, 6, capacity=2)
    assert gpu.rescans == 5


@pytest.mark.parametrize("top_id, per_block", [(50_000, 32), (65_535, 16)])
def test_table_word_width_follows_the_largest_doc_id(top_id, per_block):
    """32 queries per block while a 32-bit table fits in shared memory, else 16 with 16-bit words."""
    rng = np.random.default_rng(top_id)
    sets = _random_sets(rng, 5000, 3000, 40).to_lists()
    sets = [sorted({t * (top_id // 3000) for t in s}) for s in sets] + [[top_id]]
    docs = SetBatch.from_lists(sets)
    queries = SetBatch.from_lists(sets[:40] + [[top_id, 0]] + _random_sets(rng, 30, top_id + 1, 40).to_lists())
    gpu = _check(docs, queries, 20, 40)
    assert gpu.queries_per_block == per_block


def test_many_query_groups_and_lengths():
    """More queries than one block holds, of every length, in one batch and in ragged batches."""
    rng = np.random.default_rng(9)
    docs = _zipf_sets(rng, rng.integers(0, 65, size=60_000), 4000)
    queries = _zipf_sets(rng, rng.integers(0, 65, size=150), 4000)
    _check(docs, queries, 30, 64)
    _check(docs, queries, 30, 64, query_batch=37, tile_docs=1500)


def test_max_len_above_4096_is_refused():
    docs = SetBatch.from_lists([[1, 2]])
    with pytest.raises(ValueError, match="max_len"):
        _index(docs, np.arange(1), 4097)


# ---- per-query score floors (threshold exchange)


@pytest.mark.parametrize("seed", range(3))
def test_floors_on_random_corpora_with_heavy_ties(seed):
    rng = np.random.default_rng(500 + seed)
    max_len, vocab = 12, 16
    sets = _random_sets(rng, int(rng.integers(200, 700)), vocab, max_len).to_lists()
    for i in (0, 5, 6, 100):
        sets[i] = []
    sets[9] = list(range(max_len))
    docs = SetBatch.from_lists(sets)
    queries = SetBatch.from_lists(_random_sets(rng, 40, vocab, max_len).to_lists() + [[], list(range(max_len))])
    doc_ids = np.arange(docs.n_sets, dtype=np.int64) * 3 + 1
    cpu = NumpyShardIndex(docs, doc_ids, max_len)
    gpu = _index(docs, doc_ids, max_len)
    for k in (1, 7, 64):
        check_floors(gpu, cpu, queries, k, max_len, rng)
    # query_batch splits the searched (not skipped) queries into ragged batches
    check_floors(_index(docs, doc_ids, max_len, query_batch=5), cpu, queries, 7, max_len, rng)


@pytest.mark.parametrize("capacity", [1, 3, 8])
def test_floors_with_overflow_and_rescans(capacity):
    """Tiny buffers overflow on every level; the re-scan reuses the floor's tables and stays exact."""
    rng = np.random.default_rng(600 + capacity)
    docs = _random_sets(rng, 3000, 12, 6)
    queries = _random_sets(rng, 30, 12, 6)
    cpu = NumpyShardIndex(docs, np.arange(docs.n_sets), 6)
    gpu = _index(docs, np.arange(docs.n_sets), 6, capacity=capacity, tile_docs=700, redo_bytes=1)
    rescans = sum(check_floors(gpu, cpu, queries, k, 6, rng) for k in (1, 10, 40))
    assert rescans > 0
    # sub-batches of several re-scanned queries, and rescans longer than the shared-memory sort
    gpu = _index(docs, np.arange(docs.n_sets), 6, capacity=capacity, tile_docs=700, redo_bytes=3 * 8 * 710 * 6)
    assert check_floors(gpu, cpu, queries, 10, 6, rng) > 0


def test_floors_through_sampling_levels():
    """Several sampling levels: bounds start at the floor and only rise from there."""
    rng = np.random.default_rng(700)
    max_len = 10
    docs = _random_sets(rng, 30_000, 30, max_len)
    queries = _random_sets(rng, 70, 30, max_len)
    cpu = NumpyShardIndex(docs, np.arange(docs.n_sets), max_len)
    for capacity, ratio in ((64, 2), (1024, None)):
        gpu = _index(docs, np.arange(docs.n_sets), max_len, capacity=capacity, sample_ratio=ratio)
        for k in (1, 10, 50):
            assert len(gpu._levels(k, gpu._capacity(k))) >= 2  # the levels this test is about
            check_floors(gpu, cpu, queries, k, max_len, rng)


def test_floors_on_zipf_corpus_with_many_query_groups():
    """Several query groups per batch, skipped queries interleaved with searched ones, ragged batches."""
    rng = np.random.default_rng(800)
    max_len = 64
    docs = _zipf_sets(rng, rng.integers(0, max_len + 1, size=40_000), 4000)
    queries = _zipf_sets(rng, rng.integers(0, max_len + 1, size=100), 4000)
    cpu = NumpyShardIndex(docs, np.arange(docs.n_sets), max_len)
    check_floors(_index(docs, np.arange(docs.n_sets), max_len), cpu, queries, 30, max_len, rng)
    check_floors(_index(docs, np.arange(docs.n_sets), max_len, query_batch=37, tile_docs=1500), cpu, queries, 30,
                  max_len, rng)


def test_floors_on_a_narrow_length_range_skip_what_it_cannot_reach():
    """A shard of lengths 20..24: short and long queries with floors from a (simulated) home shard."""
    rng = np.random.default_rng(900)
    max_len = 64
    scale = max_len * max_len
    docs = _random_sets(rng, 5000, 200, 24, min_len=20)
    queries = _random_sets(rng, 64, 200, max_len)
    cpu = NumpyShardIndex(docs, np.arange(docs.n_sets), max_len)
    gpu = _index(docs, np.arange(docs.n_sets), max_len)
    floors = rng.integers(0, scale // 2, size=queries.n_sets)
    for k in (5, 100):
        want = cpu.search(queries, k, floor_key=floors)
        assert_same_topk(gpu.search(queries, k, floor_key=floors), want)
        assert gpu.last_skipped == cpu.last_skipped > 0
    check_floors(gpu, cpu, queries, 20, max_len, rng)


def test_all_docs_tie_at_the_floor():
    """Every doc has the same key: a floor at that key keeps the lowest ids, one above keeps nothing."""
    max_len = 8
    docs = SetBatch.from_lists([[3, 9, 27, 81]] * 40_000)
    queries = SetBatch.from_lists([[3, 9, 27, 81], [3, 5], [100], []])
    doc_ids = np.arange(40_000, dtype=np.int64) * 2 + 1
    cpu = NumpyShardIndex(docs, doc_ids, max_len)
    gpu = _index(docs, doc_ids, max_len)
    tie = score_key(np.array([4, 1, 0, 0]), queries.lengths, 4, max_len).astype(np.int64)
    got = gpu.search(queries, 100, floor_key=tie)
    assert_same_topk(got, cpu.search(queries, 100, floor_key=tie))
    assert (got.doc_ids[:, :3] == [[1, 3, 5]] * 4).all() and gpu.rescans == 0
    got = gpu.search(queries, 100, floor_key=tie + 1)
    assert_same_topk(got, cpu.search(queries, 100, floor_key=tie + 1))
    assert (got.doc_ids == -1).all()
    assert gpu.last_skipped == 2  # floors S + 1 (the identical set) and 1 (the empty query) are out of reach
    check_floors(gpu, cpu, queries, 100, max_len, np.random.default_rng(901))


def test_floors_with_the_widest_max_len():
    """max_len = 255: full-length sets reach key S, where the key > T table clamps to 255 (kNeverLen)."""
    rng = np.random.default_rng(950)
    max_len = 255
    full = list(range(1000, 1255))
    sets = _random_sets(rng, 600, 400, max_len, min_len=200).to_lists() + [full] * 5 + [full[:-1], [], [1]]
    docs = SetBatch.from_lists(sets)
    queries = SetBatch.from_lists([full, full[:-1], full[1:], [1], []] + _random_sets(rng, 20, 400, max_len).to_lists())
    cpu = NumpyShardIndex(docs, np.arange(docs.n_sets), max_len)
    gpu = _index(docs, np.arange(docs.n_sets), max_len)
    scale = max_len * max_len
    floors = np.full(queries.n_sets, -1, dtype=np.int64)
    floors[0] = scale  # only the identical sets
    floors[1] = scale * 254 // 255
    floors[2] = scale
    assert_same_topk(gpu.search(queries, 8, floor_key=floors), cpu.search(queries, 8, floor_key=floors))
    assert gpu.search(queries, 8, floor_key=floors).doc_ids[0, :6].tolist() == [600, 601, 602, 603, 604, -1]
    for k in (1, 6, 30):
        check_floors(gpu, cpu, queries, k, max_len, rng)


def test_floors_on_an_empty_shard_and_bad_floors():
    docs = SetBatch.from_lists([])
    queries = SetBatch.from_lists([[1, 2], [], [3]])
    gpu = _index(docs, np.zeros(0, dtype=np.int64), 8)
    assert (gpu.search(queries, 3, floor_key=np.array([0, -1, 5])).doc_ids == -1).all()

    index = _index(SetBatch.from_lists([[1, 2], [3], [70, 99]]), np.arange(3), 4, vocab_size=100)
    with pytest.raises(ValueError, match="shape"):
        index.search(queries, 2, floor_key=np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="shape"):
        gpu.search(queries, 2, floor_key=np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="integer"):
        index.search(queries, 2, floor_key=np.zeros(3))
    with pytest.raises(ValueError, match=">= -1"):
        index.search(queries, 2, floor_key=np.array([0, -3, 0]))
    got = index.search(queries, 2, floor_key=np.array([2**62, 0, 2**40], dtype=np.uint64))
    assert got.doc_ids[:, 0].tolist() == [-1, 0, -1] and index.last_skipped == 2


def test_warm_up_in_a_thread_then_an_index_built_in_the_main_thread_matches_numpy():
    """The shard actor's pattern: warm_up() in a background thread (context, settopk.kernels, a tiny
    index), then the real index in the main thread."""
    import threading

    from settopk.kernels.cuda import warm_up

    thread = threading.Thread(target=warm_up)
    thread.start()
    thread.join()
    rng = np.random.default_rng(17)
    docs, queries = _random_sets(rng, 3000, 300, 40), _random_sets(rng, 50, 300, 40)
    ids = np.arange(docs.n_sets) * 3
    assert_same_topk(_index(docs, ids, 64).search(queries, 20), NumpyShardIndex(docs, ids, 64).search(queries, 20))
