"""Sets longer than 255 ids end to end: ``settopk.jobs.score.main`` with ``backend: cpu`` (and ``cupy``
on the GPU machine) and ``max_len: 1000`` against the oracle (top-k, threshold, self-join), and the
refusals: the GPU postings (routing ``postings`` on cupy, named or picked by ``auto``) above 255,
``max_len`` above 4096, in the job, the config and ``settopk.ray``."""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from fractions import Fraction

import numpy as np
import pytest

from settopk.configs import ConfigError, JobConfig, load_config
from settopk.jobs import score as job
from settopk.jobs.bench.config import BenchConfig
from settopk.jobs.cluster import resolve_backend
from settopk.kernels import brute_force_threshold, brute_force_topk
from settopk.ray.corpus import check_search_settings
from settopk.shards.inputs import InputError
from tests.job_helpers import job_config, result_rows, score_apart, write_sets

VOCAB = 1100


@pytest.fixture(scope="module")
def long_corpus(tmp_path_factory):
    """300 docs of 300..1000 ids from 1,100 (overlaps well above 255; ties from repeated docs), one of
    exactly 1000 ids, and 12 queries, some of them docs."""
    rng = np.random.default_rng(31)
    tmp = tmp_path_factory.mktemp("long")
    docs = [rng.choice(VOCAB, size=int(rng.integers(300, 1001)), replace=False).tolist() for _ in range(296)]
    docs += [docs[3], docs[17], list(range(1000)), list(range(100, 1100))]
    queries = [rng.choice(VOCAB, size=int(rng.integers(300, 1001)), replace=False).tolist() for _ in range(8)]
    queries += [docs[3], docs[50][::-1], list(range(1000)), list(range(50, 1050))]
    return docs, queries, write_sets(tmp / "docs.txt", docs), write_sets(tmp / "q.txt", queries)


def _topk_rows(docs, queries, k, score):
    rows = []
    for qi, (q, found) in enumerate(zip(queries, brute_force_topk(docs, queries, k, score=score))):
        ql = len(set(q))
        rows += [(str(qi), r, d, score_apart(o, ql, dl, score), o, ql, dl) for r, (d, o, dl) in enumerate(found, 1)]
    return rows


def _config(tmp_path, name="c", **values):
    return job_config(tmp_path, name, **{"backend": "cpu", "max_len": 1000, "n_shards": 2, "query_batch_size": 5,
                                         **values})


@pytest.mark.usefixtures("ray_cluster")
def test_cpu_job_with_max_len_1000_matches_the_oracle(tmp_path, long_corpus):
    """Two length-bucket shards with the threshold exchange: floors and merge over keys of max_len 1000."""
    docs, queries, docs_path, queries_path = long_corpus
    out = tmp_path / "out"
    assert job.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", "12",
                     "--score", "jaccard", "--config", _config(tmp_path), "--quiet"]) == 0
    rows = result_rows(out)
    assert rows == _topk_rows(docs, queries, 12, "jaccard")
    assert max(r[4] for r in rows) == 1000 and max(r[5] for r in rows) == 1000  # overlap, query_len in int16


@pytest.mark.usefixtures("ray_cluster")
def test_cosine_job_with_max_len_1000_matches_the_oracle(tmp_path, long_corpus):
    """Cosine's table keys (one query's pairs ranked by o**2 / |d|) through the floors of the threshold
    exchange and the merge of two length-bucket shards, from the CLI over a long config."""
    docs, queries, docs_path, queries_path = long_corpus
    out = tmp_path / "out"
    assert job.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", "12",
                     "--score", "cosine", "--config", _config(tmp_path), "--quiet"]) == 0
    assert result_rows(out) == _topk_rows(docs, queries, 12, "cosine")


@pytest.mark.gpu
@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("score", ["braun_blanquet", "jaccard", "cosine"])
def test_cupy_job_with_max_len_1000_matches_the_oracle(tmp_path, long_corpus, score):
    """The GPU's 13 counter planes in the job: two shards on one GPU with the threshold exchange,
    routing auto (which scans sets this long)."""
    docs, queries, docs_path, queries_path = long_corpus
    out = tmp_path / "out"
    config = _config(tmp_path, backend="cupy", routing="auto", gpus_per_shard=0.5)
    assert job.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", "12",
                     "--score", score, "--config", config, "--quiet"]) == 0
    assert result_rows(out) == _topk_rows(docs, queries, 12, score)


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("score", ["braun_blanquet", "dice", "overlap", "containment"])
@pytest.mark.parametrize("backend", ["cpu", "numpy"])
def test_every_long_score_and_backend_in_the_job(tmp_path, long_corpus, score, backend):
    docs, queries, docs_path, queries_path = long_corpus
    out = tmp_path / "out"
    assert job.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--k", "7", "--score", score,
                     "--config", _config(tmp_path, backend=backend), "--quiet"]) == 0
    assert result_rows(out) == _topk_rows(docs, queries, 7, score)


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_threshold_and_self_join_of_long_sets_in_the_job(tmp_path, long_corpus):
    docs, queries, docs_path, queries_path = long_corpus
    t = Fraction(3, 5)
    out = tmp_path / "t"
    assert job.main(["--docs", docs_path, "--queries", queries_path, "--out", str(out), "--threshold", "0.6",
                     "--score", "braun_blanquet", "--config", _config(tmp_path), "--quiet"]) == 0
    want = []
    for qi, (q, pairs) in enumerate(zip(queries, brute_force_threshold(docs, queries, t, score="braun_blanquet"))):
        ql = len(set(q))
        want += [(str(qi), r, d, score_apart(o, ql, dl, "braun_blanquet"), o, ql, dl) for r, (d, o, dl) in enumerate(pairs, 1)]
    assert result_rows(out) == want and want
    out = tmp_path / "sj"
    assert job.main(["--docs", docs_path, "--out", str(out), "--self-join", "--threshold", "0.6",
                     "--score", "braun_blanquet", "--config", _config(tmp_path, "s"), "--quiet"]) == 0
    size = [len(set(d)) for d in docs]
    want = []
    for qi, pairs in enumerate(brute_force_threshold(docs, docs, t, score="braun_blanquet")):
        pairs = [p for p in pairs if p[0] != qi and (size[p[0]], p[0]) >= (size[qi], qi)]
        want += [(str(qi), r, d, score_apart(o, size[qi], dl, "braun_blanquet"), o, size[qi], dl)
                 for r, (d, o, dl) in enumerate(pairs, 1)]
    assert result_rows(out) == want and want


# --- refusals ------------------------------------------------------------------------------------

def _refused(tmp_path, caplog, args, *needles):
    """Exit 2 with every needle in the log, and nothing written."""
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with caplog.at_level(logging.ERROR, logger="settopk"):
        assert job.main([*args, "--quiet"]) == 2, caplog.text
    for needle in needles:
        assert needle in caplog.text, (needle, caplog.text)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before, "nothing may be written"


def test_gpu_postings_above_255_are_refused_before_the_run(tmp_path, caplog, long_corpus):
    """The GPU takes sets of up to 4096 ids, but its postings count overlaps in bytes."""
    _, _, docs_path, queries_path = long_corpus
    _refused(tmp_path, caplog, ["--docs", docs_path, "--queries", queries_path, "--out", str(tmp_path / "o"),
                                "--config", _config(tmp_path, backend="cupy", max_len=256, routing="postings")],
             "routing 'postings' with backend 'cupy' needs max_len <= 255", "found 256", "use routing 'auto'")


def test_auto_with_gpu_postings_is_refused_where_it_would_pick_cupy():
    cfg = JobConfig(backend="auto", max_len=1000, n_shards=1, cpus_per_shard=1.0, routing="postings")
    with pytest.raises(InputError, match=r"backend 'auto' \(it picked cupy.*needs max_len <= 255.*found 1000"):
        resolve_backend(cfg, {"GPU": 1.0, "CPU": 4.0})
    assert resolve_backend(cfg, {"CPU": 4.0}) == ("cpu", 1)  # no GPU: auto is cpu, whose postings take it
    for changed in ({"max_len": 255}, {"routing": "auto"}, {"routing": "scan"}):
        assert resolve_backend(dataclasses.replace(cfg, **changed), {"GPU": 1.0, "CPU": 4.0})[0] == "cupy"


@pytest.mark.parametrize("values, needles", [
    ({"max_len": 4097}, ["max_len must be an integer in [1, 4096], found 4097"]),
    ({"max_len": 0}, ["max_len must be an integer in [1, 4096], found 0"]),
    ({"max_len": 4097, "score": "cosine"}, ["max_len must be an integer in [1, 4096], found 4097"]),
    ({"max_len": 256, "backend": "cupy", "routing": "postings"}, ["backend 'cupy'", "max_len <= 255", "found 256"]),
])
def test_config_limits(values, needles):
    for cls in (JobConfig, BenchConfig):
        with pytest.raises(ConfigError) as exc:
            cls(**values)
        assert all(n in str(exc.value) for n in needles), str(exc.value)


def test_config_takes_gpu_postings_over_a_wide_vocabulary():
    for cls in (JobConfig, BenchConfig):
        assert cls(vocab_size=70000, backend="cupy", routing="postings").vocab_size == 70000


def test_config_takes_4096_for_every_score(tmp_path):
    assert load_config(_config(tmp_path, max_len=4096)).max_len == 4096
    assert JobConfig(max_len=4096, score="cosine", backend="cupy").max_len == 4096
    assert load_config(_config(tmp_path, "k", max_len=4096, score="cosine")).max_len == 4096
    assert JobConfig(max_len=4096, backend="cupy", routing="auto").max_len == 4096
    assert load_config(_config(tmp_path, "n", backend="numpy", max_len=4096, score="containment")).max_len == 4096


def test_ray_settings_limits():
    check_search_settings(10, "dice", "cpu", "scan", 4096, 65536)
    with pytest.raises(ValueError, match=r"\[1, 4096\], found 5000"):
        check_search_settings(10, "dice", "cpu", "scan", 5000, 65536)
    check_search_settings(10, "cosine", "numpy", "scan", 4096, 65536)
    with pytest.raises(ValueError, match=r"\[1, 4096\], found 4097"):
        check_search_settings(10, "cosine", "cpu", "scan", 4097, 65536)
    check_search_settings(10, "dice", "cupy", "auto", 4096, 2**24)
    with pytest.raises(ValueError, match="routing 'postings' with backend 'cupy' needs max_len <= 255"):
        check_search_settings(10, "dice", "cupy", "postings", 256, 65536)


def test_cpu_netflix_bench_config_is_netflix_shaped():
    from settopk.jobs.bench.config import load_bench_config

    cfg = load_bench_config("cpu-netflix")
    assert (cfg.backend, cfg.max_len, cfg.score) == ("cpu", 4096, "overlap")
    assert (cfg.synthetic.n_docs, cfg.synthetic.vocab_size, cfg.synthetic.length_law) == (480_000, 17_770, "lognormal")
    assert "cosine" in cfg.compare_scores


@pytest.mark.slow
def test_a_tiny_cpu_netflix_bench_run_is_exact(ray_cluster, tmp_path):
    """``python -m settopk bench`` on the cpu-netflix config cut to 3000 docs x 16 queries: checked exact."""
    import json

    import yaml

    import settopk.configs
    from settopk.jobs import bench

    data = yaml.safe_load((pathlib.Path(settopk.configs.__file__).parent / "bench" / "cpu-netflix.yaml").read_text())
    data.update(warmup=0, repetitions=1, baselines=[], compare_scores=["jaccard"], compare_routings=[], verify_queries=16)
    data["synthetic"].update(n_docs=3000, n_queries=16)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "tiny.json"
    assert bench.main(["--config", str(config), "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    exactness = json.loads(out.read_text())["exactness"]
    assert exactness["identical"] and exactness["checked"] and exactness["mismatches"] == []


def test_gpu_netflix_bench_config_is_the_cpu_shape_on_cupy():
    from settopk.jobs.bench.config import load_bench_config

    gpu, cpu = load_bench_config("gpu-netflix"), load_bench_config("cpu-netflix")
    assert (gpu.backend, gpu.max_len, gpu.routing, gpu.score) == ("cupy", 4096, "auto", "braun_blanquet")
    assert (gpu.synthetic.n_docs, gpu.synthetic.vocab_size, gpu.synthetic.length_law) == \
        (cpu.synthetic.n_docs, cpu.synthetic.vocab_size, cpu.synthetic.length_law)
    same_ids = load_bench_config("gpu-netflix-sti2-ids")  # the law at the STI2 shape's doc ids
    assert dataclasses.replace(same_ids, synthetic=gpu.synthetic, compare_scores=gpu.compare_scores) == gpu
    assert same_ids.synthetic == dataclasses.replace(gpu.synthetic, n_docs=2_600_000)
