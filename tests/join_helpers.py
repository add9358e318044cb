"""What the threshold join's tests share (tests/test_join.py, tests/test_join_arrays.py): corpora
shaped like real set data, and doc ids that are not positions."""

import numpy as np
from hypothesis import strategies as st


@st.composite
def corpora(draw, skew: float = 1.0, max_ids: int = 25):
    """Sets over a Zipf-skewed vocabulary (exponent ``skew``) of at most ``max_ids`` ids, many of
    them copies of earlier ones, empty ones too."""
    n_ids = draw(st.integers(2, max_ids))
    weights = 1.0 / np.arange(1, n_ids + 1) ** skew
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sets = []
    for _ in range(draw(st.integers(1, 45))):
        if sets and rng.random() < 0.45:
            sets.append(list(sets[rng.integers(len(sets))]))
        else:
            size = int(rng.integers(0, min(n_ids, 10 if max_ids <= 25 else 40) + 1))
            sets.append(sorted(set(rng.choice(n_ids, size=size, p=weights / weights.sum()).tolist())))
    return sets


def doc_ids(n: int) -> np.ndarray:
    """``n`` strictly increasing doc ids that are not the positions."""
    return np.arange(n, dtype=np.int64) * 3 + 7
