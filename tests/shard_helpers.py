"""What the shard tests share: the job's two-round search through ShardSearchers, in one process."""

from __future__ import annotations

from settopk.kernels import DEFAULT_SCORE
from settopk.shards import merge_topk, scatter_rounds, split_rounds


def search_two_rounds(searchers, plan, queries, k: int, max_len: int, score: str = DEFAULT_SCORE):
    """Search ``queries`` (SetBatch) as settopk.jobs.search does: each query's home shards first, then the
    other shards with floors from every first-round result, only shards with rows; then scatter and
    merge. Returns the merged TopK and the first round's rows and results (lists, one per searched shard)."""
    first, second = split_rounds(plan, queries.lengths)
    home_rows, home_results, parts = [], [], [[] for _ in plan]
    for s, rows in enumerate(first):
        if len(rows):
            result = searchers[s].search(queries, k, rows)
            home_rows.append(rows)
            home_results.append(result)
            parts[s].append((rows, result))
    for s, rows in enumerate(second):
        if len(rows):
            parts[s].append((rows, searchers[s].search(queries, k, rows, home_rows, *home_results)))
    merged = merge_topk([scatter_rounds(queries.n_sets, k, p) for p in parts if p], queries.lengths, k, max_len, score)
    return merged, home_rows, home_results
