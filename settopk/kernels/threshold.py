"""Threshold search: every (query, doc) pair whose score reaches a threshold ``T``, exactly.

**What ``T`` means.** A threshold is a rational number, taken *exactly* from its decimal text:
``"0.8"``, ``0.8`` (a float: the shortest decimal that round-trips, Python's ``repr``, so the
float 0.8 means 4/5 and not 0.8000000000000000444...) and ``Fraction(4, 5)`` are the same
threshold. A pair passes when ``score >= T`` (inclusive): a threshold that lands exactly on an
achievable score is a tie, and the pair passes. Taking the float's exact binary value instead
would drop every pair whose score is exactly 4/5 from ``T = 0.8``, which no user means.

**How it is compared.** No score is ever rounded: for each query length ``|q|`` and doc length
``|d|`` the search precomputes the least overlap ``need(|q|, |d|)`` with ``score >= T``
(:func:`need_table`, in Python integers, so any decimal is exact), and a pair passes exactly when
its overlap reaches it. With ``T = a / b`` (``a >= 0``, ``b >= 1``) and ``o = |q ∩ d|``:

================  ==========================================  ==============================
score             ``score >= T`` iff                          ``need``
================  ==========================================  ==============================
braun_blanquet    ``b o >= a max(|q|, |d|)``                  ``ceil(a max / b)``
containment       ``b o >= a |q|``                            ``ceil(a |q| / b)``
dice              ``2 b o >= a (|q| + |d|)``                  ``ceil(a (|q|+|d|) / 2b)``
jaccard           ``b o >= a (|q| + |d| - o)``                ``ceil(a (|q|+|d|) / (a+b))``
cosine            ``b² o² >= a² |q| |d|``                     ``ceil(sqrt(ceil(a²|q||d| / b²)))``
overlap           ``o >= a / b``                              ``ceil(a / b)``
================  ==========================================  ==============================

Where the score's denominator is 0 (``0/0``, scored 0) the pair passes iff ``T == 0``. A need
above ``min(|q|, |d|)`` means no doc of that length can pass: those lengths are never counted
(*length filtering*), and with postings only the ``|q| - m + 1`` rarest ids of a query are probed,
``m`` its least need over the lengths it can reach (*prefix filtering*: Chaudhuri, Ganti, Kaushik,
ICDE 2006; Bayardo, Ma, Srikant, "Scaling up all pairs similarity search", WWW 2007), each
candidate then verified exactly.

**Output** (:class:`ThresholdPairs`): per query, every passing doc, best first (the exact score
descending, then doc id ascending, as the top-k search orders), optionally only the first ``k``.
The arrays are CSR-like and unbounded: nothing is truncated unless ``k`` asks for it.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Rational
from typing import NamedTuple

import numpy as np

from .keys import check_score, key_scale, score_key
from .sets import SetBatch

__all__ = [
    "ThresholdPairs",
    "interleave_pairs",
    "parse_threshold",
    "need_table",
    "reachable_lengths",
    "order_pairs",
    "query_need",
    "self_join_keep",
    "self_join_pairs",
    "numpy_threshold_search",
]

_QUERY_CHUNK = 64  # queries whose dense overlaps the NumPy scan holds at once (64 x n_docs int16)


class ThresholdPairs(NamedTuple):
    """Every passing (query, doc) pair of a batch, grouped by query, best first (host memory).

    Attributes
    ----------
    offsets : numpy.ndarray of int64, shape (n_queries + 1,)
        Query ``i``'s pairs are rows ``offsets[i]:offsets[i + 1]`` of the arrays below;
        ``offsets[0] == 0``, ``offsets[-1] == n_pairs``.
    doc_ids : numpy.ndarray of int64, shape (n_pairs,)
        Doc ids, per query ordered by score descending, then doc id ascending.
    overlap : numpy.ndarray of int32, shape (n_pairs,)
        ``|q ∩ d|``.
    doc_len : numpy.ndarray of int32, shape (n_pairs,)
        ``|d|``.
    """

    offsets: np.ndarray
    doc_ids: np.ndarray
    overlap: np.ndarray
    doc_len: np.ndarray

    @property
    def n_queries(self) -> int:
        """Queries of the batch."""
        return len(self.offsets) - 1

    @property
    def counts(self) -> np.ndarray:
        """Pairs per query, int64 of shape (n_queries,)."""
        return np.diff(self.offsets)

    def row(self, i: int) -> list[tuple[int, int, int]]:
        """Query ``i``'s pairs as ``(doc_id, overlap, doc_len)`` tuples (the oracle's layout)."""
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return list(zip(self.doc_ids[lo:hi].tolist(), self.overlap[lo:hi].tolist(), self.doc_len[lo:hi].tolist()))


def parse_threshold(value, score: str) -> Fraction:
    """The threshold ``value`` as an exact fraction, checked against ``score``'s range.

    Parameters
    ----------
    value : str, int, float or fractions.Fraction
        Decimal text (``"0.8"``, ``"4/5"``), an int, a float (read as its shortest round-trip
        decimal, ``repr``: 0.8 is 4/5) or any rational.
    score : str
        One of :data:`settopk.kernels.SCORES`.

    Returns
    -------
    fractions.Fraction
        ``T``, with ``0 <= T <= 1`` (``T >= 0`` for overlap).

    Raises
    ------
    ValueError
        If ``value`` is not a finite number, is negative, or exceeds 1 for a score whose values lie
        in ``[0, 1]`` (every score but overlap): such a threshold would pass nothing, or everything.
    """
    check_score(score)
    if isinstance(value, bool):
        raise ValueError(f"threshold must be a number, found {value!r}")
    try:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError
            t = Fraction(repr(value))
        elif isinstance(value, (int, Rational)):
            t = Fraction(value)
        else:
            t = Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError, TypeError):
        raise ValueError(f"threshold must be a finite number such as 0.8 or 4/5, found {value!r}") from None
    if t < 0:
        raise ValueError(f"threshold must be >= 0 (0 passes every pair), found {value!r}")
    if t > 1 and score != "overlap":
        raise ValueError(f"threshold must be <= 1 for score {score!r} (its values lie in [0, 1]), found {value!r}; "
                         "only the overlap score takes thresholds above 1")
    return t


def need_table(threshold, query_lens, max_len: int, score: str, doc_lens=None) -> np.ndarray:
    """Least overlap with ``score >= threshold``, per query length and doc length (exact).

    Parameters
    ----------
    threshold : fractions.Fraction or any value :func:`parse_threshold` takes
        ``T``.
    query_lens : array_like of int, shape (n,)
        Query lengths, each in ``[0, max_len]``.
    max_len : int
        Bound on set sizes; doc lengths are ``0 .. max_len``.
    score : str
        One of :data:`settopk.kernels.SCORES`.
    doc_lens : array_like of int, shape (m,), optional
        The doc lengths of the columns, each in ``[0, max_len]``; default ``0 .. max_len``.

    Returns
    -------
    numpy.ndarray of int32, shape (n, max_len + 1) or (n, m)
        ``need[i, c]``: the least ``o`` with ``score(o, query_lens[i], doc_lens[c]) >= T``;
        ``max_len + 1`` (unreachable, as is any value above ``min(|q|, |d|)``) where no overlap
        reaches ``T``.
        The formulas are in the module docstring; Python integers keep them exact for any
        decimal.

    Raises
    ------
    ValueError
        As :func:`parse_threshold` and :func:`settopk.kernels.key_scale`.
    """
    key_scale(max_len, score)
    t = threshold if isinstance(threshold, Fraction) else parse_threshold(threshold, score)
    # One row per distinct length, then one per query: the exact table costs Python integers, at
    # most (max_len + 1)**2 of them, however many queries.
    lengths, row_of = np.unique(np.asarray(query_lens, dtype=np.int64).reshape(-1), return_inverse=True)
    d = np.arange(max_len + 1, dtype=np.int64) if doc_lens is None else np.asarray(doc_lens, dtype=np.int64).reshape(-1)
    return _need_rows(t, lengths, d, max_len, score)[row_of.reshape(-1)]


def _need_rows(t: Fraction, query_lens: np.ndarray, doc_lens: np.ndarray, max_len: int, score: str) -> np.ndarray:
    """:func:`need_table` for distinct ``query_lens`` and the columns ``doc_lens``, exact: int64
    where it cannot overflow, else Python integers."""
    a, b = t.numerator, t.denominator
    q = np.asarray(query_lens, dtype=np.int64).reshape(-1, 1)
    d = doc_lens.reshape(1, -1)
    unreachable = max_len + 1
    if score in _DENOMINATOR:  # the need is a function of one integer of at most 2 max_len: a table of it, gathered
        den = _DENOMINATOR[score](*np.broadcast_arrays(q, d))
        return _need_of_den(a, b, np.arange(int(den.max()) + 1 if den.size else 1, dtype=np.int64), score,
                            unreachable)[den]
    # int64 where no product can overflow (cosine's squares at most a**2 max_len**2, below 2**52 so
    # that a double holds each exactly, and its divisor b**2); else object arrays of Python ints.
    dtype = np.int64 if score == "cosine" and a * a * max_len * max_len < 2**52 and b * b < 2**62 else object
    q, d = np.broadcast_arrays(q.astype(dtype), d.astype(dtype))
    if score == "cosine":
        den = q * d
        square = -((-a * a * den) // (b * b))
        if square.dtype == object:
            root = np.frompyfunc(math.isqrt, 1, 1)(square)
        else:  # the double's square root is within one of isqrt: one correction each way makes it exact
            root = np.floor(np.sqrt(square.astype(np.float64))).astype(np.int64)
            root -= root * root > square
            root += (root + 1) * (root + 1) <= square
        need = root + (root * root < square)
    else:  # overlap: the fraction o / 1
        den = np.ones_like(q)
        need = np.full(q.shape, -(-a // b), dtype=object)  # a / b may exceed int64 (an overlap threshold)
    return _capped(need, den, a, unreachable)


#: The scores whose need is ``ceil(a * den / c)`` of one denominator ``den(|q|, |d|)``: Braun-Blanquet
#: ``max``, containment ``|q|``, Dice and Jaccard ``|q| + |d|`` (Jaccard's ``|q ∪ d|`` is
#: ``|q| + |d| - o``, so ``o >= T (|q| + |d| - o)`` is ``o >= a (|q| + |d|) / (a + b)``).
_DENOMINATOR = {"braun_blanquet": np.maximum, "containment": lambda q, d: q, "dice": np.add, "jaccard": np.add}


def _need_of_den(a: int, b: int, den: np.ndarray, score: str, unreachable: int) -> np.ndarray:
    """The need of each denominator value ``den`` (int64, at most ``2 max_len``), int32: exact in
    int64 where ``(a + 2 b) den`` cannot overflow, else in Python integers."""
    c = {"braun_blanquet": b, "containment": b, "dice": 2 * b, "jaccard": a + b}[score]
    if (a + 2 * b) * (int(den[-1]) + 1) >= 2**62:
        den = den.astype(object)
    return _capped(-((-a * den) // c), den, a, unreachable)


def _capped(need: np.ndarray, den: np.ndarray, a: int, unreachable: int) -> np.ndarray:
    """``need`` as int32, at most ``unreachable``; where the denominator is 0 (an empty set's score
    is 0), 0 at ``T == 0`` (``a`` its numerator), else unreachable."""
    need = np.where(den == 0, 0 if a == 0 else unreachable, need)
    return np.minimum(need, unreachable).astype(np.int32)


def reachable_lengths(need: np.ndarray, query_lens) -> np.ndarray:
    """Doc lengths a query can reach: ``need[i, l] <= min(query_lens[i], l)``, bool of need's shape."""
    q = np.asarray(query_lens, dtype=np.int64).reshape(-1, 1)
    d = np.arange(need.shape[1], dtype=np.int64).reshape(1, -1)
    return need <= np.minimum(q, d)


def order_pairs(n_queries: int, q_row, position, overlap, doc_len, query_len, doc_ids, max_len: int, score: str,
                k: int | None = None) -> ThresholdPairs:
    """Group passing pairs by query, order each group best first and keep its first ``k``.

    Parameters
    ----------
    n_queries : int
        Queries of the batch.
    q_row, position, overlap, doc_len : array_like of int, shape (n_found,)
        Each pair: its query (row in the batch), its doc's position in the shard, its overlap
        and doc length; any order, each pair once.
    query_len : array_like of int, shape (n_queries,)
        ``|q|`` per query.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        The shard's ids by position (strictly increasing, so position order is id order).
    max_len : int
        Bound on set sizes (the key scale).
    score : str
        One of :data:`settopk.kernels.SCORES`.
    k : int, optional
        Pairs kept per query (best first); None keeps all.

    Returns
    -------
    ThresholdPairs
    """
    q_row = np.asarray(q_row, dtype=np.int64)
    position = np.asarray(position, dtype=np.int64)
    overlap = np.asarray(overlap, dtype=np.int32)
    doc_len = np.asarray(doc_len, dtype=np.int32)
    qlen = np.asarray(query_len, dtype=np.int64)[q_row]
    # The integer key orders pairs exactly as the score does (settopk.kernels.keys), so sorting by
    # (query, -key, position) is the exact best-first order with ties to the lower doc id.
    key = score_key(overlap, qlen, doc_len, max_len, score).astype(np.int64)
    order = np.lexsort((position, -key, q_row))
    q_row, position, overlap, doc_len = q_row[order], position[order], overlap[order], doc_len[order]
    if k is not None:
        if k < 1:
            raise ValueError(f"k must be >= 1 (or None for every passing pair), found {k}")
        starts = np.searchsorted(q_row, q_row, side="left")
        keep = (np.arange(len(q_row)) - starts) < k
        q_row, position, overlap, doc_len = q_row[keep], position[keep], overlap[keep], doc_len[keep]
    offsets = np.zeros(n_queries + 1, dtype=np.int64)
    np.cumsum(np.bincount(q_row, minlength=n_queries), out=offsets[1:])
    return ThresholdPairs(offsets, np.asarray(doc_ids, dtype=np.int64)[position], overlap, doc_len)


def query_need(threshold, query_lens, max_len: int, score: str, min_doc_len=None) -> np.ndarray:
    """:func:`need_table` per query, with the doc lengths below ``min_doc_len[i]`` made unreachable.

    Parameters
    ----------
    threshold, query_lens, max_len, score
        As :func:`need_table`.
    min_doc_len : array_like of int, shape (n,), optional
        Per query, the shortest doc length to search (a symmetric self-join passes the query's own
        length: :func:`self_join_keep`); None: every length.

    Returns
    -------
    numpy.ndarray of int32, shape (n, max_len + 1)
        As :func:`need_table`, ``max_len + 1`` (unreachable) at the lengths left out.

    Raises
    ------
    ValueError
        As :func:`need_table`, or if ``min_doc_len`` has the wrong shape.
    """
    need = need_table(threshold, query_lens, max_len, score)
    if min_doc_len is not None:
        min_doc_len = np.asarray(min_doc_len, dtype=np.int64)
        if min_doc_len.shape != (need.shape[0],):
            raise ValueError(f"min_doc_len must have shape ({need.shape[0]},) (one per query), found {min_doc_len.shape}")
        need[np.arange(max_len + 1)[None, :] < min_doc_len[:, None]] = max_len + 1
    return need


def self_join_keep(own_ids, own_len, doc_ids, doc_len, score: str, include_self: bool = False) -> np.ndarray:
    """Which (query, doc) pairs of a self-join are written: bool of the pairs' shape.

    Containment (``|q ∩ d| / |q|``) is not symmetric: every ordered pair is kept but a doc's pair
    with itself (unless ``include_self``). Every other score gives ``(a, b)`` and ``(b, a)`` the
    same value, so each unordered pair is kept once, under its *shorter* doc, or the lower id of
    two of the same length: ``(|d|, doc_id) > (|q|, query_id)``. Under that rule a query needs only
    the docs at least as long as itself, which halves a self-join's threshold search
    (``min_doc_len`` of :meth:`settopk.kernels.NumpyShardIndex.threshold_search`), as the all-pairs
    algorithms do (Bayardo, Ma, Srikant, "Scaling up all pairs similarity search", WWW 2007).

    Parameters
    ----------
    own_ids, own_len : array_like of int64
        Each pair's query, as a doc id, and its length.
    doc_ids, doc_len : array_like of int64
        Each pair's doc and its length (all four broadcastable).
    score : str
        One of :data:`settopk.kernels.SCORES`.
    include_self : bool
        Keep a doc's pair with itself.
    """
    own_ids, doc_ids = np.asarray(own_ids, dtype=np.int64), np.asarray(doc_ids, dtype=np.int64)
    if check_score(score) == "containment":
        return np.ones(np.broadcast(own_ids, doc_ids).shape, bool) if include_self else doc_ids != own_ids
    own_len, doc_len = np.asarray(own_len, dtype=np.int64), np.asarray(doc_len, dtype=np.int64)
    later = (doc_ids >= own_ids) if include_self else (doc_ids > own_ids)
    return (doc_len > own_len) | ((doc_len == own_len) & later)


def self_join_pairs(pairs: ThresholdPairs, query_ids, query_len, score: str, include_self: bool = False,
                    k: int | None = None) -> ThresholdPairs:
    """A self-join's pairs from a search of the corpus against itself (:func:`self_join_keep`): no
    doc paired with itself (unless ``include_self``); each unordered pair once, under its shorter
    doc, where the score is symmetric; every ordered pair for containment; each query's first ``k``.

    Parameters
    ----------
    pairs : ThresholdPairs
        A threshold search whose queries are docs of the same corpus (searched with or without
        ``min_doc_len`` set to the queries' lengths: the result is the same), each query's pairs
        best first.
    query_ids : array_like of int64, shape (n_queries,)
        The doc id of each query.
    query_len : array_like of int, shape (n_queries,)
        The length of each query.
    score : str
        One of :data:`settopk.kernels.SCORES`.
    include_self : bool
        Keep each doc's pair with itself.
    k : int, optional
        Keep each query's first ``k`` kept pairs; None keeps all.

    Returns
    -------
    ThresholdPairs
        The kept pairs, in the same order.

    Raises
    ------
    ValueError
        If ``query_ids`` or ``query_len`` do not have one entry per query.
    """
    query_ids = np.asarray(query_ids, dtype=np.int64)
    query_len = np.asarray(query_len, dtype=np.int64)
    for name, value in (("query_ids", query_ids), ("query_len", query_len)):
        if value.shape != (pairs.n_queries,):
            raise ValueError(f"{name} must have shape ({pairs.n_queries},) (one per query), found {value.shape}")
    row = np.repeat(np.arange(pairs.n_queries), pairs.counts)
    keep = self_join_keep(query_ids[row], query_len[row], pairs.doc_ids, pairs.doc_len, score, include_self)
    if k is not None:  # each query's pairs are best first: its first k kept ones
        kept = np.concatenate([[0], np.cumsum(keep)])
        keep &= kept[1:] - np.repeat(kept[pairs.offsets[:-1]], pairs.counts) <= k
    offsets = np.zeros_like(pairs.offsets)
    np.cumsum(np.bincount(row[keep], minlength=pairs.n_queries), out=offsets[1:])
    return ThresholdPairs(offsets, pairs.doc_ids[keep], pairs.overlap[keep], pairs.doc_len[keep])


def numpy_threshold_search(index, queries: SetBatch, threshold, k: int | None = None,
                           min_doc_len=None) -> ThresholdPairs:
    """The scan of :meth:`settopk.kernels.NumpyShardIndex.threshold_search` (its path at ``T == 0``;
    exact at any ``T``): every reachable query counted against every doc by the lane-packed scan."""
    t = parse_threshold(threshold, index.score)
    n_q, n = queries.n_sets, index.n_docs
    qlen = queries.lengths
    need = query_need(t, qlen, index.max_len, index.score, min_doc_len)
    present = np.bincount(index.doc_len.astype(np.int64), minlength=index.max_len + 1) > 0
    reach = reachable_lengths(need, qlen) & present[None, :]
    found = []  # (q_row, position, overlap) per piece
    scanned = np.flatnonzero(reach.any(axis=1)) if n else np.zeros(0, np.int64)
    index.last_skipped = n_q - len(scanned)
    doc_len = index.doc_len.astype(np.int64)
    for lo in range(0, len(scanned), _QUERY_CHUNK):
        rows = scanned[lo : lo + _QUERY_CHUNK]
        overlap = index._overlaps(queries.take(rows)).astype(np.int32)  # queries already in the tables' ids
        # need[row, |d|] per pair: unreachable lengths hold need > min(|q|, |d|) >= overlap.
        hit_row, hit_pos = np.nonzero(overlap >= np.take(need[rows], doc_len, axis=1))
        found.append((rows[hit_row], hit_pos, overlap[hit_row, hit_pos]))
    index.last_routing = {"scan": len(scanned), "postings": 0, "scancount": 0, "prefix": 0}
    if found:
        q_row, pos, ov = (np.concatenate([f[i] for f in found]) for i in range(3))
    else:
        q_row = pos = ov = np.zeros(0, np.int64)
    return order_pairs(n_q, q_row, pos, ov, doc_len[pos], qlen, index.doc_ids, index.max_len, index.score, k)


def interleave_pairs(n_queries: int, parts) -> ThresholdPairs:
    """One batch's pairs from the pairs of disjoint sets of its rows.

    Parameters
    ----------
    n_queries : int
        Rows of the batch.
    parts : sequence of (numpy.ndarray of int64, ThresholdPairs)
        Each part's rows (ascending, disjoint from the other parts') and their pairs (CSR over
        those rows). Rows no part names get no pair.

    Returns
    -------
    ThresholdPairs
        CSR over ``0 .. n_queries - 1``, each row's pairs as its part gave them.

    Raises
    ------
    ValueError
        If a part's rows and pairs differ in length.
    """
    for rows, pairs in parts:
        if len(rows) != pairs.n_queries:
            raise ValueError(f"a part names {len(rows)} rows for pairs of {pairs.n_queries} queries")
    if len(parts) == 1 and len(parts[0][0]) == n_queries:  # ascending and disjoint: every row, in order
        return parts[0][1]
    counts = np.zeros(n_queries, np.int64)
    for rows, pairs in parts:
        counts[rows] = pairs.counts
    offsets = np.zeros(n_queries + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    n = int(offsets[-1])
    out = ThresholdPairs(offsets, np.empty(n, np.int64), np.empty(n, np.int32), np.empty(n, np.int32))
    for rows, pairs in parts:
        # Each pair's place: its row's start in the batch plus its rank within the row.
        within = np.arange(len(pairs.doc_ids), dtype=np.int64) - np.repeat(pairs.offsets[:-1], pairs.counts)
        at = np.repeat(offsets[np.asarray(rows, np.int64)], pairs.counts) + within
        for name in ("doc_ids", "overlap", "doc_len"):
            getattr(out, name)[at] = getattr(pairs, name)
    return out
