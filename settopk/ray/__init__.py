"""settopk on Ray Data: exact top-k search of a query dataset, as a dataset of result rows.

:func:`search` is the whole pipeline: ``ray.data.read_parquet(...)`` -> ``settopk.ray.search(ds, docs)``
-> ``write_parquet(...)`` gives the rows ``settopk score`` writes for the same inputs. For a pipeline
of your own, :func:`load_corpus` reads and plans the corpus once (a :class:`CorpusHandle`),
:class:`ShardSearch` is the callable class a ``map_batches`` pool runs (one stage per shard), and
:func:`result_rows` turns the last stage's output into result rows.

Importing this package imports Ray (``import settopk`` does not).
"""

from settopk.shards.results import RESULT_SCHEMA

from .corpus import CorpusHandle, load_corpus
from .search import search
from .stage import CARRIED_COLUMNS, PER_QUERY_SCHEMA, ROWS, ShardSearch, result_rows

__all__ = ["CARRIED_COLUMNS", "CorpusHandle", "PER_QUERY_SCHEMA", "RESULT_SCHEMA", "ROWS", "ShardSearch", "load_corpus",
           "result_rows", "search"]
