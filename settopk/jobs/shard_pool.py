"""Driver-side management of the shard actors: their placement group, starting and stopping them.

One placement group holds one bundle per actor (its GPUs and CPUs), so the shards are
reserved together or not at all, and a restarted actor comes back in its own bundle. The
job reserves the group before it reads the corpus, so a cluster that cannot hold the shards
fails before anything is read. The actors ask for none of their bundles' CPUs themselves
(the bundles hold them for the actors): the reader tasks run in them during the read
(:func:`settopk.shards.reading.read_corpus_pieces`), also when the actors have started already. An
actor starts (:func:`start_shards`), loads its kernels and waits; once the corpus is read and
planned, :func:`supply_shards` tells it its shard and it loads the shard's docs. The actors
are :class:`settopk.shards.ShardSearcher` (or a subclass) wrapped by :func:`settopk.shards.actor.actor_class`.
"""

from __future__ import annotations

import dataclasses

from settopk.shards.searcher import ShardSearcher
from settopk.shards.actor import actor_class, open_inputs, supply_inputs

__all__ = ["ShardPool", "reserve_shards", "start_shards", "stop_shards", "supply_shards"]

_GPU_CALLS_AT_ONCE = 2  # searches one GPU actor runs at once (threads; see start_shards)
_PLACEMENT_TIMEOUT_S = 120.0


def _shard_bundle(backend: str, cfg) -> dict:
    """The resources one shard actor reserves: ``cpus_per_shard`` CPUs and, for ``cupy``,
    ``gpus_per_shard`` GPUs (a token 0.001 CPU where both are 0: a bundle cannot be empty)."""
    gpus = cfg.gpus_per_shard if backend == "cupy" else 0
    bundle = {key: value for key, value in {"CPU": cfg.cpus_per_shard, "GPU": gpus}.items() if value}
    return bundle or {"CPU": 0.001}


def reserve_shards(n_actors: int, backend: str, cfg):
    """Reserve one placement-group bundle per shard actor and wait until Ray has placed them all.

    The job reserves before it reads the corpus. Asked for after the read, the group waits
    on Ray, which places it from a cluster view that lags the CPUs the readers have just
    freed and then retries with a back-off.

    Parameters
    ----------
    n_actors : int
        Shards times replicas.
    backend : str
    cfg : settopk.configs.JobConfig

    Returns
    -------
    ray.util.placement_group.PlacementGroup
        ``n_actors`` bundles of :func:`_shard_bundle`, strategy PACK.

    Raises
    ------
    RuntimeError
        If the cluster cannot place the bundles within two minutes (the message gives them).
    """
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    bundle = _shard_bundle(backend, cfg)
    group = placement_group([dict(bundle) for _ in range(n_actors)], strategy="PACK")
    try:
        ray.get(group.ready(), timeout=_PLACEMENT_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(group)
        raise RuntimeError(
            f"the cluster could not place {n_actors} shard bundle(s) of {bundle} within {_PLACEMENT_TIMEOUT_S:g} s "
            f"(resources: {ray.cluster_resources()}); lower n_shards, replicas or cpus_per_shard, or add nodes"
        ) from None
    return group


def start_shards(n_actors: int, limits, backend: str, cfg, group, searcher_cls: type = ShardSearcher) -> tuple[list, object]:
    """Start the shard actors in the bundles of ``group``; each waits for its inputs (:func:`supply_shards`).

    Actor ``i`` runs in bundle ``i``. It loads its backend's kernels at once and its shard's
    docs once :func:`supply_shards` has named them, so the job may start the actors before it
    reads the corpus. The actors ask for no CPUs of their own: their bundles hold the CPUs
    (``cpus_per_shard``), which the reader tasks use until the read ends and which no task
    outside the bundles can take.

    Parameters
    ----------
    n_actors : int
        Shards times replicas (at most the bundles of ``group``).
    limits : SetLimits
    backend : str
    cfg : settopk.configs.JobConfig
    group : ray.util.placement_group.PlacementGroup
        From :func:`reserve_shards`.
    searcher_cls : type
        The class each actor wraps: :class:`settopk.shards.ShardSearcher`, or a subclass of it (the
        chaos tests pass one whose process dies or hangs on purpose).

    Returns
    -------
    (list of ActorHandle, ActorHandle)
        ``n_actors`` actors, and the :class:`settopk.shards.actor.ShardInputs` they (and their
        restarts) take their inputs from; keep it while they run.
    """
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    f = cfg.faults
    actor = actor_class(searcher_cls)
    inputs_name, inputs = open_inputs()
    actors = []
    for index in range(n_actors):
        options = {
            "num_cpus": 0,
            "num_gpus": cfg.gpus_per_shard if backend == "cupy" else 0,
            # Ray's own fault tolerance: a dead actor restarts (taking its docs again from the
            # object store) and the searches it was running are sent again; searches are pure.
            "max_restarts": f.actor_restarts,
            "max_task_retries": f.actor_restarts,
            # Two calls at once on a GPU: one's Ray transport (arguments in, results out to the
            # object store) runs while the other's kernels do; the GPU serialises the kernels.
            "max_concurrency": _GPU_CALLS_AT_ONCE if backend == "cupy" else 1,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index),
        }
        threads = max(1, int(cfg.cpus_per_shard))  # the CPUs of the actor's bundle
        actors.append(actor.options(**options).remote(inputs_name, index, limits, backend, cfg.score, cfg.routing, threads))
    return actors, inputs


def supply_shards(pool: "ShardPool", plan, corpus, replicas: int) -> None:
    """Give the started actors of ``pool`` their shards: actor ``r * len(plan) + s`` is replica
    ``r`` of shard ``s`` (replica 0 of every shard first). Actors beyond ``len(plan) * replicas``
    (the plan found fewer distinct lengths than shards) are stopped.

    Parameters
    ----------
    pool : ShardPool
        With ``actors`` and ``inputs`` from :func:`start_shards`.
    plan : list of ShardSpec
    corpus : settopk.shards.reading.CorpusRead
        The pieces' docs in the object store.
    replicas : int
    """
    import ray

    n_actors = len(plan) * replicas
    for surplus in pool.actors[n_actors:]:
        ray.kill(surplus)
    pool.actors = pool.actors[:n_actors]
    specs = [plan[index % len(plan)] for index in range(n_actors)]
    supply_inputs(pool.inputs, specs, corpus.corpus_refs, corpus.drops, corpus.ordered)


def stop_shards(actors, group) -> None:
    """Kill the shard actors and free their placement group (``group`` may be None)."""
    import ray
    from ray.util.placement_group import remove_placement_group

    for a in actors:
        ray.kill(a)
    if group is not None:
        remove_placement_group(group)


@dataclasses.dataclass
class ShardPool:
    """What a run holds on the cluster: the shard bundles (reserved before the read) and the actors.

    The driver fills ``group`` from :func:`reserve_shards`, and ``actors`` and ``inputs`` from
    :func:`start_shards`; :meth:`release` frees them all, and may be called more than once.
    """

    group: object = None
    actors: list = dataclasses.field(default_factory=list)
    inputs: object = None  # the shard actors' ShardInputs

    def release(self) -> None:
        """Kill the actors (and their inputs' actor) and free the placement group (the GPUs are free afterwards)."""
        actors, group, self.actors, self.group = self.actors, self.group, [], None
        inputs, self.inputs = self.inputs, None
        stop_shards(actors + ([inputs] if inputs is not None else []), group)
