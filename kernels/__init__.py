"""Scoring kernels: exact Braun-Blanquet top-k over token-id sets.

Public surface: the CSR set container, the score key, the result type, the NumPy
backend (also the test oracle for the GPU), and a brute-force oracle. The CuPy
backend lives in :mod:`kernels.cuda` and is imported lazily, so ``import
kernels`` works without CuPy.
"""

from .keys import best_key_in_range, check_floor_key, key_scale, min_overlap_above, score_key, score_value
from .oracle import brute_force_topk
from .reference import NumpyShardIndex
from .sets import SetBatch
from .topk import TopK, empty_topk, order_candidates

__all__ = [
    "SetBatch",
    "TopK",
    "NumpyShardIndex",
    "best_key_in_range",
    "brute_force_topk",
    "check_floor_key",
    "empty_topk",
    "key_scale",
    "min_overlap_above",
    "order_candidates",
    "score_key",
    "score_value",
]
