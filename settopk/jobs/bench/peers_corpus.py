"""The corpus of the peers run (:mod:`settopk.jobs.bench.peers`): random sets with planted near-duplicates.

The synthetic generator (:mod:`settopk.jobs.synthetic`) plants its near-duplicates among the
queries, with 5-20 % of the ids changed, and draws set lengths from the STI2 histogram (or
uniformly from 0); issue 32's shape is one corpus with its own near-duplicates, a fixed edit share
and lengths from 32. So the sets are made here, with the generator's id law and its rows of
distinct ids and edits (:mod:`settopk.jobs.synthetic.laws`), from one seed: the same arguments always give
the same corpus.
"""

from __future__ import annotations

import numpy as np

from settopk.jobs.synthetic import SyntheticSpec
from settopk.jobs.synthetic.laws import STREAM_DOC_IDS, STREAM_NEAR_IDS, IdLaw, edited_rows, fill_lengths, stream_rng
from settopk.kernels import SetBatch

__all__ = ["planted_corpus"]

# Spawn-key tag of the plan's stream (lengths, sources, order): apart from the generator's tags (0-5).
_STREAM_PLAN = 32


def planted_corpus(n_sets: int, min_len: int, max_len: int, vocab_size: int, id_dist: str, zipf_s: float,
                   near_duplicate_fraction: float, edit_fraction: float, seed: int) -> tuple[SetBatch, np.ndarray]:
    """Random sets, a share of them near-duplicates of others, in a seeded order.

    ``round(n_sets * near_duplicate_fraction)`` sets are planted: each copies a distinct random
    source among the others and replaces ``round(edit_fraction * length)`` of its ids (at least
    one) with fresh ids from the id law that the source does not hold, so a planted pair of
    length ``L`` with ``e`` edits has Jaccard ``(L - e) / (L + e)`` (10 % edits: about 0.82).
    Every other set has a length uniform in ``[min_len, max_len]`` and distinct ids from the id law.

    Parameters
    ----------
    n_sets : int
        Sets in all, ``>= 1``.
    min_len, max_len : int
        Bounds of the set lengths, ``1 <= min_len <= max_len <= vocab_size``.
    vocab_size : int
        Ids lie in ``[0, vocab_size)``, ``vocab_size <= 65536``.
    id_dist : str
        ``"zipf"`` or ``"uniform"`` (:class:`settopk.jobs.synthetic.SyntheticSpec`).
    zipf_s : float
        Zipf exponent.
    near_duplicate_fraction : float
        Share of the sets that are planted, in ``[0, 0.5]``.
    edit_fraction : float
        Share of a planted set's ids replaced, in ``(0, 0.2]``.
    seed : int
        Seed of every random stream.

    Returns
    -------
    (SetBatch, numpy.ndarray of int64, shape (n_planted, 2))
        The sets (ids ascending and distinct within each) and the planted pairs
        ``(source, copy)`` as positions in it.

    Raises
    ------
    ValueError
        If an argument is out of range.
    """
    if not 0.0 <= near_duplicate_fraction <= 0.5 or not 0.0 < edit_fraction <= 0.2:
        raise ValueError(f"near_duplicate_fraction must be in [0, 0.5] and edit_fraction in (0, 0.2], found "
                         f"{near_duplicate_fraction} and {edit_fraction}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"min_len must be in [1, max_len], found {min_len} and {max_len}")
    law = IdLaw(SyntheticSpec(n_docs=n_sets, n_queries=0, seed=seed, vocab_size=vocab_size, id_dist=id_dist,
                              zipf_s=zipf_s, max_len=max_len))
    law.check()
    rng = stream_rng(seed, _STREAM_PLAN)
    n_planted = int(round(n_sets * near_duplicate_fraction))
    n_base = n_sets - n_planted
    lengths = rng.integers(min_len, max_len + 1, size=n_base, dtype=np.int64)
    base = fill_lengths(lengths, law, seed, STREAM_DOC_IDS, None)
    source = np.sort(rng.choice(n_base, size=n_planted, replace=False))
    copies = _near_duplicates(base, source, edit_fraction, law, seed)
    # A seeded order, so that no system sees the planted sets last.
    order = rng.permutation(n_sets)  # order[new position] = old position (base sets first, then copies)
    where = np.empty(n_sets, dtype=np.int64)
    where[order] = np.arange(n_sets)
    pairs = np.stack([where[source], where[n_base + np.arange(n_planted)]], axis=1)
    return SetBatch.concat([base, copies]).take(order), pairs


def _near_duplicates(base: SetBatch, source: np.ndarray, edit_fraction: float, law: IdLaw, seed: int) -> SetBatch:
    """Copies of ``base``'s sets ``source``, each with its share of ids replaced by fresh ones."""
    lengths = base.lengths.astype(np.int64)[source]
    n_fresh = np.minimum(np.maximum(1, np.rint(edit_fraction * lengths).astype(np.int64)), law.n - lengths)
    offsets = np.zeros(len(source) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.empty(offsets[-1], dtype=np.uint16)
    for length in np.unique(lengths).tolist():
        rows = np.flatnonzero(lengths == length)
        rng = stream_rng(seed, _STREAM_PLAN, STREAM_NEAR_IDS, length)
        src = base.tokens[base.offsets[source[rows]][:, None] + np.arange(length)]
        tokens[offsets[rows][:, None] + np.arange(length)] = edited_rows(rng, law, src, n_fresh[rows])
    return SetBatch(offsets, tokens)
