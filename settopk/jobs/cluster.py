"""The Ray cluster a run attaches to, and the backend and shard count that fit it.

Everything here runs on the driver before any actor starts, so a config that asks for GPUs on
a cluster without them (or more than it has) fails at the start, naming what is missing.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from dataclasses import dataclass

from settopk.configs import gpu_routing_problems
from settopk.kernels import search_cost_per_doc
from settopk.shards.inputs import InputError

from .validate import Job, check_gpus

__all__ = ["Cluster", "connect", "resolve_backend", "resolve_cpus_per_shard", "shard_doc_cost", "stop_local_ray"]

log = logging.getLogger("settopk")


@dataclass
class Cluster:
    """What the run settled with the Ray cluster."""

    backend: str  # "cpu", "numpy" or "cupy"
    n_shards: int
    n_cpus: float


def connect(job: Job) -> tuple[Job, Cluster]:
    """Attach to the Ray cluster (or start a local one) and fit the backend and shard count to it.

    Returns the job with its config settled for the backend (``query_batch_size``,
    ``cpus_per_shard``) and the :class:`Cluster`.

    Raises
    ------
    settopk.shards.inputs.InputError, settopk.jobs.validate.UsageError
        The cluster lacks the GPUs or CPUs the config asks for (:func:`resolve_backend`,
        :func:`settopk.jobs.validate.check_gpus`).
    """
    import ray

    if not ray.is_initialized():
        # No address: attaches to the cluster under `ray job submit`, else starts a local one.
        # --quiet: Ray's own start-up lines (INFO, and WARNINGs about a local instance) are
        # not the job's warnings; its errors still show. Nor is the FutureWarning some Rays (2.50
        # among them) give on every start, about hiding GPUs from tasks that ask for none.
        # A local cluster lives as long as the run: it starts without a dashboard, a good part
        # of its start (docs/benchmarks.md, "Real data"); Ray 2.50 to 2.60 ignore the flag when
        # they attach to a running cluster.
        with warnings.catch_warnings():
            if job.args.quiet:
                warnings.filterwarnings("ignore", category=FutureWarning, module=r"ray\.")
            ray.init(include_dashboard=False, **({"logging_level": logging.ERROR} if job.args.quiet else {}))
    resources = ray.cluster_resources()
    check_gpus(job.args, resources)
    node_cpus = [float(node["Resources"].get("CPU", 0)) for node in ray.nodes() if node.get("Alive")]
    backend, n_shards = resolve_backend(job.cfg, resources, job.cfg.replicas, node_cpus)
    cpus = resolve_cpus_per_shard(job.cfg, backend, node_cpus, job.cfg.replicas)
    if job.cfg.cpus_per_shard == "auto":
        log.info("cpus_per_shard auto: %g per shard actor (backend %s)", cpus, backend)
    cfg = dataclasses.replace(job.cfg, query_batch_size=job.cfg.batch_size_for(backend), cpus_per_shard=cpus)
    return dataclasses.replace(job, cfg=cfg), Cluster(backend, n_shards, float(resources.get("CPU", 1)))


def stop_local_ray() -> None:
    """Stop Ray in this process: the local instance it started, or its connection to a cluster.

    Ray's own shutdown (also run at exit) stops a local instance's GCS before its autoscaler
    monitor, whose exit handler then waits, up to Ray's one-second grace, to reach the GCS; so
    the monitor is stopped first (``Node.kill_monitor``, where this Ray has it). The command
    line calls this when its run started Ray (docs/operations.md, "Ray clusters").
    """
    import ray

    node = getattr(getattr(ray, "_private", None), "worker", None)
    node = getattr(node, "_global_node", None)
    kill_monitor = getattr(node, "kill_monitor", None)
    if node is not None and kill_monitor is not None and node.is_head():
        try:
            kill_monitor(check_alive=False)
        except Exception as exc:  # the shutdown below stops it the slow way
            log.debug("could not stop Ray's monitor ahead of the shutdown: %s", exc)
    ray.shutdown()


def resolve_backend(cfg, resources: dict, replicas: int = 1, node_cpus: list | None = None) -> tuple[str, int]:
    """Backend and shard count for a cluster, checked before any actor starts.

    Parameters
    ----------
    cfg : settopk.configs.JobConfig or settopk.jobs.bench.config.BenchConfig
        Uses ``backend``, ``n_shards``, ``gpus_per_shard`` and ``cpus_per_shard``.
    resources : dict
        ``ray.cluster_resources()``.
    replicas : int
        Actors per shard (``settopk.configs.JobConfig.replicas``).
    node_cpus : list of float, optional
        CPUs of each alive node, for ``cpus_per_shard: auto`` (:func:`resolve_cpus_per_shard`).

    Returns
    -------
    (str, int)
        ``"cpu"``, ``"numpy"`` or ``"cupy"``, and the number of shards.

    Raises
    ------
    InputError
        If ``cupy`` is asked for on a cluster without GPUs, or ``auto`` picks it with ``routing: postings``
        for sets the GPU postings do not take (:func:`settopk.configs.gpu_routing_problems`),
        or the shards' actors need more GPUs or CPUs than the cluster has (they would wait forever).
    """
    n_gpus = float(resources.get("GPU", 0))
    n_cpus = float(resources.get("CPU", 0))
    backend = cfg.backend
    if backend == "auto":
        backend = "cupy" if n_gpus > 0 else "cpu"
        log.info("backend auto: %s (the Ray cluster has %g GPU(s))", backend, n_gpus)
    if backend == "cupy" and n_gpus == 0:
        raise InputError(
            f"config asks for backend 'cupy' but the Ray cluster has no GPU (resources: {resources}); "
            "run on a GPU cluster or use backend 'cpu', 'numpy' or 'auto'"
        )
    if backend == "cupy" and cfg.backend == "auto":  # an explicit cupy is checked with the config
        problems = gpu_routing_problems(cfg.routing, cfg.max_len,
                                        f"backend 'auto' (it picked cupy: the Ray cluster has {n_gpus:g} GPU(s))")
        if problems:
            raise InputError(problems[0])
    cpus = resolve_cpus_per_shard(cfg, backend, node_cpus if node_cpus is not None else [n_cpus], replicas)
    if cfg.n_shards == "auto":
        if backend == "cupy":
            n_shards = max(1, int(n_gpus / (cfg.gpus_per_shard * replicas)))
        else:
            n_shards = max(1, int(n_cpus / (cpus * replicas)) if cpus else int(n_cpus / replicas))
    else:
        n_shards = int(cfg.n_shards)
    n_actors = n_shards * replicas
    need_gpus = n_actors * cfg.gpus_per_shard if backend == "cupy" else 0
    if need_gpus > n_gpus + 1e-9 or n_actors * cpus > n_cpus + 1e-9:
        raise InputError(
            f"{n_shards} shard(s) x {replicas} replica(s) need {need_gpus:g} GPU(s) and {n_actors * cpus:g} CPU(s), "
            f"the Ray cluster has {n_gpus:g} and {n_cpus:g}; lower n_shards, replicas or the per-shard resources"
        )
    return backend, n_shards


def resolve_cpus_per_shard(cfg, backend: str, node_cpus: list, replicas: int = 1) -> float:
    """The CPUs each shard actor reserves: ``cfg.cpus_per_shard``, or what ``"auto"`` means for ``backend``.

    For ``"cpu"``, ``"auto"`` is the CPUs of the smallest node that has any, divided by
    ``replicas`` (at least 1): a shard's index runs one thread per CPU, and threads of one
    shard split its docs at no extra cost, where more shards on one node would each search
    every query again above the first round's floors, and be merged. For ``"numpy"`` (one
    thread) and ``"cupy"`` (the GPU searches), 1.

    Parameters
    ----------
    cfg : settopk.configs.JobConfig or settopk.jobs.bench.config.BenchConfig
    backend : str
        The resolved backend: ``"cpu"``, ``"numpy"`` or ``"cupy"``.
    node_cpus : list of float
        CPUs of each alive node of the cluster.
    replicas : int

    Returns
    -------
    float
    """
    if cfg.cpus_per_shard != "auto":
        return float(cfg.cpus_per_shard)
    if backend != "cpu":
        return 1.0
    smallest = min((c for c in node_cpus if c >= 1), default=1.0)
    return float(max(1, int(smallest // max(1, replicas))))


def shard_doc_cost(backend: str, max_len: int):
    """What the shard planner balances for ``backend``: its search cost per doc by length
    (:func:`settopk.kernels.search_cost_per_doc`)."""
    return search_cost_per_doc(backend, max_len)
