"""The cost models (settopk.kernels.cost): the per-doc search cost the planner balances, and the routing models."""

import numpy as np

from settopk.kernels import SetBatch
from settopk.kernels.cost import (
    cupy_route_mask,
    cupy_search_cost_per_doc,
    numpy_postings_cheaper,
    numpy_search_cost_per_doc,
)
from settopk.kernels.postings import build_postings, postings_cost
from settopk.shards import plan_shards_from_counts


def test_gpu_search_cost_pads_ids_to_groups_of_8_plus_a_per_doc_overhead():
    cost = cupy_search_cost_per_doc(17)
    assert cost.shape == (18,) and cost.dtype == np.int64
    assert cost[[0, 1, 8, 9, 16, 17]].tolist() == [16, 24, 24, 32, 32, 40]


def test_cpu_search_cost_is_the_ids_so_the_plan_is_the_plain_one():
    cost = numpy_search_cost_per_doc(9)
    assert cost.dtype == np.int64 and cost.tolist() == list(range(10))
    counts = np.array([3, 0, 40, 7, 0, 0, 12, 1, 0, 5])
    assert plan_shards_from_counts(counts, 3, doc_cost=cost) == plan_shards_from_counts(counts, 3)


def test_gpu_cost_model_routes_whole_scan_groups():
    slots, tiles = 689_000_000, 120  # the STI2 shape: a query's scan costs about 7.6 us, its postings about 4 us
    uniform = np.full(400, 665_000, dtype=np.int64)
    uniform[:5] = 2_500_000  # dearer than a scan on their own
    assert cupy_route_mask("scan", uniform, tiles, slots, 32).sum() == 0
    assert cupy_route_mask("postings", uniform, tiles, slots, 32).all()
    alone = cupy_route_mask("auto", uniform, tiles, slots, 1)
    assert alone.sum() == 395 and not alone[:5].any()
    # In groups of 32 the 5 left over would cost a whole group of scan: they go to the postings too.
    assert cupy_route_mask("auto", uniform, tiles, slots, 32).all()
    # Frequent ids: nothing is routed, and a saving below ROUTING_BATCH_S routes nothing either.
    assert not cupy_route_mask("auto", np.full(400, 30_000_000, dtype=np.int64), tiles, slots, 32).any()
    assert not cupy_route_mask("auto", uniform[5:60], tiles, slots, 32).any()  # 55 x 3.7 us saved: not worth a batch
    assert cupy_route_mask("auto", np.zeros(0, dtype=np.int64), tiles, slots, 32).shape == (0,)
    # A wide shard's build: the 1.4 ms saved pays for ROUTING_BATCH_S and a 0.2 ms build, not a 2 ms one.
    assert cupy_route_mask("auto", uniform, tiles, slots, 32, build_s=0.0002).all()
    assert not cupy_route_mask("auto", uniform, tiles, slots, 32, build_s=0.002).any()
    assert cupy_route_mask("postings", uniform, tiles, slots, 32, build_s=1.0).all()


def test_cpu_cost_model_sends_rare_ids_to_the_postings_and_frequent_ones_to_the_scan():
    # 200,000 docs of 50 ids: a scan reads 10 M ids (about 6 ms); ids in 1 of 1000 docs cost far less.
    n_doc_ids = 10_000_000
    entries = np.array([0, 10 * 200, 50 * 200_000], dtype=np.int64)
    assert numpy_postings_cheaper(entries, n_doc_ids).tolist() == [True, True, False]
    assert not numpy_postings_cheaper(entries, 1000).any()  # a tiny shard: the per-query cost dominates
    docs = SetBatch.from_lists([[1, 2], [2, 3], [2]])
    queries = SetBatch.from_lists([[1], [2, 3]])
    entries = postings_cost(queries, build_postings(docs).doc_freq)
    assert entries.tolist() == [1, 4] and numpy_postings_cheaper(entries, len(docs.tokens)).shape == (2,)
