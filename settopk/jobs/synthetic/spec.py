"""What a synthetic corpus is: its spec, the generator version and the STI2 length histogram."""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

__all__ = ["GENERATOR_VERSION", "LENGTH_LAWS", "STI2_N_DOCS", "SyntheticSpec", "TOKEN_TYPES", "draw_lengths", "length_histogram",
           "retail_histogram"]

#: Bump whenever a change alters the output for an unchanged spec: it is part of the
#: cache key, so stale cached corpora are never reused.
GENERATOR_VERSION = 1

#: Number of docs of the STI2 competition corpus (the histogram's total).
STI2_N_DOCS = 7_853_052

HISTOGRAM_RESOURCE = "sti2_doc_length_histogram.csv"
#: Set lengths of RETAIL (Brijs et al., "Using association rules for product assortment decisions",
#: KDD 1999; the FIMI repository's retail.dat: 88,162 baskets of a Belgian store, mean 10.3 distinct
#: items, median 8, longest 76), the ``"retail"`` law.
RETAIL_HISTOGRAM_RESOURCE = "retail_set_length_histogram.csv"

#: How the Parquet files store tokens (:attr:`SyntheticSpec.token_type`).
TOKEN_TYPES = ("uint16", "int64", "string")
#: Laws of set lengths (:attr:`SyntheticSpec.length_law`).
LENGTH_LAWS = ("sti2", "uniform", "lognormal", "retail")

# The "lognormal" law, shaped like NETFLIX (users' sets of rated movies, Mann, Augsten and Bouros,
# PVLDB 2016: mean about 200 ids, median about 100, a long tail): exp(N(mu, sigma**2)) has mean
# exp(mu + sigma**2 / 2) = LOGNORMAL_MEAN, and a median LOGNORMAL_MEAN / e**(sigma**2 / 2) of about 92.
LOGNORMAL_MEAN = 200.0
LOGNORMAL_SIGMA = 1.25


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate; the output is a pure function of these fields.

    Attributes
    ----------
    n_docs : int
        Number of docs, ``>= 1``. With :data:`STI2_N_DOCS` the doc lengths are
        exactly the histogram's (shuffled); otherwise they are drawn from it.
    n_queries : int
        Number of queries, ``>= 0``.
    seed : int
        Seed of every random stream, ``>= 0``.
    vocab_size : int
        Token ids lie in ``[0, vocab_size)``; ``max_len <= vocab_size <= 2**24``. Above 65536
        the ids do not fit ``uint16``: ``token_type`` must be ``"int64"`` or ``"string"`` (with
        ``token_offset`` 0 and ``int64``, the job reads them as dense ids, ``uint32``).
    id_dist : str
        ``"zipf"``: ``p(rank r) ∝ 1 / r**zipf_s``, ranks mapped to ids through a
        seeded permutation; ``"uniform"``: every id equally likely.
    zipf_s : float
        Zipf exponent, in ``[0, 10]`` (ignored by ``"uniform"``).
    near_duplicate_fraction : float
        Share of queries, in ``[0, 1]``, made by perturbing a random non-empty doc.
    max_len : int
        Most ids in a set, in ``[1, 65536]``; the histogram is cut at ``max_len``
        (and renormalised) when it is below 128.
    token_type : str
        How the Parquet files store the tokens: ``"uint16"`` (the ids themselves),
        ``"int64"`` (each id plus ``token_offset``) or ``"string"`` (the decimal text of
        id plus ``token_offset``). Every choice describes the same sets: a search gives the
        same result on each.
    token_offset : int
        Added to every id for ``"int64"`` and ``"string"``, in ``[0, 2**63 - vocab_size]``
        (``10**12`` makes ids no kernel takes as they are).
    length_law : str
        Set lengths: ``"sti2"`` (the STI2 histogram, see ``max_len``), ``"uniform"``
        (every length in ``[0, max_len]`` equally likely), ``"lognormal"`` (NETFLIX-like:
        log-normal with mean 200 and sigma 1.25, rounded, at least 1, lengths above
        ``max_len`` cut to ``max_len``; with ``max_len`` 4096 about 0.1% of sets are cut) or
        ``"retail"`` (short market baskets: drawn from RETAIL's length histogram, mean 10.3,
        median 8, 1 to 76, cut at ``max_len`` and renormalised).
    duplicate_fraction : float
        Share of docs, in ``[0, 1)``, that are exact copies of an earlier doc (RETAIL: 5.3 % of
        its baskets repeat an earlier one). Each doc after the first is a copy with this
        probability; a copy repeats the ``r``-th original doc (in doc order, among those before
        it and the first :data:`settopk.jobs.synthetic.copies.TEMPLATE_RANKS`) with ``p(r) ∝ 1 /
        r**duplicate_zipf_s``, so the first docs repeat very many times, as RETAIL's most
        frequent baskets do. Short sets of frequent ids also repeat by chance, on top of these.
        0 (default): no copies, and the corpus is exactly what it was before the field existed.
    duplicate_zipf_s : float
        The copies' skew, in ``[0, 10]`` (0: every earlier original equally likely).

    Raises
    ------
    ValueError
        If a field is out of range.
    """

    n_docs: int
    n_queries: int
    seed: int = 0
    vocab_size: int = 50001
    id_dist: str = "zipf"
    zipf_s: float = 1.0
    near_duplicate_fraction: float = 0.5
    max_len: int = 128
    token_type: str = "uint16"
    token_offset: int = 0
    length_law: str = "sti2"
    duplicate_fraction: float = 0.0
    duplicate_zipf_s: float = 1.0

    def __post_init__(self) -> None:
        problems = []
        if self.n_docs < 1:
            problems.append(f"n_docs must be >= 1, found {self.n_docs}")
        if self.n_queries < 0:
            problems.append(f"n_queries must be >= 0, found {self.n_queries}")
        if self.seed < 0:
            problems.append(f"seed must be >= 0, found {self.seed}")
        if self.id_dist not in ("zipf", "uniform"):
            problems.append(f"id_dist must be 'zipf' or 'uniform', found {self.id_dist!r}")
        if not 0.0 <= self.zipf_s <= 10.0:
            problems.append(f"zipf_s must be in [0, 10], found {self.zipf_s}")
        if not 0.0 <= self.near_duplicate_fraction <= 1.0:
            problems.append(f"near_duplicate_fraction must be in [0, 1], found {self.near_duplicate_fraction}")
        if not 1 <= self.max_len <= 65536:
            problems.append(f"max_len must be in [1, 65536], found {self.max_len}")
        if not self.max_len <= self.vocab_size <= 1 << 24:
            problems.append(f"vocab_size must be in [max_len, 2**24] = [{self.max_len}, 16777216], found {self.vocab_size}")
        if self.vocab_size > 65536 and self.token_type == "uint16":
            problems.append(f"token_type 'uint16' holds ids below 65536, found vocab_size {self.vocab_size}; "
                            "use token_type 'int64' or 'string' for a larger vocabulary")
        if self.token_type not in TOKEN_TYPES:
            problems.append(f"token_type must be one of {TOKEN_TYPES}, found {self.token_type!r}")
        if not 0 <= self.token_offset <= 2**63 - 1 - self.vocab_size:
            problems.append(f"token_offset must be in [0, 2**63 - vocab_size), found {self.token_offset}")
        if self.token_type == "uint16" and self.token_offset:
            problems.append("token_offset needs token_type 'int64' or 'string'")
        if not 0.0 <= self.duplicate_fraction < 1.0:
            problems.append(f"duplicate_fraction must be in [0, 1), found {self.duplicate_fraction}")
        if not 0.0 <= self.duplicate_zipf_s <= 10.0:
            problems.append(f"duplicate_zipf_s must be in [0, 10], found {self.duplicate_zipf_s}")
        if self.length_law not in LENGTH_LAWS:
            problems.append(f"length_law must be one of {LENGTH_LAWS}, found {self.length_law!r}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def n_near_duplicates(self) -> int:
        """Number of near-duplicate queries (the first ones)."""
        return int(round(self.n_queries * self.near_duplicate_fraction))


@functools.lru_cache(maxsize=2)
def _histogram_cached(resource: str = HISTOGRAM_RESOURCE) -> np.ndarray:
    # `configs` and `jobs` are sibling packages (in a checkout and when installed);
    # reading the file directly avoids importing `configs` (and its YAML deps).
    sibling = Path(__file__).resolve().parents[2] / "configs" / resource
    if sibling.is_file():
        text = sibling.read_text()
    else:
        text = resources.files("configs").joinpath(resource).read_text()
    lengths, counts = [], []
    for row in csv.reader(io.StringIO(text)):
        if not row or not row[0].strip():
            continue
        try:
            length, count = int(row[0]), int(row[1])
        except ValueError:
            continue  # a header line such as "length,count"
        lengths.append(length)
        counts.append(count)
    if not lengths or min(lengths) < 0 or min(counts) < 0 or len(set(lengths)) != len(lengths):
        raise ValueError(f"settopk/configs/{resource}: expected distinct 'length,count' rows of non-negative ints")
    hist = np.zeros(max(lengths) + 1, dtype=np.int64)
    hist[lengths] = counts
    hist.setflags(write=False)
    return hist


def length_histogram() -> np.ndarray:
    """STI2 doc length histogram.

    Returns
    -------
    numpy.ndarray of int64, shape (129,)
        ``hist[l]`` is the number of STI2 docs with ``l`` distinct ids; it sums to
        :data:`STI2_N_DOCS`. A fresh, writable copy.

    Raises
    ------
    ValueError
        If ``settopk/configs/sti2_doc_length_histogram.csv`` has malformed rows.
    """
    return _histogram_cached().copy()


def retail_histogram() -> np.ndarray:
    """RETAIL's set length histogram (the ``"retail"`` law).

    Returns
    -------
    numpy.ndarray of int64, shape (77,)
        ``hist[l]`` is the number of RETAIL baskets with ``l`` distinct items; it sums to 88,162.
        A fresh, writable copy.
    """
    return _histogram_cached(RETAIL_HISTOGRAM_RESOURCE).copy()


def _length_probabilities(max_len: int, resource: str = HISTOGRAM_RESOURCE) -> np.ndarray:
    hist = _histogram_cached(resource)[: max_len + 1].astype(np.float64)
    return hist / hist.sum()


def draw_lengths(rng: np.random.Generator, n: int, max_len: int, law: str = "sti2") -> np.ndarray:
    """Lengths of ``n`` sets shaped like the STI2 docs.

    Parameters
    ----------
    rng : numpy.random.Generator
        The stream the lengths are drawn from (a shuffle or ``rng.choice``).
    n : int
        Number of sets.
    max_len : int
        Longest length; the histogram is cut there and renormalised.
    law : str
        ``"sti2"``, ``"uniform"`` (i.i.d. uniform in ``[0, max_len]``), ``"lognormal"``
        (i.i.d. NETFLIX-like) or ``"retail"`` (i.i.d. from RETAIL's histogram) (:class:`SyntheticSpec`).

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
        The exact STI2 multiset of lengths in a seeded order when ``n`` is the
        histogram's total and ``max_len`` covers it; else i.i.d. draws from it.
    """
    if law == "uniform":
        return rng.integers(0, max_len + 1, size=n, dtype=np.int64)
    if law == "lognormal":
        mu = np.log(LOGNORMAL_MEAN) - LOGNORMAL_SIGMA**2 / 2
        return np.clip(np.rint(rng.lognormal(mu, LOGNORMAL_SIGMA, size=n)), 1, max_len).astype(np.int64)
    if law == "retail":
        p = _length_probabilities(max_len, RETAIL_HISTOGRAM_RESOURCE)
        return rng.choice(len(p), size=n, p=p).astype(np.int64)
    hist = _histogram_cached()
    if n == hist.sum() and len(hist) - 1 <= max_len:
        # The exact STI2 multiset of lengths, in a seeded order.
        lengths = np.repeat(np.arange(len(hist), dtype=np.int64), hist)
        rng.shuffle(lengths)
        return lengths
    p = _length_probabilities(max_len)
    return rng.choice(len(p), size=n, p=p).astype(np.int64)
