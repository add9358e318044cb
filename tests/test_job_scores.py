"""``score`` / ``--score`` end to end: ``settopk.jobs.score.main`` on a local Ray cluster against the oracle,
the output's score column and metadata, the manifest, bad names, and resume across scores."""

from __future__ import annotations

import logging

import numpy as np
import pyarrow.parquet as pq
import pytest

from settopk.jobs import run as job_run
from settopk.jobs import score as job
from settopk.jobs.output import read_manifest, work_dir
from settopk.kernels import SCORES, brute_force_topk, score_definition
from tests.job_helpers import job_config, result_rows as _rows, score_apart as _value, write_sets as _write

pytestmark = pytest.mark.usefixtures("ray_cluster")


def _config(tmp_path, name="c", **values):
    return job_config(tmp_path, name, **{"n_shards": 2, "query_batch_size": 7, **values})


def _expected_rows(docs, queries, k, score):
    rows = []
    for qi, (q, result) in enumerate(zip(queries, brute_force_topk(docs, queries, k, score=score))):
        ql = len(set(q))
        rows += [(str(qi), rank, d, _value(o, ql, dl, score), o, ql, dl) for rank, (d, o, dl) in enumerate(result, start=1)]
    return rows


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Small vocab (ties under every score), empty sets, a repeated id, lengths 0..9 and 128."""
    rng = np.random.default_rng(14)
    tmp = tmp_path_factory.mktemp("scores")
    docs = [rng.choice(12, size=int(rng.integers(0, 10)), replace=False).tolist() for _ in range(400)]
    docs += [[], [0, 65535], list(range(128))]
    queries = [rng.choice(12, size=int(rng.integers(0, 10)), replace=False).tolist() for _ in range(25)]
    queries += [[], [3, 1, 3], list(range(128))]
    return docs, queries, _write(tmp / "docs.txt", docs), _write(tmp / "q.txt", queries)


@pytest.mark.parametrize("score", [s if s == "braun_blanquet" else pytest.param(s, marks=pytest.mark.slow) for s in SCORES])
def test_every_score_from_the_cli_matches_the_oracle(tmp_path, corpus, score):
    """Two shards with the threshold exchange on (numpy's auto): floors and merge in the score's keys."""
    docs, queries, docs_path, queries_path = corpus
    out = tmp_path / "out"
    args = ["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", "30", "--score", score,
            "--config", _config(tmp_path), "--quiet"]
    assert job.main(args) == 0
    assert _rows(out) == _expected_rows(docs, queries, 30, score)
    meta = pq.read_schema(next(out.glob("*.parquet"))).metadata
    assert meta[b"settopk.score"].decode() == score_definition(score)
    manifest = read_manifest(out)
    assert manifest["score"] == score and manifest["config"]["score"] == score
    assert sum(s["queries_skipped"] for s in manifest["shards"]) > 0  # the floors pruned in this score's keys


@pytest.mark.slow
def test_score_from_the_config_and_cli_overrides_it(tmp_path, corpus):
    docs, queries, docs_path, queries_path = corpus
    cfg = _config(tmp_path, score="dice", n_shards=1)
    base = ["--docs", docs_path, "--queries", queries_path, "--k", "12", "--config", cfg, "--quiet"]
    assert job.main(base + ["--out", str(tmp_path / "a")]) == 0
    assert _rows(tmp_path / "a") == _expected_rows(docs, queries, 12, "dice")
    assert read_manifest(tmp_path / "a")["score"] == "dice"
    assert job.main(base + ["--out", str(tmp_path / "b"), "--score", "containment"]) == 0
    assert _rows(tmp_path / "b") == _expected_rows(docs, queries, 12, "containment")


def test_default_score_is_braun_blanquet(tmp_path, corpus):
    docs, queries, docs_path, queries_path = corpus
    out = tmp_path / "out"
    assert job.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", "5",
                     "--config", _config(tmp_path), "--quiet"]) == 0
    assert _rows(out) == _expected_rows(docs, queries, 5, "braun_blanquet")
    assert read_manifest(out)["score"] == "braun_blanquet"
    meta = pq.read_schema(next(out.glob("*.parquet"))).metadata
    assert meta[b"settopk.score"] == b"Braun-Blanquet |q & d| / max(|q|, |d|); 0/0 = 0; ties by lower doc_id"


def test_bad_score_in_the_config_exits_2_listing_the_names(tmp_path, corpus, caplog):
    _, _, docs_path, queries_path = corpus
    with caplog.at_level(logging.ERROR, logger="settopk"):
        code = job.main(["--docs", docs_path, "--queries", queries_path, "--out", str(tmp_path / "out"),
                         "--config", _config(tmp_path, score="tanimoto"), "--quiet"])
    assert code == 2
    assert "score must be one of braun_blanquet, jaccard, cosine, dice, overlap, containment; found 'tanimoto'" in caplog.text
    assert "c.yaml" in caplog.text and not (tmp_path / "out").exists()


def test_bad_score_on_the_cli_exits_2_listing_the_names(tmp_path, corpus, capsys):
    _, _, docs_path, queries_path = corpus
    with pytest.raises(SystemExit) as exc:
        job.main(["--docs", docs_path, "--queries", queries_path, "--out", str(tmp_path / "out"), "--score", "Jaccard"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--score" in err and all(name in err for name in SCORES)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_run_interrupted_under_one_score_is_not_resumed_under_another(tmp_path, corpus, monkeypatch):
    """The resume key hashes the config, score included: parts ranked by braun_blanquet are discarded
    when the rerun asks for jaccard, and kept when it asks for braun_blanquet again."""
    docs, queries, docs_path, queries_path = corpus
    out = tmp_path / "out"
    cfg = _config(tmp_path, n_shards=1, query_chunk_size=10)
    base = ["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", "8", "--config", cfg, "--quiet"]

    def interrupt(*args, **kwargs):
        raise RuntimeError("interrupted before the commit")

    with monkeypatch.context() as m:  # every part is written, then the run fails
        m.setattr(job_run, "check_parts", interrupt)
        assert job.main(base + ["--score", "braun_blanquet"]) == 1
    assert len(list(work_dir(out).glob("part-*.parquet"))) == 3
    assert job.main(base + ["--score", "jaccard"]) == 0
    assert read_manifest(out)["counts"]["chunks_resumed"] == 0
    assert _rows(out) == _expected_rows(docs, queries, 8, "jaccard")

    with monkeypatch.context() as m:
        m.setattr(job_run, "check_parts", interrupt)
        assert job.main(base + ["--score", "braun_blanquet", "--force"]) == 1
    assert job.main(base + ["--score", "braun_blanquet", "--force"]) == 0
    assert read_manifest(out)["counts"]["chunks_resumed"] == 3
    assert _rows(out) == _expected_rows(docs, queries, 8, "braun_blanquet")


@pytest.mark.gpu
@pytest.mark.parametrize("score", SCORES)
def test_cupy_job_matches_the_oracle_for_every_score(tmp_path, corpus, score):
    """The GPU backend end to end (two shards on one GPU, threshold exchange forced on so the floors
    travel in the score's keys), row for row the oracle's."""
    docs, queries, docs_path, queries_path = corpus
    out = tmp_path / "out"
    cfg = _config(tmp_path, backend="cupy", gpus_per_shard=0.5, threshold_exchange="true")
    assert job.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", "30",
                     "--score", score, "--config", cfg, "--quiet"]) == 0
    assert read_manifest(out)["backend"] == "cupy"
    assert _rows(out) == _expected_rows(docs, queries, 30, score)
