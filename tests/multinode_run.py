"""Run ``settopk.jobs.score.main`` on a two-node Ray cluster simulated on this machine.

    python tests/multinode_run.py REPORT.json JOB_ARGS...

Used by ``tests/test_multinode.py`` in a subprocess: ``ray.cluster_utils.Cluster`` must not
be started in the pytest process, which already has the session's Ray cluster initialised.
The cluster is a head and one worker node with one CPU each, so two shard actors of
``cpus_per_shard: 1.0`` can only run one per node. Writes ``{"exit_code": ..., "node_ids":
[...]}`` (the job's exit code, the cluster's live Ray node ids) to ``REPORT.json`` and exits
with the job's exit code. Set ``RAY_TMPDIR`` to keep the cluster's session files (and its
``ray_current_cluster`` address file) apart from any other Ray on the machine.
"""

from __future__ import annotations

import contextlib
import json
import sys


_NODE_REGISTER_S = 180  # how long a node's raylet may take to register with the GCS here


def _patient_node_lookup() -> None:
    """Give every node of the simulated cluster up to ``_NODE_REGISTER_S`` to register instead of
    Ray's 30 s. ``ray._private.node.Node`` polls ``ray._private.services.get_node`` and gives up 30 s
    after its first try (a fixed number in Ray); CI's loaded 2-core machine missed that for a head and
    then for a worker node ("The current node timed out during startup"). The lookup retried here
    until the raylet answers keeps that poll's first try from returning before then. Only this
    script's process (a test helper) is patched."""
    import time

    import ray._private.services as services

    lookup = services.get_node

    def patient(*args, **kwargs):
        deadline = time.monotonic() + _NODE_REGISTER_S
        while True:
            try:
                return lookup(*args, **kwargs)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    services.get_node = patient


@contextlib.contextmanager
def local_cluster(n_workers: int, **head_args):
    """A head and ``n_workers`` worker nodes of one CPU each (``ray.cluster_utils.Cluster``), with
    this process connected to it; yields the cluster and shuts it down on exit. ``head_args``: more
    settings of the head node."""
    import ray
    from ray.cluster_utils import Cluster

    _patient_node_lookup()
    cluster = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, **head_args})
        for _ in range(n_workers):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        yield cluster
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


def main(argv: list[str]) -> int:
    report, job_args = argv[0], argv[1:]
    import ray

    from settopk.jobs import score

    with local_cluster(1, include_dashboard=False):
        nodes = [n for n in ray.nodes() if n["Alive"]]
        code = score.main(job_args)
        with open(report, "w") as f:
            json.dump({"exit_code": code, "node_ids": sorted(n["NodeID"] for n in nodes)}, f)
        return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
