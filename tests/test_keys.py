from fractions import Fraction

import numpy as np
import pytest

from kernels import key_scale, min_overlap_above, score_key, score_value


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
