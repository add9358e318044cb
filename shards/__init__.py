"""Sharding: corpus pieces and reading, query streams, length-bucket planning, the shard searcher (its Ray actor: shards.actor),
threshold exchange, and the exact merge."""

from .ingest import CorpusPiece, PieceSummary, assemble_shard, check_doc_ids, group_pieces, pieces_ordered, plan_pieces, read_piece
from .inputs import Corpus, InputError, Queries, Rejected, SetLimits, corpus_format, fingerprint, read_corpus, read_queries
from .merge import drop_own_docs, merge_topk
from .plan import ShardSpec, plan_shards, plan_shards_from_counts
from .query_stream import DocQueryStream, QueryStream
from .searcher import ShardSearcher
from .thresholds import floors_from, home_shards, scatter_rounds, split_rounds

__all__ = [
    "Corpus",
    "CorpusPiece",
    "DocQueryStream",
    "InputError",
    "PieceSummary",
    "Queries",
    "QueryStream",
    "SetLimits",
    "ShardSearcher",
    "ShardSpec",
    "Rejected",
    "assemble_shard",
    "check_doc_ids",
    "corpus_format",
    "drop_own_docs",
    "fingerprint",
    "floors_from",
    "group_pieces",
    "home_shards",
    "merge_topk",
    "pieces_ordered",
    "plan_pieces",
    "plan_shards",
    "plan_shards_from_counts",
    "read_corpus",
    "read_piece",
    "read_queries",
    "scatter_rounds",
    "split_rounds",
]
