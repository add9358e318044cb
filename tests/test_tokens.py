"""Token types and the exact token map (settopk.shards.inputs.vocabulary), without Ray: every
mapping gives the brute-force oracle's result on the original tokens, ties included."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from settopk.kernels import brute_force_topk
from settopk.shards.inputs import InputError, QueryStream, read_corpus, read_queries
from settopk.shards.inputs.vocabulary import (
    INT, VocabCounter, VocabularyError, WideSets, build_token_map, check_types, dedup_values, has_negative, token_type,
    values_of, vocab_of,
)

SCORES = ("braun_blanquet", "jaccard", "cosine", "dice", "overlap", "containment")

_TRANSFORMS = {
    "int64-shift": (pa.int64(), lambda x: x + 10**12),
    "int64-limits": (pa.int64(), lambda x: 2**63 - 1 - x if x % 2 else -(2**63) + x),
    "uint64-top": (pa.uint64(), lambda x: 2**64 - 1 - x),
    "string": (pa.string(), lambda x: "" if x == 0 else f"tok{x}"),
    "large_string": (pa.large_string(), lambda x: "é" * x),
    "binary": (pa.binary(), lambda x: x.to_bytes(2, "little")),
}


def _wide(sets, value_type, f) -> WideSets:
    flat = pa.array([f(x) for s in sets for x in s], value_type)
    counts = np.array([len(s) for s in sets], dtype=np.int64)
    lengths, tokens, _ = dedup_values(values_of(flat), counts)
    return WideSets(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), tokens)


def _map(docs, queries, value_type, f, vocab_size=65536):
    wide_docs, wide_queries = _wide(docs, value_type, f), _wide(queries, value_type, f)
    counter = VocabCounter(vocab_size)
    counter.add(wide_queries.tokens, "q")
    # The run's types are the docs' and the queries' (settopk.jobs.vocabulary.token_types): with no
    # query token at all, uint64 docs above 2**63 still need uint64.
    types = {**({token_type(wide_docs.tokens): "d"} if len(wide_docs.tokens) else {}), **counter.types}
    if has_negative(wide_docs.tokens):
        types.setdefault("negative", "d")
    to = check_types(types)
    token_map = build_token_map(vocab_of(wide_docs.tokens, vocab_size), counter.result(), vocab_size, to)
    token_map.check_room(int(wide_docs.lengths.max(initial=0)), int(wide_queries.lengths.max(initial=0)))
    return token_map, token_map.docs(wide_docs), token_map.queries(wide_queries)


_set = st.lists(st.integers(0, 24), max_size=9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=st.lists(_set, min_size=1, max_size=25), queries=st.lists(_set, min_size=1, max_size=6),
       transform=st.sampled_from(sorted(_TRANSFORMS)), score=st.sampled_from(SCORES))
@example(docs=[[0]], queries=[[]], transform="uint64-top", score="braun_blanquet")  # no query token: uint64 from the docs
def test_mapped_sets_give_the_oracle_result_of_the_original_tokens(docs, queries, transform, score):
    value_type, f = _TRANSFORMS[transform]
    _, dense_docs, dense_queries = _map(docs, queries, value_type, f)
    assert dense_docs.lengths.tolist() == [len(set(s)) for s in docs]
    assert dense_queries.lengths.tolist() == [len(set(s)) for s in queries]
    k = len(docs)
    assert brute_force_topk(dense_docs.to_lists(), dense_queries.to_lists(), k, score=score) == brute_force_topk(docs, queries, k, score=score)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=st.lists(_set, min_size=1, max_size=25), queries=st.lists(st.lists(st.integers(0, 40), max_size=9), min_size=1, max_size=6),
       score=st.sampled_from(SCORES), data=st.data())
def test_tightest_vocabularies_stay_exact(docs, queries, score, data):
    """Dense ids with no room to spare (shared + longest doc + longest query), and docs kept as
    they are with queries in free ids: still the oracle's result."""
    longest = max(map(len, map(set, docs))) + max(map(len, map(set, queries)))
    n_shared = len({x for s in docs for x in s} & {x for s in queries for x in s})
    tight = max(1, n_shared + longest)
    _, dense_docs, dense_queries = _map(docs, queries, pa.int64(), lambda x: -x - 1, vocab_size=tight)
    k = len(docs)
    want = brute_force_topk(docs, queries, k, score=score)
    assert brute_force_topk(dense_docs.to_lists(), dense_queries.to_lists(), k, score=score) == want
    from settopk.kernels.sets import SetBatch

    vocab_size = data.draw(st.integers(25, 60))  # docs' ids all below it: kept; some query ids above it
    small = SetBatch.from_lists(docs)
    counter = VocabCounter(vocab_size)
    counter.add(_wide(queries, pa.int64(), int).tokens, "q")
    token_map = build_token_map(vocab_of(small.tokens, vocab_size), counter.result(), vocab_size, check_types(counter.types))
    try:
        token_map.check_room(0, max(map(len, map(set, queries))))
    except VocabularyError:
        return  # too few free ids for the longest query: refused up front
    assert token_map.identity and token_map.docs(small) is small
    mapped = token_map.queries(_wide(queries, pa.int64(), int)).to_lists()
    assert brute_force_topk(small.to_lists(), mapped, k, score=score) == want


def test_side_only_tokens_never_meet_and_keep_lengths():
    docs = [[0, 1, 2, 3], [4, 5], [1]]  # 0, 2, 3, 4, 5: in docs only
    queries = [[1, 7, 8, 9], [6]]  # 6..9: in queries only
    token_map, dense_docs, dense_queries = _map(docs, queries, pa.int64(), lambda x: x * 10**15)
    assert (token_map.n_doc_tokens, token_map.n_query_tokens, token_map.n_shared) == (6, 5, 1)
    assert dense_docs.to_lists() == [[0, 1, 2, 3], [1, 2], [0]]  # shared 1 -> 0; doc-only tokens from 1 up, per doc
    assert dense_queries.to_lists() == [[0, 65533, 65534, 65535], [65535]]  # query-only tokens from the top, per query
    assert token_map.summary()["dense_ids"] == "shared-first" and token_map.kind == INT


def test_identity_when_docs_are_small_ids_and_queries_take_free_ids():
    corpus_sets = [[0, 5], [5, 65535]]
    counter = VocabCounter(65536)
    queries = _wide([[5, 70000, 65534], [-1, 0]], pa.int64(), int)
    counter.add(queries.tokens, "q")
    from settopk.kernels.sets import SetBatch

    small = SetBatch.from_lists(corpus_sets)
    token_map = build_token_map(vocab_of(small.tokens, 65536), counter.result(), 65536, check_types(counter.types))
    assert token_map.identity and token_map.docs(small) is small
    dense = token_map.queries(queries).to_lists()
    # 5 and 0 stay; 70000, 65534 and -1 are in no doc: free ids (none of 0, 5, 65535), highest first
    assert dense == [[5, 65533, 65534], [0, 65534]]
    assert (token_map.n_doc_tokens, token_map.n_query_tokens, token_map.n_shared) == (3, 5, 2)


def test_too_many_shared_tokens_is_a_typed_error_naming_the_count():
    sets = [list(range(i, i + 100)) for i in range(0, 70000, 100)]
    with pytest.raises(VocabularyError, match="share 70000 distinct tokens, expected at most 65336") as info:
        _map(sets, sets, pa.int64(), lambda x: x + 10**12)
    assert info.value.n_shared == 70000 and info.value.limit == 65336
    import pickle

    again = pickle.loads(pickle.dumps(info.value))
    assert str(again) == str(info.value) and again.n_shared == 70000


def test_strings_and_integers_do_not_mix_and_the_files_are_named():
    counter = VocabCounter(65536)
    counter.add(pa.array([b"a"], pa.large_binary()), "q1.parquet")
    with pytest.raises(InputError, match="q1.parquet.*integer tokens in q2.txt"):
        counter.add(np.array([1], dtype=np.uint16), "q2.txt")
    counter = VocabCounter(65536)
    counter.add(pa.array([-1], pa.int64()), "a.txt")
    with pytest.raises(InputError, match="b.parquet.*negative ids in a.txt"):
        counter.add(pa.array([2**64 - 1], pa.uint64()), "b.parquet")


# -- readers -------------------------------------------------------------------------------


@pytest.mark.parametrize("value_type", [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()])
def test_parquet_tokens_of_every_integer_type(tmp_path, value_type):
    info = np.iinfo(value_type.to_pandas_dtype())
    sets = [[int(info.min), int(info.max), 0], [int(info.max), int(info.max)], [], [1]]
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"doc_id": [0, 1, 2, 3], "tokens": pa.array(sets, pa.list_(value_type))}), path)
    corpus = read_corpus(path)
    assert corpus.docs.to_lists() == [sorted(set(s)) for s in sets] and corpus.n_with_repeats == 1 + (info.min == 0)
    small = 0 <= info.min and info.max < 65536
    assert isinstance(corpus.docs, WideSets) != small


@pytest.mark.parametrize("value_type", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
def test_parquet_string_and_binary_tokens(tmp_path, value_type):
    sets = [["b", "a", "", "a"], [], ["z"]] if value_type in (pa.string(), pa.large_string()) else [[b"b", b"a", b"", b"a"], [], [b"\x00"]]
    path = tmp_path / "q.parquet"
    pq.write_table(pa.table({"query_id": ["x", "y", "z"], "tokens": pa.array(sets, pa.list_(value_type))}), path)
    queries = read_queries(path)
    assert [len(s) for s in queries.queries.to_lists()] == [3, 0, 1] and queries.n_with_repeats == 1
    stream = QueryStream(path)
    assert stream.vocab.n_distinct() == 4 and set(stream.token_types) == {"large_binary"}


def test_text_reads_any_64_bit_integer(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text(f"{2**63 - 1}, -{2**63}, 5\n\n70000,70000\n")
    corpus = read_corpus(path)
    assert corpus.docs.to_lists() == [[-(2**63), 5, 2**63 - 1], [], [70000]] and corpus.n_with_repeats == 1
    path.write_text(f"{2**64 - 1},1\n")
    assert read_corpus(path).docs.to_lists() == [[1, 2**64 - 1]]


@pytest.mark.parametrize("data, line, found", [
    ("1,2\n3,x\n", 2, "'x' at id #2"),
    ("1\n2.5\n", 2, "'2.5'"),
    (f"1\n{2**64}\n", 2, f"{2**64} at id #1"),
    (f"-1\n3\n{2**63}\n", 3, f"{2**63} after a negative id"),
])
def test_text_bad_tokens_name_file_and_line(tmp_path, data, line, found):
    path = tmp_path / "d.txt"
    path.write_text(data)
    with pytest.raises(InputError) as info:
        read_corpus(path)
    assert info.value.path == str(path) and info.value.line == line and found in info.value.found


def test_parquet_null_token_names_file_and_row(tmp_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"doc_id": [0, 1], "tokens": pa.array([["a"], ["b", None]], pa.list_(pa.string()))}), path)
    with pytest.raises(InputError) as info:
        read_corpus(path)
    assert info.value.path == str(path) and info.value.row == 1 and "null" in info.value.found
    rejected = read_corpus(path, on_invalid="quarantine")
    assert rejected.docs.to_lists() == [[b"a"]] and [r.row for r in rejected.rejected] == [1]


@pytest.mark.parametrize("value_type", [pa.float64(), pa.list_(pa.int64())])
def test_parquet_tokens_of_other_types_name_the_file(tmp_path, value_type):
    path = tmp_path / "d.parquet"
    value = 1.5 if value_type == pa.float64() else [1]
    pq.write_table(pa.table({"doc_id": [0], "tokens": pa.array([[value]], pa.list_(value_type))}), path)
    with pytest.raises(InputError, match="list<integer>, list<string> or list<binary>") as info:
        read_corpus(path)
    assert info.value.path == str(path)


def test_parquet_files_of_integer_and_string_tokens_do_not_mix(tmp_path):
    pq.write_table(pa.table({"doc_id": [0], "tokens": pa.array([[1]], pa.list_(pa.int64()))}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"doc_id": [1], "tokens": pa.array([["x"]], pa.list_(pa.string()))}), tmp_path / "b.parquet")
    with pytest.raises(InputError, match="tokens of one type") as info:
        read_corpus(tmp_path)
    assert "a.parquet" in str(info.value) and "b.parquet" in str(info.value)


def test_query_stream_chunks_are_mapped_once_the_map_is_set(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text("1000000000000,5\n7\n")
    stream = QueryStream(path)
    _, as_read = next(stream.chunks(10))  # no map yet: the token values as read
    assert isinstance(as_read, WideSets) and as_read.to_lists() == [[5, 10**12], [7]]
    docs = _wide([[5, 10**12]], pa.int64(), int)
    stream.token_map = build_token_map(vocab_of(docs.tokens, 65536), stream.vocab, 65536, check_types(stream.token_types))
    ids, batch = next(stream.chunks(10))
    assert ids == ["0", "1"] and batch.to_lists() == [[0, 1], [65535]] and stream.token_map.kind == INT


# -- the synthetic corpus ---------------------------------------------------------------------


def test_synthetic_corpus_token_types_describe_the_same_sets(tmp_path):
    from settopk.jobs import make_corpus

    read = {}
    for token_type, offset in (("uint16", 0), ("int64", 10**12), ("string", 10**12)):
        out = tmp_path / token_type
        assert make_corpus.main(["--out-dir", str(out), "--n-docs", "200", "--n-queries", "10", "--vocab-size", "500", "--max-len", "30",
                                 "--length-law", "uniform", "--token-type", token_type, "--token-offset", str(offset)]) == 0
        docs = read_corpus(out / "docs.parquet").docs.to_lists()
        queries = read_queries(out / "queries.parquet").queries.to_lists()
        to_id = (lambda v: v) if token_type == "uint16" else (lambda v: int(v) - offset)
        read[token_type] = ([[to_id(v) for v in s] for s in docs], [sorted(to_id(v) for v in s) for s in queries])
    assert read["uint16"] == read["int64"]
    assert [[sorted(s) for s in part] for part in read["string"]] == [[sorted(s) for s in part] for part in read["uint16"]]
    lengths = [len(s) for s in read["uint16"][0]]
    assert max(lengths) <= 30 and len(set(lengths)) > 10  # uniform lengths, not the STI2 histogram's


def test_synthetic_spec_and_config_check_the_new_fields():
    import settopk.configs
    from settopk.jobs.synthetic import SyntheticSpec

    with pytest.raises(ValueError, match="token_type"):
        SyntheticSpec(10, 1, token_type="float")
    with pytest.raises(ValueError, match="token_offset needs"):
        SyntheticSpec(10, 1, token_offset=5)
    with pytest.raises(ValueError, match="length_law"):
        SyntheticSpec(10, 1, length_law="zipf")
    problems = settopk.configs.synthetic_problems(settopk.configs.SyntheticConfig(token_type="int8", length_law="x"), 65536)
    assert any("token_type" in p for p in problems) and any("length_law" in p for p in problems)
