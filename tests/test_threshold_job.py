"""``--threshold T`` end to end (issue 32): ``settopk.jobs.score.main`` on the session's Ray cluster
against :func:`settopk.kernels.brute_force_threshold`, on every backend (cupy on the GPU machine), with and
without ``--k``, on two shards, the self-join's rules, resume, no-op rerun and refusals."""

from __future__ import annotations

import logging
from fractions import Fraction

import numpy as np
import pytest

from settopk.jobs import run as job_run
from settopk.jobs import score as job
from settopk.jobs.output import read_manifest, work_dir
from settopk.kernels import SCORES, brute_force_threshold
from tests.job_helpers import job_config, result_rows, score_apart, write_sets

pytestmark = pytest.mark.usefixtures("ray_cluster")


def _config(tmp_path, name="c", **values):
    return job_config(tmp_path, name, **{"n_shards": 2, "query_batch_size": 7, **values})


def _expected(docs, queries, threshold, score, k=None, self_join=None):
    """The oracle's rows; ``self_join``: None, ``"exclude"`` or ``"include"`` (queries = docs, ids = positions)."""
    rows = []
    size = [len(set(d)) for d in docs]
    for qi, (q, pairs) in enumerate(zip(queries, brute_force_threshold(docs, queries, threshold, score=score))):
        if self_join is not None:  # symmetric scores: each pair under its shorter doc, the lower id at equal lengths
            pairs = [p for p in pairs if (p[0] != qi or self_join == "include")
                     and (score == "containment" or (size[p[0]], p[0]) >= (size[qi], qi))]
        if k is not None:
            pairs = pairs[:k]
        ql = len(set(q))
        rows += [(str(qi), rank, d, score_apart(o, ql, dl, score), o, ql, dl) for rank, (d, o, dl) in enumerate(pairs, 1)]
    return rows


def _achievable(docs, queries, score) -> list[Fraction]:
    """Scores some (query, doc) pair reaches exactly, as fractions (thresholds landing on ties)."""
    values = set()
    for q in queries[:6]:
        for d in docs[:60]:
            qs, ds = set(q), set(d)
            o, ql, dl = len(qs & ds), len(qs), len(ds)
            num, den = {"braun_blanquet": (o, max(ql, dl)), "jaccard": (o, ql + dl - o), "dice": (2 * o, ql + dl),
                        "containment": (o, ql), "overlap": (o, 1), "cosine": (o * o, ql * dl)}[score]
            if den and num:
                values.add(Fraction(num, den))
    if score == "cosine":  # the threshold T compares T^2 <= o^2 / (ql dl): take exact squares only
        values = {v for v in values if _is_square(v)}
        return sorted(Fraction(_isqrt(v.numerator), _isqrt(v.denominator)) for v in values)
    return sorted(values)


def _isqrt(n: int) -> int:
    import math

    return math.isqrt(n)


def _is_square(v: Fraction) -> bool:
    return _isqrt(v.numerator) ** 2 == v.numerator and _isqrt(v.denominator) ** 2 == v.denominator


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Small vocab (ties under every score), empty sets, a repeated id, identical sets, lengths 0..9 and 40."""
    rng = np.random.default_rng(32)
    tmp = tmp_path_factory.mktemp("threshold")
    docs = [rng.choice(10, size=int(rng.integers(0, 8)), replace=False).tolist() for _ in range(150)]
    docs += [[], [0, 65535], list(range(40)), list(range(40)), [1, 2, 3], [3, 2, 1]]
    queries = [rng.choice(10, size=int(rng.integers(0, 8)), replace=False).tolist() for _ in range(20)]
    queries += [[], [3, 1, 3], list(range(40))]
    return docs, queries, write_sets(tmp / "docs.txt", docs), write_sets(tmp / "q.txt", queries)


def _run(tmp_path, corpus_files, out, *extra, backend="numpy", **cfg) -> int:
    docs_path, queries_path = corpus_files
    inputs = ["--docs", docs_path] + ([] if "--self-join" in extra else ["--queries", queries_path])
    if backend == "cupy":
        cfg.setdefault("gpus_per_shard", 0.5)  # two shards share the GPU machine's one GPU
    return job.main(inputs + ["--out", str(out), "--config", _config(tmp_path, backend=backend, **cfg), "--quiet", *extra])


@pytest.mark.parametrize("score", [s if s == "jaccard" else pytest.param(s, marks=pytest.mark.slow) for s in SCORES])
def test_every_score_at_an_achievable_threshold_matches_the_oracle(tmp_path, corpus, score):
    """Two shards (the length filter sends each batch to the shards it can reach); T falls exactly on
    a score some pairs reach, so the ties at T must pass; with --k the first k of each query."""
    docs, queries, *files = corpus
    values = _achievable(docs, queries, score)
    t = values[len(values) // 2] if score != "overlap" else Fraction(3)
    text = f"{t.numerator}/{t.denominator}" if t.denominator != 1 else str(t.numerator)
    out = tmp_path / "out"
    assert _run(tmp_path, files, out, "--threshold", text, "--score", score) == 0
    expected = _expected(docs, queries, t, score)
    assert result_rows(out) == expected and any(row[3] == float(t) for row in expected)  # ties at T are in
    manifest = read_manifest(out)
    assert manifest["threshold"]["T"] == text and manifest["threshold"]["k_cap"] is None
    assert manifest["counts"]["pairs"] == len(expected) and manifest["counts"]["k"] is None
    assert _run(tmp_path, files, tmp_path / "k", "--threshold", text, "--score", score, "--k", "3") == 0
    assert result_rows(tmp_path / "k") == _expected(docs, queries, t, score, k=3)


@pytest.mark.parametrize("backend", [pytest.param(b, marks=pytest.mark.slow) for b in ("cpu", "numpy")]
                         + [pytest.param("cupy", marks=pytest.mark.gpu)])
def test_t0_and_t1_on_every_backend(tmp_path, corpus, backend):
    """T = 0: every (query, doc) pair, more than the config's k = 100 for each query (no silent cap);
    T = 1: the identical sets only (jaccard)."""
    docs, queries, *files = corpus
    assert _run(tmp_path, files, tmp_path / "t0", "--threshold", "0", "--score", "jaccard", backend=backend) == 0
    rows = result_rows(tmp_path / "t0")
    assert rows == _expected(docs, queries, Fraction(0), "jaccard") and len(rows) == len(docs) * len(queries)
    assert _run(tmp_path, files, tmp_path / "t1", "--threshold", "1", "--score", "jaccard", backend=backend) == 0
    assert result_rows(tmp_path / "t1") == _expected(docs, queries, Fraction(1), "jaccard")
    assert read_manifest(tmp_path / "t1")["backend"] == backend


@pytest.mark.parametrize("score", ["jaccard", pytest.param("containment", marks=pytest.mark.slow)])
def test_self_join_writes_unordered_pairs_once_and_containment_ordered(tmp_path, corpus, score):
    docs, _, *files = corpus
    t = Fraction(1, 2)
    out = tmp_path / "out"
    assert _run(tmp_path, files, out, "--self-join", "--threshold", "0.5", "--score", score, backend="cpu") == 0
    assert result_rows(out) == _expected(docs, docs, t, score, self_join="exclude")
    rule = read_manifest(out)["threshold"]["self_join_rule"]
    assert rule.startswith("ordered") == (score == "containment")
    assert _run(tmp_path, files, tmp_path / "inc", "--self-join", "--include-self", "--threshold", "0.5", "--k", "4",
                "--score", score) == 0
    assert result_rows(tmp_path / "inc") == _expected(docs, docs, t, score, k=4, self_join="include")


@pytest.mark.slow
def test_interrupted_run_resumes_then_reruns_as_a_no_op_and_another_t_is_refused(tmp_path, corpus, monkeypatch, caplog):
    docs, queries, *files = corpus
    out = tmp_path / "out"
    args = ("--threshold", "0.4", "--score", "dice", "--tsv", str(tmp_path / "r.tsv"))

    def interrupt(*a, **kw):
        raise RuntimeError("interrupted before the commit")

    with monkeypatch.context() as m:
        m.setattr(job_run, "check_parts", interrupt)
        assert _run(tmp_path, files, out, *args, query_chunk_size=8) == 1
    assert len(list(work_dir(out).glob("part-*.parquet"))) == 3
    assert _run(tmp_path, files, out, *args, query_chunk_size=8) == 0
    expected = _expected(docs, queries, Fraction(2, 5), "dice")
    assert result_rows(out) == expected
    manifest = read_manifest(out)
    assert manifest["counts"]["chunks_resumed"] == 3 and manifest["counts"]["rows"] == len(expected)
    lines = (tmp_path / "r.tsv").read_text().split("\n")[:-1]
    assert len(lines) == len(queries)
    assert lines == ["\t".join(str(r[2]) for r in expected if r[0] == str(qi)) for qi in range(len(queries))]
    run_id = manifest["run_id"]
    assert _run(tmp_path, files, out, *args, query_chunk_size=8) == 0  # no-op
    assert read_manifest(out)["run_id"] == run_id
    with caplog.at_level(logging.ERROR, logger="settopk"):
        assert _run(tmp_path, files, out, "--threshold", "0.5", "--score", "dice", query_chunk_size=8) == 2
    assert "threshold ('2/5' there, '1/2' now)" in caplog.text
    with caplog.at_level(logging.ERROR, logger="settopk"):  # a cap is another result too
        assert _run(tmp_path, files, out, *args, "--k", "2", query_chunk_size=8) == 2
    assert "k (32767 there, 2 now)" in caplog.text
    assert read_manifest(out)["run_id"] == run_id


@pytest.mark.gpu
@pytest.mark.parametrize("score", SCORES)
def test_cupy_threshold_self_join_and_dedup_match_the_oracle(tmp_path, corpus, score):
    """The GPU backend on two shards: the self-join's pairs at a threshold on achievable scores
    (ties at T), with and without --k, and --dedup's groups, equal to the oracle's."""
    docs, _, *files = corpus
    values = _achievable(docs, docs, score)
    t = values[len(values) // 2] if score != "overlap" else Fraction(3)
    text = f"{t.numerator}/{t.denominator}" if t.denominator != 1 else str(t.numerator)
    out = tmp_path / "out"
    assert _run(tmp_path, files, out, "--self-join", "--threshold", text, "--score", score, backend="cupy") == 0
    expected = _expected(docs, docs, t, score, self_join="exclude")
    assert result_rows(out) == expected and read_manifest(out)["backend"] == "cupy"
    assert _run(tmp_path, files, tmp_path / "k", "--threshold", text, "--score", score, "--k", "2",
                backend="cupy") == 0
    assert result_rows(tmp_path / "k") == _expected(docs, corpus[1], t, score, k=2)
    if score == "jaccard":
        dedup = tmp_path / "dedup"
        assert _run(tmp_path, files, dedup, "--self-join", "--threshold", text, "--score", score, "--dedup",
                    backend="cupy") == 0
        group = _union_find_groups(len(docs), [(int(r[0]), r[2]) for r in expected])
        (groups, _dups), pairs = _dedup_outputs(dedup)
        assert pairs == expected and {g["doc_id"]: g["group_id"] for g in groups} == group


@pytest.mark.slow
def test_a_query_with_more_pairs_than_the_rank_column_holds_is_refused_by_name(tmp_path, caplog):
    """No silent truncation: 32,768 docs pass T = 0 for the one query (exit 2: a rerun fails the same
    way); --k caps it instead."""
    docs = [[i % 7] for i in range(32_768)]
    files = (write_sets(tmp_path / "d.txt", docs), write_sets(tmp_path / "q.txt", [[1]]))
    out = tmp_path / "out"
    with caplog.at_level(logging.ERROR, logger="settopk"):
        assert _run(tmp_path, files, out, "--threshold", "0", n_shards=1, query_batch_size=1) == 2
    assert "query '0' has more than 32767 pairs" in caplog.text and "raise --threshold" in caplog.text
    assert not out.exists()
    assert _run(tmp_path, files, out, "--threshold", "0", "--k", "5", n_shards=1) == 0
    assert [r[2] for r in result_rows(out)] == [1, 8, 15, 22, 29]


def _union_find_groups(n_docs: int, pairs) -> dict[int, int]:
    """doc -> least doc id of its group, for every doc in a pair with another (a plain union-find)."""
    parent = list(range(n_docs))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    seen = set()
    for a, b in pairs:
        if a != b:
            seen.update((a, b))
            ra, rb = find(a), find(b)
            parent[max(ra, rb)] = min(ra, rb)  # the root stays the least id
    return {d: find(d) for d in sorted(seen)}


def _dedup_outputs(out):
    import pyarrow.parquet as pq

    return tuple(pq.read_table(out / name).to_pylist() for name in ("groups", "duplicates")), result_rows(out / "pairs")


@pytest.mark.slow
def test_dedup_groups_match_a_union_find_on_both_backends_and_layouts(tmp_path, corpus):
    """Pairs, groups and duplicates committed together; the same bytes' worth of rows on cpu and numpy,
    on one and two shards; a rerun is a no-op, a rerun without --dedup is another result."""
    docs, _, *files = corpus
    t = Fraction(3, 5)
    oracle = _expected(docs, docs, t, "jaccard", self_join="exclude")
    group = _union_find_groups(len(docs), [(int(r[0]), r[2]) for r in oracle])
    want_groups = [{"doc_id": d, "group_id": g, "group_size": sum(1 for x in group.values() if x == g)}
                   for d, g in group.items()]
    want_dups = [{"doc_id": d, "kept_doc_id": g} for d, g in group.items() if d != g]
    seen = []
    for backend, shards in (("cpu", 2), ("numpy", 1)):
        out = tmp_path / f"{backend}{shards}"
        assert _run(tmp_path, files, out, "--self-join", "--threshold", "0.6", "--score", "jaccard", "--dedup",
                    backend=backend, n_shards=shards) == 0
        for name in ("pairs", "groups", "duplicates", "_SUCCESS"):
            assert (out / name).exists()
        assert all((out / name / "_SUCCESS").exists() for name in ("pairs", "groups", "duplicates"))
        (groups, dups), pairs = _dedup_outputs(out)
        assert pairs == oracle and groups == want_groups and dups == want_dups
        assert len(want_dups) > 0 and any(g["group_size"] > 2 for g in groups)  # transitive groups are exercised
        manifest = read_manifest(out)
        assert manifest["dedup"]["duplicates"] == len(want_dups) and manifest["counts"]["pairs"] == len(oracle)
        # Shards group their own docs (cpu: its self-join's groups and pairs of groups; numpy: its
        # index verifies the pairs of groups): only the pairs across the two cpu shards are read
        # back, none from numpy's one shard.
        assert manifest["dedup"]["shards_from_groups"] == ([0, 1] if backend == "cpu" else [0])
        assert manifest["dedup"]["edges"] < len(oracle) and (manifest["dedup"]["edges"] == 0) == (backend == "numpy")
        seen.append(_dedup_outputs(out))
    assert seen[0] == seen[1]
    run_id = read_manifest(out)["run_id"]
    assert _run(tmp_path, files, out, "--self-join", "--threshold", "0.6", "--score", "jaccard", "--dedup", n_shards=1) == 0
    assert read_manifest(out)["run_id"] == run_id  # no-op
    assert _run(tmp_path, files, out, "--self-join", "--threshold", "0.6", "--score", "jaccard", n_shards=1) == 2


@pytest.mark.parametrize("extra", [("--threshold", "0.5"), ("--self-join",)])
def test_dedup_without_a_threshold_self_join_exits_2(tmp_path, corpus, caplog, extra):
    _, _, *files = corpus
    with caplog.at_level(logging.ERROR, logger="settopk"):
        assert _run(tmp_path, files, tmp_path / "out", "--dedup", *extra) == 2
    assert "--dedup groups the pairs of a threshold self-join" in caplog.text and not (tmp_path / "out").exists()
