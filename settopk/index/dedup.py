"""``settopk.dedup``: near-duplicate groups of a corpus in this process, the job's ``--dedup`` tables.

The groups come from the identical-set groups plus the verified pairs between distinct sets
(:func:`settopk.shards.components.group_components`, which the job's shards use too).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from settopk.shards.components import group_components, group_tables

from .api import Index
from .join import JoinArgumentError, checked_threshold, kernel_self_join

__all__ = ["dedup"]


def dedup(docs, threshold, score: str = "jaccard", *, backend: str = "auto") -> tuple[pa.Table, pa.Table]:
    """Near-duplicate groups of a corpus: the job's ``--dedup`` tables, computed in this process.

    The groups are the connected components of the threshold self-join's pairs (transitive, each
    labelled by its least doc id), found without listing every pair: the identical sets are the
    groups of the index's prepared corpus (:meth:`settopk.Index.join_corpus`, kept between calls),
    every pair inside a group passes exactly when a set's score with itself does (so its members
    are in one component), and each pair of distinct groups is
    verified once (:func:`settopk.kernels.join.group_pairs`), joining whole groups (GroupJoin:
    Bouros, Ge, Mamoulis, "Spatio-textual similarity joins", PVLDB 2012), the components found
    over the groups (:func:`settopk.shards.components.group_components`). At ``T == 0`` and for
    containment, one set per group is self-joined instead.

    Parameters
    ----------
    docs : settopk.Index, or anything :meth:`settopk.Index.build` takes
        The corpus. An Index is used as it is (its score and backend; ``score`` must be its
        score, ``backend`` is ignored); anything else is built into one with ``score`` and ``backend``.
    threshold : str, int, float or fractions.Fraction
        ``T``, exact (:func:`settopk.kernels.parse_threshold`).
    score : str, default "jaccard"
        One of :data:`settopk.kernels.SCORES`.
    backend : str, default "auto"
        As :meth:`settopk.Index.build`.

    Returns
    -------
    (pyarrow.Table, pyarrow.Table)
        ``groups`` (:data:`settopk.shards.components.GROUPS_SCHEMA`: ``doc_id``, ``group_id`` (the
        least doc id of the group), ``group_size``; every doc with at least one pair) and
        ``duplicates`` (:data:`settopk.shards.components.DUPLICATES_SCHEMA`: ``doc_id``,
        ``kept_doc_id``; every grouped doc but its group's least id), both ordered by ``doc_id``:
        equal to the job's ``DIR/groups`` and ``DIR/duplicates`` for the same docs, threshold
        and score. Docs in no pair are in neither table.

    Raises
    ------
    JoinArgumentError
        (a ValueError) If ``threshold`` is not a number in the score's range, or ``score`` differs
        from a given Index's.
    settopk.shards.inputs.InputError, ValueError, TypeError
        As :meth:`settopk.Index.build`, for bad docs or arguments.
    """
    from settopk.kernels.join import group_pairs, host_groups, join_applies, self_passing

    if isinstance(docs, Index):
        if score != docs.score:
            raise JoinArgumentError(f"score must be the index's ({docs.score!r}) when docs is an Index, found {score!r}; "
                                    "pass the index's score, or build another index")
        index = docs
    else:
        index = Index.build(docs, score=score, backend=backend)
    t = checked_threshold(threshold, index.score)
    sets, ids = index._sets, index.doc_ids
    if not sets.n_sets:
        return group_tables(np.zeros(0, np.int64), np.zeros(0, np.int64))
    js = host_groups(index.join_corpus)  # the index's identical-set groups, kept between calls
    if join_applies(t) and index.score != "containment":
        # Each pair of distinct groups verified once, on the index's prepared corpus (GroupJoin).
        g_a, g_b = group_pairs(index.join_corpus, sets.id_bound, t, index.score, index.max_len, backend=index.backend,
                               threads=index.threads)
    else:  # T == 0 (a scan) or containment (ordered pairs): the self-join of one set per group
        reps = np.sort(js.group_rep)
        pairs = kernel_self_join(index.backend, sets.take(reps), ids[reps], t, index.score, index.max_len, False, None,
                                 threads=index.threads, vocab_size=index.vocab_size)
        g_a = np.repeat(js.group_of[reps], pairs.counts)
        g_b = js.group_of[np.searchsorted(ids, pairs.doc_ids)]
    self_pass = self_passing(t, index.score, index.max_len, js.group_len)
    return group_tables(*group_components(js, ids, self_pass, g_a, g_b))
