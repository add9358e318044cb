"""Re-emission: the queries whose candidates overflowed their buffers, emitted again into buffers
of their exact size and selected (CuPy imported inside the methods).

A mixin of :class:`settopk.kernels.cuda.levels.LevelSearch`: the bounds and tables of the last level
are unchanged, so the count kernel (or the postings) emits the same docs again, exactly as many as
the first pass counted, which is checked.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SORT_MAX", "Reemission", "pow2_at_least"]

SORT_MAX = 16384  # largest per-query sort in shared memory (128 KiB of uint64)


def pow2_at_least(n: int) -> int:
    """The least power of two >= ``n`` (and >= 2): a bitonic sort's size."""
    return 1 << max(1, (max(n, 1) - 1).bit_length())


class Reemission:
    """Exact-size re-emission and selection of overflowed queries; the host class provides the
    count kernel (``_count_emit``, ``_groups_of``, ``_select``), ``n_docs`` and ``redo_bytes``."""

    def _rescan(self, overflowed, counts, query_arrays, bound_key, k, top, emit=None):
        """Scan the whole shard again for the overflowed queries with exact-size buffers, then select.

        The thresholds are those of the last level, so the kernel emits the
        same docs again (:meth:`_reemit`). ``emit(members, count, cand_base, cand_cap, cand)``
        (members: host int64 query indices) replaces the scan for queries whose last level
        ran through the postings.
        """
        import cupy

        qlen, tie_pos, thr_ge, thr_gt = query_arrays[2], query_arrays[5], query_arrays[3], query_arrays[4]
        if emit is None:
            emit = self._scan_emitter(query_arrays)
        for members, bases, sizes, cand, count, cand_base, cand_cap in self._reemit(overflowed, counts, emit):
            small = members[sizes <= SORT_MAX]
            if len(small):
                sort_size = pow2_at_least(int(sizes[sizes <= SORT_MAX].max()))
                self._select(cand, cand_base, cand_cap, count, cupy.asarray(small.astype(np.int32)), len(small), k,
                             sort_size, top, update=False, bound_key=bound_key, tie_pos=tie_pos, qlen=qlen,
                             thr_ge=thr_ge, thr_gt=thr_gt)
            for q, base, size in zip(members.tolist(), bases.tolist(), sizes.tolist()):
                if size <= SORT_MAX:
                    continue
                best = cupy.sort(cand[base : base + size])[::-1][:k]  # too long for the shared-memory sort
                top[q] = 0
                top[q, : len(best)] = best

    def _scan_emitter(self, query_arrays):
        """``emit(members, count, cand_base, cand_cap, cand)`` of :meth:`_reemit` through the count
        kernel over the whole shard (members: host int query indices, sorted order)."""

        def emit(members, count, cand_base, cand_cap, cand):
            group_query, n_groups = self._groups_of(members)
            self._count_emit(group_query, n_groups, query_arrays, 1, self.n_docs, count, cand_base, cand_cap, cand)

        return emit

    def _reemit(self, overflowed, counts, emit):
        """Emit the candidates of the ``overflowed`` queries again, into buffers of their exact size.

        The bounds and tables are unchanged, so the kernel emits the same docs again: exactly
        ``counts[q]`` of them, which is checked. Queries go in batches whose buffers fit
        ``redo_bytes`` (a query larger than that alone).

        Yields
        ------
        (members, bases, sizes, cand, count, cand_base, cand_cap)
            Host int64 query indices, each one's first slot and candidate count (host int64), the
            device uint64 buffer (query ``members[i]``'s candidates at ``cand[bases[i]:bases[i] +
            sizes[i]]``, unordered), the device int32 counters, and the device slot bases (int64)
            and capacities (int32) per query of the batch as the kernels take them, per batch.

        Raises
        ------
        RuntimeError
            If a query emits a different number of candidates than its first scan counted.
        """
        import cupy

        n_q = len(counts)
        budget = max(1, self.redo_bytes // 8)
        batch: list[int] = []
        used = 0
        batches = []
        for q in overflowed.tolist():
            if batch and used + counts[q] > budget:
                batches.append(batch)
                batch, used = [], 0
            batch.append(q)
            used += int(counts[q])
        batches.append(batch)
        for batch in batches:
            members = np.asarray(batch, dtype=np.int64)
            sizes = counts[members].astype(np.int64)
            bases = np.cumsum(sizes) - sizes
            cand = cupy.empty(max(1, int(sizes.sum())), dtype=np.uint64)
            count = cupy.zeros(n_q, dtype=np.int32)
            cand_base = cupy.asarray(_scatter(n_q, members, bases, np.int64))
            cand_cap = cupy.asarray(_scatter(n_q, members, sizes, np.int32))
            emit(members, count, cand_base, cand_cap, cand)
            again = count.get()[members]
            if not np.array_equal(again, sizes):
                raise RuntimeError(
                    f"re-scan emitted {again.tolist()} candidates where the first scan counted {sizes.tolist()}; "
                    "the GPU results are not reproducible (a kernel bug or a hardware fault)"
                )
            yield members, bases, sizes, cand, count, cand_base, cand_cap


def _scatter(n: int, rows: np.ndarray, values: np.ndarray, dtype) -> np.ndarray:
    """Host array of ``n`` zeros of ``dtype`` with ``values`` at ``rows``."""
    out = np.zeros(n, dtype=dtype)
    out[rows] = values
    return out
