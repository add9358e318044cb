"""The canonical form of a set, the same for every format: ids ascending, each once.

Readers decode a block of sets into one flat array of ids and a count per set; :func:`canonical`
sorts and de-duplicates all of them with one NumPy sort (skipped when the block is already sorted
and repeat-free), and the other helpers filter and join such CSR arrays without a per-set Python
loop.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from settopk.kernels.sets import SetBatch

from .vocabulary import WideSets, as_type, common_type

__all__ = ["NO_SETS", "canonical", "concat_sets", "csr_offsets", "in_length_range", "select_sets", "take_tokens"]

NO_SETS = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint16), np.zeros(0, dtype=bool))
"""``(lengths, tokens, repeated)`` of no set at all, as :func:`canonical` returns them."""


def canonical(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort and de-duplicate each set of a flat CSR array.

    Parameters
    ----------
    values : numpy.ndarray of uint16 or uint32, shape (n_values,)
        Ids of all sets, set after set; every id already checked to be in range. ``uint32``
        values (ids of a vocabulary above 65536) stay ``uint32``, any other dtype becomes ``uint16``.
    counts : numpy.ndarray of int64, shape (n_sets,)
        Ids per set before de-duplication; sums to ``n_values``.

    Returns
    -------
    lengths : numpy.ndarray of int64, shape (n_sets,)
        Distinct ids per set.
    tokens : numpy.ndarray of uint16 (or uint32), shape (lengths.sum(),)
        The sets, each ascending and duplicate-free.
    repeated : numpy.ndarray of bool, shape (n_sets,)
        Sets that had a repeated id.
    """
    n_sets = len(counts)
    dtype = np.uint32 if values.dtype == np.uint32 else np.uint16
    bits = 32 if dtype == np.uint32 else 16  # the key is set << bits | id, in int64
    if len(values) < 2:
        return counts.astype(np.int64), values.astype(dtype), np.zeros(n_sets, dtype=bool)
    ends = np.cumsum(counts)
    increasing = values[1:] > values[:-1]
    boundary = ends[:-1][(ends[:-1] > 0) & (ends[:-1] < len(values))] - 1  # pairs that straddle two sets
    increasing[boundary] = True
    if increasing.all():  # fast path: already sorted and repeat-free (the usual case for docs.txt)
        return counts.astype(np.int64), values.astype(dtype, copy=False), np.zeros(n_sets, dtype=bool)
    set_of = np.repeat(np.arange(n_sets, dtype=np.int64), counts)
    key = (set_of << bits) | values.astype(np.int64)
    key.sort()
    new = np.empty(len(key), dtype=bool)
    new[0] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    kept = key[new]
    repeated = np.zeros(n_sets, dtype=bool)
    repeated[key[~new] >> bits] = True
    lengths = np.bincount(kept >> bits, minlength=n_sets).astype(np.int64)
    return lengths, (kept & ((1 << bits) - 1)).astype(dtype), repeated


def csr_offsets(lengths: np.ndarray) -> np.ndarray:
    """CSR offsets of sets of the given lengths.

    Parameters
    ----------
    lengths : numpy.ndarray of int, shape (n_sets,)

    Returns
    -------
    numpy.ndarray of int64, shape (n_sets + 1,)
        ``0`` then the running sum of ``lengths``: set ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``.
    """
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def select_sets(lengths: np.ndarray, tokens: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sets of a CSR array where ``keep`` holds.

    Parameters
    ----------
    lengths : numpy.ndarray of int64, shape (n_sets,)
    tokens : numpy.ndarray of uint16, shape (lengths.sum(),)
    keep : numpy.ndarray of bool, shape (n_sets,)

    Returns
    -------
    (lengths, tokens)
        Of the kept sets only; the inputs themselves when every set is kept.
    """
    if keep.all():
        return lengths, tokens
    return lengths[keep], take_tokens(tokens, np.repeat(keep, lengths))


def take_tokens(tokens, mask: np.ndarray):
    """The tokens where ``mask`` (bool) holds: a ``uint16`` array, or wide Arrow values
    (:mod:`settopk.shards.inputs.vocabulary`)."""
    return tokens[mask] if isinstance(tokens, np.ndarray) else tokens.filter(pa.array(mask))


def in_length_range(lengths: np.ndarray, length_range) -> np.ndarray:
    """Bool mask, shape (n_sets,): the sets whose length lies in ``length_range``.

    Parameters
    ----------
    lengths : numpy.ndarray of int64, shape (n_sets,)
    length_range : (int, int) or None
        ``(lo, hi)``, inclusive; None keeps every set.
    """
    if length_range is None:
        return np.ones(len(lengths), dtype=bool)
    lo, hi = length_range
    return (lengths >= lo) & (lengths <= hi)


def concat_sets(lengths: list[np.ndarray], tokens: list) -> SetBatch:
    """One :class:`SetBatch` from consecutive groups of sets in CSR form.

    Parameters
    ----------
    lengths : list of numpy.ndarray of int64
        Each group's set lengths.
    tokens : list of numpy.ndarray of uint16 (or uint32)
        Each group's ids, ``lengths[i].sum()`` of them.

    Returns
    -------
    SetBatch or WideSets
        The sets of every group, in order (empty for no group); a
        :class:`settopk.shards.inputs.vocabulary.WideSets` where a group's tokens are wide
        (Arrow values), every group then cast to one type.

    Raises
    ------
    ValueError
        For groups of tokens no one type holds (the caller names the files).
    """
    if any(not isinstance(t, np.ndarray) for t in tokens):
        to = common_type(t.type for t in tokens if not isinstance(t, np.ndarray))
        if to is None or (to == pa.large_binary() and any(isinstance(t, np.ndarray) and len(t) for t in tokens)):
            raise ValueError("integer and string tokens in one input")
        parts = [as_type(t, to) if isinstance(t, np.ndarray) or t.type != to else t for t in tokens]
        values = pa.chunked_array(parts, type=to).combine_chunks()
        return WideSets(csr_offsets(np.concatenate(lengths)), values)
    all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    all_tokens = np.concatenate(tokens) if tokens else np.zeros(0, dtype=np.uint16)
    # Read ids are uint16; dense ids mapped above 65536 (uint32) keep their width.
    return SetBatch(csr_offsets(all_lengths), all_tokens if all_tokens.dtype == np.uint32 else all_tokens.astype(np.uint16, copy=False))
