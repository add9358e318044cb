"""Tests of the synthetic corpus generator (settopk.jobs.synthetic) and its job (settopk.jobs.make_corpus)."""

from __future__ import annotations

import hashlib
import threading
from itertools import permutations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from settopk.jobs import make_corpus
from settopk.jobs import synthetic as syn
from settopk.jobs.synthetic import cache as syn_cache
from settopk.jobs.synthetic import laws
from settopk.jobs.synthetic import spec as syn_spec
from settopk.jobs.synthetic import STI2_N_DOCS, SyntheticSpec, ensure_synthetic, generate_docs, generate_queries
from settopk.kernels.sets import SetBatch

STI2_MEAN_LEN = 65.14


def digest(batch: SetBatch) -> str:
    return hashlib.sha256(batch.offsets.tobytes() + batch.tokens.tobytes()).hexdigest()


def assert_valid_sets(batch: SetBatch, vocab_size: int, max_len: int) -> None:
    lengths = batch.lengths
    assert lengths.min(initial=0) >= 0 and lengths.max(initial=0) <= max_len
    assert batch.tokens.max(initial=0) < vocab_size
    rows = np.repeat(np.arange(batch.n_sets), lengths)
    same_row = rows[1:] == rows[:-1]
    # Strictly ascending inside a row means sorted and distinct.
    assert (np.diff(batch.tokens.astype(np.int64))[same_row] > 0).all()


@pytest.fixture(scope="module")
def small():
    spec = SyntheticSpec(n_docs=3000, n_queries=60, seed=7)
    docs = generate_docs(spec, workers=1)
    return spec, docs, generate_queries(spec, docs, workers=1)


def test_length_histogram_is_the_sti2_one():
    hist = syn.length_histogram()
    assert hist.dtype == np.int64 and hist.shape == (129,)
    assert hist.sum() == STI2_N_DOCS and hist[0] == 1
    assert abs((np.arange(129) * hist).sum() / hist.sum() - STI2_MEAN_LEN) < 0.01
    hist[5] = -1  # a copy: the cached histogram is untouched
    assert syn.length_histogram()[5] != -1


def test_same_spec_same_output_and_threads_do_not_matter(small):
    spec, docs, queries = small
    docs2 = generate_docs(spec, workers=3)
    assert digest(docs2) == digest(docs)
    assert digest(generate_queries(spec, docs2, workers=2)) == digest(queries)
    other = SyntheticSpec(n_docs=3000, n_queries=60, seed=8)
    other_docs = generate_docs(other, workers=1)
    assert digest(other_docs) != digest(docs)
    assert digest(generate_queries(other, other_docs)) != digest(queries)


@pytest.mark.parametrize(
    "spec",
    [
        SyntheticSpec(n_docs=2000, n_queries=50, seed=1),
        SyntheticSpec(n_docs=2000, n_queries=50, seed=1, id_dist="uniform"),
        SyntheticSpec(n_docs=2000, n_queries=50, seed=2, zipf_s=1.5, vocab_size=300, max_len=40),
        SyntheticSpec(n_docs=500, n_queries=20, seed=3, vocab_size=128, max_len=128, near_duplicate_fraction=1.0),
    ],
    ids=["zipf", "uniform", "small-vocab-short", "vocab-equals-max-len"],
)
def test_sets_are_sorted_distinct_in_range(spec):
    docs = generate_docs(spec, workers=2)
    queries = generate_queries(spec, docs)
    assert docs.n_sets == spec.n_docs and queries.n_sets == spec.n_queries
    assert_valid_sets(docs, spec.vocab_size, spec.max_len)
    assert_valid_sets(queries, spec.vocab_size, spec.max_len)


def test_length_distribution_follows_the_histogram():
    spec = SyntheticSpec(n_docs=300_000, n_queries=0, seed=4)
    docs = generate_docs(spec)
    lengths = docs.lengths
    assert abs(lengths.mean() - STI2_MEAN_LEN) < 1.0
    hist = syn.length_histogram()
    got = np.bincount(lengths, minlength=len(hist)) / len(lengths)
    total_variation = 0.5 * np.abs(got - hist / hist.sum()).sum()
    assert total_variation < 0.02


def test_competition_size_uses_the_exact_histogram():
    lengths = syn_spec.draw_lengths(np.random.default_rng(0), STI2_N_DOCS, 128)
    assert (np.bincount(lengths, minlength=129) == syn.length_histogram()).all()
    assert not (np.diff(lengths[:1000]) >= 0).all()  # shuffled, not in length order


def test_zipf_head_frequency_and_permuted_ranks():
    spec = SyntheticSpec(n_docs=1, n_queries=0, seed=5)
    law = laws.IdLaw(spec)
    draws = law.sample(np.random.default_rng(0), (2_000_000, 1)).ravel()
    freq = np.bincount(draws, minlength=spec.vocab_size) / len(draws)
    harmonic = (1.0 / np.arange(1, spec.vocab_size + 1)).sum()
    top = np.argsort(freq)[::-1][:3]
    # Ranks 1, 2, 3 have p = 1/(r H): about 8.8%, 4.4%, 2.9%.
    for rank, token in enumerate(top, start=1):
        assert freq[token] == pytest.approx(1 / (rank * harmonic), rel=0.02)
        assert law.p[token] == pytest.approx(1 / (rank * harmonic))
    assert top.tolist() != [0, 1, 2]  # ranks go through the seeded permutation
    # In docs, the head token is in most docs; the law's top ids lead the doc frequencies.
    docs = generate_docs(SyntheticSpec(n_docs=20_000, n_queries=0, seed=5))
    doc_freq = np.bincount(docs.tokens, minlength=spec.vocab_size)
    assert set(np.argsort(doc_freq)[::-1][:3]) == set(top.tolist())


def test_uniform_ids_are_flat():
    spec = SyntheticSpec(n_docs=1, n_queries=0, id_dist="uniform", vocab_size=1000, max_len=10)
    draws = laws.IdLaw(spec).sample(np.random.default_rng(0), (1_000_000, 1)).ravel()
    freq = np.bincount(draws, minlength=1000)
    assert draws.max() < 1000 and abs(freq.mean() - 1000) < 1e-9 and freq.std() < 60  # Poisson sd is ~32


@pytest.mark.parametrize("force_short", [False, True], ids=["one-block", "extended"])
def test_distinct_rows_is_exact_successive_sampling(force_short):
    # Vocab 4 with Zipf s=1: the probability of a 2-set {a, b} drawn as "first two
    # distinct values" is p_a p_b / (1 - p_a) + p_b p_a / (1 - p_b).
    spec = SyntheticSpec(n_docs=1, n_queries=0, seed=6, vocab_size=4, max_len=2)
    law = laws.IdLaw(spec)
    if force_short:
        # One draw per row to start with: every row needs the extension loop.
        law.width = lambda need: 1
    n = 200_000
    rows = laws.distinct_rows(np.random.default_rng(1), law, np.full(n, 2, np.int64), 2)
    assert (rows[:, 0] < rows[:, 1]).all()
    codes, counts = np.unique(rows[:, 0].astype(np.int64) * 4 + rows[:, 1], return_counts=True)
    p = law.p
    expected = {a * 4 + b: p[a] * p[b] / (1 - p[a]) + p[b] * p[a] / (1 - p[b]) for a, b in permutations(range(4), 2) if a < b}
    assert set(codes.tolist()) <= set(expected)
    for code, count in zip(codes.tolist(), counts.tolist()):
        sd = np.sqrt(n * expected[code] * (1 - expected[code]))
        assert abs(count - n * expected[code]) < 5 * sd


def overlaps(query: np.ndarray, docs: SetBatch) -> np.ndarray:
    """|q ∩ d| for every doc, shape (n_docs,)."""
    rows = np.repeat(np.arange(docs.n_sets), docs.lengths)
    return np.bincount(rows[np.isin(docs.tokens, query)], minlength=docs.n_sets)


def test_near_duplicates_overlap_their_doc_and_random_queries_do_not(small):
    spec, docs, queries = small
    n_near = spec.n_near_duplicates
    assert n_near == 30
    lengths = docs.lengths
    best = []
    for i in range(queries.n_sets):
        q = queries[i]
        score = overlaps(q, docs) / np.maximum(np.maximum(lengths, len(q)), 1)
        best.append(score.max())
        if i < n_near:
            # Same length as its source doc, and most of that doc's ids.
            assert len(q) >= 1 and (lengths == len(q))[score.argmax()]
    best = np.array(best)
    assert best[:n_near].min() >= 0.6 and np.median(best[:n_near]) >= 0.8
    assert np.median(best[n_near:]) < 0.5


def test_parquet_schema_and_round_trip(small, tmp_path):
    _, docs, queries = small
    docs_path, queries_path = syn.write_parquet(docs, queries, tmp_path / "out")
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"docs.parquet", "queries.parquet"}  # no temp leftovers
    dt = pq.read_table(docs_path)
    qt = pq.read_table(queries_path)
    assert dt.schema.field("doc_id").type == pa.int64()
    assert qt.schema.field("query_id").type == pa.string()
    for t in (dt, qt):
        assert pa.types.is_list(t.schema.field("tokens").type)
        assert t.schema.field("tokens").type.value_type == pa.uint16()
    assert dt.column("doc_id").to_numpy().tolist() == list(range(docs.n_sets))
    qids = qt.column("query_id").to_pylist()
    assert qids[:2] == ["q000000", "q000001"] and len(qids) == queries.n_sets
    for table, batch in ((dt, docs), (qt, queries)):
        col = table.column("tokens").combine_chunks()
        assert (col.offsets.to_numpy().astype(np.int64) == batch.offsets).all()
        assert (col.values.to_numpy() == batch.tokens).all()


def test_parquet_batches_rebase_offsets(small, tmp_path, monkeypatch):
    _, docs, queries = small
    monkeypatch.setattr(syn_cache, "_WRITE_BATCH_ROWS", 700)  # several record batches and row groups
    docs_path, _ = syn.write_parquet(docs, queries, tmp_path)
    assert pq.ParquetFile(docs_path).metadata.num_row_groups == 5
    tokens = pq.read_table(docs_path).column("tokens").to_pylist()
    assert tokens == docs.to_lists()


def test_query_ids_widen_past_a_million():
    assert syn.query_ids(0, 2, 10) == ["q000000", "q000001"]
    assert syn.query_ids(999_999, 1_000_000, 2_000_000) == ["q0999999"]


def test_cache_is_reused_not_regenerated(tmp_path, monkeypatch):
    spec = SyntheticSpec(n_docs=500, n_queries=10, seed=9)
    docs_path, queries_path = ensure_synthetic(spec, tmp_path)
    assert docs_path.parent.parent == tmp_path and docs_path.parent.name == syn.cache_name(spec)
    assert (docs_path.parent / "spec.json").is_file()
    mtimes = docs_path.stat().st_mtime_ns, queries_path.stat().st_mtime_ns

    def boom(*args, **kwargs):
        raise AssertionError("regenerated a cached corpus")

    monkeypatch.setattr(syn_cache, "generate_docs", boom)
    assert ensure_synthetic(spec, str(tmp_path)) == (docs_path, queries_path)
    assert (docs_path.stat().st_mtime_ns, queries_path.stat().st_mtime_ns) == mtimes
    assert [p.name for p in tmp_path.iterdir()] == [docs_path.parent.name]  # no temp dirs left
    # Another spec (or generator version) is another directory.
    assert syn.cache_name(SyntheticSpec(n_docs=500, n_queries=10, seed=10)) != syn.cache_name(spec)
    monkeypatch.setattr(syn_cache, "GENERATOR_VERSION", syn.GENERATOR_VERSION + 1)
    assert syn.cache_name(spec) != docs_path.parent.name


def test_cache_race_keeps_one_complete_corpus(tmp_path):
    spec = SyntheticSpec(n_docs=2000, n_queries=10, seed=11)
    results, errors = [], []

    def worker():
        try:
            results.append(ensure_synthetic(spec, tmp_path, workers=1))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [syn.cache_name(spec)]
    docs = pq.read_table(results[0][0]).column("tokens").to_pylist()
    assert docs == generate_docs(spec).to_lists()


def test_cache_keeps_a_corpus_that_appeared_meanwhile(tmp_path, monkeypatch):
    spec = SyntheticSpec(n_docs=300, n_queries=4, seed=13)
    real = syn.generate_docs
    winner = {}

    def rival_finishes_first(spec_, **kwargs):
        monkeypatch.setattr(syn_cache, "generate_docs", real)
        winner["paths"] = ensure_synthetic(spec_, tmp_path)  # publishes while we generate
        winner["mtime"] = winner["paths"][0].stat().st_mtime_ns
        return real(spec_, **kwargs)

    monkeypatch.setattr(syn_cache, "generate_docs", rival_finishes_first)
    assert ensure_synthetic(spec, tmp_path) == winner["paths"]
    assert winner["paths"][0].stat().st_mtime_ns == winner["mtime"]  # the rival's file was kept
    assert [p.name for p in tmp_path.iterdir()] == [syn.cache_name(spec)]


def test_cache_repairs_a_damaged_entry(tmp_path):
    spec = SyntheticSpec(n_docs=200, n_queries=4, seed=12)
    docs_path, queries_path = ensure_synthetic(spec, tmp_path)
    queries_path.unlink()
    assert ensure_synthetic(spec, tmp_path) == (docs_path, queries_path)
    assert queries_path.is_file()
    assert [p.name for p in tmp_path.iterdir()] == [docs_path.parent.name]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_docs": 0}, "n_docs"),
        ({"n_queries": -1}, "n_queries"),
        ({"id_dist": "normal"}, "id_dist"),
        ({"near_duplicate_fraction": 1.5}, "near_duplicate_fraction"),
        ({"vocab_size": 70000}, "vocab_size"),
        ({"vocab_size": 100}, "vocab_size"),  # below max_len: distinct ids impossible
        ({"zipf_s": -1.0}, "zipf_s"),
    ],
)
def test_spec_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SyntheticSpec(**{"n_docs": 10, "n_queries": 1, **kwargs})


def test_make_corpus_main_writes_both_files(tmp_path, capsys):
    out = tmp_path / "corpus"
    argv = ["--out-dir", str(out), "--n-docs", "1000", "--n-queries", "20", "--seed", "3", "--id-dist", "uniform"]
    assert make_corpus.main(argv) == 0
    printed = capsys.readouterr().out
    assert "docs.parquet" in printed and "queries.parquet" in printed
    assert pq.read_table(out / "docs.parquet").num_rows == 1000
    assert pq.read_table(out / "queries.parquet").num_rows == 20
    spec = SyntheticSpec(n_docs=1000, n_queries=20, seed=3, id_dist="uniform")
    assert pq.read_table(out / "docs.parquet").column("tokens").to_pylist() == generate_docs(spec).to_lists()
    assert make_corpus.main(["--out-dir", str(out), "--n-docs", "0", "--n-queries", "1"]) == 2


def test_too_concentrated_law_is_rejected():
    spec = SyntheticSpec(n_docs=10, n_queries=0, zipf_s=10.0, vocab_size=300)
    with pytest.raises(ValueError, match="too concentrated"):
        generate_docs(spec)
