"""The shard searcher without Ray, and as a Ray actor that crashes and restarts."""

import time

import numpy as np
import pytest

from settopk.kernels import NumpyShardIndex, SetBatch
from settopk.shards import plan_shards
from settopk.shards.actor import actor_class, open_inputs, supply_inputs
from settopk.shards.inputs import SetLimits, plan_pieces, read_piece
from settopk.shards.searcher import ShardSearcher
from tests.fault_helpers import crashing_searcher


@pytest.fixture
def corpus(tmp_path):
    """The docs, and the corpus read as one piece (what a reader task leaves in the object store)."""
    docs = [[1, 2], [2, 3, 4], [5], [], [1, 2, 3, 4, 5]]
    path = tmp_path / "docs.txt"
    path.write_text("".join(",".join(map(str, d)) + "\n" for d in docs))
    pieces, _, _ = plan_pieces(str(path), 1)
    return docs, [read_piece(p, SetLimits(max_len=8))[1] for p in pieces]


def test_searcher_loads_only_its_length_range(corpus):
    docs, pieces = corpus
    plan = plan_shards(np.array([len(d) for d in docs]), 2, 8)
    queries = SetBatch.from_lists([[2, 3], [5]])
    whole = NumpyShardIndex(SetBatch.from_lists(docs), np.arange(len(docs)), 8).search(queries, 5)
    parts = [ShardSearcher(spec, pieces, SetLimits(max_len=8), "numpy") for spec in plan]
    assert sum(p.index.n_docs for p in parts) == len(docs)
    for p in parts:
        assert p.info()["n_docs"] == p.spec.n_docs
    ids = {int(i) for p in parts for i in p.search(queries, 5).doc_ids.ravel() if i >= 0}
    assert ids == {int(i) for i in whole.doc_ids.ravel() if i >= 0}


def test_searcher_refuses_pieces_that_do_not_match_the_plan(corpus):
    docs, pieces = corpus
    spec = plan_shards(np.array([len(d) for d in docs] + [2]), 1, 8)[0]  # the plan counted one doc more
    with pytest.raises(RuntimeError, match="plan expects 6 / 13"):
        ShardSearcher(spec, pieces, SetLimits(max_len=8), "numpy")


def test_out_of_memory_message_names_the_setting(corpus):
    docs, pieces = corpus
    spec = plan_shards(np.array([len(d) for d in docs]), 1, 8)[0]
    searcher = ShardSearcher(spec, pieces, SetLimits(max_len=8), "numpy")

    class OutOfMemoryError(Exception):
        pass

    def no_memory(*args):
        raise OutOfMemoryError("Out of memory allocating 1,024 bytes")

    searcher.index.search = no_memory
    with pytest.raises(RuntimeError, match="ran out of GPU memory while searching a batch of 1 queries.*lower query_batch_size"):
        searcher.search(SetBatch.from_lists([[1]]), 3)


@pytest.mark.slow
def test_crashed_actor_restarts_and_reloads_its_shard(ray_cluster, corpus, tmp_path):
    import ray

    docs, pieces = corpus
    spec = plan_shards(np.array([len(d) for d in docs]), 1, 8)[0]
    marker = tmp_path / "crashed"
    refs = [ray.put(piece) for piece in pieces]  # a restarted actor takes its docs from the object store again
    inputs_name, inputs = open_inputs()
    actor = actor_class(crashing_searcher(shard=spec.shard_id, after=2, marker=str(marker))).options(
        num_cpus=0, max_restarts=1, max_task_retries=0
    ).remote(inputs_name, 0, SetLimits(max_len=8), "numpy", "braun_blanquet", "scan", 1)
    supply_inputs(inputs, [spec], refs, {}, True)
    queries = SetBatch.from_lists([[2, 3]])
    first = ray.get(actor.search.remote(queries, 3))
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.search.remote(queries, 3))  # the injected crash
    assert marker.exists()
    again = _once_restarted(lambda: ray.get(actor.search.remote(queries, 3), timeout=60))  # reloaded, same answer
    assert np.array_equal(first.doc_ids, again.doc_ids)
    ray.kill(actor)
    ray.kill(inputs)


def _once_restarted(call, timeout_s: float = 60.0):
    """``call()``, sent again while Ray still restarts the actor (a call sent then fails at once
    with ActorUnavailableError, as the actor allows no task retries)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_an_actor_started_before_its_inputs_waits_for_them(ray_cluster, corpus):
    import ray

    docs, pieces = corpus
    spec = plan_shards(np.array([len(d) for d in docs]), 1, 8)[0]
    inputs_name, inputs = open_inputs()
    actor = actor_class().options(num_cpus=0).remote(inputs_name, 0, SetLimits(max_len=8), "numpy", "braun_blanquet", "scan", 1)
    ready, _ = ray.wait([actor.__ray_ready__.remote()], timeout=1.0)
    assert not ready, "the actor finished its constructor without its inputs"
    supply_inputs(inputs, [spec], [ray.put(piece) for piece in pieces], {}, True)
    info = ray.get(actor.info.remote(), timeout=60)
    assert info["n_docs"] == spec.n_docs == len(docs)
    ray.kill(actor)
    ray.kill(inputs)
