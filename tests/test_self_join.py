"""Self-join (``--self-join``): every doc a query against the corpus, its own doc left out unless
``--include-self``; the docs-as-queries stream, the exact exclusion, resume, and the bad-argument exits."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from settopk.jobs import score as job
from settopk.jobs.output import read_manifest, rejected_path, work_dir
from settopk.kernels import TopK, brute_force_topk
from settopk.shards import drop_own_docs
from settopk.shards.inputs import DocQueryStream, InputError, SetLimits, read_corpus
from tests.job_helpers import job_config, kill_driver_mid_run, result_rows as _rows, score_apart as _value, write_sets as _write

LIMITS = SetLimits(vocab_size=60, max_len=10)


def _config(tmp_path, name="c", **values):
    return job_config(tmp_path, name, **{"n_shards": 2, "query_batch_size": 7, **values})


def _expected_self_join(docs, doc_ids, k, score="braun_blanquet", include_self=False):
    """Oracle rows: each doc searched by brute force against the corpus, or against the corpus
    without itself (not through the job's k + 1 and drop)."""
    rows = []
    for i, (own, q) in enumerate(zip(doc_ids, docs)):
        others = [j for j in range(len(docs)) if include_self or j != i]
        result = brute_force_topk([docs[j] for j in others], [q], k, doc_ids=[doc_ids[j] for j in others], score=score)[0]
        ql = len(set(q))
        rows += [(str(own), rank, d, _value(o, ql, dl, score), o, ql, dl) for rank, (d, o, dl) in enumerate(result, start=1)]
    return rows


def _tie_docs(seed=21, n=120):
    """Small vocab (ties everywhere), empty docs, and exact duplicates of some docs, so a doc's
    own entry ties with another doc's (the exclusion must remove the right one)."""
    rng = np.random.default_rng(seed)
    docs = [rng.choice(9, size=int(rng.integers(0, 6)), replace=False).tolist() for _ in range(n)]
    docs += [[], [], docs[3], docs[3], docs[10], [0, 59], list(range(10))]
    docs[7] = [4, 2, 4]  # unsorted, with a repeated id
    return docs


# --------------------------------------------------------------------------------------------------
# The exclusion


def test_drop_own_docs_gives_the_top_k_of_the_corpus_without_the_doc():
    rng = np.random.default_rng(2)
    for trial in range(30):
        n = int(rng.integers(2, 14))
        docs = [rng.choice(5, size=int(rng.integers(0, 4)), replace=False).tolist() for _ in range(n)]
        docs[int(rng.integers(n))] = list(docs[0])  # a duplicate: the own doc ties with another
        k = int(rng.integers(1, n + 3))  # k + 1 beyond n_docs pads rows with -1
        full = brute_force_topk(docs, docs, k + 1)
        ids = np.full((n, k + 1), -1, np.int64)
        overlap, doc_len = np.zeros((n, k + 1), np.int16), np.zeros((n, k + 1), np.int16)
        for q, result in enumerate(full):
            for r, (d, o, dl) in enumerate(result):
                ids[q, r], overlap[q, r], doc_len[q, r] = d, o, dl
        got = drop_own_docs(TopK(ids, overlap, doc_len), np.arange(n))
        assert got.doc_ids.shape == (n, k)
        for q in range(n):
            others = [j for j in range(n) if j != q]
            want = brute_force_topk([docs[j] for j in others], [docs[q]], k, doc_ids=others)[0]
            width = len(want)
            assert [(int(d), int(o), int(dl)) for d, o, dl in zip(got.doc_ids[q, :width], got.overlap[q, :width], got.doc_len[q, :width])] == want
            assert (got.doc_ids[q, width:] == -1).all() and width == min(k, n - 1)


def test_drop_own_docs_refuses_mismatched_shapes():
    topk = TopK(np.zeros((2, 3), np.int64), np.zeros((2, 3), np.int16), np.zeros((2, 3), np.int16))
    with pytest.raises(ValueError, match="one own id per row"):
        drop_own_docs(topk, np.arange(3))


# --------------------------------------------------------------------------------------------------
# The docs-as-queries stream


def _streamed(stream, chunk_size):
    chunks = list(stream.chunks(chunk_size))
    assert all(len(ids) == chunk_size for ids, _ in chunks[:-1]) and all(len(ids) == b.n_sets for ids, b in chunks)
    return [q for ids, _ in chunks for q in ids], [s for _, batch in chunks for s in batch.to_lists()]


def _same_as_corpus(path, on_invalid, chunk_size):
    want = read_corpus(path, LIMITS, on_invalid=on_invalid)
    stream = DocQueryStream(path, LIMITS, on_invalid=on_invalid)
    assert (stream.n_queries, stream.n_with_repeats, stream.fmt, stream.files) == (len(want.doc_ids), want.n_with_repeats, want.fmt, want.files)
    assert stream.rejected == want.rejected
    ids, sets = _streamed(stream, chunk_size)
    by_id = dict(zip(want.doc_ids.tolist(), want.docs.to_lists()))
    assert sorted(int(q) for q in ids) == want.doc_ids.tolist() and len(set(ids)) == len(ids)
    assert all(by_id[int(q)] == s for q, s in zip(ids, sets))
    return ids


@pytest.mark.timeout(60)
@pytest.mark.parametrize("chunk_size", [1, 7, 1000])
def test_text_corpus_streams_as_its_docs_with_the_same_rejects(tmp_path, chunk_size):
    rng = np.random.default_rng(4)
    sets = [rng.integers(0, 50, int(rng.integers(0, 11))).tolist() for _ in range(90)]
    path = _write(tmp_path / "docs.txt", sets)
    assert _same_as_corpus(path, "error", chunk_size) == [str(i) for i in range(90)]
    lines = (tmp_path / "docs.txt").read_text().splitlines()
    lines[5], lines[40], lines[89] = "1,x", "7.0", ",".join(map(str, range(11)))
    bad = tmp_path / "bad.txt"
    bad.write_text("".join(line + "\n" for line in lines))
    ids = _same_as_corpus(str(bad), "quarantine", chunk_size)
    assert ids == [str(i) for i in range(90) if i not in (5, 40, 89)]  # line numbers keep their docs' ids
    with pytest.raises(InputError) as stream_error:
        DocQueryStream(str(bad), LIMITS)
    with pytest.raises(InputError) as corpus_error:
        read_corpus(str(bad), LIMITS)
    assert str(stream_error.value) == str(corpus_error.value) and stream_error.value.line == 6


@pytest.mark.timeout(60)
@pytest.mark.parametrize("chunk_size", [1, 5, 1000])
def test_parquet_corpus_streams_in_read_order_dropping_repeated_ids_as_the_readers_do(tmp_path, chunk_size):
    rng = np.random.default_rng(8)
    n = 80
    ids = rng.permutation(1000)[:n].astype(np.int64)  # unordered, sparse
    ids[30], ids[55], ids[70] = ids[2], ids[2], ids[40]  # repeats across row groups and files
    sets = [rng.integers(0, 50, int(rng.integers(0, 11))).tolist() for _ in range(n)]
    sets[12] = [3, None]  # a null token
    root = tmp_path / "docs"
    root.mkdir()
    for f, (lo, hi) in enumerate([(0, 33), (33, 60), (60, 80)]):
        pq.write_table(pa.table({"doc_id": ids[lo:hi], "tokens": pa.array(sets[lo:hi], pa.list_(pa.int32()))}),
                       root / f"part-{f}.parquet", row_group_size=8)
    got = _same_as_corpus(str(root), "quarantine", chunk_size)
    kept = [i for i in range(n) if i not in (12, 30, 55, 70)]
    assert got == [str(ids[i]) for i in kept]  # read order: files, then rows
    with pytest.raises(InputError) as stream_error:
        DocQueryStream(str(root), LIMITS)
    assert stream_error.value.row == 12 and "token ids without nulls" in str(stream_error.value)
    sets[12] = [3]  # now the first problem is the repeated doc_id, as read_corpus reports it
    pq.write_table(pa.table({"doc_id": ids[0:33], "tokens": pa.array(sets[0:33], pa.list_(pa.int32()))}), root / "part-0.parquet", row_group_size=8)
    with pytest.raises(InputError) as stream_error:
        DocQueryStream(str(root), LIMITS)
    with pytest.raises(InputError) as corpus_error:
        read_corpus(str(root), LIMITS)
    assert str(stream_error.value) == str(corpus_error.value) and f"doc_id {ids[2]} again" in str(stream_error.value)


# --------------------------------------------------------------------------------------------------
# The job


@pytest.fixture(scope="module")
def tie_corpus(tmp_path_factory):
    docs = _tie_docs()
    return docs, _write(tmp_path_factory.mktemp("selfjoin") / "docs.txt", docs)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("score", ["jaccard"] + [pytest.param(s, marks=pytest.mark.slow) for s in ("braun_blanquet", "cosine", "overlap")])
def test_self_join_excluding_self_matches_the_oracle(tmp_path, ray_cluster, tie_corpus, score):
    """Two shards, the threshold exchange on (numpy's auto), chunks of 40 queries: each doc's
    rows are the top-k of the corpus without it, ties and duplicates of itself included."""
    docs, docs_path = tie_corpus
    out = tmp_path / "out"
    args = ["--self-join", "--docs", docs_path, "--out", str(out), "--k", "12", "--score", score,
            "--config", _config(tmp_path, query_chunk_size=40), "--quiet"]
    assert job.main(args) == 0
    rows = _rows(out)
    assert rows == _expected_self_join(docs, list(range(len(docs))), 12, score)
    assert all(query_id != str(doc_id) for query_id, _, doc_id, *_ in rows)
    manifest = read_manifest(out)
    assert manifest["inputs"]["queries"]["self_join"] is True and manifest["inputs"]["queries"]["include_self"] is False
    assert manifest["config"]["self_join"] is True and manifest["output"]["parts"] == 4
    counts = manifest["counts"]
    assert counts["n_queries"] == counts["n_docs"] == len(docs) and counts["rows"] == len(rows) == len(docs) * 12


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_include_self_keeps_each_doc_in_its_own_results(tmp_path, ray_cluster, tie_corpus):
    docs, docs_path = tie_corpus
    cfg = _config(tmp_path, n_shards=1, threshold_exchange="false")
    out = tmp_path / "out"
    assert job.main(["--self-join", "--include-self", "--docs", docs_path, "--out", str(out), "--k", "6", "--config", cfg, "--quiet"]) == 0
    assert _rows(out) == _expected_self_join(docs, list(range(len(docs))), 6, include_self=True)
    assert read_manifest(out)["inputs"]["queries"]["include_self"] is True


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_k_at_least_n_docs_gives_every_other_doc(tmp_path, ray_cluster):
    docs = [[1, 2], [2], [], [1, 2], [7]]
    path = _write(tmp_path / "docs.txt", docs)
    for include, per_query in ((False, 4), (True, 5)):
        out, tsv = tmp_path / f"out{include}", tmp_path / f"r{include}.tsv"
        args = ["--self-join", "--docs", path, "--out", str(out), "--k", "5", "--config", _config(tmp_path, query_chunk_size=2),
                "--tsv", str(tsv), "--quiet"] + (["--include-self"] if include else [])
        assert job.main(args) == 0
        rows = _rows(out)
        assert rows == _expected_self_join(docs, list(range(5)), 5, include_self=include) and len(rows) == 5 * per_query
        assert read_manifest(out)["counts"]["rows_per_query"] == per_query
        lines = tsv.read_text().splitlines()
        assert len(lines) == 5 and all(len(line.split("\t")) == per_query for line in lines)
    assert (tmp_path / "rFalse.tsv").read_text().splitlines()[0] == "3\t1\t2\t4"  # doc 0: its duplicate 3 first


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_parquet_self_join_with_quarantined_and_repeated_docs(tmp_path, ray_cluster):
    """Query ids are the doc ids the readers keep: bad rows and later repeats of a doc_id are
    neither docs nor queries, and the rejects are listed once."""
    rng = np.random.default_rng(6)
    n = 60
    ids = rng.permutation(500)[:n].astype(np.int64)
    ids[45] = ids[4]
    sets = [rng.choice(8, size=int(rng.integers(0, 5)), replace=False).tolist() for _ in range(n)]
    sets[20] = [1, None]  # a null token
    root = tmp_path / "docs"
    root.mkdir()
    for f, (lo, hi) in enumerate([(0, 30), (30, 60)]):
        pq.write_table(pa.table({"doc_id": ids[lo:hi], "tokens": pa.array(sets[lo:hi], pa.list_(pa.int64()))}),
                       root / f"p{f}.parquet", row_group_size=10)
    out = tmp_path / "out"
    cfg = _config(tmp_path, on_invalid="quarantine", query_chunk_size=16)
    assert job.main(["--self-join", "--docs", str(root), "--out", str(out), "--k", "8", "--config", cfg, "--quiet"]) == 0
    kept = [i for i in range(n) if i not in (20, 45)]
    expected = _expected_self_join([sets[i] for i in kept], [int(ids[i]) for i in kept], 8)
    rows = _rows(out)
    by_query = {}
    for row in rows:
        by_query.setdefault(row[0], []).append(row)
    assert list(by_query) == [str(ids[i]) for i in kept]  # read order
    assert sorted(rows) == sorted(expected)
    manifest = read_manifest(out)
    assert manifest["counts"]["rejected_docs"] == 2 and manifest["counts"]["rejected_queries"] == 0
    rejected = pq.read_table(rejected_path(out)).to_pydict()
    assert rejected["input"] == ["docs", "docs"] and sorted(rejected["row"]) == [15, 20]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_self_join_runs_on_the_synthetic_corpus(tmp_path, ray_cluster):
    cfg = tmp_path / "c.yaml"
    cache = tmp_path / "cache"
    cfg.write_text("backend: numpy\nn_shards: 1\ncpus_per_shard: 0.5\nself_join: true\nmax_len: 16\n"
                   f"synthetic:\n  n_docs: 300\n  n_queries: 5\n  vocab_size: 40\n  cache_dir: {cache}\n")
    out = tmp_path / "out"
    assert job.main(["--out", str(out), "--k", "4", "--config", str(cfg), "--quiet"]) == 0
    corpus = read_corpus(next(cache.rglob("docs.parquet")), SetLimits(max_len=16))
    table = pq.read_table(out)
    assert table.num_rows == 300 * 4 and table["query_id"].unique().to_pylist() == [str(i) for i in corpus.doc_ids.tolist()]
    assert _rows(out) == _expected_self_join(corpus.docs.to_lists(), corpus.doc_ids.tolist(), 4)


@pytest.mark.timeout(120)
def test_dry_run_says_self_join_and_writes_nothing(tmp_path, ray_cluster, tie_corpus, capsys):
    _, docs_path = tie_corpus
    out = tmp_path / "out"
    assert job.main(["--self-join", "--docs", docs_path, "--out", str(out), "--config", _config(tmp_path), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "self-join: every doc is a query, each doc left out of its own results" in printed and f"output: {out}" in printed
    assert not out.exists() and not work_dir(out).exists()


@pytest.mark.timeout(120)
def test_bad_self_join_arguments_exit_2_and_write_nothing(tmp_path, ray_cluster, tie_corpus, caplog):
    _, docs_path = tie_corpus
    one = _write(tmp_path / "one.txt", [[1, 2]])
    out = tmp_path / "out"
    cases = [
        (["--self-join", "--docs", docs_path, "--queries", docs_path], "a self-join takes its queries from the corpus (--docs); drop --queries"),
        (["--include-self", "--docs", docs_path, "--queries", docs_path], "include_self: true needs self_join: true"),
        (["--docs", docs_path, "--queries", docs_path, "--config", _config(tmp_path, "sj", self_join="true")], "drop --queries"),
        (["--self-join", "--docs", one], "self-join needs at least 2 docs (each doc is searched against the others), found 1"),
        (["--self-join", "--docs", str(tmp_path / "missing.txt")], "missing.txt: expected an existing file or directory"),
    ]
    for extra, message in cases:
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="settopk"):
            args = extra + ["--out", str(out), "--quiet"] + ([] if "--config" in extra else ["--config", _config(tmp_path)])
            assert job.main(args) == 2, extra
        assert message in caplog.text, (extra, caplog.text)
        assert not out.exists() and not work_dir(out).exists()
    with pytest.raises(SystemExit) as err:  # self_join is a flag: no value
        job.main(["--self-join=yes", "--docs", docs_path])
    assert err.value.code == 2
    # One doc is fine where it is its own result.
    assert job.main(["--self-join", "--include-self", "--docs", one, "--out", str(out), "--config", _config(tmp_path), "--quiet"]) == 0
    assert _rows(out) == [("0", 1, 0, 1.0, 2, 2, 2)]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_killed_self_join_resumes_to_an_identical_result(tmp_path, ray_cluster):
    """SIGKILL mid-run, then the same arguments resume; --include-self or --force on the
    interrupted work start over (the settings are in the resume key)."""
    n_docs = 400
    rng = np.random.default_rng(9)
    docs = [rng.choice(30, size=int(rng.integers(0, 10)), replace=False).tolist() for _ in range(n_docs)]
    docs_path = _write(tmp_path / "docs.txt", docs)
    n_parts = n_docs // 25  # query_chunk_size 25: the kill lands with most parts still to come
    cfg = tmp_path / "c.yaml"
    cfg.write_text("backend: numpy\nn_shards: 2\ncpus_per_shard: 0.5\nquery_batch_size: 5\nquery_chunk_size: 25\n")
    args = ["--self-join", "--docs", docs_path, "--k", "10", "--config", str(cfg), "--run-id", "sj-1", "--quiet"]
    out = tmp_path / "out"
    committed = kill_driver_mid_run(args, out)
    work = work_dir(out)
    assert 3 <= committed < n_parts
    interrupted = tmp_path / "interrupted"
    shutil.copytree(work, interrupted)

    assert job.main(args + ["--out", str(out)]) == 0  # same arguments: resume
    manifest = read_manifest(out)
    assert manifest["counts"]["chunks_resumed"] >= committed - 1 and manifest["run_id"] == "sj-1"
    clean = tmp_path / "clean"
    assert job.main(args + ["--out", str(clean)]) == 0
    assert pq.read_table(out).equals(pq.read_table(clean)) and pq.read_table(out).num_rows == n_docs * 10
    parts = sorted(p.name for p in out.glob("part-*.parquet"))
    assert parts == sorted(p.name for p in clean.glob("part-*.parquet")) and len(parts) == n_parts
    for name in parts:
        assert (out / name).read_bytes() == (clean / name).read_bytes()
    assert _rows(out) == _expected_self_join(docs, list(range(n_docs)), 10)

    # The interrupted work again, now with --include-self: other results, so nothing is reused.
    shutil.copytree(interrupted, work)
    assert job.main(args + ["--out", str(out), "--include-self", "--force"]) == 0
    manifest = read_manifest(out)
    assert manifest["counts"]["chunks_resumed"] == 0 and manifest["config"]["include_self"] is True
    assert _rows(out) == _expected_self_join(docs, list(range(n_docs)), 10, include_self=True)
    # --force with the arguments of the interrupted run resumes its parts and rewrites the result.
    shutil.copytree(interrupted, work)
    assert job.main(args + ["--out", str(out), "--force"]) == 0
    assert read_manifest(out)["counts"]["chunks_resumed"] == committed
    assert pq.read_table(out).equals(pq.read_table(clean))


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_cupy_self_join_matches_the_oracle(tmp_path, ray_cluster, tie_corpus):
    docs, docs_path = tie_corpus
    for include in (False, True):
        out = tmp_path / f"out{include}"
        cfg = _config(tmp_path, f"g{include}", backend="cupy", n_shards=1, gpus_per_shard=1.0, cpus_per_shard=0.5, query_chunk_size=40)
        args = ["--self-join", "--docs", docs_path, "--out", str(out), "--k", "12", "--config", cfg, "--quiet"]
        assert job.main(args + (["--include-self"] if include else [])) == 0
        assert read_manifest(out)["backend"] == "cupy"
        assert _rows(out) == _expected_self_join(docs, list(range(len(docs))), 12, include_self=include)
