"""End to end: token types of any kind give the same result as the same corpus with plain small ids
(settopk.jobs.vocabulary): the mapping changes no doc id, score or order, ties included."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from settopk.jobs import score
from settopk.jobs.output import read_manifest
from tests.job_helpers import job_config

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.slow]

_SHIFT = 10**12


def _sets(rng, n, lo, hi, max_len):
    return [sorted(rng.choice(np.arange(lo, hi), size=rng.integers(0, max_len + 1), replace=False).tolist()) for _ in range(n)]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Docs over ids 0..29, queries over 10..39: ids 0..9 are doc-only, 30..39 query-only; many ties."""
    rng = np.random.default_rng(31)
    docs = _sets(rng, 300, 0, 30, 8) + [[], list(range(30))]
    queries = _sets(rng, 30, 10, 40, 8) + [[], [35, 36, 37], list(range(10, 40))]
    return docs, queries


def _text(path, sets, f=str):
    path.write_text("".join(",".join(f(x) for x in s) + "\n" for s in sets))
    return str(path)


def _parquet(path, id_column, ids, sets, value_type, f):
    pq.write_table(pa.table({id_column: ids, "tokens": pa.array([[f(x) for x in s] for s in sets], pa.list_(value_type))}), path)
    return str(path)


def _run(tmp_path, name, docs, queries, *extra):
    out = tmp_path / f"out-{name}"
    cfg = job_config(tmp_path, name=f"c-{name}", max_len=40)
    assert score.main(["--docs", docs, "--queries", queries, "--out", str(out), "--k", "12", "--config", cfg, "--quiet", *extra]) == 0
    return out


def _rows(out):
    return pq.read_table(out).to_pydict()


def test_wide_tokens_give_the_plain_result(tmp_path, plain):
    """Text with 64-bit ids, Parquet int64/uint64/string/binary: each run's table equals the plain run's."""
    docs, queries = plain
    base = _run(tmp_path, "plain", _text(tmp_path / "d.txt", docs), _text(tmp_path / "q.txt", queries))
    expected = _rows(base)
    assert read_manifest(base)["inputs"]["tokens"] == {
        "token_kind": "integer", "dense_ids": "identity", "distinct_doc_tokens": 30, "distinct_query_tokens": 30,
        "distinct_shared_tokens": 20, "vocab_size": 65536}
    variants = {
        "text-int64": (_text(tmp_path / "d64.txt", docs, lambda x: str(x + _SHIFT)), _text(tmp_path / "q64.txt", queries, lambda x: str(x + _SHIFT))),
        "text-negative": (_text(tmp_path / "dn.txt", docs, lambda x: str(-x - 2**62)), _text(tmp_path / "qn.txt", queries, lambda x: str(-x - 2**62))),
        "parquet-uint64": (
            _parquet(tmp_path / "du.parquet", "doc_id", list(range(len(docs))), docs, pa.uint64(), lambda x: 2**64 - 1 - x),
            _parquet(tmp_path / "qu.parquet", "query_id", [str(i) for i in range(len(queries))], queries, pa.uint64(), lambda x: 2**64 - 1 - x)),
        "parquet-string": (
            _parquet(tmp_path / "ds.parquet", "doc_id", list(range(len(docs))), docs, pa.large_string(), lambda x: f"w{x}" if x else ""),
            _parquet(tmp_path / "qs.parquet", "query_id", [str(i) for i in range(len(queries))], queries, pa.string(), lambda x: f"w{x}" if x else "")),
        "parquet-binary-vs-text-small": (
            _parquet(tmp_path / "db.parquet", "doc_id", list(range(len(docs))), docs, pa.binary(), lambda x: x.to_bytes(2, "big")),
            _parquet(tmp_path / "qb.parquet", "query_id", [str(i) for i in range(len(queries))], queries, pa.binary(), lambda x: x.to_bytes(2, "big"))),
    }
    for name, (d, q) in variants.items():
        out = _run(tmp_path, name, d, q)
        assert _rows(out) == expected, name
        tokens = read_manifest(out)["inputs"]["tokens"]
        assert (tokens["distinct_doc_tokens"], tokens["distinct_query_tokens"], tokens["distinct_shared_tokens"]) == (30, 30, 20), name
        assert tokens["dense_ids"] == "shared-first", name


def test_rerun_is_a_no_op_and_self_join_maps_every_token(tmp_path, plain):
    docs, _ = plain
    d = _text(tmp_path / "d64.txt", docs, lambda x: str(x * _SHIFT))
    plain_out = tmp_path / "plain-self"
    cfg = job_config(tmp_path, name="self", max_len=40)
    assert score.main(["--self-join", "--docs", _text(tmp_path / "d.txt", docs), "--out", str(plain_out), "--config", cfg, "--quiet"]) == 0
    out = tmp_path / "wide-self"
    args = ["--self-join", "--docs", d, "--out", str(out), "--config", cfg, "--quiet"]
    assert score.main(args) == 0
    assert _rows(out) == _rows(plain_out)
    before = read_manifest(out)
    assert before["inputs"]["tokens"]["distinct_shared_tokens"] == 30
    assert score.main(args) == 0  # the finished result stands: nothing is recomputed
    assert read_manifest(out)["run_id"] == before["run_id"]


def test_shared_vocabulary_too_large_is_a_typed_error_naming_the_count(tmp_path, caplog):
    docs = [[i * 3 + _SHIFT for i in range(j * 100, j * 100 + 100)] for j in range(700)]
    d = _text(tmp_path / "d.txt", docs)
    q = _text(tmp_path / "q.txt", docs)
    out = tmp_path / "out"
    cfg = job_config(tmp_path, name="big", max_len=128)
    assert score.main(["--docs", d, "--queries", q, "--out", str(out), "--config", cfg, "--quiet"]) == 2
    assert "share 70000 distinct tokens, expected at most" in caplog.text
    assert "raise vocab_size to at least 70" in caplog.text and "--config FILE" in caplog.text
    assert not out.exists()


def test_strings_with_integers_across_inputs_exit_2_naming_files(tmp_path, caplog):
    d = _text(tmp_path / "d.txt", [[1, 2], [3]])
    q = _parquet(tmp_path / "q.parquet", "query_id", ["a"], [["x"]], pa.string(), str)
    out = tmp_path / "out"
    assert score.main(["--docs", d, "--queries", q, "--out", str(out), "--config", job_config(tmp_path), "--quiet"]) == 2
    assert "q.parquet" in caplog.text and "d.txt" in caplog.text and not out.exists()


@pytest.mark.timeout(300)
def test_killed_run_with_string_tokens_resumes_to_the_plain_result(tmp_path):
    """SIGKILL mid-run on string tokens, then the same arguments resume; the result equals the
    plain-id run's and an uninterrupted run's, part for part."""
    import shutil

    from tests.job_helpers import kill_driver_mid_run

    rng = np.random.default_rng(5)
    docs = _sets(rng, 300, 0, 30, 8)
    queries = _sets(rng, 200, 10, 40, 8)
    ids = [f"q{i:03d}" for i in range(len(queries))]
    d = _parquet(tmp_path / "d.parquet", "doc_id", list(range(len(docs))), docs, pa.string(), lambda x: f"w{x}")
    q = _parquet(tmp_path / "q.parquet", "query_id", ids, queries, pa.string(), lambda x: f"w{x}")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("backend: numpy\nn_shards: 2\ncpus_per_shard: 0.5\nquery_batch_size: 5\nquery_chunk_size: 20\nmax_len: 40\n")
    args = ["--docs", d, "--queries", q, "--k", "10", "--config", str(cfg), "--run-id", "tok-1", "--quiet"]
    out = tmp_path / "out"
    committed = kill_driver_mid_run(args, out)
    assert committed >= 3
    assert score.main(args + ["--out", str(out)]) == 0
    assert read_manifest(out)["counts"]["chunks_resumed"] >= committed - 1
    clean = tmp_path / "clean"
    assert score.main(args + ["--out", str(clean)]) == 0
    assert pq.read_table(out).equals(pq.read_table(clean))
    plain = tmp_path / "plain"
    pd = _parquet(tmp_path / "pd.parquet", "doc_id", list(range(len(docs))), docs, pa.int64(), int)
    pq_ = _parquet(tmp_path / "pq.parquet", "query_id", ids, queries, pa.int64(), int)
    assert score.main(["--docs", pd, "--queries", pq_, "--out", str(plain), "--k", "10", "--config", str(cfg), "--quiet"]) == 0
    assert _rows(out) == _rows(plain)
    shutil.rmtree(plain)
