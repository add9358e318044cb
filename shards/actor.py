"""The shard searcher as a Ray actor.

:class:`shards.searcher.ShardSearcher` holds a shard and searches it; this module wraps it
(or a subclass of it) as a Ray actor class, so that only the code that starts actors
imports Ray.

A shard actor restarts after a crash (``max_restarts``), and Ray then runs its constructor
again with the same arguments. Ray does not keep object references passed to a constructor
alive for that (ray-project/ray#53727), so the driver passes no reference at all: it puts the
corpus pieces' references in a :class:`PieceHolder` actor and hands each shard actor the
holder's name (:func:`hold_pieces`); every start, the first and any restart, looks the
references up there.
"""

from __future__ import annotations

import uuid

import ray

from .searcher import ShardSearcher

__all__ = ["PieceHolder", "ShardActor", "actor_class", "hold_pieces"]


@ray.remote(num_cpus=0, max_restarts=0)
class PieceHolder:
    """Keeps the corpus pieces' references for the shard actors (see the module's docstring)."""

    def __init__(self, held: list):
        self._refs = list(held[0])  # the references came inside a list, so Ray did not fetch their values

    def refs(self) -> list:
        """``[references]``: nested in a list, so the caller receives the references themselves."""
        return [self._refs]


def hold_pieces(refs) -> tuple[str, object]:
    """Put the pieces' references ``refs`` in a new named :class:`PieceHolder`.

    Returns
    -------
    (str, ActorHandle)
        The holder's name (what a shard actor's constructor takes as ``pieces``) and its
        handle; the holder lives while the handle does (kill it with the shard actors).
    """
    name = f"settopk-pieces-{uuid.uuid4().hex}"
    return name, PieceHolder.options(name=name).remote([list(refs)])


def _pieces(pieces):
    """The pieces a shard takes: looked up in the named holder, or as given (a list)."""
    if isinstance(pieces, str):
        return ray.get(ray.get_actor(pieces).refs.remote())[0]
    return pieces


def _by_name(searcher_cls: type):
    """``searcher_cls`` whose constructor also takes a :class:`PieceHolder`'s name as ``pieces``."""

    def __init__(self, spec, pieces, *args, **kwargs):
        searcher_cls.__init__(self, spec, _pieces(pieces), *args, **kwargs)

    return type(searcher_cls.__name__, (searcher_cls,), {"__init__": __init__, "__module__": searcher_cls.__module__,
                                                          "__doc__": searcher_cls.__doc__})


ShardActor = ray.remote(_by_name(ShardSearcher))
"""``ShardSearcher`` as a Ray actor class (``ShardActor.options(...).remote(spec, pieces, limits, backend, ...)``,
``pieces`` a :class:`PieceHolder`'s name, or the pieces or their references)."""


def actor_class(searcher_cls: type = ShardSearcher):
    """The Ray actor class around ``searcher_cls``.

    Parameters
    ----------
    searcher_cls : type
        :class:`ShardSearcher` or a subclass of it (the tests pass one that fails on purpose).

    Returns
    -------
    ray.actor.ActorClass
        :data:`ShardActor` for ``ShardSearcher`` itself. Its constructor takes what
        ``searcher_cls`` takes, where ``pieces`` may also be a :class:`PieceHolder`'s name.

    Raises
    ------
    TypeError
        If ``searcher_cls`` is not a subclass of :class:`ShardSearcher`.
    """
    if searcher_cls is ShardSearcher:
        return ShardActor
    if not (isinstance(searcher_cls, type) and issubclass(searcher_cls, ShardSearcher)):
        raise TypeError(f"searcher_cls must be ShardSearcher or a subclass of it, found {searcher_cls!r}")
    return ray.remote(_by_name(searcher_cls))
