import itertools

import numpy as np
import pytest

from shards import plan_shards


def _check_cover(plan, lengths, max_len):
    assert plan[0].min_len == 0 and plan[-1].max_len == max_len
    for a, b in zip(plan, plan[1:]):
        assert b.min_len == a.max_len + 1
    assert sum(s.n_docs for s in plan) == len(lengths)
    assert sum(s.n_tokens for s in plan) == int(np.sum(lengths))
    for s in plan:
        inside = (lengths >= s.min_len) & (lengths <= s.max_len)
        assert s.n_docs == inside.sum() > 0
        assert s.n_tokens == lengths[inside].sum()


def _best_max_load(lengths, n_shards):
    """Brute force over every contiguous split of the distinct lengths."""
    present = np.unique(lengths)
    w = [max(int(l) * int((lengths == l).sum()), 1) for l in present]
    best = None
    for parts in range(1, min(n_shards, len(w)) + 1):
        for cuts in itertools.combinations(range(1, len(w)), parts - 1):
            bounds = [0, *cuts, len(w)]
            load = max(sum(w[a:b]) for a, b in zip(bounds, bounds[1:]))
            best = load if best is None else min(best, load)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_plan_is_contiguous_complete_and_optimal(seed):
    rng = np.random.default_rng(seed)
    max_len = 16
    lengths = rng.choice(rng.choice(max_len + 1, size=rng.integers(1, 9), replace=False), size=rng.integers(1, 200))
    n_shards = int(rng.integers(1, 6))
    plan = plan_shards(lengths, n_shards, max_len)
    _check_cover(plan, lengths, max_len)
    assert len(plan) == min(n_shards, len(np.unique(lengths)))
    loads = [max(s.n_tokens, 1) for s in plan]
    assert max(loads) <= _best_max_load(lengths, n_shards) or max(loads) == _best_max_load(lengths, n_shards)


def test_competition_histogram_balances_within_five_percent():
    hist = np.loadtxt("configs/sti2_doc_length_histogram.csv", delimiter=",", dtype=np.int64)
    lengths = np.repeat(hist[:, 0], hist[:, 1])
    for n in (2, 4):
        plan = plan_shards(lengths, n, 128)
        tokens = np.array([s.n_tokens for s in plan])
        assert len(plan) == n and tokens.max() / tokens.mean() < 1.05


def test_one_length_only_gives_one_shard():
    plan = plan_shards(np.full(10, 7), 4, 128)
    assert len(plan) == 1 and (plan[0].min_len, plan[0].max_len, plan[0].n_docs) == (0, 128, 10)


def test_more_shards_than_lengths_and_empty_buckets():
    lengths = np.array([0, 0, 3, 3, 128])
    plan = plan_shards(lengths, 10, 128)
    _check_cover(plan, lengths, 128)
    assert len(plan) == 3


def test_only_empty_docs_and_empty_corpus():
    plan = plan_shards(np.zeros(5, np.int64), 3, 128)
    assert len(plan) == 1 and plan[0].n_docs == 5
    assert plan_shards(np.zeros(0, np.int64), 3, 128) == []


def test_bad_arguments():
    with pytest.raises(ValueError):
        plan_shards(np.array([1]), 0, 128)
    with pytest.raises(ValueError):
        plan_shards(np.array([129]), 1, 128)
