"""The NumPy backend against the brute-force oracle (exact fractions on Python sets)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from settopk.kernels import NumpyShardIndex, SetBatch, best_key_in_range, brute_force_topk, key_scale, score_key


def _rows(topk):
    return [
        [(int(d), int(o), int(l)) for d, o, l in zip(ids, ov, dl) if d >= 0]
        for ids, ov, dl in zip(topk.doc_ids, topk.overlap, topk.doc_len)
    ]


def _check(docs, queries, k, max_len=128, doc_ids=None):
    ids = np.arange(len(docs)) if doc_ids is None else np.asarray(doc_ids)
    index = NumpyShardIndex(SetBatch.from_lists(docs), ids, max_len)
    got = index.search(SetBatch.from_lists(queries), k)
    assert got.doc_ids.shape == (len(queries), k)
    assert _rows(got) == brute_force_topk(docs, queries, k, doc_ids=list(ids))
    # padding only where the shard has fewer than k docs
    assert np.all((got.doc_ids >= 0).sum(axis=1) == min(k, len(docs)))


def test_ties_break_by_lower_doc_id():
    docs = [[1, 2], [1, 2], [3], [1, 2], [1, 2, 3, 4]]
    _check(docs, [[1, 2]], k=3)
    _check(docs, [[1, 2, 3]], k=5)


def test_empty_sets_and_zero_over_zero():
    docs = [[], [0], [], [5, 6]]
    _check(docs, [[], [0], [7]], k=4)


def test_extreme_ids_and_max_len_set():
    full = list(range(65536 - 128, 65536))
    docs = [full, [0], [0, 65535], list(range(128))]
    _check(docs, [full, [0, 65535], list(range(128))], k=4)


def test_k_larger_than_corpus_and_sparse_doc_ids():
    docs = [[1, 2, 3], [2, 3], [9]]
    _check(docs, [[2, 3], [9]], k=10, doc_ids=[7, 100, 2**40])


def test_max_len_above_255_uses_wide_lanes():
    docs = [list(range(300)), list(range(150, 400)), [1]]
    _check(docs, [list(range(300)), [1, 2]], k=3, max_len=400)


def test_zero_docs():
    index = NumpyShardIndex(SetBatch.from_lists([]), np.zeros(0, np.int64), 128)
    got = index.search(SetBatch.from_lists([[1]]), 5)
    assert np.all(got.doc_ids == -1)


def test_rejects_bad_construction():
    with pytest.raises(ValueError, match="strictly increasing"):
        NumpyShardIndex(SetBatch.from_lists([[1], [2]]), np.array([3, 3]), 128)
    with pytest.raises(ValueError, match="max_len"):
        NumpyShardIndex(SetBatch.from_lists([[1, 2, 3]]), np.array([0]), 2)


def test_random_many_query_groups_with_heavy_ties():
    rng = np.random.default_rng(7)
    docs = [rng.choice(12, size=rng.integers(0, 8), replace=False).tolist() for _ in range(300)]
    queries = [rng.choice(12, size=rng.integers(0, 8), replace=False).tolist() for _ in range(21)]
    _check(docs, queries, k=37, max_len=8)


_sets = st.lists(st.lists(st.integers(0, 20), max_size=10), max_size=40)


@settings(max_examples=150, deadline=None)
@given(docs=_sets, queries=st.lists(st.lists(st.integers(0, 20), max_size=10), min_size=1, max_size=12), k=st.integers(1, 50))
def test_property_matches_oracle(docs, queries, k):
    # Repeated ids inside a set count once: from_lists de-duplicates, the oracle uses sets.
    _check(docs, queries, k, max_len=21)


# ---- per-query score floors (threshold exchange)


def _oracle_with_floor(docs, queries, k, floors, max_len, doc_ids=None):
    """Brute force: the full oracle order, docs with key < floor dropped, then the first k."""
    full = brute_force_topk(docs, queries, len(docs), doc_ids=doc_ids)
    rows = []
    for q, floor, ranked in zip(queries, floors, full):
        q_len = len(set(q))
        rows.append([e for e in ranked if score_key(e[1], q_len, e[2], max_len) >= floor][:k])
    return rows


def _ranked_keys(docs, queries, max_len):
    """Per query, the keys of every doc, best first (from the oracle)."""
    full = brute_force_topk(docs, queries, len(docs))
    return [[int(score_key(ov, len(set(q)), dl, max_len)) for _, ov, dl in ranked] for q, ranked in zip(queries, full)]


def _key_at(ranked, rank):
    """Key at ``rank`` of a ranked list (0-based), one above its best past the end, 0 for no docs."""
    if not ranked:
        return 0
    return ranked[rank] if rank < len(ranked) else ranked[0] + 1


def _floor_cases(docs, queries, k, max_len, rng):
    """Floor arrays that land on ties: the exact k-th key, the next one, a random rank, above every key, -1, 0, ..."""
    ranked = _ranked_keys(docs, queries, max_len)
    n_docs = len(docs)
    cases = {
        "none": [-1] * len(queries),
        "zero": [0] * len(queries),
        "kth": [_key_at(r, k - 1) for r in ranked],
        "after_kth": [_key_at(r, k) for r in ranked],
        "first": [_key_at(r, 0) for r in ranked],
        "jth": [_key_at(r, int(rng.integers(0, max(1, n_docs)))) for r in ranked],
        "above_all": [r[0] + 1 if r else 1 for r in ranked],
        "above_scale": [key_scale(max_len) + 1] * len(queries),
    }
    pick = rng.integers(0, len(cases), size=len(queries))
    columns = list(cases.values())
    cases["mixed"] = [columns[p][i] for i, p in enumerate(pick)]
    return {name: np.array(values, dtype=np.int64) for name, values in cases.items()}


def _check_floor(docs, queries, k, floors, max_len=128, doc_ids=None, index=None):
    ids = np.arange(len(docs)) if doc_ids is None else np.asarray(doc_ids)
    if index is None:
        index = NumpyShardIndex(SetBatch.from_lists(docs), ids, max_len)
    batch = SetBatch.from_lists(queries)
    got = index.search(batch, k, floor_key=floors)
    assert got.doc_ids.shape == got.overlap.shape == got.doc_len.shape == (len(queries), k)
    assert _rows(got) == _oracle_with_floor(docs, queries, k, floors, max_len, doc_ids=list(ids))
    pad = got.doc_ids < 0
    assert not (got.overlap[pad].any() or got.doc_len[pad].any())
    assert np.all(pad[:, 1:] >= pad[:, :-1])  # padding only at the end of a row
    # The top-k of {key >= F} is the unrestricted top-k cut where keys drop below F.
    plain = index.search(batch, k)
    n_kept = (~pad).sum(axis=1)
    for qi in range(len(queries)):
        assert np.array_equal(got.doc_ids[qi, : n_kept[qi]], plain.doc_ids[qi, : n_kept[qi]])
    return got


def test_floor_keeps_ties_at_the_floor():
    max_len = 8
    scale = key_scale(max_len)
    docs = [[1, 2], [1, 2], [3], [1, 2], [1, 2, 3, 4], [1]]
    query = [[1, 2]]
    got = _check_floor(docs, query, 3, np.array([scale]), max_len)  # identical sets: key S exactly
    assert got.doc_ids.tolist() == [[0, 1, 3]]
    got = _check_floor(docs, query, 6, np.array([scale // 2]), max_len)  # |q ∩ d| / 4 and 1 / 2 tie at S / 2
    assert got.doc_ids.tolist() == [[0, 1, 3, 4, 5, -1]]
    got = _check_floor(docs, query, 6, np.array([scale // 2 + 1]), max_len)
    assert got.doc_ids.tolist() == [[0, 1, 3, -1, -1, -1]]
    got = _check_floor(docs, query, 2, np.array([scale + 1]), max_len)
    assert got.doc_ids.tolist() == [[-1, -1]]
    got = _check_floor(docs, query, 6, np.array([0]), max_len)  # floor 0 keeps every doc, even overlap 0
    assert got.doc_ids.tolist() == [[0, 1, 3, 4, 5, 2]]


@pytest.mark.parametrize("seed", [0] + [pytest.param(s, marks=pytest.mark.slow) for s in (1, 2)])
def test_random_floors_hit_ties_exactly(seed):
    rng = np.random.default_rng(seed)
    max_len = 8
    docs = [rng.choice(12, size=rng.integers(0, max_len + 1), replace=False).tolist() for _ in range(250)]
    docs[3] = docs[100] = []  # empty docs
    docs[7] = list(range(max_len))  # max_len sets
    queries = [rng.choice(12, size=rng.integers(0, max_len + 1), replace=False).tolist() for _ in range(19)]
    queries += [[], list(range(max_len)), list(range(4, 4 + max_len))]
    index = NumpyShardIndex(SetBatch.from_lists(docs), np.arange(len(docs)), max_len)
    for k in (1, 5, 37):
        for name, floors in _floor_cases(docs, queries, k, max_len, rng).items():
            got = _check_floor(docs, queries, k, floors, max_len, index=index)
            if name == "none":
                assert _rows(got) == brute_force_topk(docs, queries, k)
            if name in ("above_all", "above_scale"):
                assert (got.doc_ids == -1).all()


def test_floors_on_sparse_ids_and_wide_lanes():
    docs = [list(range(300)), list(range(150, 400)), [1], [], list(range(100, 400))]
    queries = [list(range(300)), [1, 2], [], list(range(100, 300))]
    rng = np.random.default_rng(11)
    for name, floors in _floor_cases(docs, queries, 2, 400, rng).items():
        _check_floor(docs, queries, 2, floors, max_len=400, doc_ids=[5, 9, 2**40, 2**40 + 1, 2**41])


def test_floor_none_and_no_floor_rows_change_nothing():
    rng = np.random.default_rng(5)
    docs = [rng.choice(15, size=rng.integers(0, 7), replace=False).tolist() for _ in range(120)]
    queries = SetBatch.from_lists([rng.choice(15, size=rng.integers(0, 7), replace=False).tolist() for _ in range(9)])
    index = NumpyShardIndex(SetBatch.from_lists(docs), np.arange(120), 6)
    plain = index.search(queries, 11)
    for floors in (None, np.full(9, -1), np.full(9, -1, dtype=np.int32), np.zeros(9, dtype=np.uint8)):
        got = index.search(queries, 11, floor_key=floors)
        for name in ("doc_ids", "overlap", "doc_len"):
            assert np.array_equal(getattr(got, name), getattr(plain, name))
        assert index.last_skipped == 0


def test_unreachable_floors_skip_the_query_without_scoring(monkeypatch):
    max_len = 16
    scale = key_scale(max_len)
    docs = [[1, 2, 3, 4], [1, 2, 3, 4, 5, 6], [9, 10, 11, 12, 13]]  # lengths 4..6
    queries = [[1, 2], [1, 2, 3, 4, 5], list(range(16)), []]
    batch = SetBatch.from_lists(queries)
    index = NumpyShardIndex(SetBatch.from_lists(docs), np.arange(3), max_len)
    reach = best_key_in_range(batch.lengths, 4, 6, max_len)
    assert reach.tolist() == [scale * 2 // 4, scale, scale * 6 // 16, 0]
    scored = []
    real_overlaps = index.overlaps
    monkeypatch.setattr(index, "overlaps", lambda q: scored.append(q.n_sets) or real_overlaps(q))

    # Floors at the reach: scored, and the docs that reach it are returned. No doc has 5 ids, so
    # query 1 (|q| = 5, reach S) is scored but finds nothing: the skip test is by length range only.
    got = _check_floor(docs, queries, 3, reach.astype(np.int64), max_len, index=index)
    assert scored[0] == 4
    assert got.doc_ids[:, 0].tolist() == [0, -1, 1, 0] and got.doc_ids[3].tolist() == [0, 1, 2]

    # One above the reach: every query skipped, nothing scored.
    scored.clear()
    got = index.search(batch, 3, floor_key=reach.astype(np.int64) + 1)
    assert (got.doc_ids == -1).all() and not got.overlap.any() and not got.doc_len.any()
    assert scored == [] and index.last_skipped == 4

    # Mixed: only the reachable queries are scored.
    scored.clear()
    floors = np.array([-1, scale + 1, 2**40, 0])
    got = index.search(batch, 3, floor_key=floors)
    assert scored == [2] and index.last_skipped == 2
    assert (got.doc_ids[1:3] == -1).all()
    _check_floor(docs, queries, 3, floors, max_len, index=index)


def test_floors_on_an_empty_shard():
    index = NumpyShardIndex(SetBatch.from_lists([]), np.zeros(0, np.int64), 8)
    got = index.search(SetBatch.from_lists([[1], []]), 3, floor_key=np.array([0, -1]))
    assert (got.doc_ids == -1).all()
    with pytest.raises(ValueError, match="shape"):
        index.search(SetBatch.from_lists([[1], []]), 3, floor_key=np.array([0]))


def test_bad_floors_raise_value_error():
    index = NumpyShardIndex(SetBatch.from_lists([[1, 2], [3]]), np.arange(2), 8)
    queries = SetBatch.from_lists([[1], [2], [3]])
    with pytest.raises(ValueError, match="shape"):
        index.search(queries, 2, floor_key=np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="shape"):
        index.search(queries, 2, floor_key=np.zeros((3, 1), dtype=np.int64))
    with pytest.raises(ValueError, match="integer"):
        index.search(queries, 2, floor_key=np.zeros(3))
    with pytest.raises(ValueError, match="integer"):
        index.search(queries, 2, floor_key=np.zeros(3, dtype=bool))
    with pytest.raises(ValueError, match=">= -1"):
        index.search(queries, 2, floor_key=np.array([0, -5, 0]))
    assert index.search(queries, 2, floor_key=[0, 0, 2**62]).doc_ids[2].tolist() == [-1, -1]  # any integers


@settings(max_examples=150, deadline=None)
@given(
    docs=st.lists(st.lists(st.integers(0, 15), max_size=9), min_size=1, max_size=40),
    queries=st.lists(st.lists(st.integers(0, 15), max_size=9), min_size=1, max_size=8),
    k=st.integers(1, 45),
    picks=st.lists(st.integers(-3, 45), min_size=8, max_size=8),
)
def test_property_floors_match_oracle(docs, queries, k, picks):
    """Floors by rank of the oracle's key list (ties land exactly), or -1, 0, above the scale."""
    max_len = 9
    ranked = _ranked_keys(docs, queries, max_len)
    special = {-3: -1, -2: 0, -1: key_scale(max_len) + 1}
    floors = np.array(
        [special[p] if p < 0 else _key_at(r, p) for p, r in zip(picks, ranked)], dtype=np.int64
    )
    _check_floor(docs, queries, k, floors, max_len)
