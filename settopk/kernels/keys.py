"""Exact integer keys for the set-similarity scores.

For a query ``q`` and a doc ``d`` with overlap ``o = |q ∩ d|``, each score
ranks by a fraction ``num / den`` of integers (``0/0`` counts as 0), and the
kernels compare an integer key instead. For every score but cosine the key is
``floor(S * num / den)`` (0 where ``den == 0``), with a scale ``S`` that
depends on the score and on ``L = max_len``:

================  ==========================  ======================  =========  ======
score             value                       ranked by ``num / den``  ``D``      ``S``
================  ==========================  ======================  =========  ======
braun_blanquet    ``o / max(|q|, |d|)``       the value               ``L``      ``L²``
jaccard           ``o / |q ∪ d|``             the value               ``2L``     ``4L²``
dice              ``2 o / (|q| + |d|)``       the value               ``2L``     ``4L²``
containment       ``o / |q|``                 the value               ``L``      ``L²``
overlap           ``o``                       ``o / 1``               ``1``      ``1``
================  ==========================  ======================  =========  ======

(``|q ∪ d| = |q| + |d| - o``.) The key is strictly order-preserving for set
sizes up to ``L``. Proof: every denominator is at most ``D`` (``|q ∪ d| <=
|q| + |d| <= 2L``), and ``S = D²``. Two different fractions ``a/b`` and
``c/e`` with ``b, e <= D`` differ by at least ``1 / (b e) >= 1 / D² = 1 / S``
(their difference is a nonzero integer over ``b e``), so their scaled values
differ by at least 1 and their floors differ in the same direction; equal
fractions get equal keys. Every fraction lies in ``[0, 1]`` (``o <= min(|q|,
|d|)``) except ``overlap``'s, in ``[0, L]``, so keys lie in ``[0, max_key]``
with ``max_key = S`` (``L`` for overlap).

**Cosine** ``o / sqrt(|q| |d|)`` ranks by its square ``o² / (|q| |d|)``. A
floor of that fraction would need ``S = L⁴`` (``2**48`` at ``L = 4096``), too
wide for the 32 bits the candidates give a key. But keys are only ever compared
between pairs of the same query (top-k lists, floors and thresholds are per
query), and for a fixed ``|q|`` the square orders as ``o² / |d|``. So cosine's
key is the rank of ``o² / |d|`` among the distinct fractions ``a² / b`` with
``0 <= a <= b <= L`` (:func:`cosine_key_table`; ``0/0`` counts as 0, rank 0):
strictly order-preserving among the pairs of one query, and below ``2**23``
for ``L <= 4096`` (7,554,302 distinct fractions there). Unlike the other
scores' keys, it does not compare pairs of queries of different lengths.

``tests/test_keys.py`` checks all of it exhaustively for small ``L`` and on
samples up to ``L = 4096``.

Widths: ``max_key < 2**32`` for every score (the others allow ``L <= 32767``:
``4 * 32767² < 2**32``; cosine's table goes to ``L = 4096``), which the GPU
candidate encoding ``(key << 32) | ~position`` and the CPU backends' sort
value ``(key << 31) | tiebreak`` rely on. Keys are int32 where ``max_key <
2**31`` (every score at ``L <= 4096``; jaccard and dice above ``L = 23170``
are int64).
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = [
    "SCORES",
    "DEFAULT_SCORE",
    "check_score",
    "score_definition",
    "key_scale",
    "max_key",
    "key_dtype",
    "score_key",
    "cosine_key_table",
    "cosine_key_fractions",
    "score_value",
    "min_overlap_above",
    "least_overlap",
    "best_key_in_range",
    "check_floor_key",
]

SCORES = ("braun_blanquet", "jaccard", "cosine", "dice", "overlap", "containment")
"""Names of the scores a search can rank by (config key ``score``, ``--score``)."""

DEFAULT_SCORE = "braun_blanquet"

_DEFINITIONS = {
    "braun_blanquet": "Braun-Blanquet |q & d| / max(|q|, |d|); 0/0 = 0; ties by lower doc_id",
    "jaccard": "Jaccard |q & d| / |q | d|; 0/0 = 0; ties by lower doc_id",
    "cosine": "cosine |q & d| / sqrt(|q| * |d|); 0/0 = 0; ties by lower doc_id",
    "dice": "Dice 2 |q & d| / (|q| + |d|); 0/0 = 0; ties by lower doc_id",
    "overlap": "overlap |q & d|; ties by lower doc_id",
    "containment": "containment |q & d| / |q|; 0/0 = 0; ties by lower doc_id",
}
# Scores whose numerator is c * o and whose denominator does not depend on o: key > T is then a
# single ceiling division. The value is c.
_LINEAR = {"braun_blanquet": 1, "dice": 2, "containment": 1, "overlap": 1}
_COSINE_MAX_LEN = 4096  # cosine_key_table's rows: (L + 1)(L + 2) / 2 int32, 33.6 MB at 4096
_MAX_LEN = 32767


def check_score(score: str) -> str:
    """Return ``score`` if it names a score, else raise.

    Raises
    ------
    ValueError
        If ``score`` is not one of :data:`SCORES` (the message lists them).
    """
    if score not in _DEFINITIONS:
        raise ValueError(f"score must be one of {', '.join(SCORES)}; found {score!r}")
    return score


def score_definition(score: str) -> str:
    """Name and definition of ``score``, as the result files' ``settopk.score`` metadata holds it.

    Raises
    ------
    ValueError
        If ``score`` is not one of :data:`SCORES`.
    """
    return _DEFINITIONS[check_score(score)]


def key_scale(max_len: int, score: str = DEFAULT_SCORE) -> int:
    """Return ``S``, the scale of ``score``'s integer key (see the module docstring).

    Parameters
    ----------
    max_len : int
        Largest set size (ids per doc or query) the run accepts, ``>= 1``.
    score : str
        One of :data:`SCORES`.

    Returns
    -------
    int
        ``max_len**2`` (braun_blanquet, containment), ``4 max_len**2`` (jaccard,
        dice), or 1 (overlap and cosine, whose keys are not scaled fractions:
        cosine's come from :func:`cosine_key_table`).

    Raises
    ------
    ValueError
        If ``score`` is unknown, or ``max_len`` is not in ``[1, 32767]``
        (the largest key must stay below ``2**32``), or ``[1, 4096]`` for
        cosine (the rows of its key table).
    """
    check_score(score)
    if score == "cosine":
        if not 1 <= max_len <= _COSINE_MAX_LEN:
            raise ValueError(f"max_len must be in [1, {_COSINE_MAX_LEN}] for score 'cosine' (the rows of its key "
                             f"table), found {max_len}")
        return 1
    if not 1 <= max_len <= _MAX_LEN:
        raise ValueError(f"max_len must be in [1, {_MAX_LEN}] for score {score!r} (keys below 2**32), found {max_len}")
    if score == "overlap":
        return 1
    return (4 if score in ("jaccard", "dice") else 1) * max_len * max_len


def max_key(max_len: int, score: str = DEFAULT_SCORE) -> int:
    """The largest key ``score`` reaches for sets of up to ``max_len`` ids: ``S``, ``max_len`` for overlap,
    and for cosine the rank of ``max_len² / max_len`` (the largest fraction of :func:`cosine_key_table`).

    Raises
    ------
    ValueError
        As :func:`key_scale`.
    """
    scale = key_scale(max_len, score)
    if score == "cosine":
        return int(cosine_key_table(max_len)[-1])  # row max_len, overlap max_len
    return max_len if score == "overlap" else scale


@functools.cache
def cosine_key_table(max_len: int) -> np.ndarray:
    """Cosine's keys: the rank of ``o² / d`` among the distinct fractions ``a² / b``, ``0 <= a <= b <= max_len``.

    For one query, cosine ``o / sqrt(|q| |d|)`` orders its docs as ``o² / |d|`` does, so these ranks
    are exact keys within a query (module docstring). Built once per ``max_len`` and process
    (34 MB at 4096), read-only.

    Parameters
    ----------
    max_len : int
        Bound on set sizes, in ``[1, 4096]``.

    Returns
    -------
    numpy.ndarray of int32, shape ((max_len + 1) (max_len + 2) / 2,), host memory
        The key of overlap ``o`` with a doc of length ``d`` (``o <= d``) at index ``d (d + 1) / 2 + o``:
        row ``d`` holds ``d + 1`` keys, strictly increasing; row 0 and column 0 hold 0 (``0/0`` and
        ``0/d``). Equal fractions share a key; a larger fraction has a larger key.

    Raises
    ------
    ValueError
        If ``max_len`` is not in ``[1, 4096]``.
    """
    key_scale(max_len, "cosine")  # the range check
    # Float64 keeps distinct fractions apart and in order: a² / b <= max_len < 2**13, so each is rounded by
    # less than 2**-40, and two distinct ones differ by at least 1 / (b e) >= 2**-24. Equal fractions
    # round alike (one correctly rounded division of exact integers).
    squares = np.arange(max_len + 1, dtype=np.float64) ** 2
    value = np.empty((max_len + 1) * (max_len + 2) // 2, dtype=np.float64)
    for d in range(max_len + 1):  # row by row: no (overlap, length) index arrays of the whole table's size
        start = _cosine_row_start(d)
        value[start : start + d + 1] = squares[: d + 1] / max(d, 1)
    order = np.argsort(value, kind="stable")  # rows are sorted runs, which the stable sort merges
    ranked = value[order]
    distinct = np.empty(len(ranked), dtype=np.int32)
    distinct[0] = 0
    np.not_equal(ranked[1:], ranked[:-1], out=distinct[1:])
    table = np.empty(len(ranked), dtype=np.int32)
    table[order] = np.cumsum(distinct, dtype=np.int32)
    table.flags.writeable = False
    return table


@functools.cache
def cosine_key_fractions(max_len: int) -> np.ndarray:
    """The fraction ``o² / d`` behind each of cosine's keys (:func:`cosine_key_table`), packed as ``(o << 16) | d``.

    The GPU inverts a key with it: the least overlap ``o'`` whose key reaches key ``r`` for a doc of
    length ``|d|`` is the least with ``o'² d >= o² |d|``, integer arithmetic instead of a search
    of the table's row (``least_overlap`` in ``settopk/kernels/cuda/common.cuh``).

    Parameters
    ----------
    max_len : int
        Bound on set sizes, in ``[1, 4096]``.

    Returns
    -------
    numpy.ndarray of int32, shape (max_key + 1,), host memory
        Entry ``r``: an ``(o, d)`` with key ``r`` (any of them: equal fractions share the key), ``0 <= o
        <= d <= max_len``; entry 0 is ``(0, 0)``. Read-only.

    Raises
    ------
    ValueError
        If ``max_len`` is not in ``[1, 4096]``.
    """
    table = cosine_key_table(max_len)
    rows = np.arange(max_len + 1, dtype=np.int32)
    doc_len = np.repeat(rows, rows + 1)
    overlap = np.arange(len(table), dtype=np.int32) - _cosine_row_start(doc_len.astype(np.int64)).astype(np.int32)
    fractions = np.empty(int(table[-1]) + 1, dtype=np.int32)
    fractions[table] = (overlap << 16) | doc_len
    fractions[0] = 0  # 0 / 0 (row 0) rather than whichever 0 / d was written last
    fractions.flags.writeable = False
    return fractions


def _cosine_row_start(doc_len):
    """Index of row ``doc_len`` in :func:`cosine_key_table` (an int, or int64 arrays in NumPy or CuPy)."""
    return doc_len * (doc_len + 1) // 2


def key_dtype(max_len: int, score: str = DEFAULT_SCORE) -> np.dtype:
    """int32 where every key of ``score`` fits (``max_key < 2**31``), else int64.

    Raises
    ------
    ValueError
        As :func:`key_scale`.
    """
    return np.dtype(np.int32 if max_key(max_len, score) < 2**31 else np.int64)


def score_key(overlap, query_len, doc_len, max_len: int, score: str = DEFAULT_SCORE) -> np.ndarray:
    """Integer key of ``score``: ``floor(S * num / den)``, 0 where ``den == 0``; for cosine the rank of
    ``o² / |d|`` (:func:`cosine_key_table`). See the module docstring.

    Parameters
    ----------
    overlap, query_len, doc_len : array_like of int
        Broadcastable host arrays: ``|q ∩ d|``, ``|q|`` and ``|d|``, with
        ``overlap <= min(query_len, doc_len)``.
    max_len : int
        Bound on set sizes; fixes the scale ``S``.
    score : str
        One of :data:`SCORES`.

    Returns
    -------
    numpy.ndarray of :func:`key_dtype` (int32, or int64 for wide keys)
        Keys in ``[0, max_key]``; a larger key is a strictly larger score (for
        cosine: between pairs with the same ``|q|``).

    Raises
    ------
    ValueError
        As :func:`key_scale`.
    """
    scale = key_scale(max_len, score)
    dtype = key_dtype(max_len, score)
    if score == "cosine":
        shape = np.broadcast_shapes(np.shape(overlap), np.shape(query_len), np.shape(doc_len))
        o = np.asarray(overlap, dtype=np.int64)
        d = np.asarray(doc_len, dtype=np.int64)
        key = cosine_key_table(max_len)[_cosine_row_start(d) + o]  # o <= |d|: within row |d|
        return np.broadcast_to(key, shape).astype(dtype)
    if score == "overlap":
        shape = np.broadcast_shapes(np.shape(overlap), np.shape(query_len), np.shape(doc_len))
        return np.broadcast_to(np.asarray(overlap), shape).astype(dtype)
    # Float64 division is exact here and vectorises (NumPy's integer division does not): the
    # numerator a = S * num < 2**53 (at most 8 L**3 < 2**48), so the
    # rounded quotient is off by at most a / b * 2**-53 < 1 / b, less than the distance from a / b
    # to the next integer when a / b is not one; an integral quotient is representable. So
    # floor(fl(a / b)) == a // b.
    q = np.asarray(query_len, dtype=np.float64)
    d = np.asarray(doc_len, dtype=np.float64)
    numerator = np.multiply(np.asarray(overlap), float(scale * _LINEAR.get(score, 1)), dtype=np.float64)
    if score == "braun_blanquet":
        denom = np.maximum(q, d)
    elif score == "containment":
        denom = np.broadcast_to(q, np.broadcast_shapes(q.shape, d.shape))  # the result has d's shape too
    elif score == "dice":
        denom = q + d
    else:  # jaccard: |q ∪ d|
        denom = (q + d) - np.asarray(overlap, dtype=np.float64)
    # den == 0 only where o == 0 (o <= min(|q|, |d|)), so dividing by 1 there gives the key 0 of 0/0.
    key = np.floor(numerator / np.maximum(denom, 1.0))
    return key.astype(dtype)


def score_value(overlap, query_len, doc_len, score: str = DEFAULT_SCORE) -> np.ndarray:
    """The score as float64 (the value written to the output), 0.0 for ``0/0``.

    Parameters
    ----------
    overlap, query_len, doc_len : array_like of int
        Broadcastable host arrays: ``|q ∩ d|``, ``|q|`` and ``|d|``.
    score : str
        One of :data:`SCORES`.

    Returns
    -------
    numpy.ndarray of float64
        The correctly rounded value of the fraction; for cosine
        ``o / sqrt(|q| |d|)`` (two roundings); for overlap the count itself.

    Raises
    ------
    ValueError
        If ``score`` is unknown.
    """
    check_score(score)
    if score == "braun_blanquet":
        # The maximum in the inputs' integer types, then one correctly rounded float64 division:
        # far cheaper on large int16 inputs than converting every operand to float64 first.
        return np.divide(overlap, np.maximum(np.maximum(query_len, doc_len), 1), dtype=np.float64)
    overlap = np.asarray(overlap, dtype=np.float64)
    q = np.asarray(query_len, dtype=np.float64)
    d = np.asarray(doc_len, dtype=np.float64)
    if score == "overlap":
        return overlap + 0.0 * (q + d)  # broadcast to the common shape
    if score == "cosine":
        return overlap / np.sqrt(np.maximum(q * d, 1.0))
    if score == "braun_blanquet":
        denom = np.maximum(q, d)
    elif score == "containment":
        denom = np.broadcast_to(q, np.broadcast_shapes(q.shape, d.shape))
    elif score == "dice":
        overlap, denom = 2.0 * overlap, q + d
    else:  # jaccard
        denom = q + d - overlap
    return overlap / np.maximum(denom, 1.0)


def _ceil_div(a, b):
    """``ceil(a / b)`` for int64 arrays with ``a >= 0``, ``b > 0``."""
    return -((-a) // b)


def _cosine_least_overlap(xp, table, threshold_key, query_len, doc_len, max_len):
    """Cosine's least overlap with a key above ``threshold_key``: the first entry of row ``|d|`` of
    ``table`` (:func:`cosine_key_table`) above it, by a binary search of the rows at once; ``max_len +
    1`` where none is (or where ``|q| |d| == 0``, as :func:`least_overlap` has it)."""
    t = xp.asarray(threshold_key, dtype=xp.int64)
    q, d, t = xp.broadcast_arrays(xp.asarray(query_len, dtype=xp.int64), xp.asarray(doc_len, dtype=xp.int64), t)
    start = _cosine_row_start(d)
    lo, hi = xp.zeros_like(d), d + 1  # the answer lies in [0, d + 1]; d + 1: no entry of the row is above t
    for _ in range(max(1, int(max_len + 1).bit_length())):
        mid = (lo + hi) // 2
        right = (mid < hi) & (table[start + xp.minimum(mid, d)] <= t)
        lo = xp.where(right, mid + 1, lo)
        hi = xp.where(right, hi, mid)
    need = xp.where(lo > d, xp.int64(max_len + 1), lo)
    empty = xp.where(t < 0, xp.int64(0), xp.int64(max_len + 1))  # |q| |d| == 0: the key is always 0 (0/0)
    return xp.where((q == 0) | (d == 0), empty, need)


def least_overlap(xp, threshold_key, query_len, doc_len, max_len: int, score: str = DEFAULT_SCORE,
                  cosine_keys=None):
    """:func:`min_overlap_above` as int64, in NumPy or CuPy (``xp``); the CUDA backend's threshold
    tables use it on the GPU (:func:`settopk.kernels.cuda.floors.floor_tables`). Mirrors ``least_overlap`` in
    ``settopk/kernels/cuda/common.cuh``. ``cosine_keys``: :func:`cosine_key_table` already in ``xp``'s
    memory (None: copied there on each call; only cosine reads it)."""
    scale = key_scale(max_len, score)
    if score == "cosine":
        table = xp.asarray(cosine_key_table(max_len) if cosine_keys is None else cosine_keys)
        return _cosine_least_overlap(xp, table, threshold_key, query_len, doc_len, max_len)
    # Clipped so that the products below stay far inside int64 (at most about 2**48).
    t = xp.clip(xp.asarray(threshold_key, dtype=xp.int64), -1, max_key(max_len, score)) + 1
    q, d = xp.broadcast_arrays(xp.asarray(query_len, dtype=xp.int64), xp.asarray(doc_len, dtype=xp.int64))
    if score in _LINEAR:
        if score == "braun_blanquet":
            den = xp.maximum(q, d)
        elif score == "containment":
            den = q
        elif score == "dice":
            den = q + d
        else:  # overlap: the fraction o / 1
            den = xp.ones_like(q)
        need = _ceil_div(t * den, scale * _LINEAR[score])
    else:  # jaccard
        den = q + d  # |q ∪ d| is 0 exactly where |q| + |d| is
        need = _ceil_div(t * den, scale + t)
    empty = xp.where(t <= 0, xp.int64(0), xp.int64(max_len + 1))  # den == 0: the key is always 0 (0/0)
    return xp.where(den == 0, empty, need)


def min_overlap_above(threshold_key, query_len, doc_len, max_len: int, score: str = DEFAULT_SCORE) -> np.ndarray:
    """Smallest overlap whose key is strictly greater than ``threshold_key``.

    Every key grows with the overlap for fixed lengths (the numerator grows, and
    for jaccard the denominator ``|q| + |d| - o`` shrinks), so ``key(o) > T``
    holds exactly for ``o >= need``. With ``t = T + 1`` and the key's floor
    removed (``floor(x) >= t`` iff ``x >= t`` for an integer ``t``):

    * braun_blanquet, containment, dice, overlap (``num = c o``, ``den`` free of
      ``o``): ``S c o >= t den``, so ``need = ceil(t den / (S c))``;
    * jaccard: ``S o >= t (|q| + |d| - o)``, so ``need = ceil(t (|q| + |d|) / (S + t))``;
    * cosine: the first overlap of row ``|d|`` of :func:`cosine_key_table`
      whose key is above ``T`` (the rows increase), by binary search.

    Kernels compare overlaps against these tables instead of dividing per doc.

    Parameters
    ----------
    threshold_key : array_like of int
        Key ``T`` to beat; ``-1`` admits every doc (including overlap 0).
        Values above ``max_key`` give the same answer as ``max_key`` (no key
        exceeds it).
    query_len, doc_len : array_like of int
        Broadcastable set sizes.
    max_len : int
        Bound on set sizes.
    score : str
        One of :data:`SCORES`.

    Returns
    -------
    numpy.ndarray of int32
        Minimum overlap; it may exceed ``min(query_len, doc_len)``, meaning no doc
        of that length can beat ``T``. Where ``den == 0`` the key is always 0, so the
        result is 0 when ``T < 0`` and ``max_len + 1`` (unreachable) otherwise.

    Raises
    ------
    ValueError
        As :func:`key_scale`.
    """
    return least_overlap(np, threshold_key, query_len, doc_len, max_len, score).astype(np.int32)


def best_key_in_range(query_len, min_doc_len, max_doc_len, max_len: int, score: str = DEFAULT_SCORE) -> np.ndarray:
    """Largest key any doc with a length in ``[min_doc_len, max_doc_len]`` can reach for a query.

    The overlap is at most ``min(|q|, |d|)``, so the best key of length ``d`` is
    the key of ``o = min(|q|, d)``. For braun_blanquet, jaccard, cosine and dice
    that is a function of ``min(|q|, d) / max(|q|, d)`` (``|q ∪ d| = max``,
    cosine's fraction is ``min / max``, dice's ``2 min / (min + max)``),
    non-decreasing in ``d`` up to ``|q|`` and non-increasing after it. For
    containment (``min(|q|, d) / |q|``) and overlap (``min(|q|, d)``) it is
    non-decreasing up to ``|q|`` and constant after it. Either way the best
    length is ``d* = clip(|q|, min_doc_len, max_doc_len)``. A shard whose lengths lie in the range
    cannot return a doc with a larger key, so a query whose floor exceeds this
    value can skip the shard.

    Parameters
    ----------
    query_len, min_doc_len, max_doc_len : array_like of int
        Broadcastable host arrays: ``|q|`` and the inclusive range of doc
        lengths, all in ``[0, max_len]``.
    max_len : int
        Bound on set sizes; fixes the scale ``S``.
    score : str
        One of :data:`SCORES`.

    Returns
    -------
    numpy.ndarray of :func:`key_dtype`
        The best key, in ``[0, max_key]`` (for example ``S`` for braun_blanquet
        when ``|q| >= 1`` lies in the range, and ``0`` for ``|q| == 0``).
        ``-1``, below every key, where the range is empty (``min_doc_len >
        max_doc_len``): no doc, so any floor ``>= 0`` skips.

    Raises
    ------
    ValueError
        As :func:`key_scale`.
    """
    q = np.asarray(query_len, dtype=np.int64)
    lo = np.asarray(min_doc_len, dtype=np.int64)
    hi = np.asarray(max_doc_len, dtype=np.int64)
    # clip by hand: np.clip's result is unspecified where lo > hi, and those are masked below
    best_len = np.minimum(np.maximum(q, lo), hi)
    key = score_key(np.minimum(q, best_len), q, best_len, max_len, score)
    return np.where(lo <= hi, key, -1).astype(key_dtype(max_len, score))


def check_floor_key(floor_key, n_queries: int, max_len: int, score: str = DEFAULT_SCORE) -> np.ndarray | None:
    """Validate a per-query score floor and return it as int64 (the search backends' shared check).

    Parameters
    ----------
    floor_key : array_like of int, shape (n_queries,), or None
        Host array: per query, the least key a returned doc must have (``-1``
        for no floor). None means no floor for any query.
    n_queries : int
        Queries in the batch.
    max_len : int
        Bound on set sizes; fixes the key scale.
    score : str
        One of :data:`SCORES`.

    Returns
    -------
    numpy.ndarray of int64, shape (n_queries,), or None
        The floors, with values above :func:`max_key` lowered to ``max_key + 1``
        (no key reaches either, so the results are the same, and the kernels'
        key arithmetic cannot overflow). None when ``floor_key`` is None.

    Raises
    ------
    ValueError
        If ``floor_key`` is not an integer array of shape ``(n_queries,)`` or
        holds a value below ``-1``, or as :func:`key_scale`.
    """
    ceiling = max_key(max_len, score) + 1
    if floor_key is None:
        return None
    floor = np.asarray(floor_key)
    if floor.dtype.kind not in "iu":  # bool is kind "b": refused as well
        raise ValueError(f"floor_key must have an integer dtype, found {floor.dtype}")
    if floor.shape != (n_queries,):
        raise ValueError(f"floor_key must have shape ({n_queries},) (one floor per query), found {floor.shape}")
    if floor.dtype.kind == "u":  # compare before the cast: uint64 values above 2**63 would wrap
        return np.minimum(floor, np.uint64(ceiling)).astype(np.int64)
    if len(floor) and floor.min() < -1:
        raise ValueError(f"floor_key values must be >= -1 (-1: no floor), found {floor.min()}")
    return np.minimum(floor.astype(np.int64), ceiling)
