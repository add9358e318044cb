"""Property test of the whole job: random small corpora, any shard count, exact against the oracle."""

from __future__ import annotations

import pathlib
import tempfile

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settopk.jobs import score
from settopk.kernels import brute_force_topk

pytestmark = pytest.mark.usefixtures("ray_cluster")

# A small vocabulary makes ties and repeated ids common; the largest id exercises the top of the range.
_ids = st.one_of(st.integers(0, 9), st.just(65535))
_set = st.lists(_ids, max_size=8)


# Each example is a whole job (about 1 s): 10 random corpora and layouts a run, new ones on each CI run.
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(_set, min_size=1, max_size=60),
    queries=st.lists(_set, min_size=1, max_size=6),
    k=st.integers(1, 70),
    n_shards=st.integers(1, 3),
    batch=st.integers(1, 4),
)
@pytest.mark.slow
def test_job_equals_oracle_on_random_corpora(docs, queries, k, n_shards, batch):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "docs.txt").write_text("".join(",".join(map(str, d)) + "\n" for d in docs))
        (tmp / "q.txt").write_text("".join(",".join(map(str, q)) + "\n" for q in queries))
        (tmp / "c.yaml").write_text(f"backend: numpy\nn_shards: {n_shards}\ncpus_per_shard: 0.5\nquery_batch_size: {batch}\nmax_len: 8\n")
        args = ["--docs", str(tmp / "docs.txt"), "--queries", str(tmp / "q.txt"), "--out", str(tmp / "out"), "--k", str(k), "--config", str(tmp / "c.yaml"), "--quiet"]
        assert score.main(args) == 0
        d = pq.read_table(tmp / "out").to_pydict()
    got = list(zip(d["query_id"], d["rank"], d["doc_id"], d["overlap"], d["doc_len"]))
    expected = [
        (str(qi), rank, doc_id, ov, dl)
        for qi, result in enumerate(brute_force_topk(docs, queries, k))
        for rank, (doc_id, ov, dl) in enumerate(result, start=1)
    ]
    assert got == expected
