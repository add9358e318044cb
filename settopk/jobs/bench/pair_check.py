"""settopk's threshold-join pairs against a peer's, where the peer compares floats.

A peer that tests ``score >= T`` in floating point (SetSimilaritySearch; the C++ joins, whose
length and prefix bounds are ``ceil`` of float products) can drop a pair whose exact Jaccard equals
``T``. settopk's test is exact, so the two pair sets may differ by those pairs and by nothing else:
:func:`float_ties` sorts every difference into allowed ties and mismatches, from the sets' exact
overlaps.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable

import numpy as np

__all__ = ["exact_jaccard", "float_ties", "pair_keys"]


def pair_keys(a, b, n: int) -> np.ndarray:
    """Unordered pairs ``(a, b)`` as sorted unique int64 keys ``min * n + max``.

    Parameters
    ----------
    a, b : array-like of int, shape (n_pairs,)
        The two sides of each pair, each in ``[0, n)``.
    n : int
        One more than the largest side (``n * n`` must fit in int64).
    """
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    return np.unique(np.minimum(a, b) * n + np.maximum(a, b))


def exact_jaccard(sets, a: int, b: int) -> Fraction:
    """The exact Jaccard of sets ``a`` and ``b`` of ``sets`` (a :class:`settopk.kernels.SetBatch`,
    each set's ids distinct), from their overlap; ``0/0`` is 0."""
    offsets, tokens = sets.offsets, sets.tokens
    overlap = len(np.intersect1d(tokens[offsets[a]:offsets[a + 1]], tokens[offsets[b]:offsets[b + 1]], assume_unique=True))
    union = int(offsets[a + 1] - offsets[a]) + int(offsets[b + 1] - offsets[b]) - overlap
    return Fraction(overlap, union) if union else Fraction(0)


def float_ties(ours: np.ndarray, theirs: np.ndarray, jaccard: Callable[[int, int], Fraction], threshold: float,
               n: int, peer: str) -> tuple[int, list[dict]]:
    """The pairs that only one side holds, sorted into ties the peer lost and mismatches.

    Parameters
    ----------
    ours, theirs : numpy.ndarray of int64
        settopk's and the peer's pairs as :func:`pair_keys` (sorted, unique), keyed with ``n``.
    jaccard : callable
        ``jaccard(a, b)``: the exact Jaccard of sets ``a`` and ``b``.
    threshold : float
        ``T``, read as its shortest decimal (``0.9`` is ``9/10``).
    n : int
        The keys' ``n``.
    peer : str
        The peer's name, for the mismatches.

    Returns
    -------
    ties : int
        Pairs whose exact Jaccard is ``T`` that settopk holds and the peer does not (allowed).
    mismatches : list of dict
        Every other difference: ``threshold``, ``implementation`` (the peer), ``pair`` ``[a, b]``,
        ``jaccard`` (the exact fraction as text), ``settopk`` and ``peer`` (which side holds it).
    """
    bar = Fraction(repr(threshold))
    ties, mismatches = 0, []
    for key in np.setxor1d(ours, theirs, assume_unique=True).tolist():
        a, b = divmod(key, n)
        value = jaccard(a, b)
        i = int(np.searchsorted(ours, key))
        held = i < len(ours) and int(ours[i]) == key
        if value == bar and held:
            ties += 1
        else:
            mismatches.append({"threshold": repr(threshold), "implementation": peer, "pair": [a, b], "jaccard": str(value),
                               "settopk": held, "peer": not held})
    return ties, mismatches
