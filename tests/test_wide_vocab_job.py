"""Issue 31: a shared vocabulary above 65536 tokens runs on backend cpu with a larger vocab_size,
end to end, exactly (against the brute-force oracle on the original tokens, ties included); the
GPU backends refuse such a vocab_size at config time with the reason."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from settopk.configs import ConfigError, JobConfig
from settopk.jobs import score
from settopk.jobs.output import read_manifest
from settopk.kernels import brute_force_topk
from tests.job_helpers import job_config

_SHIFT = 10**12
_K = 12


def _corpus():
    """300 docs: 274 blocks of 250 tokens (68,500 distinct) and 26 random parts of them (other
    lengths, ties); 274 queries holding 240 tokens of one block each (65,760 shared tokens in all,
    more than 65536) and 10 query-only tokens."""
    rng = np.random.default_rng(31)
    base = [list(range(250 * i, 250 * i + 250)) for i in range(274)]
    docs = base + [sorted(rng.choice(base[int(i)], int(rng.integers(1, 251)), replace=False).tolist())
                   for i in rng.integers(0, 274, 26)]
    queries = []
    for j in range(274):
        picked = rng.choice(base[j], 240, replace=False).tolist()
        queries.append(sorted(picked) + [10**6 + 10 * j + t for t in range(10)])
    return docs, queries


def _parquet(path, id_column, ids, sets, f):
    pq.write_table(pa.table({id_column: ids, "tokens": pa.array([[f(x) for x in s] for s in sets], pa.list_(pa.int64()))}), path)
    return str(path)


def _expected(docs, queries, f):
    rows = []
    for qi, (q, found) in enumerate(zip(queries, brute_force_topk([[f(x) for x in d] for d in docs],
                                                                  [[f(x) for x in q] for q in queries], _K))):
        for rank, (doc_id, ov, dl) in enumerate(found, start=1):
            rows.append((str(qi), rank, doc_id, ov / max(len(q), dl, 1), ov, len(q), dl))
    return rows


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("name, f, dense_ids", [
    ("int64-shifted", lambda x: 7 * x + _SHIFT, "shared-first"),  # mapped by the token map, uint32 dense ids
    pytest.param("int64-dense", lambda x: 7 * x + 3, "identity",  # ids below vocab_size: read as uint32 ids as they are
                 marks=pytest.mark.slow),  # the fast loop keeps one end-to-end run of the feature
])
def test_wide_shared_vocabulary_runs_on_cpu_exactly(tmp_path, name, f, dense_ids):
    docs, queries = _corpus()
    d = _parquet(tmp_path / "d.parquet", "doc_id", list(range(len(docs))), docs, f)
    q = _parquet(tmp_path / "q.parquet", "query_id", [str(i) for i in range(len(queries))], queries, f)
    out = tmp_path / "out"
    cfg = job_config(tmp_path, backend="cpu", cpus_per_shard=1, max_len=255, vocab_size=1_000_000)
    assert score.main(["--docs", d, "--queries", q, "--out", str(out), "--k", str(_K), "--config", cfg, "--quiet"]) == 0
    table = pq.read_table(out).to_pydict()
    got = list(zip(*(table[c] for c in ("query_id", "rank", "doc_id", "score", "overlap", "query_len", "doc_len"))))
    assert got == _expected(docs, queries, f)
    tokens = read_manifest(out)["inputs"]["tokens"]
    assert tokens["distinct_shared_tokens"] == 65_760 > 65536
    assert tokens["dense_ids"] == dense_ids and tokens["vocab_size"] == 1_000_000


@pytest.mark.parametrize("backend", ["cupy", "auto", "cpu", "numpy"])
def test_every_backend_takes_a_vocab_size_up_to_2_24(backend):
    assert JobConfig(backend=backend, vocab_size=1 << 24).vocab_size == 1 << 24
    with pytest.raises(ConfigError, match=r"vocab_size must be an integer in \[1, 16777216\]"):
        JobConfig(backend=backend, vocab_size=(1 << 24) + 1)


def test_synthetic_uint16_tokens_refuse_a_wide_vocabulary():
    from settopk.configs import SyntheticConfig
    from settopk.jobs.synthetic.spec import SyntheticSpec

    with pytest.raises(ConfigError, match="token_type 'uint16' holds ids below 65536"):
        JobConfig(backend="cpu", vocab_size=1 << 24, synthetic=SyntheticConfig(vocab_size=1 << 24))
    assert JobConfig(backend="cpu", vocab_size=1 << 24,
                     synthetic=SyntheticConfig(vocab_size=1 << 24, token_type="int64")).synthetic.vocab_size == 1 << 24
    with pytest.raises(ValueError, match="use token_type 'int64' or 'string'"):
        SyntheticSpec(n_docs=10, n_queries=1, vocab_size=70_000)


def test_auto_picks_the_gpu_for_a_wide_vocab_size():
    from settopk.jobs.cluster import resolve_backend

    assert resolve_backend(JobConfig(backend="auto", vocab_size=1_000_000), {"GPU": 1.0, "CPU": 4.0})[0] == "cupy"
    assert resolve_backend(JobConfig(backend="auto", vocab_size=1_000_000), {"CPU": 4.0})[0] == "cpu"
