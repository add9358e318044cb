"""Reading the corpus with Ray tasks: one task per piece, the docs left in the object store.

The driver gets each piece's :class:`settopk.shards.inputs.PieceSummary` (a length histogram,
id range and counts); the docs stay in the object store until the shard actors
take their length ranges (:class:`settopk.shards.searcher.ShardSearcher`). The driver fetches
doc ids only when the pieces' id ranges overlap (a corpus not written in id
order), to find repeated ids.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from settopk.shards.inputs.vocabulary import vocab_of
from settopk.shards.inputs import CorpusPiece, InputError, PieceSummary, SetLimits, check_doc_ids, group_pieces, pieces_ordered, plan_pieces, read_piece

__all__ = ["CorpusRead", "read_corpus_pieces", "pieces_for_cluster", "unwrap_input_error"]

log = logging.getLogger("settopk")
_MIN_PIECE_ROWS = 1 << 16  # below this, task overhead outweighs the parallelism
# One wave of reader tasks: a piece per CPU keeps every CPU busy, and no task waits for a
# second wave behind the first's slowest.
_PIECES_PER_CPU = 1


def _read_piece_parts(piece: CorpusPiece, limits: SetLimits, on_invalid: str):
    """A reader task's four results: the summary (for the driver), the ids (fetched only to find
    repeats across pieces), the docs (for the shard actors) and the piece's distinct tokens
    (merged by Ray tasks, :mod:`settopk.jobs.vocabulary`)."""
    summary, corpus = read_piece(piece, limits, on_invalid)
    ids = (corpus.doc_ids, corpus.source_rows, corpus.docs.lengths)
    return summary, ids, corpus, vocab_of(corpus.docs.tokens, limits.vocab_size)


@dataclass
class CorpusRead:
    """The corpus as the readers left it.

    Attributes
    ----------
    pieces : list of CorpusPiece
    summaries : list of PieceSummary
    corpus_refs : list of ray.ObjectRef
        Each piece's docs (a :class:`settopk.shards.inputs.Corpus`) in the object store; keep them
        referenced while shard actors may restart.
    drops : dict
        Doc ids repeated across pieces to leave out, per piece index (quarantine).
    ordered : bool
        The pieces' doc id ranges increase in read order.
    length_counts : numpy.ndarray of int64, shape (max_len + 1,)
        Docs of each length, after drops.
    n_docs, n_with_repeats : int
    rejected : list of Rejected
        Rows and lines set aside, in read order.
    vocab_refs : list of ray.ObjectRef
        Each piece's distinct tokens (:class:`settopk.shards.inputs.vocabulary.Vocab`).
    wide : bool
        Some piece holds tokens other than small ids: its docs are token values until
        :func:`settopk.jobs.vocabulary.settle_tokens` maps them (the shards wait for that).
    """

    pieces: list
    summaries: list
    corpus_refs: list
    drops: dict
    ordered: bool
    length_counts: np.ndarray
    n_docs: int
    n_with_repeats: int
    rejected: list = field(default_factory=list)
    vocab_refs: list = field(default_factory=list)
    wide: bool = False


def unwrap_input_error(exc: BaseException) -> BaseException:
    """The :class:`settopk.shards.inputs.InputError` a Ray task raised, if that is what ``exc`` wraps; else ``exc``."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, InputError) else exc


def pieces_for_cluster(path, n_cpus: float) -> tuple[list[CorpusPiece], str, tuple[str, ...]]:
    """:func:`settopk.shards.inputs.plan_pieces` with pieces sized for about one per CPU of the cluster (one wave of readers).

    A text corpus is one piece; a Parquet piece holds whole row groups.
    """
    pieces, fmt, files = plan_pieces(path, 1)
    total_rows = sum(max(p.n_rows, 0) for p in pieces)
    target = max(_MIN_PIECE_ROWS, -(-total_rows // max(1, int(_PIECES_PER_CPU * n_cpus))))
    return group_pieces(pieces, target), fmt, files


def _reader_placements(n_pieces: int, group, reader_cpus: float, cluster_cpus: float) -> list:
    """``(scheduling strategy or None, num_cpus)`` per reader.

    The CPUs of the bundles of ``group`` (idle until the shard actors start) and the CPUs
    outside them are cut into reader slots, and the pieces are dealt over the slots in turn,
    so no reader ever waits for CPUs that the bundles hold: a bundle with fewer CPUs than
    ``reader_cpus`` gets one reader that asks for what the bundle has.
    """
    if group is None or reader_cpus <= 0:
        return [(None, reader_cpus)] * n_pieces
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    slots, reserved = [], 0.0
    for index, bundle in enumerate(group.bundle_specs):
        cpus = float(bundle.get("CPU", 0))
        reserved += cpus
        if cpus > 0:
            where = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)
            slots += [(where, min(cpus, reader_cpus))] * max(1, int(cpus / reader_cpus + 1e-9))
    slots += [(None, reader_cpus)] * int((cluster_cpus - reserved) / reader_cpus + 1e-9)
    return [slots[i % len(slots)] for i in range(n_pieces)] if slots else [(None, reader_cpus)] * n_pieces


def _drop_error(refs) -> None:
    """Take a failed reader's other results, so that Ray does not log its error again as
    unhandled when they are freed: the driver reports it once."""
    import ray

    for ref in refs:
        try:
            ray.get(ref)
        except ray.exceptions.RayTaskError:
            pass


def read_corpus_pieces(
    pieces: list[CorpusPiece], limits: SetLimits, on_invalid: str, on_done=None, reader_cpus: float = 1.0, group=None
) -> CorpusRead:
    """Read every piece in a Ray task (``reader_cpus`` CPUs each) and check doc ids across pieces.

    Parameters
    ----------
    pieces : list of CorpusPiece
        In read order.
    limits : SetLimits
    on_invalid : {"error", "quarantine"}
    on_done : callable, optional
        Called with no argument as each piece is read (progress bars).
    reader_cpus : float
        Ray CPUs each reader task reserves; 0 lets readers run beside actors that hold
        every CPU (the benchmark reads again while its shard actors are up).
    group : ray.util.placement_group.PlacementGroup, optional
        The shard actors' reserved bundles (:func:`settopk.jobs.shard_pool.reserve_shards`): readers
        run in their CPUs and in the CPUs outside them, so the read uses the whole cluster
        and the actors then start in bundles that are already placed.

    Raises
    ------
    InputError
        The first bad row or line in read order (a reader's error, re-raised as is), or a
        doc id repeated across pieces.
    """
    import ray

    reader = ray.remote(num_returns=4)(_read_piece_parts)
    cluster_cpus = float(ray.cluster_resources().get("CPU", 0)) if group is not None else 0.0
    refs = [
        reader.options(num_cpus=cpus, scheduling_strategy=where).remote(piece, limits, on_invalid)
        for piece, (where, cpus) in zip(pieces, _reader_placements(len(pieces), group, reader_cpus, cluster_cpus))
    ]
    summary_refs = [r[0] for r in refs]
    summaries: list[PieceSummary | None] = [None] * len(pieces)
    errors: dict[int, BaseException] = {}
    pending = {ref: i for i, ref in enumerate(summary_refs)}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        i = pending.pop(done[0])
        try:
            summaries[i] = ray.get(done[0])
        except ray.exceptions.RayTaskError as exc:
            errors[i] = unwrap_input_error(exc)
            if not isinstance(errors[i], InputError):
                raise
            # Pieces before this one may hold an earlier bad row: wait for those only.
            pending = {ref: j for ref, j in pending.items() if j < min(errors)}
        if on_done is not None:
            on_done()
    if errors:
        for index in errors:
            _drop_error(refs[index][1:])
        raise errors[min(errors)]  # the first bad row in read order, as a single-pass reader reports it

    def fetch_ids(index: int):
        ids, rows, _ = ray.get(refs[index][1])
        return ids, rows

    drops, repeat_rejects = check_doc_ids(pieces, summaries, fetch_ids, on_invalid)
    length_counts = np.sum([s.length_counts for s in summaries], axis=0).astype(np.int64)
    n_docs = sum(s.n_docs for s in summaries)
    for index, dropped in drops.items():
        ids, _, lengths = ray.get(refs[index][1])
        gone = np.isin(ids, dropped)
        np.subtract.at(length_counts, lengths[gone], 1)
        n_docs -= int(gone.sum())
    rejected = [r for s in summaries for r in s.rejected] + list(repeat_rejects)
    return CorpusRead(
        pieces=pieces,
        summaries=summaries,
        corpus_refs=[r[2] for r in refs],
        drops=drops,
        ordered=pieces_ordered(summaries),
        length_counts=length_counts,
        n_docs=n_docs,
        n_with_repeats=sum(s.n_with_repeats for s in summaries),
        rejected=rejected,
        vocab_refs=[r[3] for r in refs],
        wide=any(s.token_type != "small" for s in summaries),
    )
