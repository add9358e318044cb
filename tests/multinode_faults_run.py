"""Run ``settopk.jobs.score.main`` on a head and three worker nodes (``ray.cluster_utils.Cluster``) and
remove a worker node that holds a shard actor while the job runs.

    python tests/multinode_faults_run.py REPORT.json JOB_ARGS...

Used by ``tests/test_multinode_faults.py`` in a subprocess (a ``Cluster`` must not start in the
pytest process). Every node has one CPU, so the two shard actors (``cpus_per_shard: 1.0``) sit on
two nodes. The actors wrap :class:`SlowSearcher`, which pauses at each search so that the job is
still searching when a worker node holding an actor is removed, once the first part of the
result is committed. If that run fails, the same arguments run again on the three nodes left:
the job resumes from its committed chunks. The REPORT (JSON) holds the exit codes, the nodes
(head, workers, the removed one) and the node of every reader and merge task (Ray's state API).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from multinode_run import local_cluster  # beside this script: on sys.path when it runs
from settopk.shards.searcher import ShardSearcher

PAUSE_S = 0.4  # per search call: the job lasts several seconds, long enough to lose a node in it


class SlowSearcher(ShardSearcher):
    """A :class:`settopk.shards.ShardSearcher` that pauses at each search and records its node in
    ``$SETTOPK_MN_MARKS`` (one file per actor process)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        marks = os.environ.get("SETTOPK_MN_MARKS")
        if marks:
            import ray

            with open(os.path.join(marks, f"actor-{os.getpid()}"), "w") as f:
                f.write(ray.get_runtime_context().get_node_id())

    def search(self, *args, **kwargs):
        time.sleep(PAUSE_S)
        return super().search(*args, **kwargs)


def _remove_a_shard_node(cluster, head_id: str, work: str, marks: str, removed: dict, stop: threading.Event) -> None:
    """Once a part is committed in ``work``, remove the worker node of a shard actor."""
    by_id = {node.node_id: node for node in cluster.worker_nodes}
    while not stop.is_set():
        parts = [p for p in os.listdir(work) if p.startswith("part-") and p.endswith(".parquet")] if os.path.isdir(work) else []
        actor_nodes = set()
        for name in os.listdir(marks):
            with open(os.path.join(marks, name)) as f:
                actor_nodes.add(f.read().strip())
        targets = sorted(n for n in actor_nodes if n != head_id and n in by_id)
        if parts and targets:
            removed.update(node_id=targets[0], parts_committed=len(parts), at=time.time())
            cluster.remove_node(by_id[targets[0]])
            return
        time.sleep(0.05)


def _task_nodes() -> dict:
    """Node ids of the reader and merge tasks run so far, per function (Ray's state API)."""
    from ray.util.state import list_tasks

    out: dict[str, list[str]] = {}
    for task in list_tasks(limit=10_000, raise_on_missing_output=False):
        name = task.func_or_class_name or task.name or ""
        for wanted in ("_read_piece_parts", "merge_and_write_chunk"):
            if wanted in name and task.node_id:
                out.setdefault(wanted, []).append(task.node_id)
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str]) -> int:
    report, job_args = argv[0], argv[1:]
    import ray

    from settopk.jobs import score
    from settopk.jobs.output import work_dir

    out = job_args[job_args.index("--out") + 1]
    marks = os.environ["SETTOPK_MN_MARKS"]
    # The dashboard serves Ray's state API (the tasks' nodes); a free port, as others may run Ray here.
    with local_cluster(3, include_dashboard=True, dashboard_port=_free_port()) as cluster:
        head_id = ray.get_runtime_context().get_node_id()
        workers = sorted(node.node_id for node in cluster.worker_nodes)
        removed: dict = {}
        stop = threading.Event()
        remover = threading.Thread(target=_remove_a_shard_node, args=(cluster, head_id, str(work_dir(out)), marks, removed, stop),
                                   daemon=True)
        remover.start()
        started = time.time()
        codes = [score.main(job_args, searcher_cls=SlowSearcher)]
        first_ended = time.time()
        stop.set()
        remover.join()
        if codes[0] != 0:
            codes.append(score.main(job_args, searcher_cls=SlowSearcher))  # resumes from the committed chunks
        tasks = _task_nodes()
        with open(report, "w") as f:
            json.dump({"exit_codes": codes, "head": head_id, "workers": workers, "removed": removed, "tasks": tasks,
                       "first_run_s": [started, first_ended]}, f)
        return codes[-1]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
