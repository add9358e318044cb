"""The index contract (settopk.kernels.index): build_index, the backend registry, the planner's cost model, and
that none of it needs CuPy."""

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from settopk.kernels import (
    BACKENDS,
    NumpyShardIndex,
    SetBatch,
    ShardIndex,
    TopK,
    brute_force_topk,
    build_index,
    empty_topk,
    register_backend,
    registered_backends,
    score_key,
    search_cost_per_doc,
    unregister_backend,
    warm_up_backend,
)
from settopk.kernels.cost import cupy_search_cost_per_doc
from settopk.shards import plan_shards, plan_shards_from_counts
from settopk.shards.inputs import Corpus, SetLimits
from settopk.shards.searcher import ShardSearcher

_DOCS = [[1, 2, 3], [2, 3], [4], [1, 4, 5, 6], [], [2, 5]]
_QUERIES = [[2, 3], [4, 5], [9], []]


def _rows(top: TopK):
    return [[(int(i), int(o), int(d)) for i, o, d in zip(*row) if i >= 0] for row in zip(*top)]


class _OracleIndex:
    """A stand-in backend, as a benchmark would register one: brute force over the docs."""

    def __init__(self, doc_ids, docs, *, max_len, vocab_size, score, routing, threads):
        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        self._docs = docs.to_lists()
        self.max_len, self.score, self.routing = max_len, score, routing
        self.postings_bytes = self.last_skipped = 0
        self.last_routing = {"scan": 0, "postings": 0}
        self.built_with = vocab_size

    @property
    def n_docs(self) -> int:
        return len(self.doc_ids)

    def search(self, queries, k, floor_key=None):
        out = empty_topk(queries.n_sets, k)
        for q, rows in enumerate(brute_force_topk(self._docs, queries.to_lists(), k, self.doc_ids, self.score)):
            if floor_key is not None:
                ql = queries.lengths[q]
                rows = [r for r in rows if score_key(r[1], ql, r[2], self.max_len, self.score) >= floor_key[q]]
            for j, row in enumerate(rows):
                out.doc_ids[q, j], out.overlap[q, j], out.doc_len[q, j] = row
        self.last_routing = {"scan": queries.n_sets, "postings": 0}
        return out


@pytest.fixture
def oracle_backend():
    register_backend("oracle", _OracleIndex, lambda max_len: np.arange(max_len + 1) * 2 + 1)
    yield "oracle"
    unregister_backend("oracle")


def test_import_kernels_and_its_index_needs_no_cupy():
    """`import settopk.kernels` (and settopk.kernels.index, settopk.kernels.cost, the settopk.kernels.cuda package) must work where
    CuPy is absent: CuPy is made unimportable in a fresh interpreter, and the NumPy backend still builds."""
    code = """
import sys

class _NoCupy:
    def find_spec(self, name, path=None, target=None):
        if name == "cupy" or name.startswith(("cupy.", "cupyx")):
            raise ImportError("cupy is blocked in this test")
        return None

sys.meta_path.insert(0, _NoCupy())
import numpy as np
import settopk.kernels, settopk.kernels.index, settopk.kernels.cost, settopk.kernels.cuda, settopk.kernels.cuda.floors
from settopk.kernels import SetBatch, build_index, search_cost_per_doc
index = build_index("numpy", np.arange(2), SetBatch.from_lists([[1, 2], [3]]), max_len=4)
assert index.search(SetBatch.from_lists([[2]]), 1).doc_ids.tolist() == [[0]]
assert search_cost_per_doc("cupy", 8).tolist() == [16] + [24] * 8
try:
    build_index("cupy", np.arange(1), SetBatch.from_lists([[1]]), max_len=4)
except ImportError:
    pass
else:
    raise AssertionError("a cupy index was built without CuPy")
assert not any(m == "cupy" or m.startswith("cupy.") for m in sys.modules), sorted(sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_build_index_numpy_is_the_numpy_backend_and_meets_the_contract():
    docs, queries = SetBatch.from_lists(_DOCS), SetBatch.from_lists(_QUERIES)
    doc_ids = np.array([3, 10, 11, 20, 21, 40])
    index = build_index("numpy", doc_ids, docs, max_len=8, score="jaccard", routing="auto")
    assert isinstance(index, NumpyShardIndex) and isinstance(index, ShardIndex)
    assert (index.max_len, index.score, index.routing, index.n_docs) == (8, "jaccard", "auto", 6)
    direct = NumpyShardIndex(docs, doc_ids, 8, "jaccard", routing="auto").search(queries, 3)
    got = index.search(queries, 3)
    assert _rows(got) == _rows(direct) == brute_force_topk(_DOCS, _QUERIES, 3, doc_ids.tolist(), "jaccard")
    assert {"scan", "postings"} <= set(index.last_routing) and index.postings_bytes > 0
    assert index.last_routing["scan"] + index.last_routing["postings"] == len(_QUERIES)


def test_build_index_rejects_an_unknown_backend_and_passes_argument_errors_on():
    docs = SetBatch.from_lists(_DOCS)
    with pytest.raises(ValueError, match="backend must be one of 'numpy', 'cpu', 'cupy', found 'tpu'"):
        build_index("tpu", np.arange(6), docs, max_len=8)
    with pytest.raises(ValueError, match="routing"):
        build_index("numpy", np.arange(6), docs, max_len=8, routing="sometimes")
    with pytest.raises(ValueError):
        build_index("numpy", np.arange(6), docs, max_len=8, score="hamming")


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed here")
def test_build_index_cupy_without_cupy_is_an_import_error():
    with pytest.raises(ImportError):
        build_index("cupy", np.arange(6), SetBatch.from_lists(_DOCS), max_len=8)


def test_search_cost_per_doc_per_backend():
    assert search_cost_per_doc("numpy", 5).tolist() == [0, 1, 2, 3, 4, 5]
    gpu = search_cost_per_doc("cupy", 17)
    assert gpu.dtype == np.int64 and np.array_equal(gpu, cupy_search_cost_per_doc(17))
    with pytest.raises(ValueError, match="backend must be one of"):
        search_cost_per_doc("auto", 8)  # the job resolves "auto" before it plans
    counts = np.array([0, 80, 0, 0, 0, 0, 0, 0, 10])  # equal ids; short docs cost more on the GPU
    by_ids = plan_shards_from_counts(counts, 2, doc_cost=search_cost_per_doc("numpy", 8))
    assert by_ids == plan_shards_from_counts(counts, 2)
    by_gpu = plan_shards_from_counts(counts, 2, doc_cost=search_cost_per_doc("cupy", 8))
    assert [(s.n_docs, s.n_tokens) for s in by_gpu] == [(80, 80), (10, 80)]


def test_registered_backend_is_built_planned_and_searched_like_a_product_one(oracle_backend):
    assert registered_backends() == BACKENDS + ("oracle",)
    docs, queries = SetBatch.from_lists(_DOCS), SetBatch.from_lists(_QUERIES)
    index = build_index(oracle_backend, np.arange(6), docs, max_len=8, vocab_size=100)
    assert isinstance(index, ShardIndex) and index.built_with == 100
    assert _rows(index.search(queries, 2)) == _rows(NumpyShardIndex(docs, np.arange(6), 8).search(queries, 2))
    assert search_cost_per_doc(oracle_backend, 3).tolist() == [1, 3, 5, 7]
    # The shard searcher builds it by name, as the job does a product backend, floors included.
    ids = np.arange(len(_DOCS), dtype=np.int64)
    pieces = [Corpus(ids, docs, 0, "parquet", ())]
    plan = plan_shards(docs.lengths, 2, 8)
    searchers = [ShardSearcher(spec, pieces, SetLimits(65536, 8), oracle_backend) for spec in plan]
    references = [ShardSearcher(spec, pieces, SetLimits(65536, 8), "numpy") for spec in plan]
    assert len(plan) == 2 and all(isinstance(s.index, _OracleIndex) for s in searchers)
    for searcher, reference in zip(searchers, references):
        assert _rows(searcher.search(queries, 3)) == _rows(reference.search(queries, 3))
    home = references[0].search(queries, 3)  # the first shard's lists give the second its floors
    rows = np.arange(len(_QUERIES))
    assert _rows(searchers[1].search(queries, 3, None, [rows], home)) == \
        _rows(references[1].search(queries, 3, None, [rows], home))


def test_register_backend_refuses_clashes_and_non_callables(oracle_backend):
    with pytest.raises(ValueError, match="already registered"):
        register_backend("numpy", _OracleIndex, np.arange)
    with pytest.raises(ValueError, match="already registered"):
        register_backend(oracle_backend, _OracleIndex, np.arange)
    with pytest.raises(TypeError):
        register_backend("other", "not a factory", np.arange)
    with pytest.raises(TypeError):
        register_backend("other", _OracleIndex, np.arange, warm_up="not a warm-up")
    with pytest.raises(ValueError):
        register_backend("", _OracleIndex, np.arange)
    with pytest.raises(ValueError, match="product backend"):
        unregister_backend("cupy")
    with pytest.raises(ValueError, match="not registered"):
        unregister_backend("other")
    assert "other" not in registered_backends()


def test_warm_up_backend_calls_the_registered_hook_once_per_call():
    calls = []
    register_backend("warmed", _OracleIndex, np.arange, warm_up=lambda max_len, routing: calls.append((max_len, routing)))
    try:
        assert warm_up_backend("warmed", 16, "auto") is True and calls == [(16, "auto")]
        assert warm_up_backend("numpy", 16) is False  # nothing compiled to load
        with pytest.raises(ValueError, match="backend must be one of"):
            warm_up_backend("absent", 16)
    finally:
        unregister_backend("warmed")


def test_set_batch_take_slice_and_concat_keep_each_set():
    a = SetBatch.from_lists([[1, 2], [3], [], [4, 5, 6]])
    b = SetBatch.from_lists([[7], [8, 9]])
    assert a.take(np.array([3, 0, 3, 2])).to_lists() == [[4, 5, 6], [1, 2], [4, 5, 6], []]
    for lo, hi in ((0, 4), (1, 3), (2, 3), (3, 4), (2, 2)):
        part = a.slice(lo, hi)
        assert part.to_lists() == a.to_lists()[lo:hi] and part.offsets[0] == 0
        assert part.tokens.base is a.tokens or part.tokens.base is a.tokens.base  # a view: no gather
    both = SetBatch.concat([a, b])
    assert both.to_lists() == a.to_lists() + b.to_lists() and both.offsets.dtype == np.int64
    assert SetBatch.concat([]).n_sets == 0 and SetBatch.concat([b]).to_lists() == b.to_lists()
