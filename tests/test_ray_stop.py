"""``settopk score`` stops the local Ray instance it started (settopk.jobs.cluster.stop_local_ray):
its processes are gone when the command returns, and the result is written."""

import json
import os
import subprocess
import sys

from tests.job_helpers import write_sets

_SCRIPT = """
import json, logging, os, sys, time
import ray
from settopk.jobs import cluster, score

seen = {}
real = cluster.stop_local_ray


def spy():
    node = ray._private.worker._global_node
    seen.update({kind: [info.process.pid for info in infos] for kind, infos in node.all_processes.items()})
    real()


cluster.stop_local_ray = spy  # score.main imports it when it runs
code = score.main(sys.argv[1:])


def alive(pid):  # still running a few seconds on (an exited process not yet reaped is not)
    for _ in range(50):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.1)
    return True


print("RESULT " + json.dumps({"code": code, "initialized": ray.is_initialized(), "kinds": sorted(seen),
                              "alive": [kind for kind, pids in seen.items() for pid in pids if alive(pid)]}))
"""


def test_the_command_stops_the_local_ray_it_started(tmp_path):
    docs = write_sets(tmp_path / "docs.txt", [[1, 2, 3], [1, 2, 3], [2, 3, 4], [7, 8]])
    out = tmp_path / "out"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", _SCRIPT, "--docs", docs, "--self-join", "--threshold", "0.5",
                           "--score", "jaccard", "--backend", "cpu", "--out", str(out), "--quiet"],
                          capture_output=True, text=True, env=env, timeout=240)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(lines[0][len("RESULT "):])
    assert result["code"] == 0, done.stderr[-2000:]
    # The head this command started, its monitor among its processes, all of them stopped.
    assert {"gcs_server", "monitor", "raylet"} <= set(result["kinds"])
    assert result["alive"] == [] and result["initialized"] is False
    assert (out / "_SUCCESS").exists()
