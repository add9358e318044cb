"""Exact integer keys for Braun-Blanquet scores.

The Braun-Blanquet score of a query ``q`` and a doc ``d`` is
``|q ∩ d| / max(|q|, |d|)`` (``0/0`` counts as 0). Comparing floats would be
exact here too, but kernels want integers: ``key = (S * overlap) // max(|q|, |d|)``
with ``S = max_len ** 2`` is strictly order-preserving for set sizes up to
``max_len``. Proof: two different fractions ``a/b`` and ``c/d`` with
``b, d <= max_len`` differ by at least ``1 / (b d) >= 1 / S``, so their scaled
values differ by at least 1 and their floors differ in the same direction;
equal fractions get equal keys. ``tests/test_keys.py`` checks it exhaustively.
"""

from __future__ import annotations

import numpy as np

__all__ = ["key_scale", "score_key", "score_value", "min_overlap_above"]


def key_scale(max_len: int) -> int:
    """Return ``S = max_len ** 2``, the scale of the integer score key.

    Parameters
    ----------
    max_len : int
        Largest set size (ids per doc or query) the run accepts, ``>= 1``.

    Raises
    ------
    ValueError
        If ``max_len`` is not in ``[1, 32767]`` (keys must fit in int32).
    """
    if not 1 <= max_len <= 32767:
        raise ValueError(f"max_len must be in [1, 32767], found {max_len}")
    return max_len * max_len


def score_key(overlap, query_len, doc_len, max_len: int) -> np.ndarray:
    """Integer key ``(S * overlap) // max(query_len, doc_len)``, 0 where both lengths are 0.

    Parameters
    ----------
    overlap, query_len, doc_len : array_like of int
        Broadcastable host arrays: ``|q ∩ d|``, ``|q|`` and ``|d|``.
    max_len : int
        Bound on set sizes; fixes the scale ``S = max_len ** 2``.

    Returns
    -------
    numpy.ndarray of int32
        Keys in ``[0, S]``; a larger key is a strictly larger score.
    """
    scale = key_scale(max_len)
    overlap = np.asarray(overlap, dtype=np.int64)
    denom = np.maximum(np.asarray(query_len, dtype=np.int64), np.asarray(doc_len, dtype=np.int64))
    key = (scale * overlap) // np.maximum(denom, 1)
    return key.astype(np.int32)


def score_value(overlap, query_len, doc_len) -> np.ndarray:
    """Braun-Blanquet score as float64 (the value written to the output), 0.0 for ``0/0``.

    Parameters
    ----------
    overlap, query_len, doc_len : array_like of int
        Broadcastable host arrays: ``|q ∩ d|``, ``|q|`` and ``|d|``.

    Returns
    -------
    numpy.ndarray of float64
        The correctly rounded value of the fraction.
    """
    overlap = np.asarray(overlap, dtype=np.float64)
    denom = np.maximum(np.asarray(query_len, dtype=np.float64), np.asarray(doc_len, dtype=np.float64))
    return overlap / np.maximum(denom, 1.0)


def min_overlap_above(threshold_key, query_len, doc_len, max_len: int) -> np.ndarray:
    """Smallest overlap whose key is strictly greater than ``threshold_key``.

    ``key(ov) > T`` holds exactly when ``S * ov >= (T + 1) * m`` with
    ``m = max(query_len, doc_len)``, i.e. ``ov >= ceil((T + 1) * m / S)``.
    Kernels compare overlaps against this table instead of dividing per doc.

    Parameters
    ----------
    threshold_key : array_like of int
        Key ``T`` to beat; ``-1`` admits every doc (including overlap 0).
    query_len, doc_len : array_like of int
        Broadcastable set sizes.
    max_len : int
        Bound on set sizes.

    Returns
    -------
    numpy.ndarray of int32
        Minimum overlap; it may exceed ``min(query_len, doc_len)``, meaning no doc
        of that length can beat ``T``. Where ``m == 0`` the key is always 0, so the
        result is 0 when ``T < 0`` and ``max_len + 1`` (unreachable) otherwise.
    """
    scale = key_scale(max_len)
    t = np.asarray(threshold_key, dtype=np.int64)
    m = np.maximum(np.asarray(query_len, dtype=np.int64), np.asarray(doc_len, dtype=np.int64))
    need = -((-(t + 1) * m) // scale)  # ceil division
    need = np.maximum(need, 0)
    need = np.where(m == 0, np.where(t < 0, 0, max_len + 1), need)
    return need.astype(np.int32)
