import itertools

import numpy as np
import pytest

from settopk.shards import plan_shards, plan_shards_from_counts


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
    return _best_max_load_counts(np.bincount(np.asarray(lengths, dtype=np.int64)), n_shards)


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
    hist = np.loadtxt("settopk/configs/sti2_doc_length_histogram.csv", delimiter=",", dtype=np.int64)
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


# --------------------------------------------------------------------------------------------------
# plan_shards_from_counts: the plan from the readers' length histogram


def _check_counts_cover(plan, counts):
    """Contiguous ranges covering [0, max_len], each non-empty, with the histogram's docs and tokens."""
    counts = np.asarray(counts, dtype=np.int64)
    max_len = len(counts) - 1
    assert [s.shard_id for s in plan] == list(range(len(plan)))
    assert plan[0].min_len == 0 and plan[-1].max_len == max_len
    for a, b in zip(plan, plan[1:]):
        assert b.min_len == a.max_len + 1
    lengths = np.arange(max_len + 1)
    for s in plan:
        inside = (lengths >= s.min_len) & (lengths <= s.max_len)
        assert s.n_docs == counts[inside].sum() > 0
        assert s.n_tokens == (lengths * counts)[inside].sum()
    assert sum(s.n_docs for s in plan) == counts.sum()


def _load(spec, counts):
    """A shard's load as the planner weighs it: tokens, with a bucket of empty docs weighing one."""
    return spec.n_tokens + int(spec.min_len == 0 and counts[0] > 0)


def _best_max_load_counts(counts, n_shards):
    """Brute force over every contiguous split of the non-empty buckets into at most n_shards parts."""
    present = np.flatnonzero(counts)
    w = [max(int(length) * int(counts[length]), 1) for length in present]
    best = None
    for parts in range(1, min(n_shards, len(w)) + 1):
        for cuts in itertools.combinations(range(1, len(w)), parts - 1):
            bounds = [0, *cuts, len(w)]
            load = max(sum(w[a:b]) for a, b in zip(bounds, bounds[1:]))
            best = load if best is None else min(best, load)
    return best


@pytest.mark.parametrize("seed", range(10))
def test_plan_from_counts_equals_plan_from_lengths(seed):
    rng = np.random.default_rng(100 + seed)
    max_len = int(rng.choice([4, 16, 128]))
    lengths = rng.choice(rng.choice(max_len + 1, size=rng.integers(1, min(10, max_len + 2)), replace=False), size=rng.integers(1, 300))
    counts = np.bincount(lengths, minlength=max_len + 1)
    for n_shards in range(1, 7):
        from_counts = plan_shards_from_counts(counts, n_shards)
        assert from_counts == plan_shards(lengths, n_shards, max_len)
        _check_counts_cover(from_counts, counts)
    assert plan_shards_from_counts(counts.astype(np.int32).tolist(), 3) == plan_shards(lengths, 3, max_len)  # any integer sequence


@pytest.mark.parametrize("seed", range(60))
def test_plan_from_counts_is_optimal_and_uses_every_shard_it_may(seed):
    rng = np.random.default_rng(seed)
    max_len = int(rng.integers(0, 12))
    counts = rng.integers(0, 6, size=max_len + 1) * (rng.random(max_len + 1) < 0.6)  # many empty buckets
    if counts.sum() == 0:
        counts[rng.integers(0, max_len + 1)] = int(rng.integers(1, 4))
    n_shards = int(rng.integers(1, 7))
    plan = plan_shards_from_counts(counts, n_shards)
    _check_counts_cover(plan, counts)
    assert len(plan) == min(n_shards, np.count_nonzero(counts))
    assert max(_load(s, counts) for s in plan) == _best_max_load_counts(counts, n_shards)


@pytest.mark.parametrize("length", [0, 1, 5, 9])
def test_one_length_only_is_one_shard_for_any_shard_count(length):
    counts = np.zeros(10, np.int64)
    counts[length] = 4
    for n_shards in (1, 2, 5, 100):
        assert [s.to_dict() for s in plan_shards_from_counts(counts, n_shards)] == [
            {"shard_id": 0, "min_len": 0, "max_len": 9, "n_docs": 4, "n_tokens": 4 * length}
        ]


def test_empty_buckets_between_lengths_go_to_the_shard_before_the_next_length():
    counts = [0, 3, 0, 0, 2, 0, 1, 0]  # lengths 1, 4, 6 present; max_len 7
    plan = plan_shards_from_counts(counts, 3)
    assert [(s.min_len, s.max_len, s.n_docs, s.n_tokens) for s in plan] == [(0, 3, 3, 3), (4, 5, 2, 8), (6, 7, 1, 6)]
    plan = plan_shards_from_counts(counts, 2)  # loads 3 | 8 | 6: best split 3 + 8 | 6 (max 11 < 3 | 14)
    assert [(s.min_len, s.max_len) for s in plan] == [(0, 5), (6, 7)]


def test_more_shards_than_distinct_lengths():
    counts = [2, 0, 0, 1, 0, 0, 0, 5, 0]
    plan = plan_shards_from_counts(counts, 50)
    assert [(s.min_len, s.max_len, s.n_docs) for s in plan] == [(0, 2, 2), (3, 6, 1), (7, 8, 5)]


def test_only_empty_docs_and_zero_counts():
    assert [s.to_dict() for s in plan_shards_from_counts([7, 0, 0], 4)] == [
        {"shard_id": 0, "min_len": 0, "max_len": 2, "n_docs": 7, "n_tokens": 0}
    ]
    assert [(s.min_len, s.max_len) for s in plan_shards_from_counts([7], 2)] == [(0, 0)]  # max_len 0
    assert plan_shards_from_counts(np.zeros(129, np.int64), 3) == []
    assert plan_shards_from_counts([0], 1) == []


@pytest.mark.parametrize(
    "counts, n_shards",
    [
        ([], 1),  # empty histogram
        (np.zeros((2, 3), np.int64), 1),  # not 1-D
        ([1, -1, 2], 2),  # a negative count
        ([1, 2], 0),  # no shard
        ([1, 2], -3),
    ],
)
def test_bad_histograms_are_refused(counts, n_shards):
    with pytest.raises(ValueError):
        plan_shards_from_counts(counts, n_shards)


def test_doc_cost_shifts_boundaries_towards_costlier_lengths():
    counts = np.zeros(9, dtype=np.int64)
    counts[[1, 8]] = [80, 10]  # equal ids (80 each); short docs cost more per id on the GPU
    by_ids = plan_shards_from_counts(counts, 2)
    assert [(s.min_len, s.max_len) for s in by_ids] == [(0, 7), (8, 8)]
    cost = np.arange(9) + 16  # a per-doc overhead, as settopk.kernels.cost.cupy_search_cost_per_doc adds
    weighted = plan_shards_from_counts(counts, 2, doc_cost=cost)
    assert [(s.n_docs, s.n_tokens) for s in weighted] == [(80, 80), (10, 80)]
    three = np.zeros(9, dtype=np.int64)
    three[[1, 2, 8]] = [60, 30, 15]  # ids 60, 60, 120
    assert [(s.min_len, s.max_len) for s in plan_shards_from_counts(three, 2)] == [(0, 7), (8, 8)]
    assert [(s.min_len, s.max_len) for s in plan_shards_from_counts(three, 2, doc_cost=np.arange(9) + 16)] == [(0, 1), (2, 8)]
