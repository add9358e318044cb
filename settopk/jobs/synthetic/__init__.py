"""Synthetic corpus shaped like the STI2 competition data, generated once into a cache.

Docs get lengths from the shipped STI2 doc length histogram and distinct token ids
from a Zipf (or uniform) law over the vocabulary. Half of the queries (by default)
are near-duplicates of random docs, the rest are random sets shaped like the docs.

Everything is a pure function of a :class:`SyntheticSpec`: the random streams are
derived from ``spec.seed`` with :class:`numpy.random.SeedSequence` spawn keys per
(purpose, length, chunk), so the output is the same on every run and for any
number of worker threads. The integer streams of NumPy's ``Generator`` are
platform-independent; the few float computations that shape the output (Zipf
probabilities, block widths) are rounded or thresholded so that last-bit
differences of another platform's math library are very unlikely to matter.

Modules: :mod:`.spec` (the spec, the generator version, the length histogram),
:mod:`.laws` (random streams, the id law, rows of distinct ids), :mod:`.generate`
(docs and queries) and :mod:`.cache` (Parquet files and the cache).
"""

from .cache import cache_name, ensure_synthetic, query_ids, write_parquet
from .generate import generate_docs, generate_queries
from .spec import GENERATOR_VERSION, STI2_N_DOCS, SyntheticSpec, length_histogram

__all__ = [
    "GENERATOR_VERSION",
    "STI2_N_DOCS",
    "SyntheticSpec",
    "length_histogram",
    "generate_docs",
    "generate_queries",
    "write_parquet",
    "ensure_synthetic",
    "cache_name",
    "query_ids",
]
