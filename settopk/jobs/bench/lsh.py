"""What banded MinHash LSH would find, computed from exact pairs: its expected recall.

Used by the peers run (:mod:`settopk.jobs.bench.peers`) to say what recall an LSH deduplicator at
given settings (NeMo Curator's fuzzy deduplication: 20 bands of 13 rows) would reach on the exact
pairs settopk finds. It needs only the pairs' Jaccard values, so a GPU run can use it on its own.
"""

from __future__ import annotations

import numpy as np

__all__ = ["lsh_recall"]


def lsh_recall(jaccard, bands: int = 20, rows: int = 13) -> float:
    """Expected recall of banded MinHash LSH over pairs of known Jaccard similarity.

    Two sets of Jaccard similarity ``J`` agree on one MinHash value with probability ``J``, on
    all ``rows`` values of a band with probability ``J**rows``, and become a candidate pair when
    at least one of ``bands`` independent bands agrees:

    ``P(J) = 1 - (1 - J**rows)**bands``,

    the S-curve of Leskovec, Rajaraman and Ullman, *Mining of Massive Datasets*, chapter 3
    (section 3.4, "Locality-Sensitive Hashing for Documents"). The recall over a set of true
    pairs is the mean of ``P`` over them. The defaults, 20 bands of 13 rows (260 hashes), are
    NeMo Curator's fuzzy deduplication settings.

    Parameters
    ----------
    jaccard : array_like of float, shape (n_pairs,)
        The pairs' exact Jaccard similarities, each in ``[0, 1]``.
    bands : int, default 20
        Bands of the LSH index, ``>= 1``.
    rows : int, default 13
        MinHash values per band, ``>= 1``.

    Returns
    -------
    float
        The mean of ``P(J)`` over the pairs: the share of them the index is expected to return
        as candidates. NaN when there are no pairs.

    Raises
    ------
    ValueError
        If ``bands`` or ``rows`` is below 1, or a similarity lies outside ``[0, 1]``.

    Examples
    --------
    >>> lsh_recall([1.0, 0.0])
    0.5
    >>> round(lsh_recall([0.8]), 4)
    0.6773
    """
    if bands < 1 or rows < 1:
        raise ValueError(f"bands and rows must be >= 1, found {bands} and {rows}")
    j = np.asarray(jaccard, dtype=np.float64).ravel()
    if j.size == 0:
        return float("nan")
    if not ((j >= 0.0) & (j <= 1.0)).all():
        raise ValueError("Jaccard similarities must lie in [0, 1]")
    return float(np.mean(1.0 - (1.0 - j**rows) ** bands))
