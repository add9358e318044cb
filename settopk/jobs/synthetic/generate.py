"""Generation: the docs and the queries of a :class:`SyntheticSpec`."""

from __future__ import annotations

import numpy as np

from settopk.kernels.sets import SetBatch

from .laws import (
    CHUNK_DRAWS,
    STREAM_DOC_IDS,
    STREAM_DOC_LENGTHS,
    STREAM_NEAR_IDS,
    STREAM_QUERY_IDS,
    STREAM_QUERY_PLAN,
    IdLaw,
    edited_rows,
    fill_lengths,
    stream_rng,
)
from .copies import copy_plan, gather_rows
from .spec import SyntheticSpec, draw_lengths

__all__ = ["generate_docs", "generate_queries"]

# Near-duplicate queries keep a uniform share in [low, high) of their source doc.
NEAR_DUP_KEEP = (0.80, 0.95)


def generate_docs(spec: SyntheticSpec, *, workers: int | None = None) -> SetBatch:
    """The synthetic corpus of a spec.

    Parameters
    ----------
    spec : SyntheticSpec
    workers : int, optional
        Threads to use (default: the usable CPUs, at most 16). The output does
        not depend on it.

    Returns
    -------
    SetBatch
        ``n_docs`` sets; set ``i`` is doc ``i``. Lengths follow ``spec.length_law`` (the STI2
        histogram by default: exactly when ``n_docs == STI2_N_DOCS`` and ``max_len >= 128``,
        else drawn from it); ids are distinct, ascending, in ``[0, vocab_size)``. With
        ``spec.duplicate_fraction``, that share of the docs (about) are copies of earlier ones
        (:mod:`settopk.jobs.synthetic.copies`), the others drawn as above.

    Raises
    ------
    ValueError
        If the id law is too concentrated to draw sets of ``max_len`` distinct
        ids in reasonable time (e.g. a large ``zipf_s`` with a small vocab).
    """
    law = IdLaw(spec)
    law.check()
    if not spec.duplicate_fraction:
        lengths = draw_lengths(stream_rng(spec.seed, STREAM_DOC_LENGTHS), spec.n_docs, spec.max_len, spec.length_law)
        return fill_lengths(lengths, law, spec.seed, STREAM_DOC_IDS, workers)
    source = copy_plan(spec.n_docs, spec.duplicate_fraction, spec.duplicate_zipf_s, spec.seed)
    n_originals = int(source.max()) + 1
    lengths = draw_lengths(stream_rng(spec.seed, STREAM_DOC_LENGTHS), n_originals, spec.max_len, spec.length_law)
    return gather_rows(fill_lengths(lengths, law, spec.seed, STREAM_DOC_IDS, workers), source)


def generate_queries(spec: SyntheticSpec, docs: SetBatch, *, workers: int | None = None) -> SetBatch:
    """The queries of a spec: near-duplicates of docs first, then random sets.

    Query ``i < spec.n_near_duplicates`` copies a random non-empty doc, keeps a
    uniform share in [0.80, 0.95) of its ids (rounded, at least one) and replaces
    the others with fresh ids from the id law that are not in that doc, so it has
    the doc's length and overlaps it in exactly the kept ids. The remaining
    queries are random sets with lengths drawn from the histogram, like docs.

    Parameters
    ----------
    spec : SyntheticSpec
    docs : SetBatch
        The corpus of ``spec`` (from :func:`generate_docs`), shape (n_docs, <= max_len).
    workers : int, optional
        Threads to use; the output does not depend on it.

    Returns
    -------
    SetBatch
        ``n_queries`` sets of at most ``max_len`` distinct ascending ids.

    Raises
    ------
    ValueError
        If near-duplicates are wanted and every doc is empty, or the id law is
        too concentrated (see :func:`generate_docs`).
    """
    law = IdLaw(spec)
    law.check()
    rng = stream_rng(spec.seed, STREAM_QUERY_PLAN)
    n_near = spec.n_near_duplicates
    doc_lengths = docs.lengths
    nonempty = np.flatnonzero(doc_lengths > 0)
    if n_near and len(nonempty) == 0:
        raise ValueError("near-duplicate queries need at least one non-empty doc")
    source = nonempty[rng.integers(0, max(1, len(nonempty)), size=n_near)]
    keep_share = rng.uniform(*NEAR_DUP_KEEP, size=n_near)
    random_lengths = draw_lengths(rng, spec.n_queries - n_near, spec.max_len, spec.length_law)

    near_lengths = doc_lengths[source]
    lengths = np.concatenate([near_lengths, random_lengths])
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.empty(offsets[-1], dtype=law.dtype)

    # Near-duplicates, by source length so each group is one rectangle.
    n_kept = np.clip(np.rint(keep_share * near_lengths).astype(np.int64), 1, near_lengths)
    # A tiny vocab may not hold enough ids outside the doc: keep more of it then.
    n_fresh = np.minimum(near_lengths - n_kept, spec.vocab_size - near_lengths)
    for length in np.unique(near_lengths):
        length = int(length)
        rows = np.flatnonzero(near_lengths == length)
        per_chunk = max(1, CHUNK_DRAWS // (2 * law.width(length)))
        for j, lo in enumerate(range(0, len(rows), per_chunk)):
            r = rows[lo : lo + per_chunk]
            crng = stream_rng(spec.seed, STREAM_NEAR_IDS, length, j)
            src = docs.tokens[docs.offsets[source[r]][:, None] + np.arange(length)]
            tokens[offsets[r][:, None] + np.arange(length)] = edited_rows(crng, law, src, n_fresh[r])

    if len(random_lengths):
        rand = fill_lengths(random_lengths, law, spec.seed, STREAM_QUERY_IDS, workers)
        tokens[offsets[n_near] :] = rand.tokens
    return SetBatch(offsets, tokens)
