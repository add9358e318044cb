"""Wide token ids (issue 31): uint32 SetBatches with ids up to 2**24 - 1 on the host backends
(``numpy`` and ``cpu``), top-k and threshold search against the brute-force oracle for every
score, ties included: ids near 2**24 - 1, ids just above 65535, and uint16 docs with uint32
queries (and the reverse)."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settopk.kernels import SCORES, NumpyShardIndex, SetBatch, brute_force_threshold, brute_force_topk, parse_threshold
from settopk.kernels.sets import MAX_VOCAB, fold_query_ids, index_ids

pytest.importorskip("numba")
from settopk.kernels.numba_index import NumbaShardIndex  # noqa: E402

# Id pools: a few ids each, so that sets overlap often (ties, near-duplicates).
POOLS = {
    "top": [MAX_VOCAB - 1 - i for i in range(9)] + [0, 1, 2],  # near 2**24 - 1, and a few small ids
    "edge": [65530 + i for i in range(12)],  # both sides of 65535 / 65536
    "spread": [0, 7, 65535, 65536, 65537, 1 << 20, (1 << 23) + 5, MAX_VOCAB - 2, MAX_VOCAB - 1, 300, 12, 99],
}
# "narrow docs": uint16 docs, uint32 queries reaching past the docs' ids (a query-only id).
MIXES = ("wide", "narrow_docs", "narrow_queries")
_picks = st.lists(st.lists(st.integers(0, 11), max_size=8), max_size=14)


def _sets(picks, pool):
    return [sorted({pool[i] for i in p}) for p in picks]


def _batches(docs, queries, mix):
    """SetBatches of the lists, each side's dtype per ``mix`` (a side whose ids all fit uint16 may be kept narrow)."""
    def batch(sets, narrow):
        fits = all(x < 65536 for s in sets for x in s)
        return SetBatch.from_lists(sets, dtype=np.uint16 if (narrow and fits) else np.uint32)

    return batch(docs, mix == "narrow_docs"), batch(queries, mix == "narrow_queries")


def _index(backend, docs, ids, max_len, score, routing):
    if backend == "numpy":
        return NumpyShardIndex(docs, ids, max_len, score, routing=routing)
    return NumbaShardIndex(docs, ids, max_len, score, routing=routing, threads=2)


def _topk_rows(topk):
    return [[(int(d), int(o), int(l)) for d, o, l in zip(r_ids, r_ov, r_len) if d >= 0]
            for r_ids, r_ov, r_len in zip(topk.doc_ids, topk.overlap, topk.doc_len)]


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
@pytest.mark.parametrize("score", SCORES)
@given(doc_picks=_picks, query_picks=_picks, pool=st.sampled_from(sorted(POOLS)), mix=st.sampled_from(MIXES),
       k=st.sampled_from([1, 3, 20]), routing=st.sampled_from(["scan", "auto", "postings"]))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_topk_with_wide_ids_matches_oracle(backend, score, doc_picks, query_picks, pool, mix, k, routing):
    docs, queries = _sets(doc_picks, POOLS[pool]), _sets(query_picks, POOLS[pool])
    d, q = _batches(docs, queries, mix)
    ids = np.arange(len(docs), dtype=np.int64) * 2 + 5
    index = _index(backend, d, ids, 8, score, routing)
    got = index.search(q, k)
    assert _topk_rows(got) == brute_force_topk(docs, queries, k, doc_ids=list(ids), score=score)


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
@pytest.mark.parametrize("score", SCORES)
@given(doc_picks=_picks, query_picks=_picks, pool=st.sampled_from(sorted(POOLS)), mix=st.sampled_from(MIXES),
       text=st.sampled_from(["0", "1", "0.5", "1/3", "2/3", "0.75"]), k=st.sampled_from([None, 2]),
       routing=st.sampled_from(["scan", "auto", "postings"]))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_threshold_with_wide_ids_matches_oracle(backend, score, doc_picks, query_picks, pool, mix, text, k, routing):
    docs, queries = _sets(doc_picks, POOLS[pool]), _sets(query_picks, POOLS[pool])
    d, q = _batches(docs, queries, mix)
    t = parse_threshold(text if score != "overlap" else str(Fraction(text) * 3), score)
    ids = [3 * i + 1 for i in range(len(docs))]
    index = _index(backend, d, np.asarray(ids, dtype=np.int64), 8, score, routing)
    got = index.threshold_search(q, t, k=k)
    assert [got.row(i) for i in range(got.n_queries)] == brute_force_threshold(docs, queries, t, doc_ids=ids,
                                                                               score=score, k=k)


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_wide_and_narrow_ids_give_the_same_results(backend):
    """The same corpus as uint16 ids and as those ids shifted into [2**24 - 65536, 2**24): identical TopK."""
    rng = np.random.default_rng(3)
    docs = [sorted(set(rng.integers(0, 300, rng.integers(0, 20)).tolist())) for _ in range(400)]
    queries = [sorted(set(rng.integers(0, 300, rng.integers(0, 20)).tolist())) for _ in range(40)] + docs[:10]
    shift = MAX_VOCAB - 65536
    narrow = (SetBatch.from_lists(docs), SetBatch.from_lists(queries))
    wide = (SetBatch.from_lists([[x + shift for x in s] for s in docs]),
            SetBatch.from_lists([[x + shift for x in s] for s in queries]))
    assert wide[0].tokens.dtype == np.uint32 and narrow[0].tokens.dtype == np.uint16
    for routing in ("scan", "auto"):
        a = _index(backend, *narrow[:1], np.arange(len(docs)), 32, "jaccard", routing).search(narrow[1], 10)
        b = _index(backend, *wide[:1], np.arange(len(docs)), 32, "jaccard", routing).search(wide[1], 10)
        for x, y in zip(a, b):
            assert np.array_equal(x, y)


def test_set_batch_widths():
    narrow = SetBatch.from_lists([[3, 1], [65535]])
    assert narrow.tokens.dtype == np.uint16 and not narrow.wide
    wide = SetBatch.from_lists([[70000, 1], [MAX_VOCAB - 1]])
    assert wide.tokens.dtype == np.uint32 and wide.wide and wide.to_lists() == [[1, 70000], [MAX_VOCAB - 1]]
    assert SetBatch.from_lists([[1]], dtype=np.uint32).tokens.dtype == np.uint32
    assert wide.take(np.array([1])).tokens.dtype == np.uint32
    both = SetBatch.concat([narrow, wide])
    assert both.tokens.dtype == np.uint32 and both.to_lists() == [[1, 3], [65535], [1, 70000], [MAX_VOCAB - 1]]
    assert SetBatch.concat([narrow, narrow]).tokens.dtype == np.uint16
    with pytest.raises(ValueError, match="uint16"):
        SetBatch.from_lists([[65536]], dtype=np.uint16)
    with pytest.raises(ValueError, match=r"\[0, 16777215\]"):
        SetBatch.from_lists([[MAX_VOCAB]])
    with pytest.raises(ValueError, match="uint16 array .* or uint32"):
        SetBatch(np.array([0, 1], np.int64), np.array([1], np.int64))


def test_host_index_refuses_ids_past_2_24():
    docs = SetBatch(np.array([0, 1], np.int64), np.array([MAX_VOCAB], np.uint32))
    with pytest.raises(ValueError, match="below 16777216"):
        NumpyShardIndex(docs, np.arange(1), 8)


def test_fold_query_ids_keeps_sets_sorted_and_lengths():
    queries = SetBatch.from_lists([[1, 5, 900, MAX_VOCAB - 1], [], [2_000_000]])
    folded = fold_query_ids(queries, 100)
    assert folded.to_lists() == [[1, 5, 102, 103], [], [100]]
    assert fold_query_ids(queries, MAX_VOCAB) is queries
    assert index_ids(SetBatch.from_lists([[1, 2]])) == 65536  # uint16 docs keep today's 65536-id tables
    assert index_ids(SetBatch.from_lists([[1, 70000]])) == 70001


def test_cupy_index_refuses_uint32_tokens_under_a_narrow_vocab_size():
    pytest.importorskip("cupy")
    from settopk.kernels.cuda.loading import check_set_batch as _check_set_batch

    with pytest.raises(ValueError, match="uint32 token ids .* vocab_size=65536: set vocab_size above every id"):
        _check_set_batch(SetBatch.from_lists([[70000]]), "docs", 8, 65536)
    _check_set_batch(SetBatch.from_lists([[70000]]), "docs", 8, 70001)


# --- inputs: readers, the token map, settopk.Index ------------------------------------------------

def test_readers_take_ids_of_a_wide_vocabulary_as_uint32(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from settopk.shards.inputs import SetLimits, read_corpus

    sets = [[70000, 3, 3], [65535], [MAX_VOCAB - 1, 0]]
    pq.write_table(pa.table({"doc_id": [0, 1, 2], "tokens": pa.array(sets, pa.list_(pa.int64()))}), tmp_path / "d.parquet")
    (tmp_path / "d.txt").write_text("70000,3,3\n65535\n16777215,0\n")
    for name in ("d.parquet", "d.txt"):
        corpus = read_corpus(str(tmp_path / name), SetLimits(vocab_size=MAX_VOCAB, max_len=8))
        assert corpus.docs.tokens.dtype == np.uint32, name
        assert corpus.docs.to_lists() == [[3, 70000], [65535], [0, MAX_VOCAB - 1]], name
        narrow = read_corpus(str(tmp_path / name), SetLimits(vocab_size=MAX_VOCAB, max_len=8), length_range=(1, 1))
        assert narrow.docs.to_lists() == [[65535]]


def test_token_map_gives_uint32_sets_above_65536_and_uint16_below():
    import pyarrow as pa

    from settopk.shards.inputs.vocabulary import WideSets, build_token_map, vocab_of

    def wide(sets):
        lengths = np.array([len(s) for s in sets])
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return WideSets(offsets, pa.array([x for s in sets for x in s], pa.int64()))

    docs = wide([[10**12, 10**12 + 1], [10**12 + 2]])
    queries = wide([[10**12 + 1, 5], [10**12 + 2, 10**12]])
    for vocab_size, dtype in ((65536, np.uint16), (1_000_000, np.uint32)):
        token_map = build_token_map(vocab_of(docs.tokens, vocab_size), vocab_of(queries.tokens, vocab_size), vocab_size,
                                    pa.int64())
        d, q = token_map.docs(docs), token_map.queries(queries)
        assert d.tokens.dtype == dtype and q.tokens.dtype == dtype
        assert max(int(d.tokens.max()), int(q.tokens.max())) < vocab_size
        assert d.lengths.tolist() == [2, 1] and q.lengths.tolist() == [2, 2]
        # The overlaps of the original tokens: doc 0 meets query 0 in one token, query 1 in one.
        index = NumpyShardIndex(d, np.arange(2), 8, "overlap")
        assert index.overlaps(q).tolist() == [[1, 0], [1, 1]]


def test_vocabulary_error_tells_the_user_to_raise_vocab_size():
    from settopk.shards.inputs.vocabulary import VocabularyError

    assert "raise vocab_size to at least 70536 (up to 16777216; the config's vocab_size key" in \
        str(VocabularyError(70000, 65000, 65536, 536))


def test_index_takes_wide_ids_on_every_backend_here():
    from settopk import Index

    docs = [[1, 70000, MAX_VOCAB - 1], [70000], [2, 3]]
    queries = [[70000, MAX_VOCAB - 1], [5_000_000], [2]]
    want = brute_force_topk(docs, queries, 2, score="jaccard")
    for backend in ("numpy", "cpu", "auto"):  # auto: cupy where there is a GPU
        for given in (docs, SetBatch.from_lists(docs)):
            index = Index(given, backend=backend, vocab_size=MAX_VOCAB, score="jaccard")
            got = index.search(queries, 2)
            assert [[(int(d), int(o), int(l)) for d, o, l in zip(*row) if d >= 0]
                    for row in zip(got.doc_ids, got.overlap, got.doc_len)] == want, backend
    # Ids past the default vocab_size: the index is built over token values, with the same results.
    for given in (docs, SetBatch.from_lists(docs)):
        index = Index(given, backend="numpy", score="jaccard")
        assert index.token_values.to_pylist() == [1, 2, 3, 70000, MAX_VOCAB - 1]
        got = index.search(queries, 2)
        assert [[(int(d), int(o), int(l)) for d, o, l in zip(*row) if d >= 0]
                for row in zip(got.doc_ids, got.overlap, got.doc_len)] == want
