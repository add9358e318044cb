"""The join's length plan (settopk.kernels.join.prefixes.length_plan), computed over the present
lengths only, against a plain loop over every pair of lengths."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from settopk.kernels.join.prefixes import length_plan
from settopk.kernels.threshold import need_table


def _reference(t, score, max_len, probe_lengths, index_lengths, ordered):
    """The plan from the full need table, one pair of lengths at a time."""
    n_p, n_i = max(probe_lengths) + 1, max(index_lengths) + 1
    table = need_table(t, np.arange(n_p), max_len, score)
    need = np.full((n_p, n_i), max_len + 1, np.int64)
    probe_prefix, index_prefix = np.zeros(n_p, np.int64), np.zeros(n_i, np.int64)
    lo, hi = np.full(n_p, n_i, np.int64), np.full(n_p, -1, np.int64)
    least_i = {}
    for lp in sorted(set(probe_lengths)):
        reached = []
        for li in sorted(set(index_lengths)):
            nd = int(table[lp, li])
            need[lp, li] = nd
            if nd <= min(lp, li) and (not ordered or li < lp or (li == lp and nd < lp)):
                reached.append((li, nd))
                least_i[li] = min(least_i.get(li, nd), nd)
        if reached:
            probe_prefix[lp] = lp - min(nd for _, nd in reached) + 1
            lo[lp], hi[lp] = reached[0][0], reached[-1][0]
    for li, nd in least_i.items():
        index_prefix[li] = li - nd + 1
    return need, probe_prefix, index_prefix, lo, hi


@pytest.mark.timeout(120)
@pytest.mark.parametrize("score", ["jaccard", "dice", "braun_blanquet", "cosine", "containment", "overlap"])
def test_the_plan_equals_a_loop_over_every_pair_of_lengths(score):
    rng = np.random.default_rng(len(score))
    thresholds = [Fraction(1, 2), Fraction(9, 10), Fraction(1), Fraction(2, 7)] + ([Fraction(3)] if score == "overlap" else [])
    for t in thresholds:
        for ordered in ((False,) if score == "containment" else (False, True)):
            for _ in range(6):
                max_len = int(rng.integers(1, 90))
                probe = rng.integers(0, max_len + 1, int(rng.integers(1, 30))).tolist()
                index = probe if ordered else rng.integers(0, max_len + 1, int(rng.integers(1, 30))).tolist()
                plan = length_plan(t, score, max_len, probe, index, ordered=ordered)
                want = _reference(t, score, max_len, probe, index, ordered)
                for got, expected in zip((plan.need, plan.probe_prefix, plan.index_prefix, plan.lo, plan.hi), want):
                    assert got.shape == expected.shape and np.array_equal(got, expected), (t, ordered, max_len)
