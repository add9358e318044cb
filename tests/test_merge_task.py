"""The merge task of a chunk: results taken batch by batch (references too), merged exactly, written atomically."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from settopk.jobs.merge_task import BatchLayout, merge_and_write_chunk
from settopk.kernels import TopK, brute_force_topk, empty_topk


def _as_topk(lists, k: int) -> TopK:
    out = empty_topk(len(lists), k)
    for row, results in enumerate(lists):
        for rank, (doc_id, overlap, doc_len) in enumerate(results):
            out.doc_ids[row, rank], out.overlap[row, rank], out.doc_len[row, rank] = doc_id, overlap, doc_len
    return out


def _shard_results(rng, n_queries: int, k: int, n_shards: int):
    """Shard-local top-k lists of random docs split by id into shards, and the global answer."""
    docs = [np.unique(rng.integers(0, 30, rng.integers(0, 12))) for _ in range(60)]
    queries = [np.unique(rng.integers(0, 30, rng.integers(1, 12))) for _ in range(n_queries)]
    split = np.array_split(np.arange(len(docs)), n_shards)
    per_shard = [_as_topk(brute_force_topk([docs[i] for i in ids], queries, k, doc_ids=ids), k) for ids in split]
    return queries, per_shard, _as_topk(brute_force_topk(docs, queries, k), k)


def _layouts(n_queries: int, batch: int, n_shards: int):
    rows = lambda lo, hi: np.arange(hi - lo, dtype=np.int64)  # noqa: E731
    return [BatchLayout(lo, min(lo + batch, n_queries), tuple((s, rows(lo, min(lo + batch, n_queries))) for s in range(n_shards)))
            for lo in range(0, n_queries, batch)]


def _batch_results(per_shard, layouts):
    return [TopK(*(a[layout.lo : layout.hi] for a in per_shard[s])) for layout in layouts for s, _ in layout.shard_lists]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n_shards", [1, 3])
def test_references_are_fetched_batch_by_batch_and_merged_exactly(ray_cluster, tmp_path, n_shards):
    rng = np.random.default_rng(n_shards)
    k, n_queries = 5, 17
    queries, per_shard, want = _shard_results(rng, n_queries, k, n_shards)
    layouts = _layouts(n_queries, 4, n_shards)
    refs = [ray_cluster.put(r) for r in _batch_results(per_shard, layouts)]
    qlen = np.array([len(q) for q in queries])
    ids = [f"q{i}" for i in range(n_queries)]
    out = merge_and_write_chunk(str(tmp_path), 2, ids, qlen, k, 128, n_shards, layouts, {"settopk.run_id": "r"}, 10, refs)
    table = pq.read_table(tmp_path / "part-00002.parquet")
    assert out["rows"] == table.num_rows == n_queries * k
    assert np.array_equal(table["doc_id"].to_numpy().reshape(n_queries, k), want.doc_ids)
    assert np.array_equal(table["overlap"].to_numpy().reshape(n_queries, k), want.overlap)
    assert table["query_id"].to_pylist() == [q for q in ids for _ in range(k)]


@pytest.mark.timeout(120)
def test_a_failed_search_leaves_no_part_and_no_temporary_file(ray_cluster, tmp_path):
    rng = np.random.default_rng(0)
    queries, per_shard, _ = _shard_results(rng, 8, 3, 1)
    layouts = _layouts(8, 4, 1)

    @ray_cluster.remote(num_cpus=0)
    def failed_search():
        raise RuntimeError("GPU fault")

    refs = [ray_cluster.put(_batch_results(per_shard, layouts)[0]), failed_search.remote()]
    with pytest.raises(ray_cluster.exceptions.RayTaskError, match="GPU fault"):
        merge_and_write_chunk(str(tmp_path), 0, [str(i) for i in range(8)], np.array([len(q) for q in queries]), 3, 128, 1, layouts, {}, 10, refs)
    assert list(tmp_path.iterdir()) == []


def test_layouts_must_consume_every_result(tmp_path):
    layouts = _layouts(4, 4, 1)
    with pytest.raises(ValueError, match="the layouts name 1 results, 2 were passed"):
        merge_and_write_chunk(str(tmp_path), 0, ["a"] * 4, np.ones(4), 3, 128, 1, layouts, {}, 10, [None, None])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_prestarted_merge_workers_are_held_until_the_shards_load(ray_cluster):
    """The prestart tasks keep their workers busy until the refs they wait on (the shards' load) are
    ready, failed ones included, so that Ray does not stop them for idling during a long load."""
    import time

    import ray

    from settopk.jobs.search import prestart_merge_workers

    @ray.remote(num_cpus=0)
    def load(seconds, fail):
        time.sleep(seconds)
        if fail:
            raise RuntimeError("a shard that failed to load")

    start = time.monotonic()
    holds = prestart_merge_workers(1, 2, [load.remote(1.5, False), load.remote(0.2, True)])
    assert len(holds) == 2
    ray.get(holds)  # a failed load ends the hold, it does not fail it
    assert time.monotonic() - start >= 1.5
    start = time.monotonic()
    ray.get(prestart_merge_workers(1, 1))
    assert time.monotonic() - start < 1.5  # nothing to wait on: the half-second hold alone
