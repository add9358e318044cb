"""The shard stage: length-bucket planning, the threshold exchange between shards, and the exact merge.

``import settopk.shards`` does not import Ray. The input-reading stage is the subpackage
:mod:`settopk.shards.inputs` (corpus pieces, query streams, readers); the shard searcher is
:class:`ShardSearcher`, and its Ray actor is in :mod:`settopk.shards.actor` (which imports Ray).
"""

from .merge import drop_own_docs, merge_topk
from .plan import ShardSpec, plan_shards, plan_shards_from_counts
from .searcher import ShardSearcher
from .thresholds import floors_from, home_shards, scatter_rounds, split_rounds

__all__ = [
    "ShardSearcher",
    "ShardSpec",
    "drop_own_docs",
    "floors_from",
    "home_shards",
    "merge_topk",
    "plan_shards",
    "plan_shards_from_counts",
    "scatter_rounds",
    "split_rounds",
]
