"""The probes of issue 47 (items 2-8): each error names its cause, and the library takes what users hold."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pytest

from tests.job_helpers import job_config, result_rows, write_sets
from settopk.jobs import score
from settopk.jobs.validate import UsageError, locate_args, settle
from settopk.kernels import brute_force_topk
from settopk.kernels.sets import SetBatch
from settopk.shards.inputs.vocabulary import (
    VocabCounter, VocabularyError, WideSets, build_token_map, check_types, token_type, vocab_of,
)


def _settle(tmp_path, *argv):
    """The settled job of these arguments, its output lock released (only its config is read)."""
    args = locate_args(score.build_parser().parse_args(["--out", str(tmp_path / "out"), *argv]))
    job = settle(args, datetime.datetime.now(datetime.timezone.utc))
    job.target.release()
    return job


# Item 2: a bad --threshold is blamed on --threshold, not on the config file.

@pytest.mark.parametrize("value", ["-0.1", "nan", "inf", "0.8abc", "", "-1/3", "1/0"])
def test_a_malformed_threshold_exits_2_naming_the_flag(value, capsys):
    with pytest.raises(SystemExit) as exc:
        score.main([f"--threshold={value}", "--dry-run"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "argument --threshold" in err and repr(value) in err and "2/3" in err and "local.yaml" not in err


@pytest.mark.parametrize("value", ["-1/3", "nan", 1.5])
def test_settopk_score_refuses_a_bad_threshold_naming_it(value):
    import settopk

    with pytest.raises(UsageError, match=r"argument (--)?threshold: (expected a finite number|threshold must be <= 1)"):
        settopk.score(docs="x", queries="y", threshold=value, quiet=True)


@pytest.mark.parametrize("value", ["1.5", "1e400", "4/3"])
def test_a_threshold_above_the_scores_range_names_the_flag_and_overlap_takes_it(tmp_path, value):
    docs = write_sets(tmp_path / "docs.txt", [[1, 2], [2, 3]])
    with pytest.raises(UsageError, match=r"^argument --threshold: threshold must be <= 1 for score 'braun_blanquet'") as info:
        _settle(tmp_path, "--docs", docs, "--queries", docs, "--threshold", value)
    assert "local.yaml" not in str(info.value)
    job = _settle(tmp_path, "--docs", docs, "--queries", docs, "--threshold", value, "--score", "overlap")
    assert job.cfg.threshold == str(__import__("fractions").Fraction(value))


def test_the_fraction_form_is_documented_and_taken(tmp_path):
    docs = write_sets(tmp_path / "docs.txt", [[1, 2], [2, 3]])
    assert _settle(tmp_path, "--docs", docs, "--queries", docs, "--threshold", "2/3").cfg.threshold == "2/3"
    threshold = next(a for a in score.build_parser()._actions if "--threshold" in a.option_strings)
    assert "2/3" in threshold.help
    readme = (__import__("pathlib").Path(__file__).parent.parent / "README.md").read_text()
    section = readme[readme.index("## Threshold search and dedup"):readme.index("## Configs")]
    assert "2/3" in section


# Item 3: the synthetic corpus's vocabulary is checked only where the run uses it.

def test_a_small_vocab_size_runs_on_given_inputs_and_is_refused_on_the_synthetic_corpus(tmp_path):
    only = tmp_path / "only.yaml"
    only.write_text("vocab_size: 1000\n")
    docs = write_sets(tmp_path / "docs.txt", [[1, 2, 3], [2, 999]])
    assert _settle(tmp_path, "--docs", docs, "--queries", docs, "--config", str(only)).cfg.vocab_size == 1000
    from settopk.configs import ConfigError

    with pytest.raises(ConfigError, match=r"synthetic.vocab_size must not exceed vocab_size.*synthetic corpus \(no --docs"):
        _settle(tmp_path, "--config", str(only))


@pytest.mark.slow  # a whole job run on Ray: 3 s or more on 2 shared cores
@pytest.mark.usefixtures("ray_cluster")
def test_a_small_vocab_size_job_gives_the_oracle_rows(tmp_path):
    docs = [[1, 2, 3], [2, 999], [5], [3, 4, 5, 6]]
    queries = [[2, 3], [999, 5, 7], [6]]
    cfg = job_config(tmp_path, vocab_size=1000)
    out = tmp_path / "out"
    argv = ["--docs", write_sets(tmp_path / "docs.txt", docs), "--queries", write_sets(tmp_path / "q.txt", queries),
            "--config", cfg, "--out", str(out), "--k", "3", "--quiet"]
    assert score.main(argv) == 0
    want = brute_force_topk(docs, queries, 3)
    got = [(int(q), r, d, ov) for q, r, d, _, ov, _, _ in result_rows(out)]
    assert got == [(q, r + 1, d, ov) for q, hits in enumerate(want) for r, (d, ov, _) in enumerate(hits)]


# Item 4: the vocabulary limit is never negative and names what to raise vocab_size to.

def _token_map(docs, queries, vocab_size, as_value):
    def wide(sets):
        lengths = [len(set(s)) for s in sets]
        values = [as_value(t) for s in sets for t in dict.fromkeys(s)]
        return WideSets(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                        pa.array(values, pa.large_binary() if isinstance(values[0], bytes) else pa.int64()))

    d, q = wide(docs), wide(queries)
    counter = VocabCounter(vocab_size)
    counter.add(q.tokens, "q")
    small = as_value is int and all(0 <= t < vocab_size for s in docs for t in s)
    doc_tokens = SetBatch.from_lists(docs).tokens if small else d.tokens
    token_map = build_token_map(vocab_of(doc_tokens, vocab_size), counter.result(), vocab_size,
                                check_types({**counter.types, token_type(d.tokens): "d"}))
    token_map.check_room(max(map(len, docs)), max(map(len, queries)))
    return token_map, (SetBatch.from_lists(docs) if small else token_map.docs(d)), token_map.queries(q)


def test_side_only_room_above_vocab_size_says_what_to_raise_it_to():
    docs = [list(range(60)), [0, 1]]  # longest doc 60, longest query 55: 115 ids kept, vocab_size 100
    queries = [list(range(1000, 1055)), [0, 1, 2]]
    with pytest.raises(VocabularyError) as info:
        _token_map(docs, queries, 100, lambda t: str(t).encode())
    message = str(info.value)
    assert "-15" not in message and "expected at most -" not in message and info.value.limit == 0
    assert "vocab_size 100 is smaller than the 115 dense ids kept" in message and "at least 118" in message  # 3 shared
    token_map, dense_docs, dense_queries = _token_map(docs, queries, 118, lambda t: str(t).encode())
    assert brute_force_topk(dense_docs.to_lists(), dense_queries.to_lists(), 2) == brute_force_topk(docs, queries, 2)


def test_docs_keeping_their_ids_name_the_doc_ids_and_the_fix():
    docs = [list(range(90))]  # ids kept (all below vocab_size): 10 left free, the longest query may need 16
    queries = [list(range(100, 115)) + [3]]
    with pytest.raises(VocabularyError) as info:
        _token_map(docs, queries, 100, int)
    message = str(info.value)
    assert message.startswith("the docs hold 90 distinct ids of [0, 100), expected at most 84") and "at least 106" in message
    token_map, dense_docs, dense_queries = _token_map(docs, queries, 106, int)
    assert token_map.identity
    assert brute_force_topk(dense_docs.to_lists(), dense_queries.to_lists(), 1) == brute_force_topk(docs, queries, 1)


# Item 5: a pandas (or Polars) DataFrame is a table, never a list of its column names.

def _frames():
    import pandas as pd

    docs = pd.DataFrame({"doc_id": [30, 10, 20, 40], "tokens": [[1, 2, 3], [2, 3], {3, 4, 5}, [9]]}, index=[7, 8, 9, 5])
    queries = pd.DataFrame({"query_id": ["a", "b", "c"], "tokens": [[2, 3], [5, 4, 1], [7]]})
    return docs, queries


def test_a_pandas_dataframe_builds_and_searches_as_its_arrow_table():
    import settopk

    docs, queries = _frames()
    index = settopk.Index.build(docs, backend="numpy")
    assert index.doc_ids.tolist() == [10, 20, 30, 40]  # the frame's index (5, 7, 8, 9) is not read
    top = index.search(queries, k=4)
    assert top.query_ids == ("a", "b", "c")
    doc_sets, query_sets = [list(t) for t in docs["tokens"]], [list(t) for t in queries["tokens"]]
    plain = settopk.Index.build(doc_sets, backend="numpy", doc_ids=docs["doc_id"].to_numpy()).search(query_sets, k=4)
    assert top.to_arrow().equals(plain.to_arrow(query_ids=["a", "b", "c"]))
    want = brute_force_topk(doc_sets, query_sets, 4, doc_ids=docs["doc_id"].tolist())  # docs sharing an id
    assert [row[:len(hits)] for row, hits in zip(top.doc_ids.tolist(), want)] == [[d for d, _, _ in h] for h in want]
    table = pa.Table.from_pandas(docs, preserve_index=False)
    assert settopk.Index.build(table, backend="numpy").search(queries, k=4).to_arrow().equals(top.to_arrow())


def test_a_polars_dataframe_and_value_tokens_are_read_as_tables():
    import polars as pl

    import settopk

    docs = pl.DataFrame({"doc_id": [2, 1], "tokens": [["red", "fox"], ["fox"]]})
    top = settopk.Index.build(docs, backend="numpy").search(pl.DataFrame({"query_id": ["q"], "tokens": [["fox", "dog"]]}), k=2)
    want = brute_force_topk([["fox"], ["red", "fox"]], [["fox", "dog"]], 2, doc_ids=[1, 2])
    assert top.query_ids == ("q",) and top.doc_ids.tolist() == [[d for d, _, _ in want[0]]]


def test_a_dataframe_that_does_not_convert_is_a_type_error_and_pandas_is_not_imported():
    import subprocess
    import sys

    import pandas as pd

    import settopk

    with pytest.raises(TypeError, match=r"pandas DataFrame is read as pyarrow.Table.from_pandas\(df, preserve_index=False\)"):
        settopk.Index.build(pd.DataFrame({"doc_id": [1], "tokens": [[1, "a"]]}), backend="numpy")
    code = "import sys, settopk, settopk.index; assert 'pandas' not in sys.modules and 'polars' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# Item 6: to_arrow takes Arrow arrays of strings, and refuses None naming its position.

def test_to_arrow_takes_arrow_string_arrays_and_refuses_none_by_position(tmp_path):
    import pyarrow.parquet as pq

    import settopk

    top = settopk.Index.build([[1, 2], [2], [3]], backend="numpy").search([[1], [2], [3]], k=2)
    names = ["x", "y", "z"]
    want = top.to_arrow(query_ids=names)
    for ids in (pa.array(names), pa.array(names, pa.large_string()), pa.chunked_array([["x"], ["y", "z"]]),
                want["query_id"].unique(), top.to_arrow(query_ids=names)["query_id"].unique()):
        got = top.to_arrow(query_ids=ids)
        assert got.equals(want)
    pq.write_table(got, tmp_path / "t.parquet")
    assert pq.read_table(tmp_path / "t.parquet").column("query_id").to_pylist() == want.column("query_id").to_pylist()
    for ids, at in (([None, "y", "z"], 0), (["x", None, "z"], 1), (pa.array(["x", "y", None]), 2)):
        with pytest.raises(ValueError, match=rf"found NoneType None at position {at} \(0-based\)"):
            top.to_arrow(query_ids=ids)
    with pytest.raises(ValueError, match="found an Arrow array of type int64"):
        top.to_arrow(query_ids=pa.array([1, 2, 3]))


# Item 7: settopk.ray takes its corpus as a pyarrow.Table or a ray.data.Dataset too.

_RAY_POOL = {"backend": "numpy", "num_cpus": 0.5, "batch_size": 7, "k": 5}


def _ray_corpus():
    rng = np.random.default_rng(47)
    docs = [rng.choice(24, size=int(rng.integers(0, 9)), replace=False).tolist() for _ in range(150)]
    doc_ids = rng.permutation(10_000)[: len(docs)].tolist()
    queries = [rng.choice(24, size=int(rng.integers(1, 7)), replace=False).tolist() for _ in range(12)]
    table = pa.table({"doc_id": pa.array(doc_ids, pa.int64()), "tokens": pa.array(docs, pa.list_(pa.int32()))})
    return docs, doc_ids, queries, table


def _search_lists(ray, docs_arg, queries):
    import settopk.ray

    dataset = ray.data.from_items([{"query_id": f"q{i}", "tokens": q} for i, q in enumerate(queries)])
    rows = settopk.ray.search(dataset, docs_arg, rows="per_query", **_RAY_POOL).take_all()
    return {r["query_id"]: (list(r["doc_id"]), list(r["overlap"])) for r in rows}


def _want_lists(docs, doc_ids, queries, k):
    want = brute_force_topk(docs, queries, len(docs), doc_ids=doc_ids)  # every doc sharing a token, ranked
    return {f"q{i}": [(d, ov) for d, ov, _ in hits] for i, hits in enumerate(want)}


def _agrees(got, want, k):
    """Each query's k rows: the oracle's ranked docs first (those sharing a token), then score-0 docs."""
    return all(list(zip(*got[q]))[: min(k, len(hits))] == hits[:k] and len(got[q][0]) == k for q, hits in want.items())


@pytest.mark.slow  # a whole search: a pool actor's start, 3-6 s on 2 shared cores
def test_ray_search_takes_a_pyarrow_table_corpus(ray_cluster):
    docs, doc_ids, queries, table = _ray_corpus()
    got = _search_lists(ray_cluster, table, queries)
    assert _agrees(got, _want_lists(docs, doc_ids, queries, 5), 5)


@pytest.mark.slow  # a whole search: a pool actor's start, 3-6 s on 2 shared cores
def test_ray_search_takes_a_dataset_corpus_of_several_blocks(ray_cluster):
    docs, doc_ids, queries, table = _ray_corpus()
    dataset = ray_cluster.data.from_arrow([table.slice(0, 60), table.slice(60)])
    got = _search_lists(ray_cluster, dataset, queries)
    assert _agrees(got, _want_lists(docs, doc_ids, queries, 5), 5)


def test_a_bad_row_of_a_table_or_dataset_corpus_is_named_by_its_row(ray_cluster):
    import settopk.ray
    from settopk.shards.inputs import InputError

    docs, doc_ids, _, table = _ray_corpus()
    nulls = table.set_column(1, "tokens", pa.array(docs[:100] + [[1, None]] + docs[101:], pa.list_(pa.int32())))
    repeats = table.set_column(0, "doc_id", pa.array(doc_ids[:120] + [doc_ids[7]] + doc_ids[121:], pa.int64()))
    data = ray_cluster.data
    for corpus, where in ((nulls, "<arrow table> row 100"), (data.from_arrow([nulls.slice(0, 60), nulls.slice(60)]), "<dataset> row 100"),
                          (repeats, "<arrow table> row 120"), (data.from_arrow([repeats.slice(0, 60), repeats.slice(60)]), "<dataset> row 120")):
        with pytest.raises(InputError, match=rf"^{where} \(0-based row\): expected"):
            settopk.ray.load_corpus(corpus, backend="numpy")
    for corpus, name in ((table.drop_columns(["doc_id"]), "<arrow table>"), (data.from_arrow(table.drop_columns(["doc_id"])), "<dataset>")):
        with pytest.raises(InputError, match=rf"^{name}: expected a column 'doc_id' of type integer"):
            settopk.ray.load_corpus(corpus, backend="numpy")
    with pytest.raises(TypeError, match="a pyarrow.Table or a ray.data.Dataset"):
        settopk.ray.load_corpus({"doc_id": [1]}, backend="numpy")


# Item 8: a query column of the wrong type raises when search is called, as a typed error.

def test_ray_search_checks_the_query_schema_when_called(ray_cluster, tmp_path):
    import pyarrow.parquet as pq

    import settopk.ray
    from settopk.errors import SettopkError

    _, _, _, table = _ray_corpus()
    pq.write_table(table, tmp_path / "docs.parquet")  # integer docs
    data = ray_cluster.data
    for queries, message in ((data.from_items([{"query_id": "a", "tokens": ["x", "y"]}]), r"^queries column 'tokens': expected a list of integer token ids"),
                             (data.from_items([{"query_id": 1.5, "tokens": [1]}]), r"^queries column 'query_id': expected string or integer ids")):
        with pytest.raises(SettopkError, match=message) as info:
            settopk.ray.search(queries, str(tmp_path / "docs.parquet"), **_RAY_POOL)
        assert isinstance(info.value, ValueError)
