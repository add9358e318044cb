"""The real-shaped synthetic law (issue 46): RETAIL's short set lengths, Zipf item popularity and
exact copies of earlier sets, skewed; deterministic by seed, cached as the other laws."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow.parquet as pq
import pytest

from settopk.jobs.synthetic import SyntheticSpec, cache_name, ensure_synthetic, generate_docs
from settopk.jobs.synthetic.copies import copy_plan, gather_rows
from settopk.jobs.synthetic.spec import draw_lengths, retail_histogram
from settopk.kernels.sets import SetBatch

RETAIL = {"length_law": "retail", "vocab_size": 16470, "zipf_s": 0.8, "near_duplicate_fraction": 0.0, "n_queries": 0}


def _repeats(sets: SetBatch) -> collections.Counter:
    return collections.Counter(sets[i].tobytes() for i in range(sets.n_sets))


def _copy_share(sets: SetBatch) -> float:
    """Share of sets equal to an earlier set."""
    return sum(c - 1 for c in _repeats(sets).values()) / sets.n_sets


def test_retail_lengths_follow_its_histogram():
    hist = retail_histogram()
    assert hist.sum() == 88_162 and hist[0] == 0 and len(hist) - 1 == 76
    mean = (np.arange(len(hist)) * hist).sum() / hist.sum()
    lengths = draw_lengths(np.random.default_rng(0), 200_000, 128, "retail")
    assert lengths.min() >= 1 and lengths.max() <= 76
    assert abs(lengths.mean() - mean) < 0.1  # 200,000 draws: the mean's standard error is about 0.02
    share = np.bincount(lengths, minlength=len(hist))[:6] / len(lengths)
    assert np.allclose(share, hist[:6] / hist.sum(), atol=0.003)
    cut = draw_lengths(np.random.default_rng(0), 10_000, 20, "retail")
    assert cut.max() == 20 and cut.min() >= 1  # cut at max_len and renormalised


def test_generation_is_deterministic_by_seed_and_workers():
    spec = SyntheticSpec(n_docs=30_000, seed=3, duplicate_fraction=0.05, **RETAIL)
    a, b = generate_docs(spec), generate_docs(spec, workers=1)
    assert np.array_equal(a.offsets, b.offsets) and np.array_equal(a.tokens, b.tokens)
    other = generate_docs(SyntheticSpec(n_docs=30_000, seed=4, duplicate_fraction=0.05, **RETAIL))
    assert not np.array_equal(a.offsets, other.offsets)
    for i in range(0, a.n_sets, 997):  # each set: distinct ascending ids in the vocabulary
        assert (np.diff(a[i].astype(np.int64)) > 0).all() and int(a[i].max(initial=0)) < 16470


def _is_copy(plan: np.ndarray) -> np.ndarray:
    """A row is a copy where its original's index is one seen before (an original gets the next)."""
    return np.concatenate([[False], plan[1:] <= np.maximum.accumulate(plan)[:-1]])


def test_copies_are_exact_earlier_sets_with_a_skew():
    n, fraction = 60_000, 0.05
    plan = copy_plan(n, fraction, 1.0, seed=1)
    copies = _is_copy(plan)
    assert np.array_equal(plan[~copies], np.arange((~copies).sum()))  # originals numbered in doc order
    assert abs(copies.mean() - fraction) < 4 * np.sqrt(fraction * (1 - fraction) / n)
    counts = np.bincount(plan[copies])
    assert counts.argmax() == 0 and counts[0] > 20 * np.median(counts[counts > 0])  # the first repeats most
    # Uniform ids over a large vocabulary: sets collide by chance almost never, so the copies are the repeats.
    docs = generate_docs(SyntheticSpec(n_docs=n, seed=1, vocab_size=65536, id_dist="uniform", length_law="retail",
                                       near_duplicate_fraction=0.0, n_queries=0, duplicate_fraction=fraction))
    first_row = {}
    for i, original in enumerate(plan.tolist()):
        first_row.setdefault(original, i)
    for i in np.flatnonzero(copies)[::15]:
        first = first_row[int(plan[i])]
        assert first < i and np.array_equal(docs[i], docs[first])
    assert abs(_copy_share(docs) - copies.mean()) < 0.002


def test_the_retail_shape_mean_length_and_duplicate_share():
    docs = generate_docs(SyntheticSpec(n_docs=100_000, seed=0, duplicate_fraction=0.01, **RETAIL))
    assert abs(docs.lengths.mean() - 10.306) < 0.15 and docs.lengths.max() <= 76
    share = _copy_share(docs)
    plain = _copy_share(generate_docs(SyntheticSpec(n_docs=100_000, seed=0, **RETAIL)))
    assert 0.01 < plain < 0.05  # short sets of frequent items repeat by chance, as in RETAIL
    assert 0.005 < share - plain < 0.015  # the planted copies come on top of those


def test_gather_rows_in_chunks_equals_take():
    sets = SetBatch.from_lists([[1, 2], [], [3], [4, 5, 6]])
    rows = np.array([3, 0, 0, 2, 1, 3])
    got, want = gather_rows(sets, rows, chunk_rows=4), sets.take(rows)
    assert np.array_equal(got.offsets, want.offsets) and np.array_equal(got.tokens, want.tokens)


def test_old_specs_keep_their_cache_names_and_the_new_law_is_cached(tmp_path):
    plain = SyntheticSpec(n_docs=1000, n_queries=10)
    assert cache_name(plain) == cache_name(SyntheticSpec(n_docs=1000, n_queries=10, duplicate_fraction=0.0, duplicate_zipf_s=1.0))
    spec = SyntheticSpec(n_docs=2000, seed=2, duplicate_fraction=0.1, **RETAIL)
    assert cache_name(spec) != cache_name(SyntheticSpec(n_docs=2000, seed=2, duplicate_fraction=0.2, **RETAIL))
    docs_path, _ = ensure_synthetic(spec, tmp_path)
    mtime = docs_path.stat().st_mtime_ns
    assert ensure_synthetic(spec, tmp_path)[0].stat().st_mtime_ns == mtime  # the second call reads the cache
    table = pq.read_table(docs_path)
    want = generate_docs(spec)
    assert table.num_rows == 2000 and table.column("tokens").to_pylist()[:50] == [want[i].tolist() for i in range(50)]


def test_configs_take_the_new_keys_and_refuse_bad_values(tmp_path):
    from settopk.configs import ConfigError, load_config
    from settopk.jobs.bench.common import synthetic_spec
    from settopk.jobs.bench.config import load_bench_config

    cfg = load_bench_config("real-shaped-10m")
    spec = synthetic_spec(cfg)
    assert (spec.n_docs, spec.length_law, spec.duplicate_fraction, spec.vocab_size) == (10_000_000, "retail", 0.01, 16470)
    assert cfg.self_join is not None and cfg.self_join.threshold == "0.8"
    bad = tmp_path / "bad.yaml"
    bad.write_text("synthetic:\n  duplicate_fraction: 1.0\n  length_law: zipfian\n")
    with pytest.raises(ConfigError, match=r"length_law must be .*'retail'.*duplicate_fraction must be in \[0, 1\)"):
        load_config(str(bad))
    with pytest.raises(ValueError, match="duplicate_zipf_s must be in"):
        SyntheticSpec(n_docs=10, n_queries=0, duplicate_zipf_s=-1.0)
