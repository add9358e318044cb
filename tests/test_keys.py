import math
from fractions import Fraction

import numpy as np
import pytest

from settopk.kernels import (SCORES, best_key_in_range, check_floor_key, key_scale, min_overlap_above, score_key,
                             score_value)


def _all_pairs(max_len):
    """Every (overlap, query_len, doc_len) with overlap <= min(lengths), lengths <= max_len."""
    m = np.arange(max_len + 1)
    ov, ql, dl = np.meshgrid(m, m, m, indexing="ij")
    ok = ov <= np.minimum(ql, dl)
    return ov[ok], ql[ok], dl[ok]


@pytest.mark.parametrize("max_len", [1, 2, 7, 128])
def test_key_is_strictly_order_preserving(max_len):
    # Distinct fractions a/m with m = max(|q|, |d|) <= max_len: keys must sort exactly like the fractions.
    fractions = sorted({Fraction(a, m) for m in range(1, max_len + 1) for a in range(m + 1)})
    num = np.array([f.numerator for f in fractions])
    den = np.array([f.denominator for f in fractions])
    keys = score_key(num, den, den, max_len)
    assert np.all(np.diff(keys) > 0), "distinct fractions must get strictly increasing keys"
    assert keys[0] == 0 and keys[-1] == key_scale(max_len)


def test_key_equal_fractions_equal_keys_and_zero_over_zero():
    assert score_key(1, 2, 1, 128) == score_key(64, 128, 100, 128)
    assert score_key(0, 0, 0, 128) == 0
    assert score_value(0, 0, 0) == 0.0
    assert score_value(3, 4, 6) == 0.5


def test_min_overlap_above_matches_key_definition():
    max_len = 16
    ov, ql, dl = _all_pairs(max_len)
    keys = score_key(ov, ql, dl, max_len)
    for t in [-1, 0, 1, 5, 100, key_scale(max_len) - 1, key_scale(max_len)]:
        need = min_overlap_above(t, ql, dl, max_len)
        assert np.array_equal(ov >= need, keys > t), t


def test_key_scale_bounds():
    with pytest.raises(ValueError):
        key_scale(0)
    with pytest.raises(ValueError):
        key_scale(40000)


def _best_key_by_length(max_len):
    """Brute force: ``best[q, d]`` = the largest key of any overlap with ``|q| = q``, ``|d| = d``."""
    ov, ql, dl = _all_pairs(max_len)
    best = np.full((max_len + 1, max_len + 1), -1, dtype=np.int64)
    np.maximum.at(best, (ql, dl), score_key(ov, ql, dl, max_len))
    return best


@pytest.mark.parametrize("max_len", [1, 2, 12])
def test_best_key_in_range_matches_brute_force(max_len):
    best = _best_key_by_length(max_len)
    lengths = range(max_len + 1)
    for q in lengths:
        for lo in lengths:
            for hi in lengths:
                want = best[q, lo : hi + 1].max() if lo <= hi else -1
                got = best_key_in_range(q, lo, hi, max_len)
                assert got.dtype == np.int32
                assert got == want, (q, lo, hi)


def test_best_key_in_range_broadcasts_and_edge_cases():
    max_len = 128
    scale = key_scale(max_len)
    q = np.arange(max_len + 1)
    got = best_key_in_range(q[:, None], np.array([0, 10, 64]), np.array([128, 20, 64]), max_len)
    assert got.shape == (max_len + 1, 3) and got.dtype == np.int32
    # |q| inside the range: an identical set scores 1; the empty query scores 0 everywhere.
    assert (got[1:, 0] == scale).all() and got[0, 0] == 0
    assert got[15, 1] == scale and got[5, 1] == scale * 5 // 10 and got[30, 1] == scale * 20 // 30
    assert got[64, 2] == scale and got[0, 2] == 0
    # An empty range holds no doc: -1 is below every key, so every floor >= 0 skips it.
    assert (best_key_in_range(q, 9, 8, max_len) == -1).all()
    # The full range of a wide max_len (int32 keys up to 32767**2).
    assert best_key_in_range(32767, 0, 32767, 32767) == key_scale(32767)


def test_check_floor_key():
    assert check_floor_key(None, 3, 8) is None
    got = check_floor_key(np.array([-1, 0, 64, 65, 2**40]), 5, 8)
    assert got.dtype == np.int64
    assert got.tolist() == [-1, 0, 64, 65, 65]  # above S = 64 every floor skips alike: lowered to S + 1
    assert check_floor_key([3, 4], 2, 8).tolist() == [3, 4]
    assert check_floor_key(np.array([2**64 - 1, 7], dtype=np.uint64), 2, 8).tolist() == [65, 7]
    assert check_floor_key(np.array([5], dtype=np.int8), 1, 8).tolist() == [5]
    assert check_floor_key(np.zeros(0, dtype=np.int64), 0, 8).shape == (0,)
    with pytest.raises(ValueError, match="shape"):
        check_floor_key(np.zeros(4, dtype=np.int64), 3, 8)
    with pytest.raises(ValueError, match="shape"):
        check_floor_key(np.zeros((3, 1), dtype=np.int64), 3, 8)
    with pytest.raises(ValueError, match="shape"):
        check_floor_key(5, 1, 8)
    with pytest.raises(ValueError, match="integer"):
        check_floor_key(np.zeros(3), 3, 8)
    with pytest.raises(ValueError, match="integer"):
        check_floor_key(np.ones(3, dtype=bool), 3, 8)
    with pytest.raises(ValueError, match=">= -1"):
        check_floor_key(np.array([0, -2, 1]), 3, 8)


def _emits(overlap, thr_ge, thr_gt):
    """The count kernel's test for a bound (F, 2**31 - 1): key > F, or key == F at any position."""
    return (overlap >= thr_gt) | (overlap >= thr_ge)


def test_floor_tables_emit_exactly_the_docs_at_or_above_the_floor():
    """The CUDA backend's starting tables (computed here with NumPy) encode ``key >= F`` exactly."""
    from settopk.kernels.cuda.floors import floor_tables  # CuPy is not needed to import the module

    max_len = 12
    scale = key_scale(max_len)
    ov, ql, dl = _all_pairs(max_len)
    keys = score_key(ov, ql, dl, max_len)
    floors = np.arange(-1, scale + 1)
    lengths = np.arange(max_len + 1)
    for q in lengths:
        ge, gt = floor_tables(np, floors, np.full(len(floors), q), max_len + 1, max_len)
        assert ge.dtype == gt.dtype == np.uint8 and ge.shape == (len(floors), max_len + 1)
        assert ge.flags.c_contiguous and gt.flags.c_contiguous
        # The same values as the host-side math, unclamped here (13 < 255).
        want_ge = min_overlap_above(floors[:, None] - 1, q, lengths[None, :], max_len)
        want_gt = min_overlap_above(floors[:, None], q, lengths[None, :], max_len)
        assert np.array_equal(ge, want_ge) and np.array_equal(gt, want_gt)
        sel = ql == q
        for f, floor in enumerate(floors):
            got = _emits(ov[sel], ge[f, dl[sel]], gt[f, dl[sel]])
            assert np.array_equal(got, keys[sel] >= floor), (q, floor)
    assert not floor_tables(np, np.full(4, -1), np.arange(4), max_len + 1, max_len)[0].any()  # no floor: all 0


def test_floor_tables_at_the_widest_gpu_max_len():
    """max_len = 255: least overlaps clamp to 255 (kNeverLen); the test still holds for every floor <= S."""
    from settopk.kernels.cuda.floors import floor_tables

    max_len = 255
    scale = key_scale(max_len)
    rng = np.random.default_rng(0)
    floors = np.unique(np.concatenate([[-1, 0, 1, 2, scale - 1, scale], rng.integers(0, scale + 1, 60)]))
    q, d = (a.ravel() for a in np.meshgrid(np.arange(max_len + 1), np.arange(max_len + 1), indexing="ij"))
    reach = np.minimum(q, d)
    for floor in floors.tolist():
        lengths = np.arange(max_len + 1)
        ge, gt = floor_tables(np, np.full(max_len + 1, floor), lengths, max_len + 1, max_len)  # [|q|, |d|]
        ge, gt = ge[q, d].astype(np.int64), gt[q, d].astype(np.int64)
        # Each table entry is the least overlap that passes: check it and the one below, within reach.
        for overlap in (ge - 1, ge, reach):
            ok = (overlap >= 0) & (overlap <= reach)
            got = _emits(overlap[ok], ge[ok], gt[ok])
            assert np.array_equal(got, score_key(overlap[ok], q[ok], d[ok], max_len) >= floor), floor
            if floor < scale:  # at F = S the "key > F" table clamps, but the emission test above still holds
                above = overlap[ok] >= gt[ok]
                assert np.array_equal(above, score_key(overlap[ok], q[ok], d[ok], max_len) > floor), floor
        # The reach mask (ge <= min(|q|, |d|)) is set exactly where some overlap reaches the floor.
        best = score_key(reach, q, d, max_len)
        assert np.array_equal(ge <= reach, best >= floor), floor


@pytest.mark.parametrize("score", SCORES)
def test_floor_tables_for_long_sets_are_uint16_and_exact(score):
    """max_len = 4096 (13 counter planes): uint16 tables clamped to 8191, still exact on sampled
    (|q|, |d|) pairs, at every overlap within reach, for floors from -1 to the largest key."""
    from settopk.kernels.cuda.floors import floor_tables, threshold_table_type

    max_len = 4096
    assert threshold_table_type(255) == (np.dtype(np.uint8), 255)
    assert threshold_table_type(256) == (np.dtype(np.uint16), 8191)
    rng = np.random.default_rng(7)
    top = max_key(max_len, score)
    floors = np.unique(np.concatenate([[-1, 0, 1, top - 1, top], rng.integers(0, top + 1, 12)]))
    q_len = np.concatenate([[0, 1, 255, 256, max_len], rng.integers(0, max_len + 1, 11)])
    d_len = rng.integers(0, max_len + 1, 24)
    for floor in floors.tolist():
        ge, gt = floor_tables(np, np.full(len(q_len), floor), q_len, max_len + 1, max_len, score)
        assert ge.dtype == gt.dtype == np.uint16 and ge.shape == (len(q_len), max_len + 1)
        for i, q in enumerate(q_len.tolist()):
            for d in d_len.tolist():
                overlap = np.unique(np.clip([0, ge[i, d] - 1, ge[i, d], gt[i, d], min(q, d)], 0, min(q, d)))
                key = score_key(overlap, q, d, max_len, score)
                assert np.array_equal(_emits(overlap, ge[i, d], gt[i, d]), key >= floor), (q, d, floor)
                assert (ge[i, d] <= min(q, d)) == (score_key(min(q, d), q, d, max_len, score) >= floor)


@pytest.mark.parametrize("max_len", [1, 7, 128, 255])
def test_score_key_equals_integer_floor_division_on_every_triple(max_len):
    """score_key divides in float64; every (overlap, |q|, |d|) up to max_len gives the integer quotient."""
    o = np.arange(max_len + 1, dtype=np.int64)[:, None, None]
    q = np.arange(max_len + 1, dtype=np.int64)[None, :, None]
    d = np.arange(max_len + 1, dtype=np.int64)[None, None, :]
    exact = (key_scale(max_len) * o) // np.maximum(np.maximum(q, d), 1)
    got = score_key(o, q, d, max_len)
    assert got.dtype == np.int32 and np.array_equal(got, exact)


def test_score_key_is_exact_at_the_largest_max_len():
    """Numerators near 2**45 (max_len 32767), quotients just below and at integers."""
    max_len, scale = 32767, 32767**2
    rng = np.random.default_rng(5)
    o = rng.integers(0, max_len + 1, 200_000)
    m = rng.integers(1, max_len + 1, 200_000)
    o = np.concatenate([o, m, m - 1, np.full(3, max_len)])
    m = np.concatenate([m, m, m, [max_len, 1, max_len - 1]])
    o = np.minimum(o, m)
    assert np.array_equal(score_key(o, m, m, max_len), (scale * o) // m)


# ---------------------------------------------------------------------------- every score

from settopk.kernels import check_score, key_dtype, max_key, score_definition  # noqa: E402


def _exact_fraction(o, q, d, score):
    """(num, den) of the fraction each score ranks by, written out apart from settopk.kernels.keys."""
    return {
        "braun_blanquet": (o, max(q, d)),
        "jaccard": (o, q + d - o),
        "cosine": (o * o, q * d),
        "dice": (2 * o, q + d),
        "overlap": (o, 1),
        "containment": (o, q),
    }[score]


def _fraction_arrays(o, q, d, score):
    o, q, d = (np.asarray(a, dtype=np.int64) for a in (o, q, d))
    return {
        "braun_blanquet": (o, np.maximum(q, d)),
        "jaccard": (o, q + d - o),
        "cosine": (o * o, q * d),
        "dice": (2 * o, q + d),
        "overlap": (o, np.ones_like(o)),
        "containment": (o, q + 0 * d),
    }[score]


def _assert_order_preserving(keys, num, den, group=None):
    """Keys sort exactly like the fractions num/den (0 where den == 0): equal fractions get equal
    keys, a larger fraction a strictly larger key, among the entries of each ``group`` (all at once
    where None). Checked on neighbours in key order with exact integer cross-multiplication, which
    covers every pair by transitivity."""
    num = np.where(den == 0, 0, num)
    den = np.where(den == 0, 1, den)
    group = np.zeros_like(keys) if group is None else np.asarray(group)
    order = np.lexsort((keys, group))  # by group, then key; within a key any order
    g, k, n, m = group[order], keys[order].astype(np.int64), num[order], den[order]
    cross = n[1:] * m[:-1] - n[:-1] * m[1:]  # sign of fraction[i + 1] - fraction[i]; below 2**63 for L <= 4096
    inside = g[1:] == g[:-1]
    same_key = inside & (k[1:] == k[:-1])
    assert np.all(cross[same_key] == 0), "two different fractions share a key"
    assert np.all(cross[inside & ~same_key] > 0), "a larger key for a fraction that is not larger"


def _cosine_ranks(max_len):
    """Cosine's keys written out apart from settopk.kernels.keys: {(o, d): rank of Fraction(o², d)}."""
    values = {(o, d): Fraction(o * o, d) if d else Fraction(0) for d in range(max_len + 1) for o in range(d + 1)}
    rank = {v: r for r, v in enumerate(sorted(set(values.values())))}
    return {pair: rank[v] for pair, v in values.items()}


def _expected_keys(ov, ql, dl, max_len, score):
    """Each score's key from its definition, in integers: the scaled floor, or cosine's rank."""
    if score == "cosine":
        ranks = _cosine_ranks(max_len)
        return np.array([ranks[(o, d)] for o, d in zip(ov.tolist(), dl.tolist())], dtype=np.int64)
    num, den = _fraction_arrays(ov, ql, dl, score)
    return np.where(den > 0, (key_scale(max_len, score) * num) // np.maximum(den, 1), 0)


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("max_len", [1, 2, 3, 7, 16])
def test_every_score_key_is_order_preserving_and_exact_on_every_triple(score, max_len):
    ov, ql, dl = _all_pairs(max_len)
    keys = score_key(ov, ql, dl, max_len, score)
    assert keys.dtype == key_dtype(max_len, score) == np.int32
    num, den = _fraction_arrays(ov, ql, dl, score)
    assert np.array_equal(keys, _expected_keys(ov, ql, dl, max_len, score))
    # Cosine's keys order the pairs of one query (|q| fixed); the others' order every pair.
    _assert_order_preserving(keys, num, den, ql if score == "cosine" else None)
    assert keys.min() == 0 and keys.max() == max_key(max_len, score)
    if score != "cosine":
        scale = key_scale(max_len, score)
        for o, q, d, key in list(zip(ov.tolist(), ql.tolist(), dl.tolist(), keys.tolist()))[:: max(1, len(ov) // 300)]:
            n, m = _exact_fraction(o, q, d, score)  # the same key from Python's integers
            assert key == (scale * n // m if m else 0)


def _sample_triples(rng, max_len, n):
    """Random valid (overlap, |q|, |d|), plus every triple with both lengths within 4 of max_len and
    of a few small lengths: the closest distinct fractions have the largest denominators."""
    q = rng.integers(0, max_len + 1, n)
    d = rng.integers(0, max_len + 1, n)
    o = (rng.random(n) * (np.minimum(q, d) + 1)).astype(np.int64)
    near = np.arange(max(0, max_len - 4), max_len + 1)
    small = np.arange(0, min(max_len, 5) + 1)
    extra = [(a, b, c) for lens in (near, small, np.concatenate([small, near])) for b in lens for c in lens
             for a in range(min(b, c) + 1)]
    eo, eq, ed = (np.array(v, dtype=np.int64) for v in zip(*extra))
    return np.concatenate([o, eo]), np.concatenate([q, eq]), np.concatenate([d, ed])


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("max_len", [128, 255, 4096])
def test_every_score_key_is_order_preserving_and_exact_on_a_sample(score, max_len):
    rng = np.random.default_rng(max_len + SCORES.index(score))
    ov, ql, dl = _sample_triples(rng, max_len, 200_000)
    keys = score_key(ov, ql, dl, max_len, score)
    assert keys.dtype == key_dtype(max_len, score)
    num, den = _fraction_arrays(ov, ql, dl, score)
    if score == "cosine":
        # Ranks are their order: every pair of one query, in integers (o**2 |d'| against o'**2 |d|).
        _assert_order_preserving(keys, num, den, ql)
        _assert_order_preserving(keys, ov * ov, np.where(dl > 0, dl, 1))  # and o**2 / |d| across queries
    else:
        scale = key_scale(max_len, score)
        exact = np.where(den > 0, (scale * num) // np.maximum(den, 1), 0)  # below 2**49: exact in int64
        assert np.array_equal(keys, exact)
        _assert_order_preserving(keys, num, den)
    assert keys.max() <= max_key(max_len, score) < 2**32


@pytest.mark.parametrize("max_len", [1, 2, 5, 40])
def test_cosine_key_table_is_the_rank_of_every_fraction(max_len):
    from settopk.kernels import cosine_key_table

    table = cosine_key_table(max_len)
    ranks = _cosine_ranks(max_len)
    assert table.dtype == np.int32 and len(table) == (max_len + 1) * (max_len + 2) // 2
    assert table.tolist() == [ranks[(o, d)] for d in range(max_len + 1) for o in range(d + 1)]
    assert not table.flags.writeable and cosine_key_table(max_len) is table  # built once, shared read-only


def test_cosine_key_table_at_4096_is_dense_and_increasing_along_each_row():
    from settopk.kernels import cosine_key_table

    table = cosine_key_table(4096).astype(np.int64)
    assert len(table) == 4097 * 4098 // 2 and table.max() == max_key(4096, "cosine") == 7_554_301
    assert np.array_equal(np.unique(table), np.arange(table.max() + 1))  # every rank is some fraction's
    d = np.repeat(np.arange(4097), np.arange(1, 4098))
    step = np.diff(table)[d[1:] == d[:-1]]  # neighbours within a row: o and o + 1 over the same |d|
    assert (step > 0).all()


def test_key_scales_widths_and_limits():
    assert [key_scale(128, s) for s in SCORES] == [128**2, 4 * 128**2, 1, 4 * 128**2, 1, 128**2]
    assert [max_key(128, s) for s in SCORES][:2] == [128**2, 4 * 128**2]
    assert [max_key(128, s) for s in SCORES][3:] == [4 * 128**2, 128, 128**2]
    assert max_key(128, "cosine") == max(_cosine_ranks(128).values())  # the largest fraction's: 128**2 / 128
    assert key_dtype(4096, "cosine") == np.int32
    assert key_dtype(255, "braun_blanquet") == np.int32 and key_dtype(32767, "jaccard") == np.int64
    assert max_key(4096, "cosine") < 2**23 and max_key(32767, "dice") < 2**32
    with pytest.raises(ValueError, match=r"\[1, 4096\] for score 'cosine'"):
        key_scale(4097, "cosine")
    with pytest.raises(ValueError, match="braun_blanquet, jaccard, cosine, dice, overlap, containment"):
        check_score("tanimoto")
    with pytest.raises(ValueError, match="score must be one of"):
        score_key(1, 1, 1, 8, "BB")
    assert score_definition("braun_blanquet") == "Braun-Blanquet |q & d| / max(|q|, |d|); 0/0 = 0; ties by lower doc_id"
    assert all(score_definition(s) for s in SCORES)


@pytest.mark.parametrize("score", SCORES)
def test_score_value_is_the_score_and_zero_over_zero_is_zero(score):
    import math

    ov, ql, dl = _all_pairs(9)
    got = score_value(ov, ql, dl, score)
    assert got.dtype == np.float64
    for o, q, d, value in zip(ov.tolist(), ql.tolist(), dl.tolist(), got.tolist()):
        if score == "cosine":
            want = o / math.sqrt(q * d) if q * d else 0.0
        else:
            n, m = _exact_fraction(o, q, d, score)
            want = float(Fraction(n, m)) if m else 0.0  # correctly rounded
        assert value == want, (o, q, d)
    # Broadcasting as the output writer uses it: one row of lengths against many.
    assert score_value(np.array([[1, 2]]), np.array([[3]]), np.array([4]), score).shape == (1, 2)


def _distinct_keys_around(keys, top):
    """Every key, one below and one above, and the bounds around [-1, top]."""
    values = np.unique(keys)
    return np.unique(np.concatenate([values - 1, values, values + 1, [-1, 0, top - 1, top, top + 1, top + 50]]))


@pytest.mark.parametrize("score", SCORES)
def test_min_overlap_above_matches_the_key_for_every_score(score):
    max_len = 12
    ov, ql, dl = _all_pairs(max_len)
    keys = score_key(ov, ql, dl, max_len, score)
    for t in _distinct_keys_around(keys, max_key(max_len, score)).tolist():
        need = min_overlap_above(t, ql, dl, max_len, score)
        assert need.dtype == np.int32
        assert np.array_equal(ov >= need, keys > t), t


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("max_len", [255, 4096])
def test_min_overlap_above_on_a_sample(score, max_len):
    rng = np.random.default_rng(SCORES.index(score))
    ov, ql, dl = _sample_triples(rng, max_len, 100_000)
    keys = score_key(ov, ql, dl, max_len, score)
    # Thresholds at, just below and just above sampled keys: where an off-by-one would show.
    for t in np.concatenate([[-1, 0, max_key(max_len, score)], rng.choice(keys, 40) + rng.integers(-1, 2, 40)]).tolist():
        need = min_overlap_above(t, ql, dl, max_len, score)
        assert np.array_equal(ov >= need, keys > t), t


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("max_len", [1, 2, 9])
def test_best_key_in_range_matches_brute_force_for_every_score(score, max_len):
    ov, ql, dl = _all_pairs(max_len)
    best = np.full((max_len + 1, max_len + 1), -1, dtype=np.int64)
    np.maximum.at(best, (ql, dl), score_key(ov, ql, dl, max_len, score))
    lengths = np.arange(max_len + 1)
    q, lo, hi = np.meshgrid(lengths, lengths, lengths, indexing="ij")
    got = best_key_in_range(q, lo, hi, max_len, score)
    assert got.dtype == key_dtype(max_len, score)
    for qi, l, h, g in zip(q.ravel().tolist(), lo.ravel().tolist(), hi.ravel().tolist(), got.ravel().tolist()):
        assert g == (best[qi, l : h + 1].max() if l <= h else -1), (qi, l, h)


@pytest.mark.parametrize("score", SCORES)
def test_check_floor_key_ceiling_follows_the_score(score):
    top = max_key(8, score)
    assert check_floor_key(np.array([-1, 0, top, 2**40]), 4, 8, score).tolist() == [-1, 0, top, top + 1]


@pytest.mark.parametrize("score", SCORES)
def test_floor_tables_emit_exactly_the_docs_at_or_above_the_floor_for_every_score(score):
    from settopk.kernels.cuda.floors import floor_tables

    max_len = 10
    ov, ql, dl = _all_pairs(max_len)
    keys = score_key(ov, ql, dl, max_len, score)
    floors = _distinct_keys_around(keys, max_key(max_len, score))
    floors = floors[floors <= max_key(max_len, score) + 1]
    for q in range(max_len + 1):
        ge, gt = floor_tables(np, floors, np.full(len(floors), q), max_len + 1, max_len, score)
        sel = ql == q
        for f, floor in enumerate(floors.tolist()):
            got = _emits(ov[sel], ge[f, dl[sel]], gt[f, dl[sel]])
            assert np.array_equal(got, keys[sel] >= floor), (q, floor)


def test_cuda_score_enum_follows_scores():
    """The kernels take the score as its index in settopk.kernels.SCORES: the enum must list them in that order."""
    import pathlib
    import re

    source = (pathlib.Path(__file__).resolve().parent.parent / "settopk" / "kernels" / "cuda" / "common.cuh").read_text()
    enum = re.search(r"enum Score : int \{(.*?)\};", source, re.S).group(1)
    values = [int(v) for v in re.findall(r"= (\d+),", enum)]
    names = re.findall(r"k(\w+) = \d+", enum)
    assert values == list(range(len(SCORES)))
    assert [re.sub(r"(?<!^)([A-Z])", r"_\1", n).lower() for n in names] == list(SCORES)


def _device_cosine_least_overlap(t, q, d, max_len, keys, fractions):
    """common.cuh's least_overlap for cosine, in Python integers: key t + 1 is the fraction a**2 / b,
    and the least overlap o with o**2 b >= a**2 |d| is the ceiling of a square root."""
    t1 = t + 1
    if q * d == 0:
        return 0 if t1 <= 0 else max_len + 1
    if t1 <= 0:
        return 0
    if t1 > keys[-1]:
        return max_len + 1
    a, b = fractions[t1] >> 16, fractions[t1] & 0xFFFF
    x = -(-(a * a * d) // b)
    r = math.isqrt(x)
    r += r * r < x
    return r if r <= d else max_len + 1


@pytest.mark.parametrize("max_len", [1, 3, 12, 4096])
def test_cosine_key_fractions_invert_the_keys_as_the_gpu_does(max_len):
    """Each key's fraction has that key, and the GPU's arithmetic inverse of a key (from its fraction)
    equals min_overlap_above's search of the table: every (key, |q|, |d|) for small max_len, samples at 4096."""
    from settopk.kernels import cosine_key_fractions, cosine_key_table

    keys, fractions = cosine_key_table(max_len), cosine_key_fractions(max_len)
    assert fractions.dtype == np.int32 and len(fractions) == max_key(max_len, "cosine") + 1 and fractions[0] == 0
    o, d = fractions >> 16, fractions & 0xFFFF
    assert np.array_equal(keys[d * (d + 1) // 2 + o], np.arange(len(fractions)))
    rng = np.random.default_rng(max_len)
    if max_len <= 12:
        triples = [(t, q, dl) for t in range(-2, len(fractions) + 2) for q in range(max_len + 1)
                   for dl in range(max_len + 1)]
    else:
        ts = np.concatenate([[-2, -1, 0, 1, len(fractions) - 2, len(fractions) - 1, len(fractions)],
                             rng.integers(0, len(fractions), 3000)])
        triples = list(zip(ts.tolist(), rng.integers(0, max_len + 1, len(ts)).tolist(),
                           rng.integers(0, max_len + 1, len(ts)).tolist()))
        triples += [(t, max_len, max_len) for t in ts.tolist()] + [(t, 1, max_len - 1) for t in ts.tolist()]
    t, q, dl = (np.array(v, dtype=np.int64) for v in zip(*triples))
    want = min_overlap_above(t, q, dl, max_len, "cosine")
    keys, fractions = keys.tolist(), fractions.tolist()
    got = [_device_cosine_least_overlap(*x, max_len, keys, fractions) for x in triples]
    assert np.array_equal(np.array(got), want)
