"""Scoring kernels: exact top-k over token-id sets by a set-similarity score (Braun-Blanquet by default).

Public surface: the CSR set container, the score key, the result type, the NumPy
backend (also the test oracle for the GPU), and a brute-force oracle. The CuPy
backend lives in :mod:`kernels.cuda` and is imported lazily, so ``import
kernels`` works without CuPy.
"""

from .keys import (
    DEFAULT_SCORE,
    SCORES,
    best_key_in_range,
    check_floor_key,
    check_score,
    key_dtype,
    key_scale,
    max_key,
    min_overlap_above,
    score_definition,
    score_key,
    score_value,
)
from .oracle import brute_force_topk
from .numpy_index import NumpyShardIndex
from .sets import SetBatch
from .topk import TopK, empty_topk, order_candidates

__all__ = [
    "DEFAULT_SCORE",
    "SCORES",
    "SetBatch",
    "TopK",
    "NumpyShardIndex",
    "best_key_in_range",
    "brute_force_topk",
    "check_floor_key",
    "check_score",
    "empty_topk",
    "key_dtype",
    "key_scale",
    "max_key",
    "min_overlap_above",
    "order_candidates",
    "score_definition",
    "score_key",
    "score_value",
]
