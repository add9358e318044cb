"""The self-join written range by range (issue 46): :class:`settopk.kernels.join.host_join.SelfJoin`,
:func:`settopk.kernels.interleave_pairs`, and a shard searcher answering a symmetric self-join's
queries from its own self-join (its home queries) and by probing (the others), against the
brute-force oracle under the self-join rule."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.join_helpers import corpora, doc_ids

from settopk.kernels import (SetBatch, ThresholdPairs, brute_force_threshold, build_index, interleave_pairs, parse_threshold,
                             self_join_keep)

pytest.importorskip("numba")

from settopk.kernels.join.host_join import SelfJoin, SelfJoinTooLarge  # noqa: E402
from settopk.shards.searcher import ShardSearcher  # noqa: E402


def _oracle_rows(docs, ids, t, score, include_self=False):
    """Per doc as a query: its (doc id, overlap, doc length) pairs under the self-join rule."""
    every = brute_force_threshold(docs, docs, parse_threshold(t, score), doc_ids=ids.tolist(), score=score)
    size = [len(set(d)) for d in docs]
    return [[p for p in every[q] if self_join_keep(ids[q], size[q], p[0], p[2], score, include_self)]
            for q in range(len(docs))]


def _rows(pairs: ThresholdPairs):
    return [pairs.row(i) for i in range(pairs.n_queries)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=corpora(), score=st.sampled_from(["jaccard", "braun_blanquet", "cosine", "dice", "overlap"]),
       t=st.sampled_from(["1/2", "2/3", "1", "1/7"]), include_self=st.booleans(), cut=st.integers(0, 45),
       k=st.sampled_from([None, None, 1, 3]))
def test_any_range_of_queries_equals_the_oracle(docs, score, t, include_self, cut, k):
    if score == "overlap":
        t = {"1/2": "1", "2/3": "2", "1": "3", "1/7": "1"}[t]
    ids = doc_ids(len(docs))
    join = SelfJoin(SetBatch.from_lists(docs), ids, t, score, 64, include_self=include_self, k=k, threads=2)
    try:
        lo = min(cut, len(docs))
        hi = min(len(docs), lo + 1 + cut // 3)
        expected = [row[:k] for row in _oracle_rows(docs, ids, t, score, include_self)]  # each query's best k
        part = join.rows(lo, hi)
        assert _rows(part) == expected[lo:hi]
        assert np.array_equal(np.diff(join.offsets)[lo:hi], part.counts)
        assert _rows(join.rows(0, len(docs))) == expected
        assert join.rows(lo, lo).n_queries == 0
        with pytest.raises(ValueError, match="not within"):
            join.rows(0, len(docs) + 1)
    finally:
        join.close()


@pytest.mark.parametrize("include_self", [False, True])
@pytest.mark.parametrize("k", [None, 7])
@pytest.mark.parametrize("score", ["jaccard", "dice"])
def test_many_copies_in_lists_of_one_score_equal_the_oracle(include_self, k, score):
    """Groups of 30-60 identical sets, shuffled: a query group's list holds runs of one score longer
    than the insertion sort's (the targets' members merged by position), and lists where the member
    rule applies to some entries only (a group paired with itself and with others), whose rows
    count their pairs by binary search."""
    rng = np.random.default_rng(5)
    docs = [[1, 2]] * 40 + [[1, 3]] * 30 + [[1]] * 35 + [[2]] * 31 + [[1, 2, 3]] * 60 + [[1, 2, 4]] * 33 + [[4, 5]] * 3
    docs = [docs[i] for i in rng.permutation(len(docs))]
    ids = doc_ids(len(docs))
    expected = [row[:k] for row in _oracle_rows(docs, ids, "1/2", score, include_self)]
    join = SelfJoin(SetBatch.from_lists(docs), ids, "1/2", score, 8, include_self=include_self, k=k, threads=2)
    try:
        assert _rows(join.rows(0, len(docs))) == expected
        assert _rows(join.rows(17, 101)) == expected[17:101]
    finally:
        join.close()


def test_a_self_join_past_its_budget_is_refused_by_the_probe_or_the_lists():
    """Many copies of two sets: few pairs of groups, many list entries (the copies)."""
    docs = SetBatch.from_lists([[1, 2, 3]] * 30 + [[1, 2, 4]] * 30 + [[7, 8]])
    ids = np.arange(docs.n_sets)
    join = SelfJoin(docs, ids, "1/2", "jaccard", 8, max_entries=200)  # 60 + 60 entries: fits
    assert join.offsets[-1] == 60 * 59 // 2  # 30 * 29 / 2 twice inside, 30 * 30 across
    join.close()
    with pytest.raises(SelfJoinTooLarge, match="lists have 120 entries"):
        SelfJoin(docs, ids, "1/2", "jaccard", 8, max_entries=100)
    distinct = SetBatch.from_lists([[i, i + 1] for i in range(40)] + [[i, i + 2] for i in range(40)])
    with pytest.raises(SelfJoinTooLarge, match="pairs of groups"):
        SelfJoin(distinct, np.arange(distinct.n_sets), "1/3", "jaccard", 8, max_entries=5)


def test_containment_and_a_zero_threshold_are_refused():
    docs = SetBatch.from_lists([[1, 2], [2]])
    with pytest.raises(ValueError, match="containment is not symmetric"):
        SelfJoin(docs, np.arange(2), "0.5", "containment", 8)
    with pytest.raises(ValueError, match="T == 0"):
        SelfJoin(docs, np.arange(2), "0", "jaccard", 8)


def test_interleave_puts_each_part_at_its_rows():
    a = ThresholdPairs(np.array([0, 2, 2]), np.array([5, 6]), np.array([1, 1], np.int32), np.array([3, 4], np.int32))
    b = ThresholdPairs(np.array([0, 1]), np.array([9]), np.array([2], np.int32), np.array([2], np.int32))
    out = interleave_pairs(4, [(np.array([0, 3]), a), (np.array([1]), b)])
    assert [out.row(i) for i in range(4)] == [[(5, 1, 3), (6, 1, 4)], [(9, 2, 2)], [], []]
    assert interleave_pairs(2, [(np.arange(2), a)]) is a
    with pytest.raises(ValueError, match="names 1 rows"):
        interleave_pairs(2, [(np.array([0]), a)])


class _Searcher(ShardSearcher):
    """A shard searcher over given docs, without the job's loading (its index built here)."""

    def __init__(self, docs, ids, score, backend="cpu"):
        kwargs = {"threads": 2} if backend == "cpu" else {}
        self.index = build_index(backend, ids, SetBatch.from_lists(docs), max_len=64, vocab_size=64, score=score, **kwargs)
        self.score = score
        self.search_s = self.busy_s = self.load_s = 0.0
        self.searched = self.skipped = self.posted = 0
        import threading

        self._lock, self._active, self._busy_since = threading.Lock(), 0, 0.0

    def info(self) -> dict:
        return {"load_s": self.load_s}


_BACKENDS = ["cpu", "numpy", pytest.param("cupy", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("backend", _BACKENDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=corpora(), score=st.sampled_from(["jaccard", "cosine", "braun_blanquet"]), t=st.sampled_from(["1/2", "2/3", "1"]),
       seed=st.integers(0, 2**31), include_self=st.booleans(), k=st.sampled_from([None, 2]),
       budget=st.sampled_from([None, 3]))
def test_a_shard_answers_home_and_other_queries_as_the_probe_and_the_rule_do(backend, docs, score, t, seed, include_self,
                                                                              k, budget):
    """The shard holds the docs of lengths >= a cut (a length-bucket shard), or any subset; the batch is every doc
    (some the shard's, in runs broken by the others), a subset of its rows searched: each row's
    pairs are those the oracle keeps under the self-join rule among the shard's docs."""
    rng = np.random.default_rng(seed)
    ids = doc_ids(len(docs))
    size = np.array([len(set(d)) for d in docs])
    # A length-bucket shard (lengths from a cut up), or any subset (the probe's own-length floor then matters).
    held = np.flatnonzero(size >= int(rng.integers(0, 4)) if seed % 2 else rng.random(len(docs)) < 0.7)
    if not len(held):
        return
    searcher = _Searcher([docs[i] for i in held], ids[held], score, backend)
    batch = SetBatch.from_lists(docs)
    rows = np.flatnonzero(rng.random(len(docs)) < 0.8)
    assert searcher.prepare_self_join(t, include_self, k, budget) == {"load_s": searcher.load_s}
    kept = searcher.index._self_join
    got = searcher.threshold_search(batch, t, k, rows, True, ids, include_self, budget)
    again = searcher.threshold_search(batch, t, k, rows, True, ids, include_self, budget)
    assert kept is None or searcher.index._self_join is kept  # found as the shard loads, then kept
    if budget is None:
        assert kept is not None
    elif kept is None:  # past the budget: refused once, every row probed (the result as exact)
        assert searcher._self_join_refused == (t, include_self, k, budget)
    # The oracle over the shard's docs, each row's doc as the query, under the rule.
    expected = []
    for r in rows:
        pairs = brute_force_threshold([docs[i] for i in held], [docs[r]], parse_threshold(t, score), doc_ids=ids[held].tolist(), score=score)[0]
        expected.append([p for p in pairs if self_join_keep(ids[r], size[r], p[0], p[2], score, include_self)])
    # The shard applies the rule, then keeps each query's best k: what the merge then keeps.
    assert _rows(got) == [row[:k] for row in expected] == _rows(again)


@pytest.mark.parametrize("backend", _BACKENDS)
def test_a_shard_past_its_budget_probes_its_own_docs_and_says_so(caplog, backend):
    docs = [[1, 2, 3]] * 20 + [[1, 2, 4]] * 20 + [[5]]
    ids = doc_ids(len(docs))
    searcher = _Searcher(docs, ids, "jaccard", backend)
    batch = SetBatch.from_lists(docs)
    with caplog.at_level("INFO", logger="settopk"):
        searcher.prepare_self_join("1/2", False, None, 10)
    assert searcher.index._self_join is None and "probed batch by batch" in caplog.text
    got = searcher.threshold_search(batch, "1/2", None, None, True, ids, False, 10)
    assert _rows(got) == _oracle_rows(docs, ids, "1/2", "jaccard")
    assert searcher.index._self_join is None  # refused once, not tried again
    # --dedup: 780 pairs of members but one pair of groups. numpy and cupy verify the pairs of groups
    # within the budget; a cpu shard without its self-join has no groups of its own.
    grouped = searcher.dedup_components("1/2", False, None, 10)
    if backend == "cpu":
        assert grouped is None
    else:
        assert dict(zip(*(a.tolist() for a in grouped))) == _oracle_components(docs, ids, "1/2", "jaccard")
    searcher.prepare_self_join("1/2", False, None, 1000)  # another budget: found
    assert searcher.index._self_join is not None


def _oracle_components(docs, ids, t, score):
    """doc id -> least doc id of its component over every passing pair of distinct docs (a union-find)."""
    every = brute_force_threshold(docs, docs, parse_threshold(t, score), doc_ids=ids.tolist(), score=score)
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for q, row in enumerate(every):
        for d, *_ in row:
            if d != ids[q]:
                a, b = find(int(ids[q])), find(int(d))
                parent[max(a, b)] = min(a, b)
    return {x: find(x) for x in sorted(parent)}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=corpora(), score=st.sampled_from(["jaccard", "cosine", "braun_blanquet", "dice"]),
       t=st.sampled_from(["1/2", "2/3", "1", "1/7"]), budget=st.sampled_from([None, 3]))
def test_a_shard_groups_its_own_docs_as_the_components_of_every_passing_pair(docs, score, t, budget):
    """``dedup_components`` on cpu: from the kept self-join's groups and pairs of groups, every doc of
    the shard in a passing pair with another, with its component's least id; None past the budget."""
    ids = doc_ids(len(docs))
    searcher = _Searcher(docs, ids, score)
    got = searcher.dedup_components(t, False, None, budget)
    if got is None:
        assert budget is not None and searcher.index._self_join is None
        return
    nodes, group = got
    assert nodes.dtype == group.dtype == np.int64
    assert dict(zip(nodes.tolist(), group.tolist())) == _oracle_components(docs, ids, t, score)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(docs=corpora(), score=st.sampled_from(["jaccard", "cosine", "braun_blanquet", "dice"]),
       t=st.sampled_from(["1/2", "2/3", "1", "1/7"]), budget=st.sampled_from([None, 3]))
def test_an_array_shard_groups_its_docs_from_its_self_join_or_its_pairs_of_groups(backend, docs, score, t, budget):
    """``numpy`` and ``cupy``: from the kept self-join's groups and pairs of groups, or, past its
    budget of pairs (many identical docs), from pairs of groups the index verifies for the call
    (``join_groups``), the same components; None past the budget of pairs of groups only."""
    from settopk.kernels.join import corpus_group_pairs

    ids = doc_ids(len(docs))
    searcher = _Searcher(docs, ids, score, backend)
    got = searcher.dedup_components(t, False, None, budget)
    if got is None:
        n_group_pairs = len(corpus_group_pairs(SetBatch.from_lists(docs), t, score, 64)[1])
        assert budget is not None and n_group_pairs > budget
        return
    nodes, group = got
    assert nodes.dtype == group.dtype == np.int64
    assert dict(zip(nodes.tolist(), group.tolist())) == _oracle_components(docs, ids, t, score)


@pytest.mark.parametrize("backend", ["cpu", "numpy"])
def test_a_shard_without_a_self_join_has_no_groups_of_its_own(backend):
    searcher = _Searcher([[1, 2], [1, 2], [3]], doc_ids(3), "containment", backend)
    assert searcher.dedup_components("1/2") is None
    searcher = _Searcher([[1, 2], [1, 2], [3]], doc_ids(3), "jaccard", backend)
    assert searcher.dedup_components("0") is None  # T == 0: every pair passes, no prefix-filtered join
    assert searcher.dedup_components("1/2")[1].tolist() == [int(doc_ids(3)[0])] * 2
