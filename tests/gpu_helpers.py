"""What the GPU index tests share: the CuPy index (imported late, so the modules import where
CuPy is absent and their tests skip) and random query and doc sets."""

from __future__ import annotations

from kernels import SetBatch


def cupy_index(*args, **kwargs):
    """:class:`kernels.cuda.CupyShardIndex` with these arguments."""
    from kernels.cuda import CupyShardIndex  # imported here: CuPy may be absent where these skip

    return CupyShardIndex(*args, **kwargs)


def random_set_batch(rng, n_sets: int, vocab: int, max_len: int, min_len: int = 0) -> SetBatch:
    """``n_sets`` uniform random sets with ``min_len..max_len`` distinct ids below ``vocab``."""
    sets = []
    for _ in range(n_sets):
        length = int(rng.integers(min_len, min(max_len, vocab) + 1))
        sets.append(rng.choice(vocab, size=length, replace=False))
    return SetBatch.from_lists(sets)
