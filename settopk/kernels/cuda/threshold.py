"""Threshold search of :class:`settopk.kernels.cuda.CupyShardIndex`: every doc whose score with a
query reaches ``T``, exactly, on the GPU. CuPy is imported inside the methods.

Method
------
Where ``T > 0`` and ``routing`` is not ``"scan"``, the search is the threshold join of
:mod:`settopk.kernels.join.arrays` run in CuPy (frequency order, identical docs grouped, prefix,
length, positional and bitmap filters and early-exit verification on the device, the last three
in one kernel: :mod:`settopk.kernels.cuda.join`), its doc side prepared at the first search of a
threshold and kept on the index. With ``routing="scan"``, or at ``T == 0`` (every pair passes, none
is prefix filtered):

The count kernel of the top-k search (``count_emit`` in ``bitslice_topk.cu``) already emits exactly
the docs with ``key >= F`` for a bound ``(F, 2**31 - 1)`` that never moves. A threshold search is that
kernel alone, once over the shard, with ``F`` fixed at the threshold:

* ``need(|q|, |d|)`` (:func:`settopk.kernels.need_table`, exact in Python integers) is the least
  overlap with ``score >= T``. For a query, ``F`` is the least key :func:`settopk.kernels.score_key`
  of a passing pair over the doc lengths the shard holds: ``min over |d| of key(need(|q|, |d|), |q|,
  |d|)``. Keys are strictly order-preserving on achievable scores, so a pair has ``key >= F``
  exactly when its score is at least that least passing score, which is ``>= T``; and every
  passing pair has ``key >= F``. ``key >= F`` is therefore ``score >= T``, ties included.
* The kernel's size filter comes with it: per (query, doc length) it compares the counters with
  the least overlap of ``key >= F`` and skips the tiles and warps whose lengths no query of the
  group can reach (*length filtering*). Queries no length of the shard can pass never reach the
  GPU.
* With postings (``routing`` other than ``"scan"``), queries the cost model routes to them and
  with ``F >= 1`` (a passing doc shares an id with the query) are answered from their ids'
  postings instead of the scan; queries with ``F == 0`` (``T == 0``) pass docs with no id in common,
  which only the scan sees.
* Each query's candidates go to a buffer of ``capacity`` slots; the kernel counts every emission,
  so a query that found more is emitted again into a buffer of its exact size
  (:meth:`settopk.kernels.cuda.reemit.Reemission._reemit`, batches bounded by ``redo_bytes``). No
  pair is ever dropped: output is unbounded, GPU memory is bounded by those two settings.

The candidates are decoded on the GPU (position, key, doc length, overlap) and ordered best first on
the host by :func:`settopk.kernels.threshold.order_pairs`, as the CPU backends order theirs.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..join.kept import ArraySelfJoins
from ..keys import least_overlap, score_key
from ..sets import SetBatch
from ..threshold import ThresholdPairs, need_table, order_pairs, parse_threshold, reachable_lengths
from .floors import floor_tables, threshold_table_type

__all__ = ["THRESHOLD_CAPACITY", "ThresholdSearch", "threshold_floors"]

THRESHOLD_CAPACITY = 1024  # candidate slots per query before the exact-size re-emission
_LAST_POSITION = 2**31 - 1  # the bound's tie position that admits every doc of key F
_NO_FLOOR = -2  # a query no doc length of the shard can pass


def threshold_floors(threshold, query_len, doc_lengths_present, max_len: int, score: str,
                     min_doc_len=None) -> np.ndarray:
    """The key floor ``F`` per query with ``key >= F`` exactly when ``score >= threshold``.

    Parameters
    ----------
    threshold : fractions.Fraction or any value :func:`settopk.kernels.parse_threshold` takes
        ``T``.
    query_len : numpy.ndarray of int, shape (n_queries,)
        ``|q|`` per query, in ``[0, max_len]``.
    doc_lengths_present : numpy.ndarray of bool, shape (max_len + 1,)
        The doc lengths the shard holds.
    max_len, score
        The key scale and the score (:func:`settopk.kernels.score_key`).
    min_doc_len : numpy.ndarray of int, shape (n_queries,), optional
        Per query, the shortest doc length searched; None: every length.

    Returns
    -------
    numpy.ndarray of int64, shape (n_queries,)
        ``F`` in ``[0, max_key]``: the least key of a passing pair over the lengths searched; or
        ``-2`` where none of them can pass.
    """
    query_len = np.asarray(query_len, dtype=np.int64)
    lengths = np.arange(max_len + 1, dtype=np.int64)  # per (query length, doc length), then per query
    need = need_table(threshold, lengths, max_len, score)
    reach = reachable_lengths(need, lengths) & np.asarray(doc_lengths_present, dtype=bool)[None, :]
    overlap = np.minimum(need, np.minimum(lengths[:, None], lengths[None, :]))  # in range where unreachable (masked)
    keys = score_key(overlap, lengths[:, None], lengths[None, :], max_len, score)
    keys = np.where(reach, keys.astype(np.int64), np.iinfo(np.int64).max)
    # from_len[l, m]: the least key over doc lengths >= m (a suffix minimum), max_len + 1 columns + 1
    from_len = np.concatenate([np.minimum.accumulate(keys[:, ::-1], axis=1)[:, ::-1],
                               np.full((max_len + 1, 1), np.iinfo(np.int64).max)], axis=1)
    start = np.zeros_like(query_len) if min_doc_len is None else np.clip(min_doc_len, 0, max_len + 1)
    floor = from_len[query_len, start]
    return np.where(floor == np.iinfo(np.int64).max, _NO_FLOOR, floor).astype(np.int64)


class ThresholdSearch(ArraySelfJoins):
    """The threshold search of :class:`settopk.kernels.cuda.CupyShardIndex`, a base class beside
    :class:`settopk.kernels.cuda.levels.LevelSearch`, whose launchers and re-emission it uses; and
    the shard's kept self-join (:class:`settopk.kernels.join.kept.ArraySelfJoins`), on its device."""

    def threshold_search(self, queries: SetBatch, threshold, k: int | None = None, *,
                         min_doc_len=None) -> ThresholdPairs:
        """Every doc whose score with a query reaches ``threshold`` (inclusive), exactly, best first.

        Same contract and result as :meth:`settopk.kernels.NumpyShardIndex.threshold_search`; the
        method is in this module's docstring.

        Parameters
        ----------
        queries : SetBatch
            ``n_queries`` sets in host memory (``offsets`` int64, ``tokens`` uint16, C-contiguous),
            each with at most ``max_len`` ids, all below ``vocab_size``.
        threshold : str, int, float or fractions.Fraction
            ``T``, read exactly from its decimal text (:func:`settopk.kernels.parse_threshold`).
        k : int, optional
            Keep only each query's ``k`` best passing docs; None (default) keeps all.
        min_doc_len : array_like of int, shape (n_queries,), optional
            Per query, search only the docs at least this long (the count kernel's tables make the
            shorter lengths unreachable, so their tiles are skipped); None: every doc.

        Returns
        -------
        settopk.kernels.ThresholdPairs
            Host arrays, CSR by query; each query's docs by score descending, then doc id ascending.

        Raises
        ------
        ValueError
            If ``threshold`` is not a number in ``[0, 1]`` (``>= 0`` for overlap), ``k < 1``,
            ``min_doc_len`` does not have one entry per query, or the queries are malformed (as
            :meth:`search`).
        RuntimeError
            If a re-emission does not reproduce its first count (a kernel or hardware fault).

        Notes
        -----
        Sets ``last_skipped`` (queries no doc length of the shard can pass), ``rescans`` (queries
        emitted again into an exact-size buffer) and ``last_routing``.
        """
        import cupy

        t = parse_threshold(threshold, self.score)
        if k is not None and (isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1):
            raise ValueError(f"k must be an integer >= 1 (or None for every passing pair), found {k!r}")
        self._check_queries(queries)
        if min_doc_len is not None:
            min_doc_len = np.asarray(min_doc_len, dtype=np.int64)
            if min_doc_len.shape != (queries.n_sets,):
                raise ValueError(f"min_doc_len must have shape ({queries.n_sets},) (one per query), "
                                 f"found {min_doc_len.shape}")
        self.rescans = 0
        self.last_routing = self._fresh_routing()
        n_q = queries.n_sets
        lengths = queries.lengths
        if self.n_docs and t > 0 and self.routing != "scan":
            return self._joined(queries, t, k, min_doc_len)
        if self.n_docs and n_q:
            floor = threshold_floors(t, lengths, self._lengths_present(), self.max_len, self.score, min_doc_len)
        else:
            floor = np.full(n_q, _NO_FLOOR, np.int64)
        active = np.flatnonzero(floor != _NO_FLOOR)
        self.last_skipped = n_q - len(active)
        found = []
        with cupy.cuda.Device(self._device_id):
            for chunk in self._chunks(active):
                with self._batch_turn():
                    for run in self._runs(queries, chunk, eligible=floor[chunk] >= 1):
                        q_row, *rest = self._threshold_batch(
                            run.batch, floor[run.rows], None if min_doc_len is None else min_doc_len[run.rows],
                            run.routed, run.tokens)
                        found.append((run.rows[q_row], *rest))
        if found:
            q_row, position, overlap, doc_len = (np.concatenate([f[i] for f in found]) for i in range(4))
        else:
            q_row = position = overlap = doc_len = np.zeros(0, np.int64)
        return order_pairs(n_q, q_row, position, overlap, doc_len, lengths, self.doc_ids, self.max_len, self.score, k)

    def _joined(self, queries: SetBatch, t, k, min_doc_len) -> ThresholdPairs:
        """``T > 0``: the array join in CuPy (:mod:`settopk.kernels.join.arrays`), the docs prepared
        on this device at the first search of a threshold and kept (a job or a self-join keeps one)."""
        import cupy

        from ..join.arrays import prepare_docs

        with cupy.cuda.Device(self._device_id):
            side = self._join_side
            if side is None or side.threshold != t:
                self._join_side = None  # the old side's device arrays go before the new ones come
                side = self._join_side = prepare_docs(_concatenated(self._join_pieces), self.doc_ids, t, self.score,
                                                      self.max_len, backend="cupy")
            self.last_skipped = 0
            self.last_routing["postings"] = queries.n_sets
            return side.probe(queries, k, min_doc_len)

    def _self_join_input(self):
        """What :class:`settopk.kernels.join.kept.ArraySelfJoins` joins: the docs, in CuPy, on this shard's device."""
        import cupy

        return _concatenated(self._join_pieces), "cupy", cupy.cuda.Device(self._device_id)

    def _lengths_present(self) -> np.ndarray:
        """Host bool of shape (max_len + 1,): the doc lengths the shard holds (computed once)."""
        import cupy

        if getattr(self, "_present", None) is None:
            counts = cupy.bincount(self._len_by_pos.astype(np.int32), minlength=self.max_len + 1).get()
            self._present = counts[: self.max_len + 1] > 0
        return self._present

    def _threshold_batch(self, batch: SetBatch, floor: np.ndarray, min_doc_len: np.ndarray | None,
                         routed: np.ndarray | None = None, tokens=None):
        """Every pair of one batch with ``key >= floor[q]`` (host int64, each ``>= 0``) and, where
        given, a doc at least ``min_doc_len[q]`` long. ``routed`` and ``tokens``: as for ``_search_batch``
        (only queries with ``floor >= 1`` are routed: a floor of 0 passes docs outside the postings; a
        routed query needs no scan here, so a batch without table numbers leaves none unfinished).

        Returns host arrays ``(q_row, position, overlap, doc_len)`` of int64, one entry per pair,
        unordered (``q_row``: the batch's row; ``position``: the doc's position in the shard)."""
        import cupy

        n_q = batch.n_sets
        lengths = batch.lengths
        order = np.argsort(lengths, kind="stable")  # groups of similar lengths: tighter size filters
        qoff = cupy.asarray(batch.offsets[:-1][order])
        tokens, qtok = self._query_tokens(batch, tokens, routed)
        qlen = cupy.asarray(lengths[order].astype(np.int32))
        floor = floor[order]
        bound_key = cupy.asarray(floor)
        tie_pos = cupy.full(n_q, _LAST_POSITION, dtype=np.int32)
        thr_ge, thr_gt = floor_tables(cupy, bound_key, qlen, self._longest + 1, self.max_len, self.score,
                                      self._cosine_keys)
        if min_doc_len is not None:  # shorter lengths unreachable: their tiles and warps are skipped
            shorter = cupy.arange(self._longest + 1)[None, :] < cupy.asarray(min_doc_len[order])[:, None]
            never = threshold_table_type(self.max_len)[1]
            thr_ge[shorter] = never
            thr_gt[shorter] = never
        query_arrays = (qoff, qtok, qlen, thr_ge, thr_gt, tie_pos)
        capacity = self.capacity or THRESHOLD_CAPACITY
        cand = cupy.empty(n_q * capacity, dtype=np.uint64)
        count = cupy.zeros(n_q, dtype=np.int32)
        cand_base = cupy.arange(n_q, dtype=np.int64) * capacity
        cand_cap = cupy.full(n_q, capacity, dtype=np.int32)

        if routed is None:
            routed = self._route(qoff, qtok, qlen, eligible=floor >= 1)  # F == 0 passes docs outside the postings
        else:
            routed = routed[order]
        post_arrays = self._postings_arrays(query_arrays, tokens) if routed.any() else query_arrays
        emitters = {False: self._scan_emitter(query_arrays), True: self._postings_emitter(post_arrays, bound_key)}
        for posted, emit in emitters.items():
            rows = np.flatnonzero(routed == posted)
            if len(rows):
                emit(rows, count, cand_base, cand_cap, cand)
                self.last_routing["postings" if posted else "scan"] += len(rows)

        counts = count.get().astype(np.int64)
        fits = np.where(counts <= capacity, counts, 0)
        starts = np.repeat(np.arange(n_q, dtype=np.int64) * capacity - (np.cumsum(fits) - fits), fits)
        parts = [(np.repeat(np.arange(n_q, dtype=np.int64), fits),
                  cand[cupy.asarray(starts + np.arange(int(fits.sum()), dtype=np.int64))])]
        overflowed = np.flatnonzero(counts > capacity)
        self.rescans += len(overflowed)
        for posted, emit in emitters.items():
            rows = overflowed[routed[overflowed] == posted]
            if len(rows):
                for members, _bases, sizes, buf, *_ in self._reemit(rows, counts, emit):
                    parts.append((np.repeat(members, sizes), buf[: int(sizes.sum())]))
        q_sorted = np.concatenate([p[0] for p in parts])
        values = cupy.concatenate([p[1] for p in parts])
        position = ((values & 0xFFFFFFFF) ^ 0xFFFFFFFF).astype(np.int64)  # the encoding: (key << 32) | ~position
        key = (values >> 32).astype(np.int64)
        doc_len = self._len_by_pos[position].astype(np.int64)
        q_dev = cupy.asarray(q_sorted)
        overlap = least_overlap(cupy, key - 1, qlen[q_dev].astype(np.int64), doc_len, self.max_len, self.score,
                                self._cosine_keys)
        q_row = order[q_sorted].astype(np.int64)
        if min_doc_len is not None:  # the postings kernel emits by key alone: its shorter docs go here
            keep = (doc_len >= cupy.asarray(min_doc_len[order])[q_dev]).get()
            return q_row[keep], position[keep].get(), overlap[keep].get().astype(np.int64), doc_len[keep].get()
        return q_row, position.get(), overlap.get().astype(np.int64), doc_len.get()


def _concatenated(pieces: list) -> SetBatch:
    """One host SetBatch of the pieces, in order (the pieces themselves where there is one)."""
    if len(pieces) == 1:
        return pieces[0]
    tokens = np.concatenate([p.tokens for p in pieces])
    lengths = np.concatenate([p.lengths for p in pieces])
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return SetBatch(offsets, tokens)
