"""What the job tests share: input files, settopk.configs, the score column computed apart, the rows
of a result, and a driver killed mid-run."""

from __future__ import annotations

import math
import os
import pathlib
import signal
import subprocess
import sys
import time
from fractions import Fraction

import pyarrow.parquet as pq

from settopk.jobs.output import RESULT_SCHEMA, work_dir

ROOT = pathlib.Path(__file__).resolve().parent.parent


def write_sets(path, sets) -> str:
    """Write sets in the STI2 text format (one comma-separated set per line); returns the path."""
    path.write_text("".join(",".join(map(str, s)) + "\n" for s in sets))
    return str(path)


def job_config(tmp_path, name: str = "c", **values) -> str:
    """A job config YAML in ``tmp_path`` (NumPy backend, one shard, half a CPU unless ``values``
    say otherwise; a dict value becomes a section); returns its path."""
    values = {"backend": "numpy", "n_shards": 1, "cpus_per_shard": 0.5, **values}
    lines = []
    for key, value in values.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {v}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {value}")
    path = tmp_path / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def score_apart(ov: int, ql: int, dl: int, score: str) -> float:
    """The score column's value, computed apart from settopk.kernels.keys."""
    if score == "overlap":
        return float(ov)
    if score == "cosine":
        return ov / math.sqrt(ql * dl) if ql * dl else 0.0
    num, den = {"braun_blanquet": (ov, max(ql, dl)), "jaccard": (ov, ql + dl - ov), "dice": (2 * ov, ql + dl),
                "containment": (ov, ql)}[score]
    return float(Fraction(num, den)) if den else 0.0


def result_rows(out) -> list[tuple]:
    """The rows of a result dataset, as tuples in :data:`RESULT_SCHEMA` order (its schema checked)."""
    table = pq.read_table(out)
    assert table.schema.equals(RESULT_SCHEMA, check_metadata=False)
    d = table.to_pydict()
    return list(zip(*(d[name] for name in RESULT_SCHEMA.names)))


def kill_driver_mid_run(args: list[str], out, min_parts: int = 3) -> int:
    """Run ``settopk.jobs.score`` with ``args --out out`` in a process attached to the test's Ray cluster,
    SIGKILL it once ``min_parts`` parts are committed, and return how many were.

    Asserts that the driver was killed before it finished (no result at ``out``)."""
    import ray

    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "settopk", "score", *args, "--out", str(out)], cwd=ROOT, env=env)
    work = work_dir(out)
    deadline = time.monotonic() + 120
    while len(list(work.glob("part-*.parquet"))) < min_parts and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL and not pathlib.Path(out).exists(), "the driver must be killed mid-run"
    return len(list(work.glob("part-*.parquet")))
