"""--dedup's groups (issue 32): connected components of a threshold self-join's pairs, against a
union-find written out here, and the groups/duplicates tables."""

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
