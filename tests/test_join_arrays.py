"""The threshold join over an array module (settopk.kernels.join.arrays, backends numpy and cupy):
self-join and R-S probe against the brute-force oracle on skewed corpora full of repeated sets,
every score, thresholds on ties, k caps, the self-join rule (containment's ordered pairs,
include_self), empty sets, slices small enough to cut probe groups apart; the shard indexes'
threshold_search through it; the same checks on the GPU (marker gpu); RETAIL's counts (slow)."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settopk.kernels import (
    SCORES,
    NumpyShardIndex,
    SetBatch,
    brute_force_threshold,
    join,
    parse_threshold,
    self_join_keep,
)
from settopk.kernels.join.array_ops import host_segments, marked_segments
from settopk.kernels.join.arrays import prepare_docs, self_join
from tests.join_helpers import corpora, doc_ids

_THRESHOLDS = {score: ["0.5", "2/3", "0.8", "1", "0.3", "1/7"] for score in SCORES}
_THRESHOLDS["overlap"] = ["1", "2", "3"]


def _text(score, pick):
    return _THRESHOLDS[score][pick % len(_THRESHOLDS[score])]


def check_self_join(backend, docs, score, text, k, include_self, slice_entries=None):
    """Fail unless the array self-join equals the oracle filtered by the self-join rule."""
    ids = doc_ids(len(docs))
    got = self_join(SetBatch.from_lists(docs), ids, text, score, 16, backend=backend, include_self=include_self, k=k,
                    slice_entries=slice_entries)
    every = brute_force_threshold(docs, docs, Fraction(parse_threshold(text, score)), doc_ids=ids.tolist(), score=score)
    lens = [len(set(d)) for d in docs]
    assert got.n_queries == len(docs)
    assert got.doc_ids.dtype == np.int64 and got.overlap.dtype == np.int32 and got.doc_len.dtype == np.int32
    for q in range(len(docs)):
        want = [p for p in every[q] if self_join_keep(ids[q], lens[q], p[0], p[2], score, include_self)]
        assert got.row(q) == want[:k], (q, docs[q])


def check_probe(backend, docs, queries, score, text, k, floor, slice_entries=None):
    """Fail unless the array R-S probe equals the oracle (queries hold ids no doc holds too)."""
    ids = doc_ids(len(docs))
    queries = [q + [30 + i] if i % 3 == 0 else q for i, q in enumerate(queries)]
    batch = SetBatch.from_lists(queries)
    side = prepare_docs(SetBatch.from_lists(docs), ids, text, score, 40, backend=backend, slice_entries=slice_entries)
    got = side.probe(batch, k=k, min_doc_len=batch.lengths if floor else None)
    want = brute_force_threshold(docs, queries, Fraction(parse_threshold(text, score)), doc_ids=ids.tolist(),
                                 score=score)
    assert got.n_queries == len(queries)
    for q in range(len(queries)):
        expected = [p for p in want[q] if not floor or p[2] >= len(set(queries[q]))]
        assert got.row(q) == expected[:k], (q, queries[q])


@given(docs=corpora(1.3), score=st.sampled_from(SCORES), pick=st.integers(0, 5), k=st.sampled_from([None, 1, 3]),
       include_self=st.booleans(), cap=st.sampled_from([None, 1, 5]))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_self_join_equals_the_oracle(docs, score, pick, k, include_self, cap):
    check_self_join("numpy", docs, score, _text(score, pick), k, include_self, cap)


@given(docs=corpora(1.3), queries=corpora(1.3), score=st.sampled_from(SCORES), pick=st.integers(0, 5),
       k=st.sampled_from([None, 2]), floor=st.booleans(), cap=st.sampled_from([None, 1, 7]))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_probe_equals_the_oracle(docs, queries, score, pick, k, floor, cap):
    check_probe("numpy", docs, queries, score, _text(score, pick), k, floor, cap)


def test_one_popular_token_in_tiny_slices():
    # Every set holds id 0, 300 copies of few sets: a probe group's candidates span many slices.
    rng = np.random.default_rng(5)
    base = [[0] + sorted(set(rng.integers(1, 12, rng.integers(1, 6)).tolist())) for _ in range(12)]
    docs = [base[i % len(base)] for i in range(120)] + [[0]] * 5 + [[]] * 3
    for score in ("jaccard", "containment", "overlap"):
        check_self_join("numpy", docs, score, _text(score, 0), None, False, slice_entries=3)
        check_probe("numpy", docs, docs[::7], score, _text(score, 1), 4, False, slice_entries=2)


def test_segments_marked_equal_repeated():
    counts = np.array([0, 3, 0, 0, 2, 1, 0], np.int64)
    for got, want in zip(marked_segments(np, counts), host_segments(counts)):
        assert got.tolist() == want.tolist()
    assert [a.tolist() for a in marked_segments(np, np.zeros(3, np.int64))] == [[], []]


def test_the_package_dispatches_numpy_here():
    docs = [[1, 2, 3], [1, 2, 3], [2, 3], [4]]
    ids = doc_ids(len(docs))
    batch = SetBatch.from_lists(docs)
    want = self_join(batch, ids, "0.6", "jaccard", 8, backend="numpy")
    got = join.self_join(batch, ids, "0.6", "jaccard", 8, backend="numpy")
    assert [got.row(q) for q in range(4)] == [want.row(q) for q in range(4)]
    # {2, 3} is the shorter: its pairs with both copies of {1, 2, 3} (2/3 >= 0.6) are under it.
    assert got.row(0) == [(10, 3, 3)] and got.row(2) == [(7, 2, 3), (10, 2, 3)] and got.row(3) == []
    side = join.prepare_docs(batch, ids, "0.6", "jaccard", 8, backend="numpy")
    assert side.probe(SetBatch.from_lists([[2, 3, 9]])).row(0) == [(13, 2, 2)]  # 2/3; the copies score 2/4


def test_errors_name_the_option():
    batch = SetBatch.from_lists([[1], [1, 2]])
    with pytest.raises(ValueError, match="T == 0"):
        self_join(batch, doc_ids(2), "0", "jaccard", 16, backend="numpy")
    with pytest.raises(ValueError, match="k must be >= 1"):
        self_join(batch, doc_ids(2), "0.5", "jaccard", 16, backend="numpy", k=0)
    with pytest.raises(ValueError, match="min_doc_len must have shape"):
        prepare_docs(batch, doc_ids(2), "0.5", "jaccard", 16, backend="numpy").probe(batch, min_doc_len=[1])
    from settopk.kernels.join.arrays import array_module

    with pytest.raises(ValueError, match="backend must be"):
        array_module("cpu")


def test_empty_sides():
    empty = SetBatch.from_lists([])
    got = prepare_docs(SetBatch.from_lists([[1, 2]]), doc_ids(1), "0.5", "dice", 8, backend="numpy").probe(empty)
    assert got.n_queries == 0 and len(got.doc_ids) == 0
    got = prepare_docs(empty, doc_ids(0), "0.5", "dice", 8, backend="numpy").probe(SetBatch.from_lists([[1], []]))
    assert got.offsets.tolist() == [0, 0, 0]
    assert self_join(SetBatch.from_lists([[], []]), doc_ids(2), "0.5", "jaccard", 8, backend="numpy").offsets.tolist() == [0, 0, 0]


@pytest.mark.parametrize("score", SCORES)
def test_numpy_index_threshold_search_through_the_join(score):
    rng = np.random.default_rng(11)
    docs = [sorted(set((rng.zipf(1.4, rng.integers(1, 9)) % 40).tolist())) for _ in range(150)]
    docs += docs[:60]
    queries = docs[::4] + [[41, 42], []]
    ids = doc_ids(len(docs))
    index = NumpyShardIndex(SetBatch.from_lists(docs), ids, 16, score=score)
    text = _text(score, 0)
    for min_len in (None, np.array([len(q) for q in queries])):
        got = index.threshold_search(SetBatch.from_lists(queries), text, min_doc_len=min_len)
        want = brute_force_threshold(docs, queries, Fraction(parse_threshold(text, score)), doc_ids=ids.tolist(),
                                     score=score)
        for q in range(len(queries)):
            assert got.row(q) == [p for p in want[q] if min_len is None or p[2] >= min_len[q]]
    zero = index.threshold_search(SetBatch.from_lists(queries[:3]), "0")  # the scan: every pair
    assert zero.counts.tolist() == [len(docs)] * 3


@pytest.mark.parametrize("backend", ["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def test_order_without_the_one_sort_key(backend, monkeypatch):
    """Where (query, score rank, doc) does not fit the one-sort key, three stable sorts give the
    same order (ties on score by doc id)."""
    from settopk.kernels.join import array_emit

    rng = np.random.default_rng(4)
    docs = [sorted(set((rng.zipf(1.3, rng.integers(1, 12)) % 60).tolist())) for _ in range(300)]
    docs += docs[:100]
    monkeypatch.setattr(array_emit, "_KEY_BITS", 0)
    for score, text in (("jaccard", "0.3"), ("cosine", "0.5"), ("containment", "0.6")):
        check_self_join(backend, docs, score, text, None, False)
        check_probe(backend, docs, docs[::3], score, text, 2, True)


def check_host_rows(backend, docs, score, text, k, include_self):
    """Fail unless the self-join's pairs written on the host from the array join's pairs of groups
    (what ``cupy`` does past its device memory) equal the oracle, the self-join rule applied."""
    from settopk.kernels.join import array_emit, arrays
    from settopk.kernels.join.array_ops import to_host
    from settopk.kernels.join.prefixes import group_join_threshold
    from settopk.kernels.join.prepare import frequency_order, prepare_sets

    batch, ids = SetBatch.from_lists(docs), doc_ids(len(docs))
    score, t = group_join_threshold(text, score)
    xp = arrays.array_module(backend)
    js = prepare_sets(batch, frequency_order(batch.tokens, batch.id_bound))
    plan, found = arrays._group_join(xp, arrays._Groups(xp, js), t, score, 16, arrays.SLICE_ENTRIES)
    found = tuple(to_host(xp, v.astype(xp.int32)) for v in found)
    got = array_emit.host_rows(batch, ids, t, score, 16, js, plan, found, include_self, k)
    every = brute_force_threshold(docs, docs, t, doc_ids=ids.tolist(), score=score)
    lens = [len(set(d)) for d in docs]
    for q in range(len(docs)):
        want = [p for p in every[q] if self_join_keep(ids[q], lens[q], p[0], p[2], score, include_self)]
        assert got.row(q) == want[:k], (q, docs[q])


_SYMMETRIC = [s for s in SCORES if s != "containment"]


@given(docs=corpora(1.3), score=st.sampled_from(_SYMMETRIC), pick=st.integers(0, 5), k=st.sampled_from([None, 1, 3]),
       include_self=st.booleans())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_pairs_of_groups_written_on_the_host_equal_the_oracle(docs, score, pick, k, include_self):
    check_host_rows("numpy", docs, score, _text(score, pick), k, include_self)


# ---- GPU: the same checks with xp = cupy -------------------------------------------------------


@pytest.mark.gpu
@given(docs=corpora(1.3), score=st.sampled_from(SCORES), pick=st.integers(0, 5), k=st.sampled_from([None, 1, 3]),
       include_self=st.booleans(), cap=st.sampled_from([None, 1, 5]))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_gpu_self_join_equals_the_oracle(docs, score, pick, k, include_self, cap):
    check_self_join("cupy", docs, score, _text(score, pick), k, include_self, cap)


@pytest.mark.gpu
@given(docs=corpora(1.3), queries=corpora(1.3), score=st.sampled_from(SCORES), pick=st.integers(0, 5),
       k=st.sampled_from([None, 2]), floor=st.booleans(), cap=st.sampled_from([None, 1, 7]))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_gpu_probe_equals_the_oracle(docs, queries, score, pick, k, floor, cap):
    check_probe("cupy", docs, queries, score, _text(score, pick), k, floor, cap)


@pytest.mark.gpu
@given(docs=corpora(1.3), score=st.sampled_from(_SYMMETRIC), pick=st.integers(0, 5), k=st.sampled_from([None, 1, 3]),
       include_self=st.booleans())
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_gpu_pairs_of_groups_written_on_the_host_equal_the_oracle(docs, score, pick, k, include_self):
    check_host_rows("cupy", docs, score, _text(score, pick), k, include_self)


@pytest.mark.gpu
def test_gpu_self_join_past_the_device_memory_is_written_on_the_host():
    """A self-join whose member pairs would not fit the device's free memory takes the host's rows:
    the same pairs as the device's own expansion."""
    from settopk.kernels.join import arrays

    rng = np.random.default_rng(5)
    docs = [sorted(set((rng.zipf(1.3, rng.integers(1, 20)) % 200).tolist())) for _ in range(2000)]
    docs += [docs[i] for i in rng.integers(0, len(docs), 2000)]
    batch, ids = SetBatch.from_lists(docs), doc_ids(len(docs))
    want = self_join(batch, ids, "0.5", "jaccard", 64, backend="cupy", k=5, include_self=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(arrays, "device_bytes_free", lambda xp: 0)
        mp.setattr(arrays, "expand_members", None)  # the device's expansion is not reached
        got = self_join(batch, ids, "0.5", "jaccard", 64, backend="cupy", k=5, include_self=True)
    for name in ("offsets", "doc_ids", "overlap", "doc_len"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name


@pytest.mark.gpu
def test_gpu_join_equals_numpy_join_on_repeated_skewed_sets():
    rng = np.random.default_rng(2)
    docs = [sorted(set((rng.zipf(1.3, rng.integers(1, 30)) % 500).tolist())) for _ in range(3000)]
    docs += [docs[i] for i in rng.integers(0, len(docs), 1500)]
    batch, ids = SetBatch.from_lists(docs), doc_ids(len(docs))
    for score, text in (("jaccard", "0.5"), ("cosine", "0.7"), ("containment", "0.8")):
        want = self_join(batch, ids, text, score, 64, backend="numpy")
        got = self_join(batch, ids, text, score, 64, backend="cupy", slice_entries=4096)
        for name in ("offsets", "doc_ids", "overlap", "doc_len"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), (score, name)


@pytest.mark.gpu
@pytest.mark.parametrize("stage_bytes", [24, 1000, 4096])
def test_gpu_staged_copies_equal_the_device_arrays(stage_bytes, monkeypatch):
    """to_host through staging buffers smaller than the array (chunks not a multiple of the item
    size, the last one short): every dtype and shape comes back equal."""
    import cupy

    from settopk.kernels.cuda import copies

    monkeypatch.setattr(copies, "STAGE_BYTES", stage_bytes)
    rng = np.random.default_rng(stage_bytes)
    for a in (rng.integers(-2**62, 2**62, 5001), rng.integers(0, 2**31, (37, 29)).astype(np.int32),
              rng.random(777), np.arange(3, dtype=np.int8)):
        got = copies.to_host(cupy.asarray(a))
        assert got.dtype == a.dtype and got.shape == a.shape and np.array_equal(got, a)
    assert copies.to_host(cupy.asarray(np.arange(20)[::2])).tolist() == list(range(0, 20, 2))


@pytest.mark.gpu
def test_gpu_staged_copy_waits_for_the_kernels_that_write_it(monkeypatch):
    """An array copied as soon as the kernels that write it are queued comes back written."""
    import cupy

    from settopk.kernels.cuda import copies

    monkeypatch.setattr(copies, "STAGE_BYTES", 1 << 20)
    for _ in range(3):
        made = cupy.cumsum(cupy.ones(1 << 24, cupy.int64))
        assert np.array_equal(copies.to_host(made), np.arange(1, (1 << 24) + 1))


@pytest.mark.gpu
def test_gpu_join_kernel_in_small_launches_with_a_short_first_buffer(monkeypatch):
    """The kernel's grid cut into launches of a few entries, and a first output buffer of one slot
    (every pair found again in the second launch): the same pairs as the host join."""
    import settopk.kernels.cuda.join as cuda_join

    rng = np.random.default_rng(5)
    docs = [sorted(set((rng.zipf(1.2, rng.integers(1, 40)) % 300).tolist())) for _ in range(2000)]
    docs += [docs[i] for i in rng.integers(0, len(docs), 800)]
    batch, ids = SetBatch.from_lists(docs), doc_ids(len(docs))
    want = self_join(batch, ids, "0.4", "jaccard", 64, backend="numpy")
    monkeypatch.setattr(cuda_join, "LAUNCH_ENTRIES", 997)
    monkeypatch.setattr(cuda_join, "MIN_CAPACITY", 1)
    monkeypatch.setattr(cuda_join, "CANDIDATES_PER_SLOT", 1 << 40)
    got = self_join(batch, ids, "0.4", "jaccard", 64, backend="cupy")
    assert len(want.doc_ids) > 1000
    for name in ("offsets", "doc_ids", "overlap", "doc_len"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name


@pytest.mark.gpu
@pytest.mark.parametrize("score", ["jaccard", "containment", "overlap"])
def test_gpu_index_threshold_search_through_the_join(score):
    from tests.gpu_helpers import cupy_index

    rng = np.random.default_rng(11)
    docs = [sorted(set((rng.zipf(1.4, rng.integers(1, 9)) % 40).tolist())) for _ in range(150)]
    docs += docs[:60]
    queries = docs[::4] + [[41, 42], []]
    ids = doc_ids(len(docs))
    index = cupy_index(SetBatch.from_lists(docs), ids, 16, score=score)
    text = _text(score, 0)
    for min_len in (None, np.array([len(q) for q in queries])):
        got = index.threshold_search(SetBatch.from_lists(queries), text, min_doc_len=min_len)
        want = brute_force_threshold(docs, queries, Fraction(parse_threshold(text, score)), doc_ids=ids.tolist(),
                                     score=score)
        for q in range(len(queries)):
            assert got.row(q) == [p for p in want[q] if min_len is None or p[2] >= min_len[q]]


def _retail(path):
    rows = [np.unique(np.array(line.split(), dtype=np.int64)) for line in path.read_text().splitlines()]
    values = np.concatenate(rows)
    batch = SetBatch(np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64),
                     np.searchsorted(np.unique(values), values).astype(np.uint16))
    return batch, np.arange(len(rows), dtype=np.int64)


_RETAIL_PAIRS = (("0.5", 5_081_632), ("0.7", 609_104), ("0.8", 568_171), ("0.9", 563_005))


@pytest.mark.slow
def test_retail_pair_counts(retail_dat):
    batch, ids = _retail(retail_dat)
    for text, pairs in _RETAIL_PAIRS[1:]:
        assert len(self_join(batch, ids, text, "jaccard", 128, backend="numpy").doc_ids) == pairs


@pytest.mark.gpu
def test_gpu_retail_pair_counts(retail_dat):
    batch, ids = _retail(retail_dat)
    for text, pairs in _RETAIL_PAIRS:
        assert len(self_join(batch, ids, text, "jaccard", 128, backend="cupy").doc_ids) == pairs


@pytest.mark.parametrize("backend", ["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def test_index_self_joins_reuse_one_prepared_corpus(backend):
    """Index.self_join at several thresholds and scores prepares the corpus once (on cupy with its
    device copy) and equals the oracle each time."""
    import settopk
    from settopk.kernels.join.arrays import ArrayCorpus
    from settopk.kernels.join.prepare import JoinSets

    rng = np.random.default_rng(8)
    docs = [sorted(set((rng.zipf(1.3, rng.integers(1, 10)) % 50).tolist())) for _ in range(200)]
    docs += docs[:70]
    index = settopk.Index.build(docs, score="jaccard", backend=backend)
    lens = [len(d) for d in docs]
    for text in ("0.5", "0.8", "1/3"):
        got = index.self_join(text)
        assert isinstance(index.join_corpus, ArrayCorpus if backend == "cupy" else JoinSets)
        every = brute_force_threshold(docs, docs, Fraction(text), doc_ids=list(range(len(docs))), score="jaccard")
        want = [(q, p[0]) for q in range(len(docs)) for p in every[q] if self_join_keep(q, lens[q], p[0], p[2], "jaccard", False)]
        assert list(zip(got.query_index.tolist(), got.doc_ids.tolist())) == want
    first = index.join_corpus
    index.self_join("0.6")
    assert index.join_corpus is first
