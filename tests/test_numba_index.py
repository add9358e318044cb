"""The compiled CPU index (settopk.kernels.numba_index) against NumpyShardIndex and the brute-force oracle, ties included."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settopk.kernels import SCORES, NumpyShardIndex, SetBatch, brute_force_topk, key_scale, max_key, score_key

pytest.importorskip("numba")
from settopk.kernels import numba_heaps, numba_kernels  # noqa: E402
from settopk.kernels.numba_index import NumbaShardIndex  # noqa: E402

ROUTINGS = ("scan", "auto", "postings")


def _rows(topk):
    return [
        [(int(d), int(o), int(l)) for d, o, l in zip(ids, ov, dl) if d >= 0]
        for ids, ov, dl in zip(topk.doc_ids, topk.overlap, topk.doc_len)
    ]


def _oracle(docs, queries, k, ids, score, max_len, floor=None):
    """brute_force_topk, with each row cut where its keys drop below the floor."""
    want = brute_force_topk(docs, queries, k, doc_ids=list(ids), score=score)
    if floor is None:
        return want
    return [[(d, o, l) for d, o, l in row if int(score_key(o, len(set(q)), l, max_len, score)) >= f]
            for q, row, f in zip(queries, want, floor)]


def _same(got, want):
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def _check(docs, queries, k, score="braun_blanquet", max_len=8, ids=None, floor=None, routings=ROUTINGS,
           threads=(1, 3), oracle=True):
    """Every routing and thread count gives NumpyShardIndex's TopK bit for bit (and the oracle's rows)."""
    ids = np.arange(len(docs), dtype=np.int64) * 3 + 1 if ids is None else np.asarray(ids, dtype=np.int64)
    d, q = SetBatch.from_lists(docs), SetBatch.from_lists(queries)
    reference = NumpyShardIndex(d, ids, max_len, score)
    want = reference.search(q, k, floor_key=floor)
    if oracle:
        assert _rows(want) == _oracle(docs, queries, k, ids, score, max_len, floor)
    for routing in routings:
        for n_threads in threads:
            index = NumbaShardIndex(d, ids, max_len, score, routing=routing, threads=n_threads)
            got = index.search(q, k, floor_key=floor)
            _same(got, want)
            assert index.last_skipped == reference.last_skipped
            r = index.last_routing
            if len(docs):
                assert r["scan"] + r["postings"] == q.n_sets - index.last_skipped
            if routing == "scan":
                assert r["postings"] == 0
            if routing == "postings" and len(docs):
                assert r["scan"] == 0
    return want


def test_score_codes_follow_kernels_scores():
    names = ("BRAUN_BLANQUET", "JACCARD", "COSINE", "DICE", "OVERLAP", "CONTAINMENT")
    assert [getattr(numba_heaps, n) for n in names] == [SCORES.index(n.lower()) for n in names]


def test_kernels_are_cached_and_release_the_gil():
    for fn in (numba_kernels.scan_range, numba_kernels.scancount_queries, numba_kernels.sort_heaps):
        assert fn.targetoptions["nogil"] is True
        assert type(fn._cache).__name__ == "FunctionCache"  # cache=True: machine code kept on disk


def _cosine_keys(max_len, score):
    """The kernels' ``cosine_keys`` argument: cosine's key table, or a stand-in the other scores never read."""
    from settopk.kernels import cosine_key_table

    return cosine_key_table(max_len) if score == "cosine" else cosine_key_table(1)


def test_integer_keys_and_least_overlaps_match_kernels_keys():
    """The compiled key and least-overlap formulas against settopk.kernels.keys, exhaustively for small sets."""
    from settopk.kernels import min_overlap_above

    for score in SCORES:
        for max_len in (1, 5, 9):
            code, scale, top = SCORES.index(score), key_scale(max_len, score), max_key(max_len, score)
            ck = _cosine_keys(max_len, score)
            lens = np.arange(max_len + 1)
            ql, dl = np.meshgrid(lens, lens, indexing="ij")
            for o in range(max_len + 1):
                ok = o <= np.minimum(ql, dl)
                want = score_key(o, ql, dl, max_len, score)
                got = np.vectorize(lambda a, b: numba_kernels.score_key(code, scale, ck, o, a, b))(ql, dl)
                assert np.array_equal(got[ok], want[ok])
            for t in (-2, -1, 0, 1, top // 3, top - 1, top, top + 1, top + 7):
                want = min_overlap_above(t, ql, dl, max_len, score)
                got = np.vectorize(lambda a, b: numba_kernels.least_overlap(code, scale, top, max_len, ck, t, a, b))(ql, dl)
                assert np.array_equal(got, want), (score, max_len, t)



@pytest.mark.parametrize("score", SCORES)
def test_stepped_least_overlaps_per_length_match_least_overlap(score):
    """_set_need steps the least overlap up from length to length without dividing: per length it stores
    least_overlap's value where a doc of that length can reach it, more than min(ql, dl) where none can,
    the same value in the bit planes, and the number of queries each length can reach."""
    max_len = 9
    code, scale, top = SCORES.index(score), key_scale(max_len, score), max_key(max_len, score)
    ck = _cosine_keys(max_len, score)
    n_planes = max(3, (max_len + 1).bit_length())
    lengths = np.array([0, 1, 2, 4, 5, 8, 9], dtype=np.int64)
    nq = 70  # two words of lanes
    q_len = np.arange(nq, dtype=np.int64) % (max_len + 1)
    need = np.zeros((nq, len(lengths)), np.int64)
    planes = np.zeros((len(lengths), n_planes, 8), np.uint64)
    reach = np.full(len(lengths), nq, np.int64)
    for t in (-1, 0, 1, top // 5, top // 2, top - 1, top, top + 3, -1, top // 3):  # rises, then falls back
        for q in range(nq):
            numba_kernels._set_need(q, t, q_len[q], lengths, need, planes, reach, code, scale, top, max_len, ck)
        fit = np.minimum(q_len[:, None], lengths[None, :])
        want = np.array([[numba_kernels.least_overlap(code, scale, top, max_len, ck, t, ql, dl) for dl in lengths]
                         for ql in q_len])
        reachable = want <= fit
        assert np.array_equal(need <= fit, reachable), (score, t)
        assert np.array_equal(need[reachable], want[reachable]), (score, t)
        assert np.array_equal(reach, reachable.sum(axis=0))
        bits = [(planes[:, b, q >> 6] >> np.uint64(q & 63)) & np.uint64(1) for q in range(nq) for b in range(n_planes)]
        stored = (np.array(bits, np.int64).reshape(nq, n_planes, len(lengths)) << np.arange(n_planes)[None, :, None])
        assert np.array_equal(stored.sum(axis=1), need)

@pytest.mark.parametrize("score", SCORES)
def test_ties_break_by_lower_doc_id(score):
    docs = [[1, 2], [1, 2], [3], [1, 2], [1, 2, 3, 4], [], [1, 2], [2]]
    for k in (1, 2, 3, 5, 8, 20):
        _check(docs, [[1, 2], [1, 2, 3], [2], []], k, score)


@pytest.mark.parametrize("score", SCORES)
def test_empty_sets_zero_over_zero_and_k_past_the_shard(score):
    docs = [[], [0], [], [5, 6], [0, 5]]
    _check(docs, [[], [0], [7], [5, 6, 0]], 1, score)
    _check(docs, [[], [0], [7], [5, 6, 0]], 12, score, ids=[7, 100, 2**40, 2**40 + 1, 2**41])


def test_extreme_ids_and_max_len_sets():
    full = list(range(65536 - 128, 65536))
    docs = [full, [0], [0, 65535], list(range(128)), [65535], full[:64]]
    queries = [full, [0, 65535], list(range(128)), [65535], [0]]
    for score in SCORES:
        _check(docs, queries, 4, score, max_len=128)


@pytest.mark.parametrize("max_len", [255, 400, 2000])
def test_wide_counters(max_len):
    """Overlaps past 255 (more bit planes), every score."""
    rng = np.random.default_rng(max_len)
    long = max_len - 5
    docs = [list(range(long)), list(range(100, 100 + long)), [1], [], sorted(rng.choice(3 * max_len, long, replace=False))]
    docs += [sorted(rng.choice(3 * max_len, int(rng.integers(0, long)), replace=False)) for _ in range(30)]
    queries = [list(range(long)), [1, 2], [], docs[4], docs[7]]
    for score in SCORES:
        _check(docs, queries, 5, score, max_len=max_len, threads=(2,), oracle=max_len <= 400)


@pytest.mark.parametrize("score", SCORES)
def test_small_blocks_and_eager_refreshes(score, monkeypatch):
    """ScanCount over many blocks of length-ordered ranks (blocks passed over, overlap-1 second passes);
    scan thresholds refreshed after every stale admission on one thread; on two, scan rounds from one doc a
    thread, cut short where a thread's pairs fill its 600 slots (the rest counted again next round); with
    and without floors."""
    from settopk.kernels import numba_index

    monkeypatch.setattr(numba_index, "_POSTINGS_BLOCK", 64)
    monkeypatch.setattr(numba_index, "_REFRESH_AFTER", 1)
    monkeypatch.setattr(numba_index, "_ROUND_FIRST", 1)
    monkeypatch.setattr(numba_index, "_HIT_SLOTS", 600)
    rng = np.random.default_rng(10 + SCORES.index(score))
    max_len = 12
    docs = [sorted(rng.choice(40, int(rng.integers(0, max_len + 1)), replace=False).tolist()) for _ in range(700)]
    queries = [sorted(rng.choice(40, int(rng.integers(0, max_len + 1)), replace=False).tolist()) for _ in range(40)]
    queries += [docs[5], docs[600][:3], [], [39]]
    plain = NumpyShardIndex(SetBatch.from_lists(docs), np.arange(700), max_len, score).search(
        SetBatch.from_lists(queries), 30)
    keys = score_key(plain.overlap, np.array([len(q) for q in queries])[:, None], plain.doc_len, max_len, score)
    for k in (1, 9, 30):
        for floor in (None, keys[:, k - 1].astype(np.int64), np.zeros(len(queries), np.int64)):
            _check(docs, queries, k, score, max_len=max_len, floor=floor, routings=("scan", "postings"),
                   threads=(1, 2), oracle=False)


@pytest.mark.parametrize("score", ["overlap", "containment", "braun_blanquet"])
def test_overlap_one_pass_over_position_blocks(score, monkeypatch):
    """Fewer than k docs share two ids with a query, many share one: the second ScanCount pass fills the
    heap with overlap-1 docs block by block (ties to the lowest positions) and, for the scores ranked by
    position, passes over the blocks after it is full; blocks of 37 ranks leave a partial last block."""
    from settopk.kernels import numba_index

    monkeypatch.setattr(numba_index, "_POSTINGS_BLOCK", 37)
    rng = np.random.default_rng(5)
    docs = [sorted(rng.choice(np.arange(10, 400), 6, replace=False).tolist()) for _ in range(900)]
    for i in range(0, 900, 7):
        docs[i][0] = 1  # id 1 in every 7th doc, id 2 in every 11th: few docs hold both
    for i in range(0, 900, 11):
        docs[i][1] = 2
    docs = [sorted(set(d)) for d in docs]
    queries = [[1, 2], [1, 2, 3], [2, 500], [1], docs[77]]
    for k in (1, 40, 150):
        _check(docs, queries, k, score, max_len=8, routings=("postings",), threads=(1, 2))


def test_zero_docs_and_zero_queries():
    empty = SetBatch.from_lists([])
    for routing in ROUTINGS:
        index = NumbaShardIndex(empty, np.zeros(0, np.int64), 8, routing=routing)
        got = index.search(SetBatch.from_lists([[1], []]), 3, floor_key=np.array([0, -1]))
        assert (got.doc_ids == -1).all() and not got.overlap.any() and not got.doc_len.any()
        index = NumbaShardIndex(SetBatch.from_lists([[1]]), np.zeros(1, np.int64), 8, routing=routing)
        got = index.search(empty, 3)
        assert got.doc_ids.shape == (0, 3)


def test_many_groups_words_and_a_rising_threshold():
    """600 queries (two scan groups, partial words), 3000 docs on a small vocabulary: heaps fill early and
    thresholds rise and are refreshed many times; the results stay those of the NumPy index. Groups are
    scanned side by side where there is one for every thread, else in rounds on every thread, their lanes
    owned by up to 4 threads (2 groups on 4 threads; 3 groups on 2 threads: two side by side, then one
    in rounds)."""
    rng = np.random.default_rng(3)
    vocab = rng.zipf(1.3, 40_000) % 60
    docs = [sorted(set(rng.choice(vocab, int(rng.integers(0, 13))).tolist())) for _ in range(3000)]
    queries = [sorted(set(rng.choice(vocab, int(rng.integers(0, 13))).tolist())) for _ in range(600)]
    for score in SCORES:
        _check(docs, queries, 7, score, max_len=12, routings=("scan", "auto"), threads=(1, 2, 4), oracle=False)
    _check(docs, queries + queries[:500], 7, "cosine", max_len=12, routings=("scan",), threads=(2,), oracle=False)
    _check(docs, queries[:70], 1, "jaccard", max_len=12, routings=("postings",), threads=(4,), oracle=False)


@pytest.mark.parametrize("score", SCORES)
def test_floors_at_ties_above_every_key_and_skipped_queries(score):
    rng = np.random.default_rng(SCORES.index(score))
    max_len = 8
    docs = [rng.choice(12, size=int(rng.integers(0, max_len + 1)), replace=False).tolist() for _ in range(250)]
    docs[3] = docs[100] = []
    queries = [rng.choice(12, size=int(rng.integers(0, max_len + 1)), replace=False).tolist() for _ in range(19)]
    queries += [[], list(range(max_len))]
    plain = NumpyShardIndex(SetBatch.from_lists(docs), np.arange(250), max_len, score).search(
        SetBatch.from_lists(queries), 250)
    keys = score_key(plain.overlap, np.array([len(q) for q in queries])[:, None], plain.doc_len, max_len, score)
    top = max_key(max_len, score)
    for k in (1, 5, 37):
        for floor in (keys[:, k - 1], keys[:, k - 1] + 1, keys[:, 0], keys[:, 0] + 1, np.zeros(21, np.int64),
                      np.full(21, -1), np.full(21, top + 1), rng.integers(-1, top + 2, 21)):
            _check(docs, queries, k, score, floor=np.asarray(floor, dtype=np.int64), ids=np.arange(250), threads=(2,),
                   oracle=False)
    # Any integer dtype, values past the key range.
    _check(docs, queries, 3, score, floor=np.zeros(21, dtype=np.uint8), threads=(1,))
    _check(docs, queries, 3, score, floor=np.full(21, 2**62), threads=(1,))


def test_unreachable_floors_skip_queries():
    docs = [[1, 2, 3, 4], [1, 2, 3, 4, 5, 6], [9, 10, 11, 12, 13]]  # lengths 4..6
    queries = [[1, 2], [1, 2, 3, 4, 5], list(range(16)), []]
    scale = key_scale(16)
    _check(docs, queries, 3, max_len=16, floor=np.array([-1, scale + 1, 2**40, 0]))
    index = NumbaShardIndex(SetBatch.from_lists(docs), np.arange(3), 16, routing="auto")
    got = index.search(SetBatch.from_lists(queries), 3, floor_key=np.full(4, scale + 1))
    assert (got.doc_ids == -1).all() and index.last_skipped == 4
    assert index.last_routing == {"scan": 0, "postings": 0, "scancount": 0, "prefix": 0}


def test_routing_auto_follows_postings_lengths():
    """Rare ids (short postings) go through the postings, a frequent id through the scan."""
    rng = np.random.default_rng(4)
    docs = SetBatch.from_lists([[0] + rng.choice(np.arange(1, 60000), 40, replace=False).tolist() for _ in range(20000)])
    index = NumbaShardIndex(docs, np.arange(20000), 64, "overlap", routing="auto", threads=1)
    assert index.postings_bytes == index.postings.nbytes + 6 * 20000  # and the rank order: int32 + int16
    rare = [rng.choice(np.arange(1, 60000), 10, replace=False).tolist() for _ in range(4)]
    index.search(SetBatch.from_lists(rare), 5)
    assert index.last_routing["postings"] == 4
    common = [[0] + r for r in rare] * 100  # id 0 is in every doc: its postings cost a scan's worth
    want = NumpyShardIndex(docs, np.arange(20000), 64, "overlap").search(SetBatch.from_lists(common), 5)
    _same(index.search(SetBatch.from_lists(common), 5), want)
    assert index.last_routing["scan"] == 400
    assert NumbaShardIndex(docs, np.arange(20000), 64).postings_bytes == 0


def test_pickled_index_searches_the_same():
    import pickle

    docs = SetBatch.from_lists([[1, 2], [2, 3], [3], [1, 2, 3]])
    queries = SetBatch.from_lists([[1, 2], [3]])
    index = NumbaShardIndex(docs, np.arange(4), 8, routing="auto", threads=2)
    want = index.search(queries, 3)
    _same(pickle.loads(pickle.dumps(index)).search(queries, 3), want)


def test_bad_arguments_raise():
    d = SetBatch.from_lists([[1, 2], [3]])
    with pytest.raises(ValueError, match="routing"):
        NumbaShardIndex(d, np.arange(2), 8, routing="fast")
    with pytest.raises(ValueError, match="threads"):
        NumbaShardIndex(d, np.arange(2), 8, threads=0)
    with pytest.raises(ValueError, match="strictly increasing"):
        NumbaShardIndex(d, np.array([3, 3]), 8)
    with pytest.raises(ValueError, match="doc ids"):
        NumbaShardIndex(d, np.arange(3), 8)
    with pytest.raises(ValueError, match="max_len"):
        NumbaShardIndex(d, np.arange(2), 1)
    with pytest.raises(ValueError, match="max_len"):
        NumbaShardIndex(d, np.arange(2), 4097, "cosine")
    with pytest.raises(ValueError, match="score"):
        NumbaShardIndex(d, np.arange(2), 8, "tanimoto")
    index = NumbaShardIndex(d, np.arange(2), 8)
    queries = SetBatch.from_lists([[1], [2], [3]])
    with pytest.raises(ValueError, match="k must be"):
        index.search(queries, 0)
    with pytest.raises(ValueError, match="shape"):
        index.search(queries, 2, floor_key=np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="integer"):
        index.search(queries, 2, floor_key=np.zeros(3))
    with pytest.raises(ValueError, match=">= -1"):
        index.search(queries, 2, floor_key=np.array([0, -5, 0]))


def test_kernels_import_without_numba():
    code = (
        "import sys; sys.modules['numba'] = None\n"
        "import settopk.kernels, settopk.kernels.numba_index\n"
        "from settopk.kernels import SetBatch\n"
        "import numpy as np\n"
        "try:\n"
        "    settopk.kernels.numba_index.NumbaShardIndex(SetBatch.from_lists([[1]]), np.arange(1), 8)\n"
        "except ImportError:\n"
        "    print('ImportError')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ImportError"


_SETS = st.lists(st.lists(st.integers(0, 14), max_size=8), max_size=40)
_QUERIES = st.lists(st.lists(st.integers(0, 14), max_size=8), min_size=1, max_size=8)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=_SETS, queries=_QUERIES, k=st.integers(1, 45), score=st.sampled_from(SCORES),
       routing=st.sampled_from(ROUTINGS), threads=st.integers(1, 3), block=st.sampled_from([5, 64, 16384]),
       data=st.data())
def test_property_matches_numpy_and_oracle(docs, queries, k, score, routing, threads, block, data):
    """Random shards on a small vocabulary (many ties), optional floors, every score, routing, thread count,
    and ScanCount blocks of one or several lengths."""
    from settopk.kernels import numba_index

    floor = None
    if data.draw(st.booleans()):
        top = max_key(8, score)
        floor = np.array(data.draw(st.lists(st.integers(-1, top + 1), min_size=len(queries), max_size=len(queries))))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(numba_index, "_POSTINGS_BLOCK", block)
        _check(docs, queries, k, score, floor=floor, routings=(routing,), threads=(threads,))


def test_warm_up_loads_every_kernel_a_first_search_calls():
    # A fresh process: every compiled function is still unloaded there. After warm_up, searches
    # of realistic shape (both paths, floors, two 300-query groups side by side, one group in
    # rounds on both threads) add no signature: nothing is left for the job's first search to load.
    code = (
        "import numpy as np\n"
        "from settopk.kernels import SetBatch, numba_kernels as nk\n"
        "from settopk.kernels.numba_index import NumbaShardIndex, warm_up\n"
        "fns = [getattr(nk, n) for n in dir(nk) if hasattr(getattr(nk, n), 'signatures')]\n"
        "assert fns and all(not f.signatures for f in fns)\n"
        "warm_up(128, 'auto')\n"
        "before = {f.__name__: len(f.signatures) for f in fns}\n"
        "rng = np.random.default_rng(0)\n"
        "def sets(n, vocab):\n"
        "    return SetBatch.from_lists([np.unique(rng.integers(0, vocab, rng.integers(1, 128))).tolist() for _ in range(n)])\n"
        "docs, queries = sets(3000, 400), sets(600, 400)\n"
        "for routing in ('scan', 'postings'):\n"
        "    for score in ('braun_blanquet', 'containment'):\n"
        "        index = NumbaShardIndex(docs, np.arange(3000), 128, score, routing=routing, threads=2)\n"
        "        index.search(queries, 100)\n"
        "        index.search(queries, 100, floor_key=np.full(600, 3, np.int64))\n"
        "        index.search(queries.take(np.arange(300)), 100)\n"
        "after = {f.__name__: len(f.signatures) for f in fns}\n"
        "print(sum(before.values()), before == after)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, unchanged = out.stdout.split()
    assert int(loaded) >= 4 and unchanged == "True", out.stdout
