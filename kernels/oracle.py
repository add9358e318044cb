"""Brute-force oracle on plain Python sets: slow, obviously right, for tests only."""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

__all__ = ["brute_force_topk"]


def brute_force_topk(
    docs: Sequence[Sequence[int]], queries: Sequence[Sequence[int]], k: int, doc_ids: Sequence[int] | None = None
) -> list[list[tuple[int, int, int]]]:
    """Exact top-k by Braun-Blanquet score with exact fractions.

    Parameters
    ----------
    docs, queries : sequences of sequences of int
        Token ids; repeats inside one set count once.
    k : int
        Results per query.
    doc_ids : sequence of int, optional
        Id of each doc (default: its position).

    Returns
    -------
    list of list of (doc_id, overlap, doc_len)
        Per query, at most ``k`` tuples ordered by score descending, then doc id ascending.
    """
    ids = list(range(len(docs))) if doc_ids is None else list(doc_ids)
    doc_sets = [set(d) for d in docs]
    results = []
    for q in queries:
        qs = set(q)
        scored = []
        for did, ds in zip(ids, doc_sets):
            ov = len(qs & ds)
            m = max(len(qs), len(ds))
            score = Fraction(ov, m) if m else Fraction(0)
            scored.append((-score, did, ov, len(ds)))
        scored.sort()
        results.append([(did, ov, dl) for _, did, ov, dl in scored[:k]])
    return results
