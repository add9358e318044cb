"""Docs that are exact copies of earlier docs (:attr:`SyntheticSpec.duplicate_fraction`).

Real baskets repeat: 5.3 % of RETAIL's are an earlier basket again, and a few baskets repeat
hundreds of times (one single-item basket 860 times in 88,162). The plan decides, row by row in
chunks of :data:`COPY_CHUNK_ROWS` with a random stream each, whether a doc is an original or a
copy, and which earlier original a copy repeats: the ``r``-th original in doc order with
``p(r) ∝ 1 / r**duplicate_zipf_s`` over the originals before it (at most :data:`TEMPLATE_RANKS`
of them), so the first originals repeat very many times and most repeat never.

The originals are drawn as any synthetic corpus's docs (:func:`settopk.jobs.synthetic.laws.fill_lengths`);
the corpus is then gathered from them chunk by chunk, so no temporary array grows with the
corpus's tokens beyond the corpus itself.
"""

from __future__ import annotations

import numpy as np

from settopk.kernels.sets import SetBatch

from .laws import stream_rng

__all__ = ["COPY_CHUNK_ROWS", "STREAM_COPIES", "TEMPLATE_RANKS", "copy_plan", "gather_rows"]

#: Rows planned per random stream (part of the output's definition).
COPY_CHUNK_ROWS = 1 << 16
#: A copy repeats one of the first this many originals: the law's tail beyond holds little mass
#: (0.05 of it at ``duplicate_zipf_s`` 1 and 10 M originals), and the table stays 8 MB.
TEMPLATE_RANKS = 1 << 20
#: Spawn-key tag of the plan's streams (after those of :mod:`settopk.jobs.synthetic.laws`).
STREAM_COPIES = 6


def copy_plan(n_docs: int, fraction: float, zipf_s: float, seed: int) -> np.ndarray:
    """Which original each doc is.

    Parameters
    ----------
    n_docs : int
        Docs in the corpus, ``>= 1``.
    fraction : float
        Probability, in ``[0, 1)``, that a doc after the first is a copy.
    zipf_s : float
        Skew of the originals copied (``p(rank r) ∝ 1 / r**zipf_s``).
    seed : int

    Returns
    -------
    numpy.ndarray of int64, shape (n_docs,)
        ``source[i]``: the index among the originals (in doc order) that doc ``i`` is. An original
        has the next index (``source[i] == number of originals before i``); a copy has the index
        of an earlier original, so ``source`` never exceeds its own count of originals. The
        originals number ``source.max() + 1``.
    """
    weights = np.arange(1, min(n_docs, TEMPLATE_RANKS) + 1, dtype=np.float64) ** -zipf_s
    cumulative = np.cumsum(weights)
    source = np.empty(n_docs, dtype=np.int64)
    n_originals = 0
    for chunk, lo in enumerate(range(0, n_docs, COPY_CHUNK_ROWS)):
        hi = min(lo + COPY_CHUNK_ROWS, n_docs)
        rng = stream_rng(seed, STREAM_COPIES, chunk)
        copy = rng.random(hi - lo) < fraction
        u = rng.random(hi - lo)
        if lo == 0:
            copy[0] = False  # the first doc has nothing earlier to copy
        original = ~copy
        before = n_originals + np.cumsum(original) - original  # originals before each row
        source[lo:hi][original] = before[original]
        pool = np.minimum(before[copy], TEMPLATE_RANKS)  # >= 1: row 0 is an original
        source[lo:hi][copy] = np.minimum(np.searchsorted(cumulative, u[copy] * cumulative[pool - 1], side="right"), pool - 1)
        n_originals += int(original.sum())
    return source


def gather_rows(sets: SetBatch, rows: np.ndarray, chunk_rows: int = 1 << 16) -> SetBatch:
    """``sets.take(rows)``, gathered ``chunk_rows`` rows at a time (its index arrays stay that small).

    Parameters
    ----------
    sets : SetBatch
    rows : numpy.ndarray of int64, shape (n_rows,)
        Rows of ``sets``, any order, repeats allowed.
    chunk_rows : int

    Returns
    -------
    SetBatch
        ``n_rows`` sets, set ``i`` equal to ``sets[rows[i]]``.
    """
    lengths = sets.offsets[rows + 1] - sets.offsets[rows]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.empty(int(offsets[-1]), dtype=sets.tokens.dtype)
    for lo in range(0, len(rows), chunk_rows):
        part = sets.take(rows[lo : lo + chunk_rows])
        tokens[offsets[lo] : offsets[lo] + len(part.tokens)] = part.tokens
    return SetBatch(offsets, tokens)
