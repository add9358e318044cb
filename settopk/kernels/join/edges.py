"""The edges whose connected components are those of every passing pair of a corpus, from its
identical-set groups and the passing pairs of distinct groups (GroupJoin's pairs of groups), without
listing the pairs of members: what ``settopk.dedup`` and the job's ``--dedup`` group docs by.

Source: Bouros, Ge, Mamoulis, "Spatio-textual similarity joins", PVLDB 2012 (GroupJoin).
"""

from __future__ import annotations

import numpy as np

from ..threshold import need_table
from .prepare import JoinSets

__all__ = ["passing_edges"]


def passing_edges(groups: JoinSets, doc_ids, threshold, score: str, max_len: int, group_a, group_b) -> tuple[np.ndarray, np.ndarray]:
    """Edges between doc ids with the connected components of every passing pair of a corpus.

    Two members of one group pass together exactly when a set passes with itself
    (``need(L, L) <= L``): each such group's members are joined to its first member. Each pair of
    distinct groups that passes joins their first members. A group whose set fails with itself
    (an empty set, an overlap below ``T``) has no passing pair with another group either (no set
    scores higher with another than with itself); were one given, its members would be joined
    through its first member too, so that the rule above is all there is.

    Parameters
    ----------
    groups : JoinSets
        The corpus prepared (:func:`settopk.kernels.join.prepare_corpus`), host memory.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        The id of each set of the corpus.
    threshold : fractions.Fraction
        ``T``.
    score : str
        A symmetric score (not ``containment``).
    max_len : int
        Bound on set sizes.
    group_a, group_b : numpy.ndarray of int, shape (n_group_pairs,)
        The passing pairs of distinct groups (:func:`settopk.kernels.join.group_pairs`, or a
        ``SelfJoin``'s ``group_pairs``): indexes into ``groups``.

    Returns
    -------
    (numpy.ndarray of int64, numpy.ndarray of int64), each of shape (n_edges,)
        Doc id pairs; ``n_edges`` is at most ``n_docs + n_group_pairs``.
    """
    ids = np.asarray(doc_ids, dtype=np.int64)
    size = groups.group_size
    group_len = groups.group_len.astype(np.int64)
    lens = np.unique(group_len)
    passes = need_table(threshold, lens, max_len, score)[np.arange(len(lens)), lens] <= lens
    self_pass = passes[np.searchsorted(lens, group_len)]
    group_a = np.asarray(group_a, dtype=np.int64)
    group_b = np.asarray(group_b, dtype=np.int64)
    linked = np.zeros(groups.n_groups, bool)
    linked[group_a] = linked[group_b] = True
    joined = np.repeat((self_pass | linked) & (size > 1), size)
    first = np.repeat(groups.group_rep, size)
    return (np.concatenate([ids[groups.group_members[joined]], ids[groups.group_rep[group_a]]]),
            np.concatenate([ids[first[joined]], ids[groups.group_rep[group_b]]]))
