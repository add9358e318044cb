"""The real-data threshold join (settopk.kernels.join, issue 46): the frequency order and the groups
of identical sets, and the cpu backend's self-join and R-S join against the brute-force oracle on
skewed corpora full of repeated sets, every score, thresholds that land on ties, k caps and the
self-join rule; RETAIL's exact pair counts (slow)."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.join_helpers import corpora, doc_ids

from settopk.kernels import SCORES, SetBatch, brute_force_threshold, parse_threshold, self_join_keep
from settopk.kernels.join import join_applies, prepare_docs, self_join, threshold_join
from settopk.kernels.join.prepare import frequency_order, prepare_sets

pytest.importorskip("numba")


# Thresholds that land exactly on achievable scores (ties pass), and an overlap count per score.
_THRESHOLDS = {score: ["0.5", "2/3", "0.8", "1", "0.3", "1/7"] for score in SCORES}
_THRESHOLDS["overlap"] = ["1", "2", "3"]


def test_frequency_order_ranks_rarest_first_ties_by_id():
    rank = frequency_order(np.array([5, 1, 5, 2, 5, 1], np.uint16), 7)
    # counts: 0,2,1,0,0,3,0 -> ids 0,3,4,6 (0 each), 2 (1), 1 (2), 5 (3)
    assert rank.tolist() == [0, 5, 4, 1, 2, 6, 3]
    with pytest.raises(ValueError, match="below n_ids"):
        frequency_order(np.array([9], np.uint16), 5)


def test_prepare_groups_identical_sets_exactly():
    sets = [[1, 2], [3], [2, 1], [], [1, 2], [3], [], [1, 4]]
    batch = SetBatch.from_lists(sets)
    js = prepare_sets(batch, frequency_order(batch.tokens, batch.id_bound))
    groups = [js.group_members[a:b].tolist() for a, b in zip(js.group_offsets[:-1], js.group_offsets[1:])]
    # by (length, first member): [] x2, [3] x2, then the pairs by first member
    assert groups == [[3, 6], [1, 5], [0, 2, 4], [7]]
    assert js.group_rep.tolist() == [3, 1, 0, 7]
    for g, members in enumerate(groups):
        assert all(js.group_of[m] == g for m in members)
    for i in range(len(sets)):  # each set keeps its tokens, in rank order
        row = js.tokens[js.offsets[i]:js.offsets[i + 1]]
        assert np.all(np.diff(row) > 0)


@given(docs=corpora(), score=st.sampled_from(SCORES), pick=st.integers(0, 5), k=st.sampled_from([None, 1, 3]),
       include_self=st.booleans())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_self_join_equals_the_oracle(docs, score, pick, k, include_self):
    text = _THRESHOLDS[score][pick % len(_THRESHOLDS[score])]
    t = parse_threshold(text, score)
    ids = doc_ids(len(docs))
    got = self_join(SetBatch.from_lists(docs), ids, text, score, 16, include_self=include_self, k=k)
    every = brute_force_threshold(docs, docs, Fraction(t), doc_ids=ids.tolist(), score=score)
    lens = [len(set(d)) for d in docs]
    assert got.n_queries == len(docs)
    for q in range(len(docs)):
        want = [p for p in every[q] if self_join_keep(ids[q], lens[q], p[0], p[2], score, include_self)]
        assert got.row(q) == want[:k], (q, docs[q])


@given(docs=corpora(), queries=corpora(), score=st.sampled_from(SCORES), pick=st.integers(0, 5),
       k=st.sampled_from([None, 2]), floor=st.booleans())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_probe_equals_the_oracle(docs, queries, score, pick, k, floor):
    text = _THRESHOLDS[score][pick % len(_THRESHOLDS[score])]
    t = parse_threshold(text, score)
    ids = doc_ids(len(docs))
    queries = [q + [30 + i] if i % 3 == 0 else q for i, q in enumerate(queries)]  # ids no doc holds count in |q|
    batch = SetBatch.from_lists(queries)
    min_len = batch.lengths if floor else None
    got = prepare_docs(SetBatch.from_lists(docs), ids, text, score, 40).probe(batch, k=k, min_doc_len=min_len)
    want = brute_force_threshold(docs, queries, Fraction(t), doc_ids=ids.tolist(), score=score)
    for q in range(len(queries)):
        expected = [p for p in want[q] if not floor or p[2] >= len(set(queries[q]))]
        assert got.row(q) == expected[:k], (q, queries[q])


def test_a_prepared_side_serves_batch_after_batch():
    rng = np.random.default_rng(3)
    docs = [sorted(set(rng.integers(0, 30, rng.integers(1, 9)).tolist())) for _ in range(200)]
    docs += docs[:80]
    side = prepare_docs(SetBatch.from_lists(docs), doc_ids(len(docs)), "0.6", "jaccard", 16)
    for lo in (0, 100, 200):
        batch = docs[lo:lo + 100]
        got = side.probe(SetBatch.from_lists(batch))
        want = brute_force_threshold(docs, batch, Fraction(3, 5), doc_ids=doc_ids(len(docs)).tolist(), score="jaccard")
        assert [got.row(i) for i in range(len(batch))] == want


def test_a_prepared_corpus_serves_self_joins_at_any_threshold_from_several_threads():
    """The threads and scratch kept with a prepared corpus serve its next joins: thresholds one
    after another, and two joins at once, each equal to the oracle."""
    import functools
    from concurrent.futures import ThreadPoolExecutor

    from settopk.kernels.join import prepare_corpus

    rng = np.random.default_rng(8)
    docs = [sorted(set((rng.zipf(1.4, rng.integers(1, 10)) % 60).tolist())) for _ in range(300)]
    docs += [docs[i] for i in rng.integers(0, 300, 100)]
    batch, ids, lens = SetBatch.from_lists(docs), doc_ids(len(docs)), [len(d) for d in docs]
    prepared = prepare_corpus(batch, backend="cpu")

    def rows(t, corpus):
        got = self_join(batch, ids, t, "jaccard", 16, threads=2, prepared=corpus)
        return [got.row(q) for q in range(len(docs))]

    def want(t):
        every = brute_force_threshold(docs, docs, parse_threshold(t, "jaccard"), doc_ids=ids.tolist(), score="jaccard")
        return [[p for p in every[q] if self_join_keep(ids[q], lens[q], p[0], p[2], "jaccard")] for q in range(len(docs))]

    thresholds = ["0.5", "0.9", "0.3", "0.5"]
    wanted = {t: want(t) for t in set(thresholds)}
    for t in thresholds:
        assert rows(t, prepared) == wanted[t], t
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(functools.partial(rows, corpus=prepared), thresholds)) == [wanted[t] for t in thresholds]
    # The kept workers go with the corpus: nothing of it stays behind once it is dropped.
    import gc

    from settopk.kernels.join import host_join

    key = id(prepared.group_token_offsets)
    assert key in host_join._KEPT
    del prepared
    gc.collect()
    assert key not in host_join._KEPT


def test_zero_threshold_is_refused_not_filtered():
    assert not join_applies(Fraction(0)) and join_applies(Fraction(1, 10**9))
    with pytest.raises(ValueError, match="T == 0"):
        self_join(SetBatch.from_lists([[1], [1]]), doc_ids(2), "0", "jaccard", 16)
    with pytest.raises(ValueError, match="k must be >= 1"):
        self_join(SetBatch.from_lists([[1], [1]]), doc_ids(2), "0.5", "jaccard", 16, k=0)


def test_long_sets_up_to_4096doc_ids():
    rng = np.random.default_rng(0)
    base = sorted(rng.choice(6000, 4096, replace=False).tolist())
    docs = [base, base[:3500] + base[3700:], base[::2], sorted(set(base[:4000]) | {6001}), base]
    ids = doc_ids(len(docs))
    got = self_join(SetBatch.from_lists(docs), ids, "0.8", "braun_blanquet", 4096)
    every = brute_force_threshold(docs, docs, Fraction(4, 5), doc_ids=ids.tolist(), score="braun_blanquet")
    lens = [len(d) for d in docs]
    for q in range(len(docs)):
        assert got.row(q) == [p for p in every[q] if self_join_keep(ids[q], lens[q], p[0], p[2], "braun_blanquet")]


@pytest.mark.slow
def test_retail_pair_counts(retail_dat):
    rows = [np.unique(np.array(line.split(), dtype=np.int64)) for line in retail_dat.read_text().splitlines()]
    values = np.concatenate(rows)
    batch = SetBatch(np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64),
                     np.searchsorted(np.unique(values), values).astype(np.uint16))
    ids = np.arange(len(rows), dtype=np.int64)
    # Exact counts of the unordered pairs, identical sets included (shared/README.md).
    for text, pairs in (("0.5", 5_081_632), ("0.7", 609_104), ("0.8", 568_171), ("0.9", 563_005)):
        assert len(self_join(batch, ids, text, "jaccard", 128).doc_ids) == pairs


@given(docs=corpora(), queries=corpora(), score=st.sampled_from(SCORES), pick=st.integers(0, 5),
       k=st.sampled_from([None, 1]))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_threshold_join_equals_the_oracle(docs, queries, score, pick, k):
    text = _THRESHOLDS[score][pick % len(_THRESHOLDS[score])]
    ids = doc_ids(len(docs))
    queries = queries + queries[:5]  # identical queries, probed once
    got = threshold_join(SetBatch.from_lists(docs), ids, SetBatch.from_lists(queries), text, score, max_len=16, k=k)
    want = brute_force_threshold(docs, queries, Fraction(parse_threshold(text, score)), doc_ids=ids.tolist(), score=score)
    assert got.n_queries == len(queries)
    assert [got.row(q) for q in range(len(queries))] == [w[:k] for w in want]


def test_unknown_backend_is_refused():
    batch = SetBatch.from_lists([[1, 2]])
    with pytest.raises(ValueError, match="backend must be one of"):
        threshold_join(batch, doc_ids(1), batch, "0.5", "jaccard", max_len=16, backend="gpu")


def _repeating_sets(seed: int, n: int, n_ids: int, longest: int) -> list:
    """``n`` sets of distinct ids below ``n_ids``: 40 % copies of earlier ones, most of 0-4 ids (lengths held
    by many sets), a tenth of 5 to ``longest - 1`` (lengths held by few)."""
    rng = np.random.default_rng(seed)
    sets = []
    for _ in range(n):
        if sets and rng.random() < 0.4:
            sets.append(sets[rng.integers(len(sets))])
        else:
            size = int(rng.integers(0, 5)) if rng.random() < 0.9 else int(rng.integers(5, longest))
            sets.append(sorted(rng.choice(n_ids, size, replace=False).tolist()))
    return sets


@pytest.mark.parametrize("seed", [0, 1])
def test_prepare_groups_match_a_plain_grouping(seed):
    """Lengths held by many sets (sorted as one matrix each) and by few (one key sort), against dicts."""
    sets = _repeating_sets(seed, 400, 300, 60)
    batch = SetBatch.from_lists(sets)
    rank = frequency_order(batch.tokens, batch.id_bound)
    js = prepare_sets(batch, rank)
    want = {}
    for i, s in enumerate(sets):
        want.setdefault(tuple(sorted(s)), []).append(i)
    order = sorted(want.values(), key=lambda m: (len(sets[m[0]]), m[0]))
    groups = [js.group_members[a:b].tolist() for a, b in zip(js.group_offsets[:-1], js.group_offsets[1:])]
    assert groups == order
    assert js.group_rep.tolist() == [m[0] for m in order]
    assert np.array_equal(js.group_of[js.group_members], np.repeat(np.arange(len(order)), [len(m) for m in order]))
    for i, s in enumerate(sets):
        assert js.tokens[js.offsets[i]:js.offsets[i + 1]].tolist() == sorted(rank[s].tolist())


@pytest.mark.parametrize("chunk", [1, 7, 64])
@pytest.mark.parametrize("seed", [0, 1])
def test_prepare_in_small_chunks_equals_prepare_in_one(seed, chunk, monkeypatch):
    """The per-id temporaries are made a chunk of ids at a time: with chunks smaller than one set,
    than a few sets, and than the corpus, every array of the prepared sets is the same."""
    import settopk.kernels.join.prepare as prepare

    sets = _repeating_sets(seed, 300, 500, 90)
    batch = SetBatch.from_lists(sets)
    whole_rank = frequency_order(batch.tokens, batch.id_bound)
    whole = prepare_sets(batch, whole_rank)
    monkeypatch.setattr(prepare, "_CHUNK_TOKENS", chunk)
    rank = frequency_order(batch.tokens, batch.id_bound)
    assert np.array_equal(rank, whole_rank)
    chunked = prepare_sets(batch, rank)
    for field in whole._fields:
        a, b = getattr(whole, field), getattr(chunked, field)
        assert a.dtype == b.dtype and np.array_equal(a, b), field
    assert np.array_equal(prepare.parity_bitmaps(batch.tokens, batch.offsets),
                          np.array([np.bitwise_xor.reduce(np.left_shift(np.uint64(1), np.asarray(s, np.uint64) % 64),
                                                          initial=np.uint64(0)) for s in sets], np.uint64))


def _assert_dense_jaccard_rows(got, docs, ids, n_tokens: int, t: Fraction, include_self: bool = False) -> int:
    """Assert each query's self-join rows equal a dense oracle's (a matrix product of the sets'
    0/1 rows, the pass test in integers: exact); returns the pairs."""
    dense = np.zeros((len(docs), n_tokens), np.int64)
    for i, d in enumerate(docs):
        dense[i, d] = 1
    ov = dense @ dense.T
    size = dense.sum(axis=1)
    union = size[:, None] + size[None, :] - ov
    passing = t.denominator * ov >= t.numerator * union  # ov / union >= t
    n_pairs = 0
    for q in range(len(docs)):
        keep = [d for d in np.flatnonzero(passing[q])
                if self_join_keep(ids[q], size[q], ids[d], size[d], "jaccard", include_self)]
        want = sorted(((int(ids[d]), int(ov[q, d]), int(size[d])) for d in keep),
                      key=lambda p: (-p[1] / (size[q] + p[2] - p[1]), p[0]))
        assert got.row(q) == want, q
        n_pairs += len(want)
    return n_pairs


@pytest.mark.parametrize("include_self", [False, True])
def test_a_join_of_many_pairs_on_several_threads_equals_a_dense_oracle(include_self):
    # Big groups of identical sets: over 2**16 list entries, so the emit runs in ranges on two threads.
    rng = np.random.default_rng(11)
    base = [sorted(set(rng.integers(0, 40, rng.integers(1, 12)).tolist())) for _ in range(25)]
    docs = [base[i] for i in rng.integers(0, 25, 2000)]
    ids = doc_ids(len(docs))
    got = self_join(SetBatch.from_lists(docs), ids, "0.6", "jaccard", 16, include_self=include_self, threads=2)
    n_pairs = _assert_dense_jaccard_rows(got, docs, ids, 40, Fraction(3, 5), include_self)
    assert got.offsets[-1] == n_pairs > 2**16


def test_a_probe_past_its_first_out_arrays_equals_a_dense_oracle():
    # 1,500 distinct sets over 24 tokens at Jaccard 0.3 on one thread: one probe range finds far
    # more group pairs than its first out arrays hold, and groups that reach more index groups
    # than that, so the probe stops and goes on from the group that would not fit, many times.
    rng = np.random.default_rng(5)
    docs = sorted({tuple(sorted(set(rng.integers(0, 24, rng.integers(2, 9)).tolist()))) for _ in range(3000)})[:1500]
    docs = [list(d) for d in docs]
    ids = doc_ids(len(docs))
    got = self_join(SetBatch.from_lists(docs), ids, "0.3", "jaccard", 16, threads=1)
    assert _assert_dense_jaccard_rows(got, docs, ids, 24, Fraction(3, 10)) > 100_000


@given(lengths=st.lists(st.integers(0, 12), max_size=40), lo=st.lists(st.integers(-2, 15), min_size=1, max_size=8),
       width=st.integers(-3, 6))
@settings(max_examples=80, deadline=None)
def test_length_bounds_equal_binary_searches(lengths, lo, width):
    from settopk.kernels.join.prefixes import length_bounds

    sorted_len = np.sort(np.array(lengths, np.int64))
    lo = np.array(lo, np.int64)
    hi = lo + width
    first, end = length_bounds(sorted_len, lo, hi)
    want_first = np.searchsorted(sorted_len, lo, side="left")
    want_end = np.searchsorted(sorted_len, hi, side="right")
    assert np.array_equal(first, want_first) and np.array_equal(end, want_end)


@pytest.mark.parametrize("backend", ["cpu", "numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
@given(docs=corpora(max_ids=300), queries=corpora(max_ids=300), score=st.sampled_from(SCORES), pick=st.integers(0, 5))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_wide_vocabularies_equal_the_oracle(backend, docs, queries, score, pick):
    # Over 64 ids, tokens share bits of the parity bitmaps: the bitmap filter's bound must stay a bound.
    text = _THRESHOLDS[score][pick % len(_THRESHOLDS[score])]
    t = Fraction(parse_threshold(text, score))
    ids = doc_ids(len(docs))
    got = self_join(SetBatch.from_lists(docs), ids, text, score, 64, backend=backend)
    every = brute_force_threshold(docs, docs, t, doc_ids=ids.tolist(), score=score)
    lens = [len(set(d)) for d in docs]
    for q in range(len(docs)):
        assert got.row(q) == [p for p in every[q] if self_join_keep(ids[q], lens[q], p[0], p[2], score)], q
    probed = prepare_docs(SetBatch.from_lists(docs), ids, text, score, 64, backend=backend).probe(SetBatch.from_lists(queries))
    want = brute_force_threshold(docs, queries, t, doc_ids=ids.tolist(), score=score)
    assert [probed.row(q) for q in range(len(queries))] == want


@given(x=st.sets(st.integers(0, 500), max_size=80), y=st.sets(st.integers(0, 500), max_size=80))
@settings(max_examples=200, deadline=None)
def test_parity_bitmaps_bound_the_overlap(x, y):
    from settopk.kernels.join.prepare import parity_bitmaps

    sets = [sorted(x), sorted(y)]
    offsets = np.array([0, len(x), len(x) + len(y)], np.int64)
    sx, sy = parity_bitmaps(np.array(sets[0] + sets[1], np.int64), offsets)
    assert (len(x) + len(y) - bin(int(sx ^ sy)).count("1")) // 2 >= len(x & y)
    if len(x | y) <= 64 and max(x | y, default=0) < 64:  # no two tokens share a bit: the bound is exact
        assert (len(x) + len(y) - bin(int(sx ^ sy)).count("1")) // 2 == len(x & y)


@pytest.mark.parametrize("threads", [2, 3])
def test_probe_ranges_on_several_threads_equal_the_oracle(threads, monkeypatch):
    """The probe cut into many ranges over every thread (a thread per probe entry allowed), its
    scratch made by the threads that first need it and reused by the next call: self-join and
    R-S probe equal the oracle."""
    from settopk.kernels.join import host_join

    monkeypatch.setattr(host_join, "_ENTRIES_PER_THREAD", 1)
    rng = np.random.default_rng(threads)
    docs = [sorted(set((rng.zipf(1.3, rng.integers(1, 14)) % 90).tolist())) for _ in range(600)]
    docs += [docs[i] for i in rng.integers(0, 600, 200)]
    ids = doc_ids(len(docs))
    lens = [len(d) for d in docs]
    want = brute_force_threshold(docs, docs, Fraction(1, 2), doc_ids=ids.tolist(), score="jaccard")
    got = self_join(SetBatch.from_lists(docs), ids, "0.5", "jaccard", 16, threads=threads)
    for q in range(len(docs)):
        assert got.row(q) == [p for p in want[q] if self_join_keep(ids[q], lens[q], p[0], p[2], "jaccard", False)], q
    side = prepare_docs(SetBatch.from_lists(docs), ids, "0.5", "jaccard", 16, threads=threads)
    for _ in range(2):
        probed = side.probe(SetBatch.from_lists(docs))
        assert [probed.row(q) for q in range(len(docs))] == want


@pytest.mark.parametrize("backend", ["cpu", "numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
@given(docs=corpora(), score=st.sampled_from([s for s in SCORES if s != "containment"]), pick=st.integers(0, 5))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_group_pairs_are_the_passing_pairs_of_distinct_groups(backend, docs, score, pick):
    """Each unordered pair of distinct identical-set groups whose sets pass, once: the oracle's pairs
    of the groups' first members, from the index's prepared corpus."""
    from settopk.kernels.join import JoinTooLarge, group_pairs, host_groups, prepare_corpus

    text = _THRESHOLDS[score][pick % len(_THRESHOLDS[score])]
    batch = SetBatch.from_lists(docs)
    prepared = prepare_corpus(batch, backend=backend)
    js = host_groups(prepared)
    reps = js.group_rep.tolist()
    every = brute_force_threshold([docs[r] for r in reps], [docs[r] for r in reps], Fraction(parse_threshold(text, score)),
                                  score=score)
    want = sorted((a, b) for a in range(len(reps)) for b, *_ in every[a] if a < b)
    g_a, g_b = group_pairs(prepared, batch.id_bound, text, score, 16, backend=backend, threads=2)
    assert g_a.dtype == g_b.dtype == np.int64
    got = sorted((min(a, b), max(a, b)) for a, b in zip(g_a.tolist(), g_b.tolist()))
    assert got == want
    # A bound of exactly the pairs keeps them all; one less is refused, never cut.
    bounded = group_pairs(prepared, batch.id_bound, text, score, 16, backend=backend, threads=2, max_pairs=len(want))
    assert sorted((min(a, b), max(a, b)) for a, b in zip(*(g.tolist() for g in bounded))) == want
    if want:
        with pytest.raises(JoinTooLarge):
            group_pairs(prepared, batch.id_bound, text, score, 16, backend=backend, threads=2, max_pairs=len(want) - 1)
    if backend == "numpy" and want:  # in slices of 2 entries a pair is met once per slice of its candidate
        # entries (at most its 10 prefix tokens here), so counted up to 10 times: never refused late
        from settopk.kernels.join.arrays import group_pairs as array_group_pairs

        sliced = array_group_pairs(prepared, text, score, 16, slice_entries=2, max_pairs=10 * len(want))
        assert sorted((min(a, b), max(a, b)) for a, b in zip(*(g.tolist() for g in sliced))) == want
        with pytest.raises(JoinTooLarge):
            array_group_pairs(prepared, text, score, 16, slice_entries=2, max_pairs=len(want) - 1)


def test_group_pairs_refuse_containment_and_zero():
    from settopk.kernels.join import group_pairs, prepare_corpus

    batch = SetBatch.from_lists([[1, 2], [2, 3]])
    for backend in ("cpu", "numpy"):
        prepared = prepare_corpus(batch, backend=backend)
        with pytest.raises(ValueError, match="containment is not symmetric"):
            group_pairs(prepared, batch.id_bound, "0.5", "containment", 16, backend=backend)
        with pytest.raises(ValueError, match="T == 0 passes every pair"):
            group_pairs(prepared, batch.id_bound, "0", "jaccard", 16, backend=backend)
