"""A shard's own self-join, found once and kept (:class:`KeptSelfJoins`, every backend's shard
index): on ``numpy`` and ``cupy`` with the array join (:func:`settopk.kernels.join.arrays.self_join_with_groups`),
bounded, and taken by query range, as the ``cpu`` backend's :class:`settopk.kernels.join.host_join.SelfJoin`
is (a job's symmetric self-join answers a shard's own docs from it, and ``--dedup`` groups them by its groups).
"""

from __future__ import annotations

from ..sets import SetBatch
from ..threshold import ThresholdPairs, parse_threshold
from .arrays import self_join_with_groups
from .prefixes import JoinTooLarge  # noqa: F401 (raised through self_join_with_groups; named in docstrings)

__all__ = ["ArraySelfJoins", "KeptSelfJoin", "KeptSelfJoins"]


class KeptSelfJoin:
    """A corpus's threshold self-join on ``numpy`` or ``cupy``, found once (its pairs in host memory)
    and taken by query range: what a job's shard answers its own docs from, as the ``cpu``
    backend's :class:`settopk.kernels.join.host_join.SelfJoin` (the same attributes and ``rows``).

    Parameters
    ----------
    sets : SetBatch
        ``n_docs`` sets (host memory); each is also a query.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing ids.
    threshold, score, max_len, backend, include_self, k, slice_entries
        As :func:`settopk.kernels.join.arrays.self_join`; ``T > 0``, the score symmetric (not
        ``containment``).
    max_entries : int, optional
        Refuse (:class:`JoinTooLarge`) a self-join of more than this many pairs of groups, or of
        pairs in all (the pairs of the groups' members, counted before they are listed). None: no bound.

    Attributes
    ----------
    offsets : numpy.ndarray of int64, shape (n_queries + 1,)
        Query ``i``'s pairs are rows ``offsets[i]:offsets[i + 1]``.
    groups : JoinSets
        The corpus in frequency order, its identical sets grouped (host memory).
    group_pairs : (numpy.ndarray of int64, numpy.ndarray of int64), each of shape (n_group_pairs,)
        The passing pairs of distinct groups, each unordered pair once (indexes into ``groups``).

    Raises
    ------
    ValueError
        If ``T == 0``, the score is ``containment`` or unknown, or ``k < 1``.
    JoinTooLarge
        Past ``max_entries``.
    """

    def __init__(self, sets: SetBatch, doc_ids, threshold, score: str, max_len: int, *, backend: str = "numpy",
                 include_self: bool = False, k: int | None = None, slice_entries: int | None = None,
                 max_entries: int | None = None):
        self._pairs, self.groups, self.group_pairs = self_join_with_groups(
            sets, doc_ids, threshold, score, max_len, backend=backend, include_self=include_self, k=k,
            slice_entries=slice_entries, max_entries=max_entries)
        self.offsets = self._pairs.offsets

    @property
    def n_queries(self) -> int:
        """Queries (the corpus's docs)."""
        return len(self.offsets) - 1

    def rows(self, lo: int, hi: int) -> ThresholdPairs:
        """Queries ``lo .. hi - 1``'s pairs (``0 <= lo <= hi <= n_queries``), each query's best first
        (views of the kept pairs).

        Raises
        ------
        ValueError
            If the range is out of bounds.
        """
        if not 0 <= lo <= hi <= self.n_queries:
            raise ValueError(f"query range {lo}..{hi} is not within 0..{self.n_queries}")
        p, a, b = self._pairs, int(self.offsets[lo]), int(self.offsets[hi])
        return ThresholdPairs(self.offsets[lo:hi + 1] - a, p.doc_ids[a:b], p.overlap[a:b], p.doc_len[a:b])

    def close(self) -> None:
        """Nothing to stop (the ``cpu`` SelfJoin's threads have no counterpart here)."""



class KeptSelfJoins:
    """``self_join_rows`` and ``kept_self_join`` of a shard index (a base class): the shard's
    self-join found at the first call of a ``(threshold, include_self, k)`` and kept for batch
    after batch (the one before it closed first, so two are never held), each call taking a
    range of its rows. A job's symmetric self-join takes its home queries' pairs here, in place of
    probing its docs with themselves, and ``--dedup`` groups them by its groups.

    A subclass has ``score`` and defines ``_found_self_join(t, include_self, k, max_entries)``: the
    join (``rows(lo, hi)``, ``groups``, ``group_pairs``, ``close()``), ``t`` an exact fraction.
    """

    _self_join = None  # ((t, include_self, k), the join)

    def self_join_rows(self, threshold, lo: int, hi: int, include_self: bool = False, k: int | None = None,
                       max_entries: int | None = None) -> ThresholdPairs:
        """The shard's own docs ``lo .. hi - 1`` (positions) as queries of its kept self-join.

        Parameters
        ----------
        threshold : value taken by :func:`settopk.kernels.parse_threshold`
            ``T > 0``.
        lo, hi : int
            ``0 <= lo <= hi <= n_docs``.
        include_self : bool
            Also each doc's pair with itself.
        k : int, optional
            Keep each query's ``k`` best pairs; None keeps all.
        max_entries : int, optional
            The most the kept self-join may hold, when it is found at this call (see the
            subclass's join); None: no bound.

        Returns
        -------
        ThresholdPairs
            ``hi - lo`` queries; each unordered pair of the shard's docs once, under its shorter doc
            (or the lower id of two of one length: :func:`settopk.kernels.self_join_keep`), best first.

        Raises
        ------
        ValueError
            If ``T == 0``, the score is ``containment`` (not symmetric), ``k < 1`` or the range is
            out of bounds.
        JoinTooLarge
            If the self-join, found at this call, would hold more than ``max_entries``.
        """
        return self.kept_self_join(threshold, include_self, k, max_entries).rows(lo, hi)

    def kept_self_join(self, threshold, include_self: bool = False, k: int | None = None,
                       max_entries: int | None = None):
        """The shard's self-join (its ``rows``, ``groups`` and ``group_pairs``), found as
        :meth:`self_join_rows` finds it with the same arguments, and kept.

        Raises
        ------
        ValueError, JoinTooLarge
            As :meth:`self_join_rows`.
        """
        key = (parse_threshold(threshold, self.score), bool(include_self), k)
        if self._self_join is None or self._self_join[0] != key:
            if self._self_join is not None:
                self._self_join[1].close()
            self._self_join = None  # the old join goes before the new one is found
            self._self_join = (key, self._found_self_join(*key, max_entries))
        return self._self_join[1]


class ArraySelfJoins(KeptSelfJoins):
    """The kept self-join of the ``numpy`` and ``cupy`` shard indexes (a base class): found with the
    array join (:class:`KeptSelfJoin`, host memory), ``max_entries`` bounding its pairs of groups
    and its pairs; and, past that budget, the shard's groups and pairs of groups (:meth:`join_groups`).

    A subclass has ``doc_ids``, ``score`` and ``max_len``, and defines ``_self_join_input()``:
    ``(SetBatch of its docs, backend, context manager to run the join in)``.
    """

    def _found_self_join(self, t, include_self: bool, k: int | None, max_entries: int | None) -> KeptSelfJoin:
        sets, backend, context = self._self_join_input()
        with context:
            return KeptSelfJoin(sets, self.doc_ids, t, self.score, self.max_len, backend=backend,
                                include_self=include_self, k=k, max_entries=max_entries)

    def join_groups(self, threshold, max_pairs: int | None = None):
        """The shard's identical-doc groups and the passing pairs of distinct groups at ``threshold``
        (:func:`settopk.kernels.join.corpus_group_pairs` on the index's backend, and device): its docs
        grouped by every passing pair among them without listing those pairs (a ``--dedup`` run's own
        groups of the shard, where its self-join is past its budget).

        Parameters
        ----------
        threshold : value taken by :func:`settopk.kernels.parse_threshold`
            ``T > 0``.
        max_pairs : int, optional
            Refuse more pairs of groups than this, before they are all held; None: no bound.

        Returns
        -------
        (JoinSets, numpy.ndarray of int64, numpy.ndarray of int64)
            As :func:`settopk.kernels.join.corpus_group_pairs` (host memory).

        Raises
        ------
        ValueError
            As :func:`settopk.kernels.join.group_pairs` (``T == 0``, containment).
        JoinTooLarge
            Past ``max_pairs``.
        """
        from . import corpus_group_pairs

        sets, backend, context = self._self_join_input()
        with context:
            return corpus_group_pairs(sets, threshold, self.score, self.max_len, backend=backend, max_pairs=max_pairs)
