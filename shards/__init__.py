"""Sharding: length-bucket planning, the shard searcher (a Ray actor), inputs, and the exact merge."""

from .inputs import Corpus, InputError, Queries, Rejected, SetLimits, corpus_format, fingerprint, read_corpus, read_queries
from .merge import merge_topk
from .plan import ShardSpec, plan_shards
from .searcher import ShardActor, ShardSearcher

__all__ = [
    "Corpus",
    "InputError",
    "Queries",
    "SetLimits",
    "ShardActor",
    "ShardSearcher",
    "ShardSpec",
    "Rejected",
    "corpus_format",
    "fingerprint",
    "merge_topk",
    "plan_shards",
    "read_corpus",
    "read_queries",
]
