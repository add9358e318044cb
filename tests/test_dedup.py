"""--dedup's groups (issue 32): connected components of a threshold self-join's pairs, against a
union-find written out here, and the groups/duplicates tables."""

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from settopk.jobs.dedup import components, dedup_tables


def _union_find(pairs):
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)  # the root is the least id
    return {x: find(x) for x in parent}


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=40))
@settings(max_examples=60, deadline=None)
def test_components_match_union_find(pairs):
    left = np.array([a for a, _ in pairs], np.int64)
    right = np.array([b for _, b in pairs], np.int64)
    nodes, group = components(left * 1000, right * 1000)  # ids far apart: compaction must not matter
    want = _union_find(pairs)
    assert nodes.tolist() == sorted(x * 1000 for x in want)
    assert group.tolist() == [want[x // 1000] * 1000 for x in nodes.tolist()]


def test_dedup_tables():
    pairs = pa.table({"query_id": ["5", "7", "1", "20"], "doc_id": pa.array([7, 9, 3, 21], pa.int64())})
    groups, duplicates = dedup_tables(pairs)
    assert groups.to_pydict() == {"doc_id": [1, 3, 5, 7, 9, 20, 21], "group_id": [1, 1, 5, 5, 5, 20, 20],
                                  "group_size": [2, 2, 3, 3, 3, 2, 2]}
    assert duplicates.to_pydict() == {"doc_id": [3, 7, 9, 21], "kept_doc_id": [1, 5, 5, 20]}
    empty_groups, empty_dups = dedup_tables(pa.table({"query_id": pa.array([], pa.string()),
                                                      "doc_id": pa.array([], pa.int64())}))
    assert empty_groups.num_rows == 0 and empty_dups.num_rows == 0


def test_dedup_refuses_rows_that_are_not_a_self_join():
    with pytest.raises(ValueError, match="--self-join"):
        dedup_tables(pa.table({"query_id": ["q1"], "doc_id": pa.array([1], pa.int64())}))


@given(st.lists(st.integers(1, 4), min_size=1, max_size=12), st.lists(st.booleans(), min_size=12, max_size=12),
       st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=10))
@settings(max_examples=60, deadline=None)
def test_group_components_equal_a_union_find_over_the_members_pairs(sizes, passes, links):
    """Groups of identical sets (``sizes[g]`` copies of ``{g}``), whether each passes with itself,
    and pairs of groups: the components over the groups equal a union-find over every pair of
    docs they stand for."""
    from settopk.kernels import SetBatch
    from settopk.kernels.join.prepare import prepare_sets
    from settopk.shards.components import group_components

    token = [g for g, size in enumerate(sizes) for _ in range(size)]  # each doc's one token: its group
    js = prepare_sets(SetBatch.from_lists([[g] for g in token]), np.arange(len(sizes), dtype=np.int32))
    ids = np.arange(len(token), dtype=np.int64) * 3 + 5
    group_of_token = {g: int(js.group_of[token.index(g)]) for g in range(len(sizes))}
    self_pass = np.array([passes[token[int(js.group_rep[j])]] for j in range(js.n_groups)])
    links = [(a, b) for a, b in links if a < len(sizes) and b < len(sizes) and a != b]
    group_a = np.array([group_of_token[a] for a, _ in links], np.int64)
    group_b = np.array([group_of_token[b] for _, b in links], np.int64)
    linked = {g for link in links for g in link}
    pairs = [(int(ids[i]), int(ids[j])) for i in range(len(token)) for j in range(i + 1, len(token))
             if token[i] == token[j] and (passes[token[i]] or token[i] in linked)  # a linked group joins its members
             or (token[i], token[j]) in links or (token[j], token[i]) in links]
    nodes, group = group_components(js, ids, self_pass, group_a, group_b)
    assert np.all(np.diff(nodes) > 0) and dict(zip(nodes.tolist(), group.tolist())) == _union_find(pairs)


@given(st.lists(st.tuples(st.integers(0, 19), st.integers(0, 19)), min_size=1, max_size=40),
       st.sampled_from([(True, False), (True, True), (False, True)]))
@settings(max_examples=25, deadline=None)
def test_stage_dedup_takes_a_covered_shards_pairs_from_its_groups(tmp_path_factory, pairs, covered):
    """Docs 0..9 are one length bucket (shard 0, length 2), 10..19 another (shard 1, length 3).
    A covered shard's own groups stand in for its pairs: the driver reads only the other pairs
    (across the shards, or inside an uncovered one), and the groups equal a union-find over all."""
    import pyarrow.parquet as pq

    from settopk.jobs.dedup import ShardGroups, stage_dedup
    from settopk.jobs.output import RESULT_SCHEMA, part_name
    from settopk.shards.location import Location

    tmp = tmp_path_factory.mktemp("stage")
    work, out = tmp / "work", tmp / "out"
    work.mkdir()
    pairs = [(a, b) for a, b in pairs if a != b]
    length = lambda d: 2 if d < 10 else 3  # noqa: E731
    rows = {"query_id": [str(a) for a, _ in pairs], "rank": [1] * len(pairs), "doc_id": [b for _, b in pairs],
            "score": [1.0] * len(pairs), "overlap": [1] * len(pairs), "query_len": [length(a) for a, _ in pairs],
            "doc_len": [length(b) for _, b in pairs]}
    pq.write_table(pa.table(rows, schema=RESULT_SCHEMA), work / part_name(0))
    shard = lambda d: 0 if d < 10 else 1  # noqa: E731
    groups = []
    for s in (0, 1):
        inside = [(a, b) for a, b in pairs if shard(a) == shard(b) == s]
        found = _union_find(inside)
        groups.append((np.array(sorted(found), np.int64), np.array([found[d] for d in sorted(found)], np.int64))
                      if covered[s] else None)
    plan_of_length = np.array([-1, -1, 0, 1, -1], np.int64)
    staged, section = stage_dedup(Location.real(work), [part_name(0)], Location.real(out),
                                  from_shards=ShardGroups(groups, plan_of_length))
    want = _union_find(pairs)
    got = pq.read_table(os.path.join(staged.path, "groups")).to_pydict()
    assert dict(zip(got["doc_id"], got["group_id"])) == want
    read = [p for p in pairs if not (shard(p[0]) == shard(p[1]) and covered[shard(p[0])])]
    assert section["edges"] == len(read) and section["shards_from_groups"] == [s for s in (0, 1) if covered[s]]


def test_stage_dedup_reads_no_pair_when_one_shard_has_them_all(tmp_path):
    import pyarrow.parquet as pq

    from settopk.jobs.dedup import ShardGroups, stage_dedup
    from settopk.jobs.output import part_name
    from settopk.shards.location import Location

    work = tmp_path / "work"
    work.mkdir()
    (work / part_name(0)).write_bytes(b"not parquet: a part that is read would fail")
    groups = [(np.array([3, 4, 9], np.int64), np.array([3, 3, 3], np.int64))]
    staged, section = stage_dedup(Location.real(work), [part_name(0)], Location.real(tmp_path / "out"),
                                  from_shards=ShardGroups(groups, np.zeros(5, np.int64)))
    got = pq.read_table(os.path.join(staged.path, "duplicates")).to_pydict()
    assert got == {"doc_id": [4, 9], "kept_doc_id": [3, 3]} and section["edges"] == 0
