"""The shard searcher as a Ray actor.

:class:`settopk.shards.searcher.ShardSearcher` holds a shard and searches it; this module wraps it
(or a subclass of it) as a Ray actor class, so that only the code that starts actors
imports Ray.

A shard actor may start before the corpus is read: it loads its backend's kernels while it
waits for its inputs (its shard's spec and the corpus pieces), which the driver supplies once
the readers are done and the shards are planned. The inputs live in a :class:`ShardInputs`
actor, and each shard actor gets that actor's name and its own index. A shard actor restarts
after a crash (``max_restarts``), and Ray then runs its constructor again with the same
arguments; Ray does not keep object references passed to a constructor alive for that
(ray-project/ray#53727), which is a second reason the references travel through the named
actor: every start, the first and any restart, takes them there.
"""

from __future__ import annotations

import asyncio
import uuid

import ray

from .searcher import ShardSearcher

__all__ = ["ShardInputs", "actor_class", "open_inputs", "supply_inputs"]


@ray.remote(num_cpus=0, max_restarts=0)
class ShardInputs:
    """What each shard actor loads, supplied once by the driver (see the module's docstring).

    An async actor: the shard actors' :meth:`take` calls wait, all at once, until
    :meth:`supply` has run.
    """

    def __init__(self):
        self._inputs = None
        self._ready = None

    def _event(self) -> asyncio.Event:
        if self._ready is None:  # made in the actor's event loop, where take() waits on it
            self._ready = asyncio.Event()
        return self._ready

    async def supply(self, held: list) -> None:
        """``held``: ``[(specs, refs, drops, ordered)]``, nested in a list so that Ray passes the
        references themselves; ``specs[i]`` is the shard of actor ``i``."""
        self._inputs = held[0]
        self._event().set()

    async def take(self, index: int) -> list:
        """``[spec, references, drops, ordered]`` of actor ``index``, once supplied; the references
        come inside the list, so the caller receives them unfetched."""
        await self._event().wait()
        specs, refs, drops, ordered = self._inputs
        return [specs[index], list(refs), drops, ordered]


def open_inputs() -> tuple[str, object]:
    """Start a named, empty :class:`ShardInputs`.

    Returns
    -------
    (str, ActorHandle)
        Its name (what a shard actor's constructor takes) and its handle; it lives while the
        handle does (kill it with the shard actors).
    """
    name = f"settopk-inputs-{uuid.uuid4().hex}"
    return name, ShardInputs.options(name=name).remote()


def supply_inputs(inputs, specs: list, refs: list, drops: dict, ordered: bool) -> None:
    """Give the shard actors waiting on ``inputs`` (a :class:`ShardInputs` handle) what they load.

    Parameters
    ----------
    inputs : ActorHandle
    specs : list of ShardSpec
        The shard of each actor, by the index its constructor got.
    refs : list of ray.ObjectRef
        Every corpus piece's docs, in read order.
    drops : dict
        Doc ids to leave out per piece position.
    ordered : bool
        The pieces' doc id ranges increase in read order.
    """
    ray.get(inputs.supply.remote([(list(specs), list(refs), drops, ordered)]))


def _from_inputs(searcher_cls: type):
    """``searcher_cls`` as a class whose constructor takes a :class:`ShardInputs` name and an actor index."""

    def __init__(self, inputs_name: str, index: int, limits, backend: str, score: str, routing: str, threads: int):
        searcher_cls.start_warm_up(limits, backend, routing)  # beside the wait for the inputs
        spec, refs, drops, ordered = ray.get(ray.get_actor(inputs_name).take.remote(index))
        searcher_cls.__init__(self, spec, refs, limits, backend, drops=drops, ordered=ordered, score=score,
                              routing=routing, threads=threads)

    return type(searcher_cls.__name__, (searcher_cls,), {"__init__": __init__, "__module__": searcher_cls.__module__,
                                                          "__doc__": searcher_cls.__doc__})


_SHARD_ACTOR = ray.remote(_from_inputs(ShardSearcher))


def actor_class(searcher_cls: type = ShardSearcher):
    """The Ray actor class around ``searcher_cls``.

    Parameters
    ----------
    searcher_cls : type
        :class:`ShardSearcher` or a subclass of it (the tests pass one that fails on purpose).

    Returns
    -------
    ray.actor.ActorClass
        Its constructor takes ``(inputs_name, index, limits, backend, score, routing, threads)``:
        the name of a :class:`ShardInputs` (:func:`open_inputs`), the actor's index in the
        specs given to :func:`supply_inputs`, and the rest as ``searcher_cls`` takes them.
        It loads the backend's kernels while it waits for its inputs.

    Raises
    ------
    TypeError
        If ``searcher_cls`` is not a subclass of :class:`ShardSearcher`.
    """
    if searcher_cls is ShardSearcher:
        return _SHARD_ACTOR
    if not (isinstance(searcher_cls, type) and issubclass(searcher_cls, ShardSearcher)):
        raise TypeError(f"searcher_cls must be ShardSearcher or a subclass of it, found {searcher_cls!r}")
    return ray.remote(_from_inputs(searcher_cls))
