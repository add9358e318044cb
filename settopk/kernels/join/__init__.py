"""The exact threshold join on real data: frequency order, prefix, length and positional filters,
early-exit verification, identical sets grouped.

Entry points, one contract on every backend (results identical to the scan's,
:meth:`settopk.kernels.NumpyShardIndex.threshold_search`):

* :func:`self_join`: every pair of a corpus whose score reaches ``T``, under the self-join rule
  (:func:`settopk.kernels.self_join_keep`);
* :func:`threshold_join`: every (query, doc) pair whose score reaches ``T`` (an R-S join);
* :func:`prepare_docs` then ``.probe(queries)``: the same, the doc side prepared once and
  probed batch after batch (what a shard index holds);
* :func:`group_pairs`: the passing pairs of distinct groups of identical sets of a prepared corpus,
  each verified once and none expanded to its members' pairs; with the groups that pass with
  themselves (:func:`self_passing`), they give the components of every passing pair
  (:func:`settopk.shards.components.group_components`: ``settopk.dedup`` and ``--dedup``);
  :func:`corpus_group_pairs` prepares a corpus for it and returns its groups too (a shard's own
  groups in ``--dedup``).

Modules: :mod:`~settopk.kernels.join.prepare` (frequency order, identical-set groups),
:mod:`~settopk.kernels.join.prefixes` (the filters per length), :mod:`~settopk.kernels.join.host_join`
and :mod:`~settopk.kernels.join.numba_join` (the ``cpu`` backend, Numba), :mod:`~settopk.kernels.join.arrays`,
:mod:`~settopk.kernels.join.array_verify` and :mod:`~settopk.kernels.join.array_emit` (``numpy`` and ``cupy``), :mod:`~settopk.kernels.join.kept` (a
shard's kept self-join on those two). Where ``T == 0`` every
pair passes and no prefix filter applies (:func:`join_applies`): callers scan instead.

Sources: Bayardo, Ma, Srikant, "Scaling up all pairs similarity search", WWW 2007 (AllPairs);
Xiao, Wang, Lin, Yu, "Efficient similarity joins for near duplicate detection", WWW 2008 (PPJoin);
Bouros, Ge, Mamoulis, "Spatio-textual similarity joins", PVLDB 2012 (GroupJoin); Mann, Augsten,
Bouros, "An Empirical Evaluation of Set Similarity Join Techniques", PVLDB 2016.
"""

from __future__ import annotations

from .prefixes import JoinTooLarge, join_applies, self_passing

__all__ = ["JoinTooLarge", "corpus_group_pairs", "group_pairs", "host_groups", "join_applies", "prepare_corpus",
           "prepare_docs", "self_join", "self_passing", "threshold_join"]

_BACKENDS = ("cpu", "numpy", "cupy")


def prepare_docs(docs, doc_ids, threshold, score: str, max_len: int, *, backend: str = "cpu", threads: int | None = None):
    """The doc side of an R-S join, prepared once for ``threshold`` and ``score``.

    Parameters
    ----------
    docs : settopk.kernels.SetBatch
        ``n_docs`` sets (host memory).
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing doc ids.
    threshold : str, float or fractions.Fraction
        ``T > 0`` (:func:`settopk.kernels.parse_threshold`).
    score : str
        One of :data:`settopk.kernels.SCORES`.
    max_len : int
        Bound on set sizes (queries of any length up to it are served).
    backend : {"cpu", "numpy", "cupy"}
    threads : int, optional
        ``cpu``: threads of a probe (default: this process's CPUs).

    Returns
    -------
    object with ``probe(queries, k=None, min_doc_len=None) -> ThresholdPairs``

    Raises
    ------
    ValueError
        If ``T == 0``, the threshold or score is invalid, or the backend unknown.
    """
    if backend == "cpu":
        from .host_join import DocSide

        return DocSide(docs, doc_ids, threshold, score, max_len, threads)
    if backend in ("numpy", "cupy"):
        from .arrays import prepare_docs as array_prepare

        return array_prepare(docs, doc_ids, threshold, score, max_len, backend=backend)
    raise ValueError(f"backend must be one of {_BACKENDS}, found {backend!r}")


def prepare_corpus(sets, *, backend: str = "cpu"):
    """A corpus prepared for any number of self-joins (whatever their threshold and score): its tokens
    in its own frequency order, rarest first, and its identical sets grouped (host memory; on the
    ``cupy`` backend its group sets are also copied to the current device, once).

    Parameters
    ----------
    sets : settopk.kernels.SetBatch
        ``n_docs`` sets.
    backend : {"cpu", "numpy", "cupy"}
        The backend of the self-joins it serves.

    Returns
    -------
    settopk.kernels.join.prepare.JoinSets or settopk.kernels.join.arrays.ArrayCorpus
        For :func:`self_join`'s ``prepared`` on that backend: ``JoinSets`` for ``cpu`` and ``numpy``,
        an ``ArrayCorpus`` (the ``JoinSets`` and their device copy) for ``cupy``.

    Raises
    ------
    ValueError
        If the backend is unknown.
    """
    from .prepare import frequency_order, prepare_sets

    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, found {backend!r}")
    js = prepare_sets(sets, frequency_order(sets.tokens, sets.id_bound))
    if backend != "cupy":
        return js
    from .arrays import ArrayCorpus

    return ArrayCorpus(js, backend)


def host_groups(prepared):
    """The :class:`~settopk.kernels.join.prepare.JoinSets` (host memory) of what
    :func:`prepare_corpus` returned on any backend."""
    return getattr(prepared, "sets", prepared)


def group_pairs(prepared, id_bound: int, threshold, score: str, max_len: int, *, backend: str = "cpu",
                threads: int | None = None, max_pairs: int | None = None):
    """The passing pairs of distinct groups of identical sets of a corpus (GroupJoin's group pairs):
    each unordered pair of groups once, verified once, never expanded to its members' pairs. With
    the groups themselves (:func:`host_groups`) they are every passing pair of the corpus: two
    members of one group pass together exactly when a set passes with itself.

    Parameters
    ----------
    prepared : JoinSets or ArrayCorpus
        ``prepare_corpus(sets, backend=backend)``.
    id_bound : int
        ``sets.id_bound`` of the corpus.
    threshold, score, max_len, backend, threads
        As :func:`prepare_docs`; ``T > 0`` (:func:`join_applies`) and a symmetric score (not
        ``containment``).
    max_pairs : int, optional
        Refuse more pairs than this, before they are all held (what a shard may hold); None: no bound.

    Returns
    -------
    (numpy.ndarray of int64, numpy.ndarray of int64), each of shape (n_pairs,)
        The two groups of each pair: indexes into ``host_groups(prepared)``'s groups (host memory).

    Raises
    ------
    ValueError
        For containment, ``T == 0``, a bad threshold or score, or an unknown backend.
    JoinTooLarge
        Past ``max_pairs`` (:class:`settopk.kernels.join.prefixes.JoinTooLarge`).
    """
    if backend == "cpu":
        from .host_join import group_pairs as host_group_pairs

        return host_group_pairs(host_groups(prepared), id_bound, threshold, score, max_len, threads, max_pairs)
    if backend in ("numpy", "cupy"):
        from .arrays import group_pairs as array_group_pairs

        return array_group_pairs(prepared, threshold, score, max_len, backend=backend, max_pairs=max_pairs)
    raise ValueError(f"backend must be one of {_BACKENDS}, found {backend!r}")


def corpus_group_pairs(sets, threshold, score: str, max_len: int, *, backend: str = "cpu", threads: int | None = None,
                       max_pairs: int | None = None):
    """The identical-set groups of a corpus and the passing pairs of distinct groups: the corpus
    prepared for this call (:func:`prepare_corpus`), then :func:`group_pairs`.

    Parameters
    ----------
    sets : settopk.kernels.SetBatch
        ``n_docs`` sets (host memory).
    threshold, score, max_len, backend, threads, max_pairs
        As :func:`group_pairs`.

    Returns
    -------
    (JoinSets, numpy.ndarray of int64, numpy.ndarray of int64)
        The groups (:func:`host_groups`, host memory) and the two groups of each passing pair,
        shape (n_pairs,) each.

    Raises
    ------
    ValueError, JoinTooLarge
        As :func:`group_pairs`.
    """
    prepared = prepare_corpus(sets, backend=backend)
    g_a, g_b = group_pairs(prepared, sets.id_bound, threshold, score, max_len, backend=backend, threads=threads,
                           max_pairs=max_pairs)
    return host_groups(prepared), g_a, g_b


def self_join(sets, doc_ids, threshold, score: str, max_len: int, *, backend: str = "cpu", include_self: bool = False,
              k: int | None = None, threads: int | None = None, prepared=None, max_pairs: int | None = None):
    """Every pair of a corpus whose score reaches ``threshold``, exactly, under the self-join rule.

    Parameters
    ----------
    sets : settopk.kernels.SetBatch
        ``n_docs`` sets (host memory); each is also a query.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing doc ids.
    threshold, score, max_len, backend, threads
        As :func:`prepare_docs`.
    include_self : bool
        Also each doc's pair with itself (where its own score reaches ``T``).
    k : int, optional
        Keep each query's ``k`` best pairs; None keeps all.
    prepared : JoinSets or ArrayCorpus, optional
        ``prepare_corpus(sets, backend=backend)``, kept by the caller between self-joins of one
        corpus (every backend but containment's R-S probe on ``numpy`` and ``cupy``, which prepares
        its own).
    max_pairs : int, optional
        Refuse a result of more pairs than this, counted before any pair is written (on ``numpy``
        and ``cupy`` with ``k``, the bound ``n_docs * k`` stands for the count); None: no bound.
        Containment's self-join is not bounded.

    Returns
    -------
    settopk.kernels.ThresholdPairs
        ``n_queries = n_docs`` (query ``i`` is doc ``i``). Symmetric scores: each unordered pair
        once, under its shorter doc, or the lower id of two of one length; containment: every
        ordered pair but a doc with itself. Each query's pairs best first (score descending, then
        doc id ascending).

    Raises
    ------
    ValueError
        As :func:`prepare_docs`, or ``k < 1``.
    JoinTooLarge
        Past ``max_pairs``.
    """
    if backend == "cpu":
        from .host_join import self_join as host_self_join

        return host_self_join(sets, doc_ids, threshold, score, max_len, include_self=include_self, k=k, threads=threads,
                              prepared=prepared, max_pairs=max_pairs)
    if backend in ("numpy", "cupy"):
        from .arrays import self_join as array_self_join

        return array_self_join(sets, doc_ids, threshold, score, max_len, backend=backend, include_self=include_self, k=k,
                               prepared=prepared, max_pairs=max_pairs)
    raise ValueError(f"backend must be one of {_BACKENDS}, found {backend!r}")


def threshold_join(docs, doc_ids, queries, threshold, score: str, *, max_len: int, backend: str = "cpu", k: int | None = None,
                   min_doc_len=None, threads: int | None = None):
    """Every (query, doc) pair whose score reaches ``threshold``, exactly, best first (an R-S join).

    The contract of :meth:`settopk.kernels.NumpyShardIndex.threshold_search`; the doc side is
    prepared for this one call (:func:`prepare_docs` keeps it for batch after batch).

    Parameters
    ----------
    docs : settopk.kernels.SetBatch
        ``n_docs`` sets (host memory).
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing doc ids.
    queries : settopk.kernels.SetBatch
        ``n_queries`` sets in the docs' id space (an id no doc holds matches nothing but counts in
        ``|q|``); identical queries are probed once.
    threshold, score, max_len, backend, threads
        As :func:`prepare_docs`.
    k : int, optional
        Keep each query's ``k`` best pairs; None keeps all.
    min_doc_len : array_like of int, shape (n_queries,), optional
        Per query, only docs at least this long.

    Returns
    -------
    settopk.kernels.ThresholdPairs
        CSR by query: each query's docs best first (score descending by the exact integer key,
        then doc id ascending), with overlap and doc length.

    Raises
    ------
    ValueError
        As :func:`prepare_docs`, ``k < 1``, or ``min_doc_len`` not of shape (n_queries,).
    """
    side = prepare_docs(docs, doc_ids, threshold, score, max_len, backend=backend, threads=threads)
    return side.probe(queries, k=k, min_doc_len=min_doc_len)
