"""Brute-force oracle on plain Python sets: slow, obviously right, for tests only."""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

__all__ = ["brute_force_topk", "brute_force_threshold"]


def _exact(ov: int, ql: int, dl: int, score: str) -> Fraction:
    """The score as an exact fraction (0 for 0/0); cosine as its square, which ranks the same
    (both are >= 0). Written out here, apart from settopk.kernels.keys, so the tests compare two
    independent definitions."""
    if score == "overlap":
        return Fraction(ov)
    num, den = {
        "braun_blanquet": (ov, max(ql, dl)),
        "jaccard": (ov, ql + dl - ov),
        "cosine": (ov * ov, ql * dl),
        "dice": (2 * ov, ql + dl),
        "containment": (ov, ql),
    }[score]
    return Fraction(num, den) if den else Fraction(0)


_NAMES = ("braun_blanquet", "jaccard", "cosine", "dice", "overlap", "containment")


def brute_force_topk(
    docs: Sequence[Sequence[int]],
    queries: Sequence[Sequence[int]],
    k: int,
    doc_ids: Sequence[int] | None = None,
    score: str = "braun_blanquet",
) -> list[list[tuple[int, int, int]]]:
    """Exact top-k by a set-similarity score with exact fractions.

    Parameters
    ----------
    docs, queries : sequences of sequences of int
        Token ids; repeats inside one set count once.
    k : int
        Results per query.
    doc_ids : sequence of int, optional
        Id of each doc (default: its position).
    score : str
        ``braun_blanquet`` (``|q∩d| / max(|q|, |d|)``), ``jaccard`` (``|q∩d| / |q∪d|``),
        ``cosine`` (``|q∩d| / sqrt(|q| |d|)``), ``dice`` (``2 |q∩d| / (|q| + |d|)``),
        ``overlap`` (``|q∩d|``) or ``containment`` (``|q∩d| / |q|``); 0/0 counts as 0.

    Returns
    -------
    list of list of (doc_id, overlap, doc_len)
        Per query, at most ``k`` tuples ordered by score descending, then doc id ascending.

    Raises
    ------
    ValueError
        If ``score`` is not one of the names above.
    """
    if score not in _NAMES:
        raise ValueError(f"score must be one of {', '.join(_NAMES)}; found {score!r}")
    return [ranked[:k] for ranked in _ranked(queries, docs, doc_ids, score, None)]


def brute_force_threshold(
    docs: Sequence[Sequence[int]],
    queries: Sequence[Sequence[int]],
    threshold: Fraction,
    doc_ids: Sequence[int] | None = None,
    score: str = "braun_blanquet",
    k: int | None = None,
) -> list[list[tuple[int, int, int]]]:
    """Every (query, doc) pair with ``score >= threshold``, compared in exact fractions.

    Parameters
    ----------
    docs, queries : sequences of sequences of int
        Token ids; repeats inside one set count once.
    threshold : fractions.Fraction
        ``T``, exact (the search reads a decimal such as ``0.8`` as ``Fraction(4, 5)``).
    doc_ids : sequence of int, optional
        Id of each doc (default: its position).
    score : str
        As :func:`brute_force_topk`.
    k : int, optional
        Keep only the first ``k`` pairs of each query.

    Returns
    -------
    list of list of (doc_id, overlap, doc_len)
        Per query, every passing doc, ordered by score descending, then doc id ascending.

    Raises
    ------
    ValueError
        If ``score`` is unknown or ``threshold`` is not a Fraction.
    """
    if score not in _NAMES:
        raise ValueError(f"score must be one of {', '.join(_NAMES)}; found {score!r}")
    if not isinstance(threshold, Fraction):
        raise ValueError(f"threshold must be a fractions.Fraction (exact), found {threshold!r}")
    # _exact gives cosine as its square, so its threshold is squared too (both sides are >= 0).
    bar = threshold * threshold if score == "cosine" else threshold
    return [ranked[:k] for ranked in _ranked(queries, docs, doc_ids, score, bar)]


def _ranked(queries, docs, doc_ids, score: str, bar) -> list[list[tuple[int, int, int]]]:
    """Per query, every doc as ``(doc_id, overlap, doc_len)`` by exact score descending, then doc
    id ascending; where ``bar`` is given, only those whose :func:`_exact` value reaches it."""
    ids = list(range(len(docs))) if doc_ids is None else list(doc_ids)
    doc_sets = [set(d) for d in docs]
    results = []
    for q in queries:
        qs = set(q)
        scored = []
        for did, ds in zip(ids, doc_sets):
            ov = len(qs & ds)
            value = _exact(ov, len(qs), len(ds), score)
            if bar is None or value >= bar:
                scored.append((-value, did, ov, len(ds)))
        scored.sort()
        results.append([(did, ov, dl) for _, did, ov, dl in scored])
    return results
