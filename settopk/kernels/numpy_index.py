"""Vectorised NumPy search: the CPU backend (``backend="numpy"``) and the test oracle for the GPU kernels.

Lane-packed lookup: a table maps each token id (below the index's id bound,
:func:`settopk.kernels.sets.index_ids`: 65536 for ``uint16`` docs; ``uint32`` docs are renumbered to
local ids, one per distinct doc id, :class:`settopk.kernels.dense.LocalIds`)
to a uint64 word whose byte ``j``
(or 16-bit lane ``j`` when ``max_len > 255``) is 1 if query ``j`` holds the id.
Summing the words of a doc's ids adds all lanes at once without carries
(an overlap never exceeds ``max_len``), so one gather and one add count a doc
token against 8 queries. Docs are grouped by length, so each group is a dense
``(n_docs_of_len, len)`` matrix with no padding.
"""

from __future__ import annotations

import contextlib
import logging

import numpy as np

from .cost import numpy_postings_cheaper
from .keys import DEFAULT_SCORE, best_key_in_range, check_floor_key, key_scale, score_key
from .postings import build_postings, check_routing, postings_cost, postings_search
from .dense import LocalIds, table_queries
from .join.kept import ArraySelfJoins
from .sets import SetBatch, check_shard_docs, index_ids
from .topk import TopK, empty_topk

__all__ = ["NumpyShardIndex"]

_GATHER_ELEMENTS = 1 << 20  # ids gathered per step: keeps the uint64 temporary at 8 MiB
_BAND = 8  # doc lengths per group: at most 7 padding ids per doc
_log = logging.getLogger("settopk.kernels")


class NumpyShardIndex(ArraySelfJoins):
    """One shard's docs in host memory, searched with the lane-packed lookup table.

    Implements :class:`settopk.kernels.ShardIndex` (``build_index("numpy", ...)``).

    Parameters
    ----------
    docs : SetBatch
        The shard's docs (``n_docs`` sets), in ``doc_ids`` order.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Global doc ids, strictly increasing (so position order is id order).
    max_len : int
        Bound on set sizes, in ``[1, 32767]`` (``[1, 4096]`` for cosine).
    score : str, default "braun_blanquet"
        What :meth:`search` ranks by: one of :data:`settopk.kernels.SCORES`.
    routing : str, default "scan"
        ``"scan"``: every query is counted against every doc (the lane-packed
        lookup). ``"auto"``: an inverted index (:mod:`settopk.kernels.postings`, about
        ``4 n_tokens + 8 n_ids`` more host bytes, ``n_ids`` 65536 for ``uint16`` docs, else the
        number of distinct doc ids) is built too, and each query
        takes the path the cost model (:func:`settopk.kernels.cost.numpy_postings_cheaper`)
        says is cheaper: ScanCount through the postings when its ids' postings are
        short (uniform ids), the scan otherwise (Zipf ids). ``"postings"``: every
        query goes through the postings (tests, measurements). Results are
        identical in every mode.

    Attributes
    ----------
    last_skipped : int
        Queries of the last ``search`` that their floor skipped (a diagnostic;
        0 without floors).
    last_routing : dict
        Queries of the last ``search`` per path: ``scan``, ``postings`` (as
        :class:`settopk.kernels.cuda.CupyShardIndex` reports them), and of those,
        ``scancount`` and ``prefix`` (the postings paths of
        :func:`settopk.kernels.postings.postings_search`).
    postings : settopk.kernels.postings.Postings or None
        The inverted index (None with ``routing="scan"``).
    postings_bytes : int
        Host bytes of the postings (0 with ``routing="scan"``).

    Raises
    ------
    ValueError
        If ``doc_ids`` is not strictly increasing, its length differs from
        ``docs``, a doc is longer than ``max_len``, the shard has ``2**31`` docs
        or more, or ``score`` is unknown or does not allow ``max_len``
        (:func:`settopk.kernels.key_scale`), or ``routing`` is not one of
        :data:`settopk.kernels.postings.ROUTINGS`.
    """

    def __init__(self, docs: SetBatch, doc_ids: np.ndarray, max_len: int, score: str = DEFAULT_SCORE,
                 routing: str = "scan"):
        check_routing(routing)
        key_scale(max_len, score)  # an unknown score, or a max_len too wide for its keys, fails here
        doc_ids, lengths = check_shard_docs(docs, doc_ids, max_len)
        # uint32 docs are renumbered to local ids, most frequent first (settopk.kernels.dense).
        self._local, docs = LocalIds.of(docs)
        self.doc_ids = doc_ids
        self.doc_len = lengths.astype(np.int16)
        self.max_len = max_len
        self.score = score
        self.last_skipped = 0
        self.routing = routing
        self.last_routing = _no_routing()
        self._docs = docs if routing != "scan" else None
        self._join_docs = docs  # the threshold join's input (settopk.kernels.join.arrays), prepared per threshold
        self._join_side = None
        self._self_join = None  # (key, KeptSelfJoin): the shard's own self-join, kept for a job's self-join
        # Ids at or above n_ids are held by no doc: queries' ids are folded below n_ids + max_len.
        self._n_ids = index_ids(docs) if self._local is None else self._local.n_ids
        self.postings = build_postings(docs, self._n_ids + max_len + 1) if routing != "scan" else None
        self.postings_bytes = self.postings.nbytes if self.postings is not None else 0
        # Shard length range: a query whose floor no length in it can reach is skipped.
        self._shortest = int(lengths.min()) if len(lengths) else 0
        self._longest = int(lengths.max()) if len(lengths) else 0
        self._lane_bits = 8 if max_len <= 255 else 16
        # Docs grouped by length in bands of _BAND lengths: one dense (n, width) matrix per band,
        # rows padded with id 0 up to the band's longest doc. Bands keep the NumPy calls few on
        # small shards; the padding's counts are taken back out in overlaps().
        self._groups = []  # (positions, (n, width) matrix of the docs' token dtype, (n,) pad count) per band
        band = np.minimum(lengths, max_len) // _BAND if len(lengths) else lengths
        for b in np.unique(band):
            rows = np.flatnonzero(band == b)
            row_len = lengths[rows]
            width = int(row_len.max())
            matrix = np.zeros((len(rows), width), dtype=docs.tokens.dtype)
            matrix[np.arange(width) < row_len[:, None]] = docs.take(rows).tokens  # row-major, as take() lays them out
            self._groups.append((rows, matrix, (width - row_len).astype(np.uint64)))

    @property
    def n_docs(self) -> int:
        """Number of docs in the shard."""
        return len(self.doc_ids)

    def overlaps(self, queries: SetBatch) -> np.ndarray:
        """Overlap of every (query, doc) pair.

        Parameters
        ----------
        queries : SetBatch
            ``n_queries`` sets (``uint16`` or ``uint32`` ids).

        Returns
        -------
        numpy.ndarray of int16, shape (n_queries, n_docs)
        """
        return self._overlaps(table_queries(queries, self._local, self._n_ids))

    def _overlaps(self, queries: SetBatch) -> np.ndarray:
        """:meth:`overlaps` of queries already in the tables' ids (:func:`settopk.kernels.dense.table_queries`)."""
        lanes = 64 // self._lane_bits
        lane_dtype = np.dtype("<u1") if self._lane_bits == 8 else np.dtype("<u2")
        out = np.zeros((queries.n_sets, self.n_docs), dtype=np.int16)
        # One table for every group: only the entries a group set are cleared after it (np.zeros
        # hands out zero pages lazily, so a 2**24-entry table costs only the pages the ids touch).
        table = np.zeros(max(self._n_ids, queries.id_bound), dtype="<u8")
        for first in range(0, queries.n_sets, lanes):
            group = range(first, min(first + lanes, queries.n_sets))
            if first:
                table[queries.tokens[queries.offsets[first - lanes] : queries.offsets[first]]] = 0
            for lane, qi in enumerate(group):
                table[queries[qi]] |= np.uint64(1) << np.uint64(self._lane_bits * lane)
            counts = np.zeros((self.n_docs, lanes), dtype=lane_dtype)
            for rows, matrix, pads in self._groups:
                step = max(1, _GATHER_ELEMENTS // max(1, matrix.shape[1]))
                for lo in range(0, len(rows), step):
                    words = table[matrix[lo : lo + step]].sum(axis=1, dtype="<u8")
                    # Padding ids are 0: remove what they added, lane by lane (no lane went
                    # negative or past its width: a doc's width is at most max_len).
                    words -= pads[lo : lo + step] * table[0]
                    counts[rows[lo : lo + step]] = words.view(lane_dtype).reshape(-1, lanes)
            out[first : first + len(group)] = counts[:, : len(group)].T
        return out

    def search(self, queries: SetBatch, k: int, floor_key=None) -> TopK:
        """Exact shard-local top-k for each query by the index's score, optionally above a per-query floor.

        Parameters
        ----------
        queries : SetBatch
            ``n_queries`` sets (``uint16`` or ``uint32`` ids) of at most ``max_len`` ids.
        k : int
            Results per query, ``>= 1``.
        floor_key : numpy.ndarray of int, shape (n_queries,), optional
            Host array of per-query floors on the score key
            (:func:`settopk.kernels.score_key`): only docs with ``key >= floor_key[q]``
            are returned for query ``q`` (ties at the floor are kept); ``-1``
            means no floor. A query whose floor exceeds
            :func:`settopk.kernels.best_key_in_range` over the shard's doc lengths is
            skipped without scoring (its row is all padding). None (default):
            no floor for any query.

        Returns
        -------
        TopK
            Shape ``(n_queries, k)``: per query, the top-k of the shard's docs
            whose key reaches its floor. ``-1`` ids (overlap and doc_len 0) pad
            rows where fewer than ``k`` docs qualify. The top-k of
            ``{key >= F}`` is the unrestricted top-k with the entries below ``F``
            removed, so a floor never changes the docs a row does return.

        Raises
        ------
        ValueError
            If ``k < 1``, or ``floor_key`` is not an integer array of shape
            ``(n_queries,)`` with values ``>= -1``.

        Notes
        -----
        Sets ``last_skipped`` to the number of queries the floors skipped.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, found {k}")
        floor = check_floor_key(floor_key, queries.n_sets, self.max_len, self.score)
        out = empty_topk(queries.n_sets, k)
        self.last_skipped = 0
        self.last_routing = _no_routing()
        n = self.n_docs
        if n == 0:
            return out
        if floor is None:
            active = np.arange(queries.n_sets)
        else:
            reachable = best_key_in_range(queries.lengths, self._shortest, self._longest, self.max_len, self.score)
            active = np.flatnonzero(floor <= reachable)
            self.last_skipped = queries.n_sets - len(active)
            if len(active) == 0:
                return out
        # The postings take the queries in the tables' ids; the scan (overlaps) maps its own.
        local = table_queries(queries, self._local, self._n_ids) if self.routing != "scan" else None
        routed = self._route(local, active)
        if self.routing != "scan":
            _log.debug("routing %s: %d of %d queries to the postings", self.routing, len(routed), len(active))
        if len(routed):
            sub = local.take(routed)
            part, paths = postings_search(self._docs, self.doc_ids, self.postings, sub, k, self.max_len, self.score,
                                          floor_key=None if floor is None else floor[routed])
            out.doc_ids[routed], out.overlap[routed], out.doc_len[routed] = part
            self.last_routing.update(paths, postings=len(routed))
            active = np.setdiff1d(active, routed)
            if len(active) == 0:
                return out
        self.last_routing["scan"] = len(active)
        searched = queries if len(active) == queries.n_sets else queries.take(active)
        overlap = self.overlaps(searched)
        key = score_key(overlap, searched.lengths[:, None], self.doc_len[None, :], self.max_len, self.score)
        # Unique sort value per doc: key first, then the lower position (= lower doc id) wins. Keys are
        # below 2**32 for every score (settopk.kernels.keys), so key << 31 stays below 2**63.
        tiebreak = (2**31 - 1) - np.arange(n, dtype=np.int64)
        plain = np.ones(len(active), dtype=bool) if floor is None else floor[active] < 0
        if plain.any():  # rows without a floor: one selection over all of them at once
            rows = np.flatnonzero(plain)
            value = (key[rows].astype(np.int64) << 31) | tiebreak
            best = _largest_first_rows(value, k)
            take = best.shape[1]
            qi = active[rows]
            out.doc_ids[qi, :take] = self.doc_ids[best]
            out.overlap[qi, :take] = np.take_along_axis(overlap[rows], best, axis=1)
            out.doc_len[qi, :take] = self.doc_len[best]
        for row in np.flatnonzero(~plain).tolist():
            qi = int(active[row])
            value = (key[row].astype(np.int64) << 31) | tiebreak
            pool = np.flatnonzero(key[row] >= floor[qi])
            best = pool[_largest_first_rows(value[None, pool], k)[0]]
            take = len(best)
            out.doc_ids[qi, :take] = self.doc_ids[best]
            out.overlap[qi, :take] = overlap[row, best]
            out.doc_len[qi, :take] = self.doc_len[best]
        return out

    def threshold_search(self, queries: SetBatch, threshold, k: int | None = None, *, min_doc_len=None):
        """Every doc whose score with a query reaches ``threshold`` (inclusive), exactly, best first.

        Parameters
        ----------
        queries : SetBatch
            ``n_queries`` sets (``uint16`` or ``uint32`` ids) of at most ``max_len`` ids.
        threshold : str, int, float or fractions.Fraction
            ``T``, read exactly from its decimal text (:func:`settopk.kernels.parse_threshold`:
            the float 0.8 is 4/5); a pair passes when ``score >= T``, ties included.
        k : int, optional
            Keep only each query's ``k`` best passing docs; None (default) keeps all.
        min_doc_len : array_like of int, shape (n_queries,), optional
            Per query, search only the docs at least this long (a symmetric self-join passes the
            queries' own lengths: :func:`settopk.kernels.self_join_keep`); None: every doc.

        Returns
        -------
        settopk.kernels.ThresholdPairs
            CSR by query: ``offsets`` (n_queries + 1,), ``doc_ids``, ``overlap``, ``doc_len``
            (n_pairs,), each query's docs by score descending, then doc id ascending. Unbounded:
            ``T = 0`` returns every (query, doc) pair.

        Raises
        ------
        ValueError
            If ``threshold`` is not a number in ``[0, 1]`` (``>= 0`` for overlap), ``k < 1``, or
            ``min_doc_len`` does not have one entry per query.

        Notes
        -----
        Where ``T > 0`` (any ``routing``): the threshold join of :mod:`settopk.kernels.join.arrays`
        in NumPy (frequency order, identical docs grouped, prefix, length and positional filters),
        its doc side prepared at the first search of a threshold and kept (about 30 bytes per doc
        token). At ``T == 0`` (every pair passes) doc lengths no overlap can make pass are skipped
        (:func:`settopk.kernels.threshold.need_table`) and the rest counted by the lane-packed scan.
        Sets ``last_skipped`` (queries no doc length can pass) and ``last_routing``.
        """
        from .threshold import numpy_threshold_search, parse_threshold

        tables = table_queries(queries, self._local, self._n_ids)
        t = parse_threshold(threshold, self.score)
        if self.n_docs and t > 0:
            side = self._join_side
            if side is None or side.threshold != t:  # built at the first search of a threshold, then kept
                from .join.arrays import prepare_docs

                side = self._join_side = prepare_docs(self._join_docs, self.doc_ids, t, self.score, self.max_len,
                                                      backend="numpy")
            self.last_skipped = 0
            self.last_routing = {**_no_routing(), "postings": queries.n_sets, "prefix": queries.n_sets}
            return side.probe(tables, k, min_doc_len)
        return numpy_threshold_search(self, tables, t, k, min_doc_len)

    def _self_join_input(self):
        """What :class:`settopk.kernels.join.kept.ArraySelfJoins` joins: the docs, in NumPy, here."""
        return self._join_docs, "numpy", contextlib.nullcontext()

    def _route(self, queries: SetBatch, active: np.ndarray) -> np.ndarray:
        """The queries of ``active`` (int array) that go through the postings under ``self.routing``."""
        if self.routing == "scan" or len(active) == 0:
            return active[:0]
        if self.routing == "postings":
            return active
        entries = postings_cost(queries.take(active), self.postings)
        return active[numpy_postings_cheaper(entries, len(self._docs.tokens))]


def _no_routing() -> dict:
    return {"scan": 0, "postings": 0, "scancount": 0, "prefix": 0}


def _largest_first_rows(value: np.ndarray, k: int) -> np.ndarray:
    """Per row of ``value`` (shape (n_rows, n), distinct values in a row), the column indices of its
    ``min(k, n)`` largest entries, largest first: shape (n_rows, min(k, n))."""
    n = value.shape[1]
    take = min(k, n)
    best = np.argpartition(value, n - take, axis=1)[:, n - take :] if take < n else np.broadcast_to(np.arange(n), value.shape)
    order = np.argsort(-np.take_along_axis(value, best, axis=1), axis=1)
    return np.take_along_axis(best, order, axis=1)
