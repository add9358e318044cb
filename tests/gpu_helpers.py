"""What the GPU index tests share: the CuPy index (imported late, so the modules import where
CuPy is absent and their tests skip), random query and doc sets, the comparison of two top-k
results, and floors that land on ties."""

from __future__ import annotations

import numpy as np
import pytest

from settopk.kernels import DEFAULT_SCORE, SetBatch, best_key_in_range, max_key, score_key


def cupy_index(*args, **kwargs):
    """:class:`settopk.kernels.cuda.CupyShardIndex` with these arguments."""
    from settopk.kernels.cuda import CupyShardIndex  # imported here: CuPy may be absent where these skip

    return CupyShardIndex(*args, **kwargs)


def random_set_batch(rng, n_sets: int, vocab: int, max_len: int, min_len: int = 0) -> SetBatch:
    """``n_sets`` uniform random sets with ``min_len..max_len`` distinct ids below ``vocab``."""
    sets = []
    for _ in range(n_sets):
        length = int(rng.integers(min_len, min(max_len, vocab) + 1))
        sets.append(rng.choice(vocab, size=length, replace=False))
    return SetBatch.from_lists(sets)


def assert_same_topk(got, want) -> None:
    """Fail unless the two TopK results have the same dtypes, shapes and values (naming the first mismatch)."""
    for name in ("doc_ids", "overlap", "doc_len"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.dtype == w.dtype, f"{name}: dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"{name}: shape {g.shape} != {w.shape}"
        mismatch = np.argwhere(g != w)
        if len(mismatch):
            at = tuple(mismatch[0])
            pytest.fail(f"{name}: {len(mismatch)} mismatches, first at {list(at)}: {g[at]} != {w[at]}")


def floor_cases(cpu, queries, k, max_len, rng, score: str = DEFAULT_SCORE) -> dict:
    """Floor arrays that land on ties: the exact k-th key, the next one, random ranks, above every key,
    the top key, -1, 0, every query skipped, and a per-query mix of them (int64, shape (n_queries,)).

    Keys come from the NumPy index ``cpu``'s full overlap matrix (the shard must have docs).
    """
    keys = score_key(cpu.overlaps(queries), queries.lengths[:, None], cpu.doc_len[None, :], max_len, score)
    ranked = -np.sort(-keys.astype(np.int64), axis=1)  # per query, every doc's key, best first
    n_q, n_docs = ranked.shape
    rows = np.arange(n_q)

    def at(rank):
        return np.where(rank < n_docs, ranked[rows, np.minimum(rank, n_docs - 1)], ranked[:, 0] + 1)

    reach = best_key_in_range(queries.lengths, cpu.doc_len.min(), cpu.doc_len.max(), max_len, score).astype(np.int64)
    cases = {
        "none": np.full(n_q, -1),
        "zero": np.zeros(n_q, dtype=np.int64),
        "kth": at(np.full(n_q, k - 1)),
        "after_kth": at(np.full(n_q, k)),
        "first": at(np.zeros(n_q, dtype=np.int64)),
        "jth": at(rng.integers(0, n_docs, size=n_q)),
        "near_kth": at(rng.integers(max(0, k - 3), k + 3, size=n_q)),
        "above_all": ranked[:, 0] + 1,  # reachable by the lengths, but no doc reaches it
        "skip": reach + 1,  # every query skipped
        "top": np.full(n_q, max_key(max_len, score)),
    }
    columns = list(cases.values())
    pick = rng.integers(0, len(columns), size=n_q)
    cases["mixed"] = np.array([columns[p][i] for i, p in enumerate(pick)], dtype=np.int64)
    return {name: floors.astype(np.int64) for name, floors in cases.items()}


def check_floors(gpu, cpu, queries, k, max_len, rng, score: str = DEFAULT_SCORE) -> int:
    """Every case of :func:`floor_cases`: the GPU index equals the NumPy one, skips the same queries,
    and pads every row where the floor skips or no doc reaches it; returns the GPU's total rescans."""
    rescans = 0
    for name, floors in floor_cases(cpu, queries, k, max_len, rng, score).items():
        want = cpu.search(queries, k, floor_key=floors)
        got = gpu.search(queries, k, floor_key=floors)
        try:
            assert_same_topk(got, want)
        except BaseException:
            print(f"score {score}, floor case {name!r}, k={k}: floors {floors.tolist()}")
            raise
        assert gpu.last_skipped == cpu.last_skipped, name
        if name == "skip":
            assert gpu.last_skipped == queries.n_sets and (got.doc_ids == -1).all()
        if name == "above_all":
            assert (got.doc_ids == -1).all()
        rescans += gpu.rescans
    return rescans
