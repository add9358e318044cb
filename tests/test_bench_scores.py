"""The benchmark's ``score`` key: config checks, the shard actor's index and reference, and a run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from settopk.configs import ConfigError
from settopk.jobs.bench.config import load_bench_config
from settopk.jobs import bench
from settopk.jobs.bench.baselines import BASELINES
from settopk.jobs.bench.shard import BenchShard
from settopk.kernels import SCORES, SetBatch, brute_force_topk
from settopk.shards import plan_shards
from settopk.shards.inputs import Corpus, SetLimits


def _load(tmp_path, text):
    path = tmp_path / "b.yaml"
    path.write_text(text)
    return load_bench_config(str(path))


def test_score_key_defaults_checks_names_and_refuses_baselines(tmp_path):
    assert load_bench_config("smoke").score == "braun_blanquet"
    assert _load(tmp_path, "score: cosine\nbaselines: []\n").score == "cosine"
    with pytest.raises(ConfigError, match="score must be one of braun_blanquet, jaccard, cosine, dice, overlap, containment"):
        _load(tmp_path, "score: tanimoto\nbaselines: []\n")
    with pytest.raises(ConfigError, match=r"may pick spmm and popc4 \(backend 'auto'\), which rank by braun_blanquet only, "
                                          r"found score 'jaccard'.*or set baselines: \[\]"):
        _load(tmp_path, "score: jaccard\n")  # baselines: [auto] by default
    # auto is scipy on the CPU backends, and scipy ranks by every score.
    assert _load(tmp_path, "score: jaccard\nbackend: cpu\n").baselines == ["auto"]
    with pytest.raises(ConfigError, match=r"baseline sparse_dot_topn ranks by overlap, cosine only, found score 'dice'"):
        _load(tmp_path, "score: dice\nbackend: cpu\nbaselines: [numpy, sparse_dot_topn]\n")
    assert _load(tmp_path, "score: cosine\nbackend: cpu\nbaselines: [numpy, scipy, sparse_dot_topn_1t]\n").score == "cosine"
    # A scaling run times no baselines, so any score goes.
    assert _load(tmp_path, "score: dice\nscaling: {mode: strong, shards: [1]}\n").score == "dice"


@pytest.mark.parametrize("score", SCORES)
def test_bench_shard_ranks_by_its_score(score):
    rng = np.random.default_rng(SCORES.index(score))
    docs = [rng.choice(10, size=int(rng.integers(0, 9)), replace=False).tolist() for _ in range(120)]
    queries = [rng.choice(10, size=int(rng.integers(0, 9)), replace=False).tolist() for _ in range(9)]
    batch = SetBatch.from_lists(docs)
    (spec,) = plan_shards(batch.lengths, 1, 8)
    shard = BenchShard(spec, SetLimits(65536, 8), "numpy", score)
    shard.read([Corpus(np.arange(len(docs), dtype=np.int64), batch, 0, "parquet", ())])
    shard.build()
    want = brute_force_topk(docs, queries, 15, score=score)
    q = SetBatch.from_lists(queries)
    for got in (shard.search(q, 15)[1], shard.reference(q, 15)):
        rows = [[(int(d), int(o), int(l)) for d, o, l in zip(*r) if d >= 0] for r in zip(got.doc_ids, got.overlap, got.doc_len)]
        assert rows == want
    for name, baseline in BASELINES.items():
        if score not in baseline.scores:
            with pytest.raises(ValueError, match=f"baseline {name} ranks by {', '.join(baseline.scores)}, this shard by"):
                shard.baseline_build(name)


@pytest.mark.slow
def test_a_bench_run_with_another_score(ray_cluster, tmp_path):
    config = tmp_path / "cos.yaml"
    config.write_text(
        "backend: numpy\nn_shards: 2\ncpus_per_shard: 0.5\nk: 10\nscore: cosine\nwarmup: 0\nrepetitions: 1\n"
        "verify_queries: 8\nbaselines: []\nsynthetic: {n_docs: 3000, n_queries: 16, seed: 3}\n"
    )
    out = tmp_path / "cos.json"
    assert bench.main(["--config", str(config), "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    result = json.loads(out.read_text())
    assert result["settings"]["score"] == "cosine" and result["exactness"]["identical"]
    assert result["baselines"] == {}
