"""The run's token map: the readers' distinct tokens merged by Ray tasks, the docs mapped to dense ids.

Each reader task leaves its piece's distinct tokens in the object store
(:class:`settopk.shards.inputs.vocabulary.Vocab`: a bitmap of small ids, and the wide values).
:func:`settle_tokens` merges them in a tree of Ray tasks; the last task intersects the docs'
tokens with the queries' (counted by the queries' validating pass on the driver) and hands
the driver only the shared tokens, at most as many as the queries hold. The driver never
holds the docs' vocabulary. Where some piece holds wide tokens, one Ray task per piece maps
its docs to dense ids (:meth:`settopk.shards.inputs.vocabulary.TokenMap.docs`) before the
shard actors take them; the query chunks are mapped as they are read
(:meth:`settopk.shards.inputs.QueryStream.chunks`).

The mapping is a pure function of the inputs' contents and ``vocab_size``, both in the
run's fingerprints and resume key; and any exact mapping gives the same results, so a
resumed run's chunks agree whatever mapping wrote them.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from settopk.shards.inputs import SetLimits
from settopk.shards.inputs.vocabulary import TokenMap, Vocab, build_token_map, check_types, merge_vocabs

__all__ = ["settle_tokens", "token_types", "tokens_for_run"]

log = logging.getLogger("settopk")
_FAN_IN = 16  # piece vocabularies merged per task


def _merge(to, *vocabs):
    return merge_vocabs(vocabs, to)


def _finish(docs, queries, vocab_size: int, to):
    return build_token_map(docs, queries, vocab_size, to)


def _map_piece(corpus, token_map: TokenMap):
    return dataclasses.replace(corpus, docs=token_map.docs(corpus.docs))


def token_types(pieces, summaries, query_types: dict) -> dict:
    """Every token type of the run, each with a file holding it (for
    :func:`settopk.shards.inputs.vocabulary.check_types`): the pieces' from their summaries, then the queries'."""
    types: dict[str, str] = {}
    by_index = {p.index: p for p in pieces}
    for s in summaries:
        if s.n_tokens:
            types.setdefault(s.token_type, by_index[s.index].path)
        if s.has_negative:
            types.setdefault("negative", by_index[s.index].path)
    for name, file in query_types.items():
        types.setdefault(name, file)
    return types


def settle_tokens(queries, corpus, limits: SetLimits, longest_doc: int, cpus: float = 0.0, map_docs: bool = True) -> TokenMap:
    """Make the run's :class:`TokenMap`, check it fits, and map the docs where they are wide.

    Parameters
    ----------
    queries : settopk.shards.inputs.QueryStream
        Validated; its ``token_map`` is set here.
    corpus : settopk.shards.reading.CorpusRead
        As the readers left it; where ``corpus.wide``, its ``corpus_refs`` are replaced by the
        mapped pieces.
    limits : SetLimits
    longest_doc : int
        The most distinct tokens in one doc.
    cpus : float
        Ray CPUs each merge or mapping task reserves. 0 by default, as the job's merge tasks:
        the shard actors have started by now and may hold every CPU of the cluster
        (``cpus_per_shard: auto``), and a task that waits for a CPU would wait forever.
    map_docs : bool
        Map wide docs (False for ``--dry-run``: nothing is searched).

    Returns
    -------
    TokenMap

    Raises
    ------
    settopk.shards.inputs.InputError
        For tokens of kinds that do not mix (integers with strings, negative ids with ids of
        ``2**63`` and more), naming a file of each.
    settopk.shards.inputs.vocabulary.VocabularyError
        Where the shared tokens do not fit ``vocab_size`` dense ids (with room for the
        longest doc's and query's tokens found on one side only).
    """
    import ray

    to = check_types(token_types(corpus.pieces, corpus.summaries, queries.token_types))
    merge = ray.remote(num_cpus=cpus)(_merge)
    level = list(corpus.vocab_refs)
    while len(level) > 1:
        level = [merge.remote(to, *level[i : i + _FAN_IN]) for i in range(0, len(level), _FAN_IN)]
    docs = level[0] if level else ray.put(Vocab(np.zeros(limits.vocab_size, dtype=bool), None))
    token_map = ray.get(ray.remote(num_cpus=cpus)(_finish).remote(docs, ray.put(queries.vocab), limits.vocab_size, to))
    token_map.check_room(longest_doc, queries.longest)
    log.info("tokens (%s): %d distinct in the docs, %d in the queries, %d in both; dense ids: %s",
             token_map.kind, token_map.n_doc_tokens, token_map.n_query_tokens, token_map.n_shared,
             "as read" if token_map.identity else "shared tokens first")
    if corpus.wide and map_docs:
        shared_map = ray.put(token_map)
        mapper = ray.remote(num_cpus=cpus)(_map_piece)
        corpus.corpus_refs = [mapper.remote(ref, shared_map) for ref in corpus.corpus_refs]
    queries.token_map = token_map
    return token_map


def longest(length_counts: np.ndarray) -> int:
    """The largest length with a count (0 for none)."""
    nonzero = np.flatnonzero(length_counts)
    return int(nonzero[-1]) if len(nonzero) else 0


def tokens_for_run(job, valid, corpus, plan, pool) -> dict:
    """:func:`settle_tokens` for the scoring job, then the shards supplied where the docs were
    mapped (the job supplies them right after the plan otherwise). Returns the manifest's
    ``inputs.tokens`` section (:meth:`TokenMap.summary`)."""
    token_map = settle_tokens(valid.queries, corpus, job.limits, longest(corpus.length_counts), map_docs=not job.args.dry_run)
    if corpus.wide and not job.args.dry_run:
        from .shard_pool import supply_shards

        supply_shards(pool, plan, corpus, job.cfg.replicas)
    return token_map.summary()
