"""Threshold search (issue 32): the exact threshold semantics, the need tables against exact
fractions, and every backend's threshold_search against the brute-force oracle, ties included
(the GPU's with a candidate buffer of 2 slots under the postings routing, so that most queries
take its exact-size re-emission, and the default one under the scan)."""

import math
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settopk.kernels import (
    SCORES,
    NumpyShardIndex,
    SetBatch,
    brute_force_threshold,
    need_table,
    parse_threshold,
    self_join_pairs,
)
from settopk.kernels.oracle import _exact

BACKENDS = ["numpy", "cpu", pytest.param("cupy", marks=pytest.mark.gpu)]
ROUTINGS = ("scan", "postings")


def _index(backend, docs, ids, max_len, score, routing):
    batch = SetBatch.from_lists(docs)
    ids = np.asarray(ids, dtype=np.int64)
    if backend == "numpy":
        return NumpyShardIndex(batch, ids, max_len, score, routing=routing)
    if backend == "cupy":
        from settopk.kernels.cuda import CupyShardIndex

        return CupyShardIndex(batch, ids, max_len, score=score, routing=routing,
                              capacity=2 if routing == "postings" else None)
    pytest.importorskip("numba")
    from settopk.kernels.numba_index import NumbaShardIndex

    return NumbaShardIndex(batch, ids, max_len, score, routing=routing, threads=2)


def _rows(pairs):
    return [pairs.row(i) for i in range(pairs.n_queries)]


def _passes(ov, ql, dl, score, t):
    """score >= t in exact fractions (cosine compared squared, as the oracle does)."""
    return _exact(ov, ql, dl, score) >= (t * t if score == "cosine" else t)


# --- the threshold's meaning -------------------------------------------------------------------

def test_parse_threshold_reads_decimal_text_exactly():
    assert parse_threshold(0.8, "jaccard") == Fraction(4, 5)  # the float's shortest decimal, not its binary value
    assert parse_threshold("0.8", "jaccard") == Fraction(4, 5)
    assert parse_threshold("4/5", "cosine") == Fraction(4, 5)
    assert parse_threshold(Fraction(2, 3), "dice") == Fraction(2, 3)
    assert parse_threshold(3, "overlap") == 3
    assert parse_threshold(0, "containment") == 0


@pytest.mark.parametrize("bad, score, words", [
    (-0.1, "jaccard", ">= 0"), (1.5, "jaccard", "<= 1"), (float("nan"), "dice", "finite"),
    ("abc", "cosine", "finite"), (float("inf"), "overlap", "finite"), (True, "jaccard", "number"),
])
def test_parse_threshold_refuses(bad, score, words):
    with pytest.raises(ValueError, match=words):
        parse_threshold(bad, score)


@pytest.mark.parametrize("score", SCORES)
@given(a=st.integers(0, 40), b=st.integers(1, 40))
@settings(max_examples=25, deadline=None)
def test_need_table_is_the_least_passing_overlap(score, a, b):
    """Exhaustively for lengths up to 9: need[q, d] is the least o with score >= T in exact fractions."""
    max_len = 9
    t = Fraction(a, b)
    if t > 1 and score != "overlap":
        t = Fraction(b, max(a, b))
    need = need_table(t, np.arange(max_len + 1), max_len, score)
    for ql in range(max_len + 1):
        for dl in range(max_len + 1):
            passing = [o for o in range(min(ql, dl) + 1) if _passes(o, ql, dl, score, t)]
            want = passing[0] if passing else None
            got = int(need[ql, dl])
            if want is None:
                assert got > min(ql, dl), (ql, dl, got)
            else:
                assert got == want, (ql, dl)
                assert passing == list(range(want, min(ql, dl) + 1))  # monotone: every larger overlap passes


@pytest.mark.parametrize("t", [Fraction(1, 10**21), Fraction(10**20 + 1, 10**21), Fraction(1, 2**31 + 1),
                               Fraction(2**26 - 1, 2**26)])
def test_cosine_need_table_for_thresholds_of_many_digits(t):
    """Cosine's int64 path (small numerator and denominator) and its Python-integer path (either
    large) both give the least o with o**2 >= t**2 |q| |d|, exactly."""
    max_len = 40
    need = need_table(t, np.arange(max_len + 1), max_len, "cosine")
    for ql in range(max_len + 1):
        for dl in range(max_len + 1):
            want = next((o for o in range(min(ql, dl) + 1) if _passes(o, ql, dl, "cosine", t)), None)
            if want is None:
                assert need[ql, dl] > min(ql, dl), (ql, dl)
            else:
                assert need[ql, dl] == want, (ql, dl)


def test_need_table_exact_for_long_decimals():
    t = parse_threshold("0.33333333333333333333333333334", "jaccard")  # just above 1/3: o/(6-o) = 1/3 fails
    assert need_table(t, [3], 3, "jaccard")[0, 3] == 2
    assert need_table(Fraction(1, 3), [3], 3, "jaccard")[0, 3] == 2  # o=1: 1/5 < 1/3; o=2: 2/4 >= 1/3
    assert need_table(Fraction(1, 2), [3], 3, "jaccard")[0, 3] == 2  # exactly 1/2: a tie, passes


# --- the backends against the oracle ----------------------------------------------------------

_sets = st.lists(st.lists(st.integers(0, 11), max_size=8), min_size=0, max_size=14)
_thresholds = st.sampled_from(["0", "1", "0.5", "0.25", "1/3", "2/3", "0.8", "0.75", "3/7", "0.6"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("score", SCORES)
@given(docs=_sets, queries=_sets, text=_thresholds, k=st.sampled_from([None, 1, 3]),
       routing=st.sampled_from(ROUTINGS))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_threshold_search_matches_oracle(backend, score, docs, queries, text, k, routing):
    max_len = 8
    t = parse_threshold(text if score != "overlap" else str(Fraction(text) * 3), score)
    ids = [3 * i + 1 for i in range(len(docs))]
    index = _index(backend, docs, ids, max_len, score, routing)
    got = index.threshold_search(SetBatch.from_lists(queries), t, k=k)
    assert got.offsets.dtype == np.int64 and got.doc_ids.dtype == np.int64
    assert got.overlap.dtype == np.int32 and got.doc_len.dtype == np.int32
    assert _rows(got) == brute_force_threshold(docs, queries, t, doc_ids=ids, score=score, k=k)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("score", SCORES)
def test_ties_at_the_threshold_pass(backend, score):
    """Thresholds equal to achievable scores: the pair at exactly T is returned, one just above is not."""
    docs = [[1, 2, 3, 4, 5], [1, 2, 3, 4], [1, 2], [], [1, 2, 3, 4, 5], [9], [1]]
    queries = [[1, 2, 3, 4], [], [1, 2, 3, 4, 5]]
    index = _index(backend, docs, range(len(docs)), 5, score, "postings")
    values = set()
    for q in queries:
        for d in docs:
            v = _exact(len(set(q) & set(d)), len(q), len(d), score)
            if score == "cosine":  # v is the square; a rational tie needs a rational root
                num, den = math.isqrt(v.numerator), math.isqrt(v.denominator)
                if num * num != v.numerator or den * den != v.denominator:
                    continue
                v = Fraction(num, den)
            values.add(v)
    assert len(values) >= 3
    for t in sorted(values):
        for th in (t, t + Fraction(1, 10**9)):
            if score != "overlap" and th > 1:
                continue
            want = brute_force_threshold(docs, queries, th, score=score)
            got = _rows(index.threshold_search(SetBatch.from_lists(queries), th))
            assert got == want
            if th == t:  # the tie itself passes
                assert any(_exact(o, len(q), dl, score) == (t * t if score == "cosine" else t)
                           for q, row in zip(queries, got) for _, o, dl in row)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("score", SCORES)
def test_zero_one_empty_identical(backend, score):
    docs = [[1, 2, 3], [1, 2, 3], [], [4], [1, 2]]
    queries = [[1, 2, 3], [], [4], [7, 8]]
    for routing in ROUTINGS:
        index = _index(backend, docs, [10, 11, 12, 13, 14], 4, score, routing)
        zero = index.threshold_search(SetBatch.from_lists(queries), 0)
        assert list(zero.counts) == [5, 5, 5, 5]  # T = 0: every pair, overlap 0 and empty sets included
        one = index.threshold_search(SetBatch.from_lists(queries), 1)
        assert _rows(one) == brute_force_threshold(docs, queries, Fraction(1), doc_ids=[10, 11, 12, 13, 14],
                                                   score=score)
        if score in ("braun_blanquet", "jaccard", "dice", "cosine"):
            assert _rows(one)[0] == [(10, 3, 3), (11, 3, 3)]  # identical sets score exactly 1


def test_threshold_floors_admit_exactly_the_passing_pairs():
    """The GPU's key floor per query: key >= F exactly when score >= T, for every achievable pair
    (exhaustive over lengths up to 9, each score, thresholds on and off achievable scores), and -2
    where the shard's lengths leave nothing to pass."""
    from settopk.kernels import score_key
    from settopk.kernels.cuda.threshold import threshold_floors

    max_len = 9
    present = np.ones(max_len + 1, dtype=bool)
    present[[0, 4]] = False  # lengths the shard lacks count for nothing
    qlen = np.arange(max_len + 1)
    for score in SCORES:
        for t in [Fraction(0), Fraction(1), Fraction(1, 2), Fraction(2, 3), Fraction(4, 5), Fraction(5, 7),
                  Fraction(1, 3) + Fraction(1, 10**12)] + ([Fraction(3), Fraction(9)] if score == "overlap" else []):
            floor = threshold_floors(t, qlen, present, max_len, score)
            for ql in range(max_len + 1):
                passing = []
                for dl in np.flatnonzero(present).tolist():
                    for o in range(min(ql, dl) + 1):
                        key = int(score_key(o, ql, dl, max_len, score))
                        passes = _passes(o, ql, dl, score, t)
                        if floor[ql] >= 0:
                            assert (key >= floor[ql]) == passes, (score, t, ql, dl, o)
                        passing.append(passes)
                assert (floor[ql] == -2) == (not any(passing)), (score, t, ql)
            # from each query's own length on (a symmetric self-join): the least passing key of those lengths
            own = threshold_floors(t, qlen, present, max_len, score, min_doc_len=qlen)
            for ql in range(max_len + 1):
                keys = [int(score_key(o, ql, dl, max_len, score)) for dl in np.flatnonzero(present).tolist()
                        if dl >= ql for o in range(min(ql, dl) + 1) if _passes(o, ql, dl, score, t)]
                assert own[ql] == (min(keys) if keys else -2), (score, t, ql)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_docs_and_no_queries(backend):
    index = _index(backend, [], [], 4, "jaccard", "scan")
    got = index.threshold_search(SetBatch.from_lists([[1], []]), 0)
    assert list(got.offsets) == [0, 0, 0]
    index = _index(backend, [[1]], [0], 4, "jaccard", "scan")
    assert list(index.threshold_search(SetBatch.from_lists([]), 0.5).offsets) == [0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("score", SCORES)
@given(docs=st.lists(st.lists(st.integers(0, 9), max_size=6), min_size=1, max_size=12), text=_thresholds)
@settings(max_examples=10, deadline=None)
def test_self_join(backend, score, docs, text):
    """Each unordered pair once, under its shorter doc (the lower id at equal lengths), for the
    symmetric scores; ordered pairs for containment. The search from each query's own length
    (min_doc_len, as the job runs a symmetric self-join) gives the same pairs as the full one."""
    t = parse_threshold(text, score)
    ids = list(range(5, 5 + len(docs)))
    index = _index(backend, docs, ids, 6, score, "postings")
    batch = SetBatch.from_lists(docs)
    full = brute_force_threshold(docs, docs, t, doc_ids=ids, score=score)
    size = dict(zip(ids, (len(set(d)) for d in docs)))
    keep = (lambda q, d: d != q) if score == "containment" else (lambda q, d: (size[d], d) > (size[q], q))
    want = [[p for p in row if keep(qid, p[0])] for qid, row in zip(ids, full)]
    assert _rows(self_join_pairs(index.threshold_search(batch, t), ids, batch.lengths, score)) == want
    if score != "containment":
        half = index.threshold_search(batch, t, min_doc_len=batch.lengths)
        assert all(dl >= ql for ql, row in zip(batch.lengths, _rows(half)) for _, _, dl in row)
        assert _rows(self_join_pairs(half, ids, batch.lengths, score)) == want


def test_kernel_refuses_bad_k():
    index = _index("numpy", [[1]], [0], 4, "jaccard", "scan")
    with pytest.raises(ValueError, match="k must be >= 1"):
        index.threshold_search(SetBatch.from_lists([[1]]), 0.5, k=0)


# --- the job's setting -------------------------------------------------------------------------

def test_config_threshold_is_canonical_and_checked():
    from settopk.configs import ConfigError, load_config

    assert load_config("local", {"threshold": 0.8, "score": "jaccard"}).threshold == "4/5"
    assert load_config("local", {"threshold": "0.80", "score": "jaccard"}).threshold == "4/5"
    assert load_config("local", {}).threshold is None
    with pytest.raises(ConfigError, match="threshold: threshold must be <= 1"):
        load_config("local", {"threshold": "1.5"})


def test_threshold_is_a_result_setting():
    from settopk.jobs.target import RESULT_SETTINGS

    assert "threshold" in RESULT_SETTINGS  # a rerun with another T is not the same run


def test_only_an_explicit_k_caps_a_threshold_run():
    from settopk.configs import MAX_K, load_config
    from settopk.jobs.threshold_job import threshold_config

    cfg = load_config("local", {"threshold": "0.5"})
    assert cfg.k == 100 and threshold_config(cfg, None).k == MAX_K  # the config's k does not cap
    assert threshold_config(load_config("local", {"threshold": "0.5", "k": 7}), 7).k == 7
    assert threshold_config(load_config("local", {}), None).k == 100  # top-k runs keep their k


# --- the job's logic: shard pruning and the merge into result rows ------------------------------

def _sharded(docs, ids, cuts, max_len, score):
    """NumpyShardIndexes over length ranges [cuts[i], cuts[i+1] - 1], and their ShardSpec-like ranges."""
    from types import SimpleNamespace

    shards = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        mine = [i for i, d in enumerate(docs) if lo <= len(set(d)) < hi]
        index = NumpyShardIndex(SetBatch.from_lists([docs[i] for i in mine]), np.asarray([ids[i] for i in mine], np.int64),
                                max_len, score, routing="postings")
        shards.append((SimpleNamespace(min_len=lo, max_len=hi - 1), index))
    return shards


@pytest.mark.parametrize("score", SCORES)
@given(docs=_sets, queries=_sets, text=_thresholds, k=st.sampled_from([None, 2]), self_join=st.booleans(),
       include_self=st.booleans())
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_sharded_merge_matches_oracle(score, docs, queries, text, k, self_join, include_self):
    from settopk.jobs.threshold_job import merge_pairs_table, shard_rows

    max_len = 8
    t = parse_threshold(text if score != "overlap" else str(Fraction(text) * 3), score)
    ids = [2 * i + 7 for i in range(len(docs))]
    if self_join:
        queries, query_ids = docs, ids
    else:
        query_ids = list(range(len(queries)))
    shards = _sharded(docs, ids, [0, 3, 5, max_len + 1], max_len, score)
    batch = SetBatch.from_lists(queries)
    plan = [spec for spec, _ in shards]
    rows = shard_rows(plan, batch.lengths, t, max_len, score)
    results = [(r, index.threshold_search(batch.take(r), t)) for r, (_, index) in zip(rows, shards)]
    if self_join:  # each shard applies the rule, given its queries' doc ids, as the job's do
        own = np.asarray(query_ids, dtype=np.int64)
        results = [(r, self_join_pairs(found, own[r], batch.lengths[r], score, include_self, None)) for r, found in results]
    table = merge_pairs_table([str(q) for q in query_ids], batch.lengths, results, max_len, score, k=k)
    full = brute_force_threshold(docs, queries, t, doc_ids=ids, score=score)
    want = []
    for qid, row in zip(query_ids, full):
        if self_join:
            if score == "containment":
                row = [p for p in row if include_self or p[0] != qid]
            else:
                size = {i: len(set(d)) for i, d in zip(ids, docs)}
                row = [p for p in row if (size[p[0]], p[0]) > (size[qid], qid) or (include_self and p[0] == qid)]
        want += [(str(qid), r + 1, d, o, dl) for r, (d, o, dl) in enumerate(row[:k])]
    got = list(zip(*(table[c].to_pylist() for c in ("query_id", "rank", "doc_id", "overlap", "doc_len"))))
    assert got == want


@pytest.mark.parametrize("score", ["jaccard", "containment"])
def test_one_shards_pairs_are_merged_alike_in_order_or_not(score):
    """One shard call's pairs come in the result's order and are taken as they are; the same pairs
    reversed within each query (not in order) are sorted into the same table."""
    from settopk.jobs.threshold_job import merge_pairs_table
    from settopk.kernels import ThresholdPairs

    rng = np.random.default_rng(4)
    docs = [sorted(set(rng.integers(0, 12, rng.integers(1, 7)).tolist())) for _ in range(120)]
    ids = np.arange(5, 5 + 2 * len(docs), 2, dtype=np.int64)
    index = NumpyShardIndex(SetBatch.from_lists(docs), ids, 8, score, routing="postings")
    batch = SetBatch.from_lists(docs)
    found = index.threshold_search(batch, parse_threshold("0.3", score))
    flipped = np.concatenate([np.arange(hi - 1, lo - 1, -1) for lo, hi in zip(found.offsets[:-1], found.offsets[1:])]
                             + [np.zeros(0, np.int64)]).astype(np.int64)
    reversed_ = ThresholdPairs(found.offsets, found.doc_ids[flipped], found.overlap[flipped], found.doc_len[flipped])
    rows = np.arange(len(docs))
    tables = [merge_pairs_table([str(i) for i in ids], batch.lengths, [(rows, pairs)], 8, score)
              for pairs in (found, reversed_)]
    assert tables[0].num_rows > len(docs) and tables[0].equals(tables[1])
    # The job passes each chunk's ids as one Arrow array: the same table.
    assert merge_pairs_table(pa.array([str(i) for i in ids]), batch.lengths, [(rows, found)], 8, score).equals(tables[0])


def test_shard_rows_skip_shards_a_query_cannot_reach():
    from types import SimpleNamespace

    from settopk.jobs.threshold_job import shard_rows

    plan = [SimpleNamespace(min_len=1, max_len=4), SimpleNamespace(min_len=5, max_len=9),
            SimpleNamespace(min_len=10, max_len=20)]
    # jaccard >= 0.8 needs 0.8 |q| <= |d| <= |q| / 0.8: a query of 10 reaches lengths 8..12 only
    rows = shard_rows(plan, np.array([10, 2, 0]), "0.8", 20, "jaccard")
    assert [list(r) for r in rows] == [[1], [0], [0]]
    assert [list(r) for r in shard_rows(plan, np.array([10, 0]), "0", 20, "jaccard")] == [[0, 1]] * 3  # T = 0: all


def test_merge_refuses_more_pairs_than_the_rank_column_holds(monkeypatch):
    import settopk.configs
    from settopk.jobs.threshold_job import merge_pairs_table

    monkeypatch.setattr(settopk.configs, "MAX_K", 2)
    index = NumpyShardIndex(SetBatch.from_lists([[1], [1], [1]]), np.arange(3), 4, "jaccard")
    pairs = index.threshold_search(SetBatch.from_lists([[1]]), "0.5")
    with pytest.raises(ValueError, match="more than 2 pairs .* --k"):
        merge_pairs_table(["q"], np.array([1]), [(np.array([0]), pairs)], 4, "jaccard")
    assert merge_pairs_table(["q"], np.array([1]), [(np.array([0]), pairs)], 4, "jaccard", k=2).num_rows == 2
