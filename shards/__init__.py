"""Sharding: length-bucket planning, the shard searcher (a Ray actor), inputs, and the exact merge."""

from .inputs import Corpus, InputError, Queries, SetLimits, corpus_format, read_corpus, read_queries
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
    "corpus_format",
    "merge_topk",
    "plan_shards",
    "read_corpus",
    "read_queries",
]
