"""Scoring kernels: exact top-k over token-id sets by a set-similarity score (Braun-Blanquet by default).

Public surface: the CSR set container, the score key, the result type, the shard index contract
(:class:`ShardIndex`, :func:`build_index`, :func:`search_cost_per_doc`, :mod:`settopk.kernels.index`), the
NumPy backend (also the test oracle for the GPU), and a brute-force oracle. The CuPy backend lives
in :mod:`settopk.kernels.cuda` and is imported only when an index of it is built, so ``import settopk.kernels``
works without CuPy.
"""

from .index import (
    BACKENDS,
    ShardIndex,
    build_index,
    register_backend,
    registered_backends,
    search_cost_per_doc,
    unregister_backend,
    warm_up_backend,
)
from .keys import (
    DEFAULT_SCORE,
    SCORES,
    best_key_in_range,
    check_floor_key,
    check_score,
    cosine_key_fractions,
    cosine_key_table,
    key_dtype,
    key_scale,
    max_key,
    min_overlap_above,
    score_definition,
    score_key,
    score_value,
)
from .numpy_index import NumpyShardIndex
from .oracle import brute_force_threshold, brute_force_topk
from .sets import SetBatch
from .threshold import ThresholdPairs, interleave_pairs, need_table, parse_threshold, self_join_keep, self_join_pairs
from .topk import TopK, empty_topk, order_candidates

__all__ = [
    "BACKENDS",
    "DEFAULT_SCORE",
    "SCORES",
    "SetBatch",
    "ShardIndex",
    "ThresholdPairs",
    "TopK",
    "NumpyShardIndex",
    "best_key_in_range",
    "brute_force_threshold",
    "brute_force_topk",
    "build_index",
    "check_floor_key",
    "check_score",
    "cosine_key_fractions",
    "cosine_key_table",
    "empty_topk",
    "key_dtype",
    "interleave_pairs",
    "key_scale",
    "max_key",
    "min_overlap_above",
    "need_table",
    "order_candidates",
    "parse_threshold",
    "register_backend",
    "registered_backends",
    "score_definition",
    "score_key",
    "score_value",
    "search_cost_per_doc",
    "self_join_keep",
    "self_join_pairs",
    "unregister_backend",
    "warm_up_backend",
]
