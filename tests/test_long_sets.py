"""Sets longer than 255 ids (``max_len`` up to 4096) on the ``numpy``, ``cpu`` and ``cupy`` backends (the
last on the GPU machine), against the brute-force oracle, ties included: the top-k (with and without
floors, every routing), threshold searches and the self-join, for every score."""

from __future__ import annotations

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
    brute_force_topk,
    parse_threshold,
    score_key,
    self_join_pairs,
)

BACKENDS = ("numpy", "cpu", pytest.param("cupy", marks=pytest.mark.gpu))
ROUTINGS = ("scan", "auto", "postings")


def _index(backend, docs, ids, max_len, score, routing="scan", **options):
    """The backend's index; on ``cupy``, routing ``postings`` becomes ``auto``, which scans a shard of sets
    longer than 255 ids (the GPU postings count overlaps in bytes and refuse such a shard)."""
    batch, ids = SetBatch.from_lists(docs), np.asarray(ids, dtype=np.int64)
    if backend == "numpy":
        return NumpyShardIndex(batch, ids, max_len, score, routing=routing)
    if backend == "cupy":
        from tests.gpu_helpers import cupy_index

        routing = "auto" if routing == "postings" and max_len > 255 else routing
        return cupy_index(batch, ids, max_len, score=score, routing=routing, **options)
    pytest.importorskip("numba")
    from settopk.kernels.numba_index import NumbaShardIndex

    return NumbaShardIndex(batch, ids, max_len, score, routing=routing, threads=2)


def _long_sets(rng, n, max_len, vocab):
    """``n`` sets of distinct ids below ``vocab``: lengths near ``max_len``, around 255/256, short
    and empty; some repeated (equal keys: ties broken by doc id)."""
    specials = [max_len, max_len - 1, max_len - 2, 255, 256, 257, 0, 1]
    sets = []
    for i in range(n):
        if sets and rng.random() < 0.15:
            sets.append(list(sets[int(rng.integers(len(sets)))]))
            continue
        pick = rng.random()
        length = int(rng.choice(specials)) if pick < 0.5 else int(rng.integers(0, max_len + 1))
        length = max(0, min(length, max_len, vocab))
        sets.append(rng.choice(vocab, size=length, replace=False).tolist())
    return sets


def _rows(topk):
    return [[(int(d), int(o), int(l)) for d, o, l in zip(ids, ov, dl) if d >= 0]
            for ids, ov, dl in zip(topk.doc_ids, topk.overlap, topk.doc_len)]


def _pair_rows(pairs):
    return [pairs.row(i) for i in range(pairs.n_queries)]


_shapes = st.sampled_from([(256, 24), (300, 30), (1000, 40), (4096, 60)])  # (max_len, extra vocab)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("score", SCORES)
@given(shape=_shapes, seed=st.integers(0, 2**32 - 1), k=st.sampled_from([1, 3, 7, 40]))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_topk_of_long_sets_matches_oracle(backend, score, shape, seed, k):
    """A vocabulary a little wider than ``max_len``: long sets share most ids (overlaps above 255)."""
    max_len, extra = shape
    rng = np.random.default_rng(seed)
    docs, queries = _long_sets(rng, 30, max_len, max_len + extra), _long_sets(rng, 6, max_len, max_len + extra)
    ids = [5 * i + 2 for i in range(len(docs))]
    want = brute_force_topk(docs, queries, k, doc_ids=ids, score=score)
    routings = ROUTINGS if backend == "cpu" else ("scan", "postings")
    for routing in routings:
        got = _index(backend, docs, ids, max_len, score, routing).search(SetBatch.from_lists(queries), k)
        assert got.overlap.dtype == np.int16 and got.doc_len.dtype == np.int16
        assert _rows(got) == want, routing


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("score", SCORES)
def test_floors_of_long_sets_keep_exactly_the_keys_above(backend, score):
    """A per-query floor key (the job's threshold exchange) cuts each row exactly where its keys fall below."""
    max_len = 1000
    rng = np.random.default_rng(11)
    docs, queries = _long_sets(rng, 40, max_len, 1030), _long_sets(rng, 8, max_len, 1030)
    ids = list(range(len(docs)))
    want = brute_force_topk(docs, queries, 10, doc_ids=ids, score=score)
    floors = np.array([int(score_key(row[len(row) // 2][1], len(set(q)), row[len(row) // 2][2], max_len, score))
                       if row else -1 for q, row in zip(queries, want)], dtype=np.int64)
    keep = [[(d, o, l) for d, o, l in row if int(score_key(o, len(set(q)), l, max_len, score)) >= f]
            for q, row, f in zip(queries, want, floors)]
    for routing in ("scan", "postings"):
        got = _index(backend, docs, ids, max_len, score, routing).search(SetBatch.from_lists(queries), 10,
                                                                         floor_key=floors)
        assert _rows(got) == keep, routing


def test_numpy_and_cpu_agree_bit_for_bit_at_4096():
    """Both backends' TopK arrays are identical on sets of exactly 4096 ids (the cpu scan's 13 counter planes)."""
    pytest.importorskip("numba")
    from settopk.kernels.numba_index import NumbaShardIndex

    rng = np.random.default_rng(5)
    base = rng.choice(4200, size=4096, replace=False)
    docs = [np.sort(rng.choice(base, size=4096 - i, replace=False)).tolist() for i in range(0, 40, 3)] + [base.tolist()]
    queries = [base.tolist(), base[:4000].tolist(), rng.choice(4200, size=4096, replace=False).tolist()]
    d, q, ids = SetBatch.from_lists(docs), SetBatch.from_lists(queries), np.arange(len(docs), dtype=np.int64)
    for score in SCORES:
        want = NumpyShardIndex(d, ids, 4096, score).search(q, 5)
        assert _rows(want) == brute_force_topk(docs, queries, 5, doc_ids=list(ids), score=score)
        got = NumbaShardIndex(d, ids, 4096, score, threads=2).search(q, 5)
        for name in ("doc_ids", "overlap", "doc_len"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), (score, name)
        assert int(want.overlap[0, 0]) == 4096  # the query equal to the last doc


_thresholds = st.sampled_from(["0", "1", "0.5", "0.25", "1/3", "2/3", "0.8", "0.9", "0.999", "256/300"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("score", SCORES)
@given(shape=_shapes, seed=st.integers(0, 2**32 - 1), text=_thresholds, k=st.sampled_from([None, 2]))
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_threshold_search_of_long_sets_matches_oracle(backend, score, shape, seed, text, k):
    max_len, extra = shape
    rng = np.random.default_rng(seed)
    docs, queries = _long_sets(rng, 24, max_len, max_len + extra), _long_sets(rng, 5, max_len, max_len + extra)
    # overlap thresholds are counts: scale them to the sets' lengths (some near max_len)
    t = parse_threshold(str(Fraction(text) * max_len) if score == "overlap" else text, score)
    ids = [3 * i + 1 for i in range(len(docs))]
    want = brute_force_threshold(docs, queries, t, doc_ids=ids, score=score, k=k)
    for routing in ("scan", "postings"):
        got = _index(backend, docs, ids, max_len, score, routing).threshold_search(SetBatch.from_lists(queries), t, k=k)
        assert _pair_rows(got) == want, routing


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("score", SCORES)
def test_self_join_of_long_sets_matches_oracle(backend, score):
    """Each unordered pair once, under its shorter doc; ordered pairs for containment (as tests/test_threshold.py)."""
    max_len = 600
    rng = np.random.default_rng(23)
    docs = _long_sets(rng, 30, max_len, 640)
    t = parse_threshold("300" if score == "overlap" else "0.5", score)
    ids = list(range(7, 7 + len(docs)))
    batch = SetBatch.from_lists(docs)
    full = brute_force_threshold(docs, docs, t, doc_ids=ids, score=score)
    size = dict(zip(ids, (len(set(d)) for d in docs)))
    keep = (lambda q, d: d != q) if score == "containment" else (lambda q, d: (size[d], d) > (size[q], q))
    want = [[p for p in row if keep(qid, p[0])] for qid, row in zip(ids, full)]
    assert any(want)
    for routing in ("scan", "postings"):
        index = _index(backend, docs, ids, max_len, score, routing)
        assert _pair_rows(self_join_pairs(index.threshold_search(batch, t), ids, batch.lengths, score)) == want
        if score != "containment":
            half = index.threshold_search(batch, t, min_doc_len=batch.lengths)
            assert _pair_rows(self_join_pairs(half, ids, batch.lengths, score)) == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernels_refuse_cosine_above_4096(backend):
    """Cosine's key table has rows up to 4096 (the GPU kernels' limit for every score)."""
    with pytest.raises(ValueError, match=r"max_len must be in \[1, 4096\]"):
        _index(backend, [[1, 2, 3]], [0], 4097, "cosine")


@pytest.mark.parametrize("score", SCORES)
@given(text=_thresholds, seed=st.integers(0, 2**32 - 1))
@settings(max_examples=8, deadline=None)
def test_need_table_at_4096_is_the_least_passing_overlap(score, text, seed):
    """The int64 table (max_len 4096) against exact fractions, at sampled (|q|, |d|) and the edges."""
    from settopk.kernels import need_table
    from settopk.kernels.oracle import _exact

    t = parse_threshold(str(Fraction(text) * 4096) if score == "overlap" else text, score)
    rng = np.random.default_rng(seed)
    qlens = np.unique(np.concatenate([[0, 1, 255, 256, 4095, 4096], rng.integers(0, 4097, 20)]))
    need = need_table(t, qlens, 4096, score)
    bar = t * t if score == "cosine" else t  # _exact gives cosine as its square
    assert need.shape == (len(qlens), 4097) and need.dtype == np.int32
    for i, ql in enumerate(qlens.tolist()):
        for dl in [0, 1, 255, 256, 4095, 4096, *rng.integers(0, 4097, 20).tolist()]:
            o = int(need[i, dl])
            top = min(ql, dl)
            passes = [_exact(x, ql, dl, score) >= bar for x in (o - 1, o) if 0 <= x <= top]
            if o <= top:
                assert passes[-1] and (o == 0 or not passes[0]), (ql, dl, o)
            else:  # unreachable (any value above min(|q|, |d|)): not even the full overlap passes
                assert not (_exact(top, ql, dl, score) >= bar), (ql, dl, o)


def test_lognormal_length_law_is_netflix_shaped_and_seeded():
    """Mean about 200, median about 92, at least 1, cut at max_len; the same seed, the same corpus."""
    from settopk.jobs.synthetic import SyntheticSpec
    from settopk.jobs.synthetic.generate import generate_docs
    from settopk.jobs.synthetic.spec import draw_lengths

    lengths = draw_lengths(np.random.default_rng(0), 200_000, 4096, "lognormal")
    assert lengths.min() >= 1 and lengths.max() == 4096 and 190 < lengths.mean() < 210
    assert 85 <= np.median(lengths) <= 100
    assert draw_lengths(np.random.default_rng(0), 1000, 300, "lognormal").max() == 300
    spec = SyntheticSpec(n_docs=300, n_queries=0, vocab_size=2000, max_len=1500, length_law="lognormal", seed=4)
    a, b = generate_docs(spec), generate_docs(spec)
    assert np.array_equal(a.offsets, b.offsets) and np.array_equal(a.tokens, b.tokens)
    assert a.lengths.max() <= 1500 and a.lengths.mean() > 100


@pytest.mark.gpu
@pytest.mark.parametrize("score", ["braun_blanquet", "jaccard"])
@pytest.mark.parametrize("window", [None, 3, 40])
def test_gpu_long_sets_equal_the_numpy_index(score, window, monkeypatch):
    """Thousands of docs of 0 to 1500 ids (laid out in segments of 255 positions), small tiles, several
    sampling levels, and threshold planes taken a few doc lengths at a time (``window``): the GPU's
    TopK equals the NumPy index's, with and without floors, ids beyond 65,536 included."""
    import settopk.kernels.cuda.index as cuda_index
    from tests.gpu_helpers import assert_same_topk, check_floors, cupy_index

    if window is not None:
        monkeypatch.setattr(cuda_index, "_WINDOW_LENS", window)
    rng = np.random.default_rng(41)
    max_len, k, vocab = 1500, 20, 3000
    lengths = np.minimum(rng.lognormal(4.5, 1.0, 6000).astype(np.int64), max_len)
    pool = rng.permutation(vocab)
    docs = SetBatch.from_lists([np.sort(rng.choice(pool[: max(n, 1) * 2], size=n, replace=False)) for n in lengths])
    queries = SetBatch.from_lists(docs.take(rng.choice(docs.n_sets, 40, replace=False)).to_lists()
                                  + [rng.choice(vocab, size=int(n), replace=False) for n in (0, 1, 256, 900, 1500)])
    ids = np.arange(docs.n_sets, dtype=np.int64) * 3
    cpu = NumpyShardIndex(docs, ids, max_len, score)
    gpu = cupy_index(docs, ids, max_len, score=score, routing="auto", tile_docs=512)
    assert gpu.last_routing["postings"] == 0 and gpu.postings_bytes == 0
    assert_same_topk(gpu.search(queries, k), cpu.search(queries, k))
    # The whole-shard level's tiles cover every doc, in order, each within one doc's work of an equal share.
    bounds, n_tiles = gpu._tiles(1, gpu.n_docs, 2)
    bounds = bounds.get()
    assert n_tiles > 1 and len(bounds) == n_tiles + 1 and bounds[0] == 0 and bounds[-1] == gpu.n_docs
    assert (np.diff(bounds) >= 0).all()
    work = (np.sort(lengths) + 7) // 8 * 8 + 16
    cumulative = np.concatenate([[0], np.cumsum(work)])
    assert (cumulative[bounds[1:]] - cumulative[bounds[:-1]]).max() <= cumulative[-1] / n_tiles + work.max()
    check_floors(gpu, cpu, queries, k, max_len, rng, score)
    wide = cupy_index(SetBatch(docs.offsets, docs.tokens.astype(np.uint32) + 70_000), ids, max_len, 2**24,
                      score=score, tile_docs=512)
    shifted = SetBatch(queries.offsets, queries.tokens.astype(np.uint32) + 70_000)
    assert_same_topk(wide.search(shifted, k), cpu.search(queries, k))


def _wavefronts(rows: np.ndarray) -> np.ndarray:
    """Shared-memory wavefronts of each position of a chunk (``rows``: 32 lanes x positions of ids, -1
    past a doc's end): the most distinct ids the lanes read from one of the 32 banks (equal ids are
    one broadcast)."""
    ids = np.sort(rows, axis=0)
    distinct = (ids >= 0) & np.vstack([np.ones((1, ids.shape[1]), bool), ids[1:] != ids[:-1]])
    counts = np.zeros((32, ids.shape[1]), dtype=np.int64)
    np.add.at(counts, (ids % 32, np.broadcast_to(np.arange(ids.shape[1]), ids.shape)), distinct)
    return counts.max(axis=0)


@pytest.mark.gpu
def test_gpu_layout_spreads_long_docs_over_banks_in_segments():
    """Docs past 255 ids are laid out in segments of 255 positions, each holding the doc's next 255 ids
    (sorted ids, any order inside the segment), each spread over the 32 shared-memory banks: on random
    ids, well under the wavefronts of the ids laid out in order."""
    from tests.gpu_helpers import cupy_index

    rng = np.random.default_rng(43)
    lengths = np.minimum(rng.lognormal(5.5, 0.8, 2000).astype(np.int64), 1500)
    docs = SetBatch.from_lists([np.sort(rng.choice(65536, size=n, replace=False)) for n in lengths])
    gpu = cupy_index(docs, np.arange(docs.n_sets, dtype=np.int64), 1500)
    groups = gpu._groups.get().view(np.uint16).reshape(-1, 8).astype(np.int64)
    starts, slot_len, slot_pos = (a.get() for a in (gpu._chunk_start, gpu._slot_len, gpu._slot_pos))
    spread, in_order = [], []
    for c in range(-(-docs.n_sets // 32)):
        slots = np.arange(32 * c, min(32 * c + 32, docs.n_sets))
        n_pos = int(slot_len[slots[-1]] + 7) // 8 * 8
        laid, plain = np.full((32, n_pos), -1), np.full((32, n_pos), -1)
        for lane, slot in enumerate(slots):
            n = int(slot_len[slot])
            want = docs.tokens[docs.offsets[slot_pos[slot]]:docs.offsets[slot_pos[slot] + 1]].astype(np.int64)
            got = groups[starts[c] + 32 * np.arange(n_pos // 8) + lane].reshape(-1)[:n]
            for lo in range(0, n, 255):
                assert np.array_equal(np.sort(got[lo:lo + 255]), want[lo:lo + 255]), (slot, lo)
            laid[lane, :n], plain[lane, :n] = got, want
        keep = slice(255, None)  # the positions of the second segment on
        spread.append(_wavefronts(laid)[keep])
        in_order.append(_wavefronts(plain)[keep])
    spread, in_order = np.concatenate(spread), np.concatenate(in_order)
    assert len(spread) > 1000 and spread.mean() < 0.7 * in_order.mean(), (spread.mean(), in_order.mean())


@pytest.mark.gpu
def test_gpu_long_sets_refuse_postings_routing_and_max_len_above_4096():
    from tests.gpu_helpers import cupy_index

    docs, ids = SetBatch.from_lists([[1, 2, 3]]), np.arange(1)
    with pytest.raises(ValueError, match="routing 'postings' counts overlaps in bytes.*max_len=256"):
        cupy_index(docs, ids, 256, routing="postings")
    with pytest.raises(ValueError, match=r"max_len must be in \[1, 4096\]"):
        cupy_index(docs, ids, 4097)
    assert cupy_index(docs, ids, 255, routing="postings").postings_bytes > 0
