"""A threshold self-join whose pairs explode (issue 46 item 5): many identical sets. The job holds
its pairs in bounded pieces (``output.pairs_per_piece``): the merge tasks merge and write pieces of
whole queries, the driver cuts later query batches to the pairs per query seen, ``--dedup``
contracts its pairs a chunk at a time; the rows and groups equal the in-process join's."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import settopk
from settopk.jobs import score as job
from settopk.jobs.output import read_manifest
from tests.job_helpers import job_config, write_sets

COPIES = 120
PIECE = 1000


@pytest.mark.parametrize("backend", ["numpy"])
def test_a_self_join_of_many_identical_sets_holds_bounded_pieces(ray_cluster, tmp_path, backend):
    sets = [[1, 2, 3, 4], [1, 2, 3, 5], [7, 8], [9]]
    docs = [sets[i % len(sets)] for i in range(len(sets) * COPIES)] + [[1, 2, 3, 4, 5, 6]]
    docs_path = write_sets(tmp_path / "docs.txt", docs)
    cfg = job_config(tmp_path, backend=backend, n_shards=2, query_batch_size=128, query_chunk_size=128,
                     output={"pairs_per_piece": PIECE})
    out = tmp_path / "out"
    assert job.main(["--docs", docs_path, "--self-join", "--dedup", "--out", str(out), "--threshold", "0.6",
                     "--score", "jaccard", "--config", cfg, "--quiet"]) == 0
    manifest = read_manifest(out)
    pairs = manifest["counts"]["pairs"]
    per_query = COPIES * 2  # [1,2,3,4] ~ [1,2,3,5] at 3/5: a query's pairs span both groups
    assert pairs > 30 * PIECE  # the run is far beyond one piece
    held = manifest["threshold"]["held"]
    assert held["pairs_per_piece"] == PIECE and PIECE // 2 < held["merge_piece_pairs_max"] <= PIECE + per_query
    assert held["batch_size_min"] < 128 and held["batch_size_min"] * per_query <= 2 * PIECE
    # The first chunk's batches are sized too: by a first call of PIECE // (MAX_K + 1) queries (one
    # here), whose answer cannot pass PIECE; no shard answer came near the 128 x 240 of a full batch.
    assert held["first_call_queries"] == 1 and 0 < held["shard_pairs_max"] <= 2 * PIECE
    # Each numpy shard groups its own docs (its index verifies the pairs of groups): of the pairs,
    # only those across the two shards are read back.
    assert manifest["dedup"]["shards_from_groups"] == [0, 1] and manifest["dedup"]["edges"] < pairs
    index = settopk.Index.build(docs_path, score="jaccard", backend=backend)
    assert index.self_join("0.6").to_arrow().equals(pq.read_table(out / "pairs"))
    groups, duplicates = settopk.dedup(index, "0.6", score="jaccard")
    assert groups.equals(pq.read_table(out / "groups")) and duplicates.equals(pq.read_table(out / "duplicates"))
    assert groups["group_id"].unique().to_pylist() == [0, 2, 3]  # [1,2,3,4], [1,2,3,5] and [1..6] joined
    # With --k, a shard answers at most k per query (after the self-join rule): the first call
    # takes PIECE // k queries (the chunk's 128 at most).
    capped = tmp_path / "capped"
    assert job.main(["--docs", docs_path, "--self-join", "--out", str(capped), "--threshold", "0.6", "--k", "5",
                     "--score", "jaccard", "--config", cfg, "--quiet"]) == 0
    assert read_manifest(capped)["threshold"]["held"]["first_call_queries"] == min(128, PIECE // 5)
    assert index.self_join("0.6", k=5).to_arrow().equals(pq.read_table(capped))


@pytest.mark.parametrize("piece", [100, 100_000])
def test_a_cpu_self_join_kept_or_past_its_budget_writes_the_in_process_rows(ray_cluster, tmp_path, piece):
    """The cpu shards answer their own docs from their self-join when it holds at most
    4 x pairs_per_piece entries (here ~1,000: kept at 100,000), else they probe them batch by
    batch (at 100): the rows are the same either way. ``--dedup`` groups a shard's own docs from
    the self-join it keeps, reading only the other pairs back, a chunk of pairs_per_piece at a
    time: the groups are the same too."""
    sets = [[1, 2, 3, 4], [1, 2, 3, 5], [7, 8], [9]]
    docs = [sets[i % len(sets)] for i in range(len(sets) * COPIES)] + [[1, 2, 3, 4, 5, 6]]
    docs_path = write_sets(tmp_path / "docs.txt", docs)
    cfg = job_config(tmp_path, backend="cpu", n_shards=2, query_chunk_size=128, output={"pairs_per_piece": piece})
    out = tmp_path / "out"
    assert job.main(["--docs", docs_path, "--self-join", "--dedup", "--out", str(out), "--threshold", "0.6",
                     "--score", "jaccard", "--config", cfg, "--quiet"]) == 0
    index = settopk.Index.build(docs_path, score="jaccard", backend="cpu")
    assert index.self_join("0.6").to_arrow().equals(pq.read_table(out / "pairs"))
    groups, duplicates = settopk.dedup(index, "0.6", score="jaccard")
    assert groups.equals(pq.read_table(out / "groups")) and duplicates.equals(pq.read_table(out / "duplicates"))
    dedup = read_manifest(out)["dedup"]
    # At 100 the shard of the long sets (120 x 120 pairs of groups) keeps no self-join: its pairs are read.
    assert dedup["shards_from_groups"] == ([0] if piece == 100 else [0, 1])
    assert (dedup["edges"] > 0) == (piece == 100)
    if piece == 100:  # 14,400 pairs read, contracted 100 at a time
        assert dedup["edges"] > 100 * piece and 0 < dedup["largest_chunk"] <= piece
