"""settopk.ray on Ray Data: read_parquet -> settopk.ray.search -> write_parquet equals the job's result
(DuckDB ``EXCEPT ALL`` both ways is empty), on one shard and on several, and with a pool actor killed
mid-run; the brute-force oracle for the several-shard merge; the errors a user can cause."""

from __future__ import annotations

import sys
import threading
import time
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray.cloudpickle

import settopk.ray
from settopk.jobs import score as score_job
from settopk.jobs.output import RESULT_SCHEMA
from settopk.kernels import brute_force_topk
from tests.job_helpers import job_config

# Ray workers rebuild this module's classes from the pickle and never import ``tests``.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

K = 10
# Half a CPU per actor: on a 2-CPU cluster, pools of actors at 1 CPU each were seen to hang.
POOL = {"backend": "numpy", "num_cpus": 0.5, "batch_size": 7}


def _random_sets(rng, n, vocab, max_len):
    return [rng.choice(vocab, size=rng.integers(0, max_len + 1), replace=False).tolist() for _ in range(n)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Parquet docs (sparse, unordered ids; a small vocabulary, so many ties; an empty doc) and
    queries (string ids, a repeated id in a set, an empty set)."""
    rng = np.random.default_rng(7)
    tmp = tmp_path_factory.mktemp("ray-data")
    docs = _random_sets(rng, 500, 16, 9) + [[], [0, 65535], list(range(40))]
    doc_ids = rng.permutation(100_000)[: len(docs)]
    queries = _random_sets(rng, 40, 16, 9) + [[], [0, 65535], list(range(40))]
    queries[3] = [5, 2, 5]
    query_ids = [f"q{i:03d}" for i in range(len(queries))]
    pq.write_table(pa.table({"doc_id": pa.array(doc_ids, pa.int64()), "tokens": pa.array(docs, pa.list_(pa.int32()))}),
                   tmp / "docs.parquet")
    pq.write_table(pa.table({"query_id": query_ids, "tokens": pa.array(queries, pa.list_(pa.int32()))}), tmp / "queries.parquet")
    return {"dir": tmp, "docs": docs, "doc_ids": doc_ids, "queries": queries, "query_ids": query_ids,
            "docs_path": str(tmp / "docs.parquet"), "queries_path": str(tmp / "queries.parquet")}


@pytest.fixture(scope="module")
def cli_result(ray_cluster, inputs, tmp_path_factory):
    """The job's result (``settopk score``) on the same inputs, k = 10."""
    tmp = tmp_path_factory.mktemp("cli")
    out = tmp / "out"
    argv = ["--docs", inputs["docs_path"], "--queries", inputs["queries_path"], "--out", str(out), "--k", str(K),
            "--config", job_config(tmp), "--quiet"]
    assert score_job.main(argv) == 0
    return out


def _differences(a, b) -> tuple[int, int, int, int]:
    """Rows of ``a`` not in ``b``, of ``b`` not in ``a`` (DuckDB ``EXCEPT ALL``), and each one's row count."""
    duckdb = pytest.importorskip("duckdb")
    x, y = f"read_parquet('{a}/*.parquet')", f"read_parquet('{b}/*.parquet')"

    def count(sql):
        return duckdb.sql(sql).fetchall()[0][0]

    return (count(f"SELECT count(*) FROM (SELECT * FROM {x} EXCEPT ALL SELECT * FROM {y})"),
            count(f"SELECT count(*) FROM (SELECT * FROM {y} EXCEPT ALL SELECT * FROM {x})"),
            count(f"SELECT count(*) FROM {x}"), count(f"SELECT count(*) FROM {y}"))


def _oracle_lists(inputs, k):
    order = np.argsort(inputs["doc_ids"])
    found = brute_force_topk([inputs["docs"][i] for i in order], inputs["queries"], k, doc_ids=list(inputs["doc_ids"][order]))
    return {qid: [tuple(r) for r in rows] for qid, rows in zip(inputs["query_ids"], found)}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_read_parquet_search_write_parquet_equals_the_cli(ray_cluster, inputs, cli_result, tmp_path, monkeypatch):
    import importlib

    import ray

    # Searched blocks of 7 queries are cut into blocks of 2 before their rows are built, as a GPU
    # pool's blocks of 16,384 are cut into 4096 (the other tests keep the blocks whole).
    monkeypatch.setattr(importlib.import_module("settopk.ray.search"), "_ROWS_BLOCK_QUERIES", 2)
    queries = ray.data.read_parquet(inputs["queries_path"])
    out = tmp_path / "ray-data"
    settopk.ray.search(queries, inputs["docs_path"], k=K, replicas=2, **POOL).write_parquet(str(out))
    assert pq.read_table(out).schema.equals(RESULT_SCHEMA, check_metadata=False)
    only_ray, only_cli, n_ray, n_cli = _differences(out, cli_result)
    assert (only_ray, only_cli) == (0, 0) and n_ray == n_cli > 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_shards_per_query_rows_equal_the_oracle(ray_cluster, inputs):
    import ray

    queries = ray.data.read_parquet(inputs["queries_path"])
    corpus = settopk.ray.load_corpus(inputs["docs_path"], k=K, backend="numpy", n_shards=2)
    assert corpus.n_shards == 2
    rows = settopk.ray.search(queries, corpus, rows="per_query", num_cpus=0.5, batch_size=7).take_all()
    expected = _oracle_lists(inputs, K)
    got = {r["query_id"]: list(zip(r["doc_id"], r["overlap"], r["doc_len"])) for r in rows}
    assert got == expected
    lengths = {qid: len(set(q)) for qid, q in zip(inputs["query_ids"], inputs["queries"])}
    for r in rows:  # the score column is the job's: braun_blanquet, 0.0 for 0/0
        want = [o / max(lengths[r["query_id"]], d, 1) for o, d in zip(r["overlap"], r["doc_len"])]
        assert r["query_len"] == lengths[r["query_id"]] and r["score"] == want


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_wide_vocabulary_on_two_cpu_shards_equals_the_oracle(ray_cluster, tmp_path):
    """Ids up to 2**24 - 1 (uint32 dense ids, vocab_size 2**24) through two shard stages: the carried
    tokens keep their width from one stage to the next."""
    import ray

    rng = np.random.default_rng(11)
    vocab = np.concatenate([np.arange(8), 2**24 - 1 - np.arange(8), 65530 + np.arange(12)])  # around 65536 too
    docs = [rng.choice(vocab, size=int(rng.integers(0, 10)), replace=False).tolist() for _ in range(300)]
    queries = [rng.choice(vocab, size=int(rng.integers(0, 10)), replace=False).tolist() for _ in range(30)]
    query_ids = [f"q{i:02d}" for i in range(len(queries))]
    pq.write_table(pa.table({"doc_id": pa.array(np.arange(len(docs)), pa.int64()), "tokens": pa.array(docs, pa.list_(pa.int64()))}),
                   tmp_path / "docs.parquet")
    dataset = ray.data.from_items([{"query_id": i, "tokens": q} for i, q in zip(query_ids, queries)])
    corpus = settopk.ray.load_corpus(str(tmp_path / "docs.parquet"), k=K, backend="numpy", n_shards=2, vocab_size=2**24)
    assert corpus.n_shards == 2
    rows = settopk.ray.search(dataset, corpus, rows="per_query", num_cpus=0.5, batch_size=7).take_all()
    expected = brute_force_topk(docs, queries, K)
    assert {r["query_id"]: list(zip(r["doc_id"], r["overlap"], r["doc_len"])) for r in rows} == \
        {qid: [tuple(x) for x in found] for qid, found in zip(query_ids, expected)}


@ray.remote(num_cpus=0)
class _Registry:
    """Where the pool actors of the kill test report: their handles, and the batches begun and ended."""

    def __init__(self):
        self.actors, self.busy, self.begun, self.ended = [], set(), 0, 0

    def add(self, handle):
        self.actors.append(handle)
        return len(self.actors) - 1

    def begin(self, index):
        self.busy.add(index)
        self.begun += 1

    def end(self, index):
        self.busy.discard(index)
        self.ended += 1

    def state(self):
        return list(self.actors), sorted(self.busy), self.begun, self.ended

    def holding(self, index) -> bool:
        """Whether actor ``index`` keeps its batch: the first actor built holds its first batch until
        it is killed, so the kill always lands mid-batch, however slow the machine."""
        return index == 0


class _Reporting(settopk.ray.ShardSearch):
    """A ShardSearch that reports its handle once built and each batch it begins and ends, a second a
    batch; the first actor built holds its batch until the test kills it (:meth:`_Registry.holding`)."""

    registry = ""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._registry = ray.get_actor(self.registry)
        self._index = ray.get(self._registry.add.remote(ray.get_runtime_context().current_actor))

    def __call__(self, batch):
        ray.get(self._registry.begin.remote(self._index))
        time.sleep(1.0)
        while ray.get(self._registry.holding.remote(self._index)):
            time.sleep(0.05)
        out = super().__call__(batch)
        ray.get(self._registry.end.remote(self._index))
        return out


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_pool_actor_killed_mid_batch_leaves_the_result_equal_to_the_cli(ray_cluster, inputs, cli_result, tmp_path):
    import ray

    name = f"settopk-test-registry-{uuid.uuid4().hex}"
    registry = _Registry.options(name=name).remote()
    searcher = type("Reporting", (_Reporting,), {"registry": name})
    out = tmp_path / "ray-data"
    n_batches = -(-len(inputs["queries"]) // 4)
    dataset = settopk.ray.search(ray.data.read_parquet(inputs["queries_path"]), inputs["docs_path"], k=K, replicas=2,
                                 searcher_cls=searcher, **{**POOL, "batch_size": 4})
    failure = []

    def write():
        try:
            dataset.write_parquet(str(out))
        except BaseException as exc:  # reported by the test's thread
            failure.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        actors, busy, begun, ended = ray.get(registry.state.remote())
        if len(actors) == 2 and 0 in busy and ended >= 1:
            break
        time.sleep(0.05)
    assert 0 in busy and ended < n_batches, "the kill must come while an actor searches and batches are left"
    ray.kill(actors[0], no_restart=False)  # the pool restarts it, and the batch it holds is searched again
    writer.join(timeout=600)
    assert not writer.is_alive() and not failure, failure
    actors, _, begun, ended = ray.get(registry.state.remote())
    assert len(actors) == 3  # the killed actor was built again, from the object store
    assert ended >= n_batches and begun > ended  # the batch it held was begun again (a retried task may redo others)
    only_ray, only_cli, n_ray, n_cli = _differences(out, cli_result)
    assert (only_ray, only_cli) == (0, 0) and n_ray == n_cli > 0
    ray.kill(registry)


def test_settings_out_of_range_raise_before_anything_runs(ray_cluster, inputs):
    import ray

    queries = ray.data.from_items([{"query_id": "a", "tokens": [1, 2]}])
    for kwargs, message in [({"k": 0}, "k must be an integer in [1, 32767]"), ({"score": "euclid"}, "score must be one of"),
                            ({"rows": "wide"}, "rows must be one of per_rank, per_query"),
                            ({"replicas": 0}, "replicas must be an integer >= 1"),
                            ({"backend": "tpu"}, "backend must be one of")]:
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            settopk.ray.search(queries, inputs["docs_path"], **kwargs)
    with pytest.raises(TypeError, match="queries must be a ray.data.Dataset"):
        settopk.ray.search([{"query_id": "a"}], inputs["docs_path"])
    with pytest.raises(ValueError, match=r"missing \['query_id', 'tokens'\], found columns \['id', 'set'\]"):
        settopk.ray.search(ray.data.from_items([{"id": "a", "set": [1]}]), inputs["docs_path"], backend="numpy")
    with pytest.raises(ValueError, match="need 4 CPU"):  # more than the 2-CPU cluster has
        settopk.ray.search(queries, inputs["docs_path"], replicas=4, backend="numpy")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_bad_query_raises_naming_its_column(ray_cluster, inputs):
    import ray

    queries = ray.data.from_items([{"id": 1, "set": [1, 2]}, {"id": 2, "set": [3, 70_000]}])
    dataset = settopk.ray.search(queries, inputs["docs_path"], k=K, id_column="id", tokens_column="set", **POOL)
    with pytest.raises(Exception, match=r"query column 'set': expected token ids in \[0, 65536\), found 70000"):
        dataset.take_all()


def test_ray_data_bench_configs_load_and_are_checked(tmp_path):
    from settopk.configs import ConfigError
    from settopk.jobs.bench.config import load_bench_config

    one, two, smoke = (load_bench_config(n) for n in ("ray-data-1m", "ray-data-1m-2gpu", "ray-data-smoke"))
    assert (one.backend, one.synthetic.n_queries, one.k, one.ray_data.replicas) == ("cupy", 1_000_000, 100, [1])
    assert two.ray_data.replicas == [1, 2] and smoke.backend == "numpy"
    assert (one.ray_data.batch_size, two.ray_data.batch_size, smoke.ray_data.batch_size) == (None, None, 100)
    path = tmp_path / "b.yaml"
    path.write_text("query_batch_size: 0\nray_data:\n  replicas: [0]\n  batch_size: 0\nthroughput:\n  shards: [1]\n")
    with pytest.raises(ConfigError) as err:
        load_bench_config(str(path))
    for message in ("not several", "ray_data.replicas must list replica counts >= 1", "query_batch_size must be >= 1 in a ray_data run",
                    "ray_data.batch_size must be >= 1 (or left out for the default), found 0"):
        assert message in str(err.value)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ray_data_bench_smoke_runs_the_job_and_the_pipeline_and_compares_every_row(ray_cluster, tmp_path, capsys):
    import json

    import settopk.jobs.bench as bench

    out = tmp_path / "ray-data-smoke.json"
    assert bench.main(["--config", "ray-data-smoke", "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    result = json.loads(out.read_text())
    (run,) = result["runs"]
    assert result["benchmark"] == "settopk.bench.ray_data" and result["exactness"]["identical"]
    assert run["replicas"] == 1 and run["rows"] == 300 * 10 and run["n_queries"] == 300
    for side in ("job", "ray_data"):
        assert run[side]["queries_per_s"] > 0 and run[side]["driver_max_rss_bytes"] > 0 and run[side]["wall_s"] > 0
    assert run["queries_per_s_ratio"] == pytest.approx(run["ray_data"]["queries_per_s"] / run["job"]["queries_per_s"])
    peaks = run["ray_data"]["driver_memory_peaks"]
    assert {"VmHWM", "VmRSS", "RssAnon"} <= set(peaks) and peaks["VmHWM"]["bytes"] >= peaks["RssAnon"]["bytes"] > 0
    # The pipeline's driver peak is its own (the kernel's high-water mark), not its parent's.
    assert run["ray_data"]["driver_max_rss_bytes"] >= peaks["VmHWM"]["bytes"] > 0
    printed = capsys.readouterr().out
    assert "Ray Data pipeline" in printed and "exact:" in printed and "ray_data driver peaks, 1 replica(s): VmHWM" in printed


class _FailingHolder:
    """A corpus holder whose shard can no longer be taken (as when the corpus's docs changed)."""

    class take:  # noqa: N801 - mimics an actor method: holder.take.remote(shard)
        @staticmethod
        def remote(shard):
            raise RuntimeError(f"shard {shard}: the docs no longer match the plan")


@pytest.mark.timeout(60)
def test_a_failed_index_build_is_raised_by_each_call():
    """The index is built in a thread (so Ray Data reads queries meanwhile): its error reaches every call."""
    corpus = settopk.ray.CorpusHandle(holder=_FailingHolder(), shards=(None,), n_docs=1, k=K, backend="numpy")
    searcher = settopk.ray.ShardSearch(corpus)
    assert isinstance(searcher.built.exception(timeout=30), RuntimeError)
    batch = pa.table({"query_id": ["a"], "tokens": pa.array([[1, 2]], pa.list_(pa.int32()))})
    for _ in range(2):
        with pytest.raises(RuntimeError, match="shard 0: the docs no longer match the plan"):
            searcher(batch)
