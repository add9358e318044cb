"""Inverted index (postings per token) and exact top-k through it: ScanCount and prefix filtering.

The postings of token ``t`` are the positions of the shard's docs that hold
``t``, ascending. A doc with overlap ``o >= 1`` with a query appears in exactly
``o`` of the query's postings lists, so counting a position's occurrences over
the query's lists gives every nonzero overlap exactly (*ScanCount*); docs in
none of them have overlap 0 and key 0 under every score.

*Prefix filtering* (Chaudhuri, Ganti, Kaushik, ICDE 2006; Bayardo, Ma,
Srikant, WWW 2007, "AllPairs"; Xiao et al., WWW 2008, "PPJoin"; survey and
comparison: Mann, Augsten, Bouros, VLDB 2016): if only docs with key ``>= B``
matter and ``B >= 1``, a doc of length ``l`` needs overlap
``>= need(l) = min_overlap_above(B - 1, |q|, l)`` (:func:`settopk.kernels.min_overlap_above`).
With ``m = min_l need(l)`` over the shard's lengths, such a doc shares at
least ``m`` ids with the query, so it holds one of any ``|q| - m + 1`` of the
query's ids (pigeonhole: the other ``m - 1`` cannot give ``m``). Probing the
``|q| - m + 1`` ids with the shortest postings gives a candidate superset,
which is then verified exactly against the docs' ids.

A bound ``B`` is only useful if the true k-th best key is ``>= B``; the search
checks this itself: if fewer than ``k`` eligible docs reach ``B``, the bound
was too high and the query is answered by ScanCount with its floor alone, so
any bound (too high, too low, none) gives the exact answer.

:func:`postings_search` is the CPU implementation and the oracle of the GPU
postings path (``settopk.kernels.cuda.postings``); :func:`postings_cost` is the cost
model both backends route with.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .keys import DEFAULT_SCORE, check_floor_key, key_scale, min_overlap_above, score_key
from .sets import MAX_VOCAB, SetBatch
from .topk import TopK, empty_topk

__all__ = ["ROUTINGS", "Postings", "build_postings", "check_routing", "postings_cost", "postings_search"]

ROUTINGS = ("scan", "auto", "postings")
"""Routing modes of the search backends: ``scan`` (every query scans the shard),
``auto`` (per query, the cheaper path by the cost model), ``postings`` (every
query that can use the postings does; for tests and measurements)."""


def check_routing(routing: str) -> str:
    """Return ``routing`` if it is one of :data:`ROUTINGS`, else raise ValueError (the message lists them)."""
    if routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {', '.join(ROUTINGS)}; found {routing!r}")
    return routing


@dataclass(frozen=True)
class Postings:
    """Postings lists of one shard in host memory (CSR by token).

    Attributes
    ----------
    offsets : numpy.ndarray of int64, shape (vocab_size + 1,)
        Token ``t``'s postings are ``positions[offsets[t]:offsets[t + 1]]``.
    positions : numpy.ndarray of int32, shape (n_tokens,)
        Doc positions (0-based, position order is doc id order), ascending within each token.
    """

    offsets: np.ndarray
    positions: np.ndarray

    @property
    def doc_freq(self) -> np.ndarray:
        """Postings length (docs holding the token) per token id: int64 of shape (vocab_size,)."""
        return np.diff(self.offsets)

    def freq_of(self, tokens: np.ndarray) -> np.ndarray:
        """Postings length of each id of ``tokens`` (int array): int64 of the same shape. A search
        asks this, not :attr:`doc_freq`, which is a pass over every id (2**24 of them at most)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        return self.offsets[tokens + 1] - self.offsets[tokens]

    @property
    def nbytes(self) -> int:
        """Host bytes of the postings (offsets and positions)."""
        return int(self.offsets.nbytes + self.positions.nbytes)

    def lists(self, tokens: np.ndarray) -> np.ndarray:
        """The concatenated postings of ``tokens`` (int array), in that order: int32 of shape (sum of their lengths,)."""
        tokens = np.asarray(tokens, dtype=np.int64)  # uint16 ids would wrap at 65535 + 1
        starts, ends = self.offsets[tokens], self.offsets[tokens + 1]
        lengths = ends - starts
        if lengths.sum() == 0:
            return np.zeros(0, dtype=np.int32)
        out_starts = np.cumsum(lengths) - lengths
        index = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - out_starts, lengths)
        return self.positions[index]


def build_postings(docs: SetBatch, vocab_size: int = 65536) -> Postings:
    """Postings of ``docs`` (host memory, about ``4 n_tokens + 8 vocab_size`` bytes).

    Parameters
    ----------
    docs : SetBatch
        ``n_docs`` sets (positions ``0 .. n_docs - 1``), ids below ``vocab_size``.
    vocab_size : int
        Token ids lie in ``[0, vocab_size)``; the offsets cover every id below it, so queries'
        ids must be below it too. The host indexes pass their id bound plus ``max_len + 1``
        (:func:`settopk.kernels.sets.fold_query_ids`); at most ``2**24 + 2**15``.

    Returns
    -------
    Postings

    Raises
    ------
    ValueError
        If ``vocab_size`` is not in ``[1, 2**24 + 2**15]``, an id is ``>= vocab_size``,
        or there are ``2**31`` docs or more.
    """
    if not 1 <= vocab_size <= MAX_VOCAB + 2**15:
        raise ValueError(f"vocab_size must be in [1, {MAX_VOCAB + 2**15}], found {vocab_size}")
    if docs.n_sets >= 2**31:
        raise ValueError(f"postings hold at most 2**31 - 1 docs, found {docs.n_sets}")
    tokens = docs.tokens
    if len(tokens) and int(tokens.max()) >= vocab_size:
        raise ValueError(f"docs hold id {int(tokens.max())}, not below vocab_size={vocab_size}")
    order = np.argsort(tokens, kind="stable")  # stable: positions stay ascending within a token
    positions = np.repeat(np.arange(docs.n_sets, dtype=np.int32), docs.lengths)[order]
    offsets = np.zeros(vocab_size + 1, dtype=np.int64)
    np.cumsum(np.bincount(tokens, minlength=vocab_size), out=offsets[1:])
    return Postings(offsets, positions)


def postings_cost(queries: SetBatch, doc_freq) -> np.ndarray:
    """ScanCount work per query: the summed postings lengths of its ids (int64, shape (n_queries,)).

    ``doc_freq`` is :attr:`Postings.doc_freq` (int64, shape (vocab_size,)), or the
    :class:`Postings` themselves (cheaper: only the queries' ids are looked up); ids
    must be below its length.
    """
    if queries.n_sets == 0:
        return np.zeros(0, dtype=np.int64)
    per_id = doc_freq.freq_of(queries.tokens) if isinstance(doc_freq, Postings) else doc_freq[queries.tokens]
    sums = np.zeros(queries.n_sets, dtype=np.int64)
    nonempty = np.flatnonzero(queries.lengths > 0)
    if len(per_id):
        sums[nonempty] = np.add.reduceat(per_id, queries.offsets[nonempty])
    return sums


def _overlaps_of(docs: SetBatch, candidates: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Exact ``|q ∩ d|`` for the docs at ``candidates`` (int array): int64 of shape (len(candidates),)."""
    sub = docs.take(candidates)
    member = np.isin(sub.tokens, query, assume_unique=True)
    out = np.zeros(len(candidates), dtype=np.int64)
    nonempty = np.flatnonzero(sub.lengths > 0)
    if len(member):
        out[nonempty] = np.add.reduceat(member.astype(np.int64), sub.offsets[nonempty])
    return out


def _search_one(docs, doc_len, lengths_present, postings, query, k, max_len, score, floor, bound):
    """Positions, overlaps of the exact top-k of one query (see :func:`postings_search`); also the path used."""
    n = docs.n_sets
    ql = len(query)
    target = max(floor, bound)
    if target >= 1 and ql:
        need = min_overlap_above(target - 1, ql, lengths_present, max_len, score)
        m = int(max(1, need.min()))
        if m > ql:
            candidates = np.zeros(0, dtype=np.int64)
        else:
            freq = postings.freq_of(query)
            probe = query[np.lexsort((query, freq))[: ql - m + 1]]  # the rarest ids, ties by id
            # Prefix filtering pays when the probed lists are short against ScanCount's; else count them all.
            prefix_work = int(freq[np.isin(query, probe)].sum()) * max(1, int(doc_len.mean()) if n else 1)
            if prefix_work < int(freq.sum()):
                candidates = np.unique(postings.lists(probe)).astype(np.int64)
                overlap = _overlaps_of(docs, candidates, query)
                path = "prefix"
            else:
                candidates = None
        if m > ql or candidates is not None:
            if m > ql:
                overlap, path = np.zeros(0, dtype=np.int64), "prefix"
            key = score_key(overlap, ql, doc_len[candidates], max_len, score).astype(np.int64)
            keep = key >= target
            if keep.sum() >= k or target == floor:
                pos, ov, ky = candidates[keep], overlap[keep], key[keep]
                order = np.lexsort((pos, -ky))[:k]
                return pos[order], ov[order], path
            bound = -1  # the bound was above the k-th best: answer by the floor alone
    # ScanCount: every doc with overlap >= 1, counted exactly.
    hits = postings.lists(query)
    pos, ov = np.unique(hits, return_counts=True)
    pos, ov = pos.astype(np.int64), ov.astype(np.int64)
    key = score_key(ov, ql, doc_len[pos], max_len, score).astype(np.int64)
    keep = key >= floor
    pos, ov, key = pos[keep], ov[keep], key[keep]
    positive = key > 0
    order = np.lexsort((pos[positive], -key[positive]))[:k]
    best_pos, best_ov = pos[positive][order], ov[positive][order]
    short = k - len(best_pos)
    if short > 0 and floor <= 0:
        # Key 0: every doc outside the lists (overlap 0) and any listed doc with key 0, lowest positions first.
        taken = pos[positive]
        limit = min(n, short + len(taken))
        pool = np.arange(limit, dtype=np.int64)
        pool = pool[~np.isin(pool, taken)][:short]
        zero_ov = np.zeros(len(pool), dtype=np.int64)
        listed = np.searchsorted(pos, pool)
        hit = (listed < len(pos)) & (pos[np.minimum(listed, len(pos) - 1)] == pool) if len(pos) else np.zeros(len(pool), bool)
        zero_ov[hit] = ov[listed[hit]]
        best_pos, best_ov = np.concatenate([best_pos, pool]), np.concatenate([best_ov, zero_ov])
    return best_pos, best_ov, "scancount"


def postings_search(docs: SetBatch, doc_ids: np.ndarray, postings: Postings, queries: SetBatch, k: int, max_len: int,
                    score: str = DEFAULT_SCORE, floor_key=None, bound_key=None) -> tuple[TopK, dict]:
    """Exact top-k of each query through the postings (ScanCount, or prefix filtering under a bound).

    Parameters
    ----------
    docs : SetBatch
        The shard's ``n_docs`` docs (host), the ones ``postings`` was built from.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Global doc ids, strictly increasing.
    postings : Postings
        :func:`build_postings` of ``docs``.
    queries : SetBatch
        ``n_queries`` sets, ids below the postings' vocabulary, at most ``max_len`` ids.
    k : int
        Results per query, ``>= 1``.
    max_len : int
        Bound on set sizes (the key scale).
    score : str
        One of :data:`settopk.kernels.SCORES`.
    floor_key : array of int, shape (n_queries,), optional
        As :meth:`settopk.kernels.NumpyShardIndex.search`: only docs with ``key >= floor`` (``-1``: none).
    bound_key : array of int, shape (n_queries,), optional
        A guess of a key the k-th best reaches (e.g. from a sample of the docs). With
        ``max(floor, bound) >= 1`` the query is prefix-filtered. Any value is safe: a
        bound above the k-th best is detected and the query answered without it.

    Returns
    -------
    (TopK, dict)
        The top-k, identical to :meth:`settopk.kernels.NumpyShardIndex.search` (host arrays of
        shape (n_queries, k), ``-1`` padding), and the number of queries per path
        (``{"scancount": n, "prefix": n}``).

    Raises
    ------
    ValueError
        If ``k < 1``, ``floor_key`` or ``bound_key`` is not an integer array of
        shape ``(n_queries,)`` with values ``>= -1``, or ``score``/``max_len`` are
        invalid (:func:`settopk.kernels.key_scale`).
    """
    key_scale(max_len, score)
    if k < 1:
        raise ValueError(f"k must be >= 1, found {k}")
    floor = check_floor_key(floor_key, queries.n_sets, max_len, score)
    bound = check_floor_key(bound_key, queries.n_sets, max_len, score)
    floor = np.full(queries.n_sets, -1, np.int64) if floor is None else floor
    bound = np.full(queries.n_sets, -1, np.int64) if bound is None else bound
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    doc_len = docs.lengths
    lengths_present = np.unique(doc_len)
    out = empty_topk(queries.n_sets, k)
    paths = {"scancount": 0, "prefix": 0}
    if docs.n_sets == 0:
        return out, paths
    for qi in range(queries.n_sets):
        query = queries[qi]
        pos, ov, path = _search_one(docs, doc_len, lengths_present, postings, query, k, max_len, score,
                                    int(floor[qi]), int(bound[qi]))
        paths[path] += 1
        take = len(pos)
        out.doc_ids[qi, :take] = doc_ids[pos]
        out.overlap[qi, :take] = ov
        out.doc_len[qi, :take] = doc_len[pos]
    return out, paths
