"""The shard searcher as a Ray actor.

:class:`shards.searcher.ShardSearcher` holds a shard and searches it; this module wraps it
(or a subclass of it) as a Ray actor class, so that only the code that starts actors
imports Ray.
"""

from __future__ import annotations

import ray

from .searcher import ShardSearcher

__all__ = ["ShardActor", "actor_class"]

ShardActor = ray.remote(ShardSearcher)
"""``ShardSearcher`` as a Ray actor class (``ShardActor.options(...).remote(spec, pieces, limits, backend, ...)``)."""


def actor_class(searcher_cls: type = ShardSearcher):
    """The Ray actor class around ``searcher_cls``.

    Parameters
    ----------
    searcher_cls : type
        :class:`ShardSearcher` or a subclass of it (the tests pass one that fails on purpose).

    Returns
    -------
    ray.actor.ActorClass
        :data:`ShardActor` for ``ShardSearcher`` itself.

    Raises
    ------
    TypeError
        If ``searcher_cls`` is not a subclass of :class:`ShardSearcher`.
    """
    if searcher_cls is ShardSearcher:
        return ShardActor
    if not (isinstance(searcher_cls, type) and issubclass(searcher_cls, ShardSearcher)):
        raise TypeError(f"searcher_cls must be ShardSearcher or a subclass of it, found {searcher_cls!r}")
    return ray.remote(searcher_cls)
