"""The run's manifest (``manifest.json`` in the result's run record, :func:`settopk.jobs.output.manifest_path`),
built from plain values.

The manifest says what produced the dataset: the run id, the command's arguments, the
inputs and their fingerprints, the counts, the shards (where each ran, how long it
loaded and searched), the config, the phase timings and the software versions.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import socket
import uuid

from settopk.shards.location import Location

__all__ = ["build_manifest", "inputs_section", "output_section", "shard_entries", "ray_submission_id", "new_run_id", "shown_absolute", "versions"]

_UTC = "%Y-%m-%dT%H:%M:%SZ"


def shown_absolute(location) -> str:
    """``location`` for logs, manifests and keys: an absolute local path, or the URI redacted
    (:func:`settopk.shards.location.redact`)."""
    location = Location.of(location)
    return location.path if location.local else str(location)


def _shown(value):
    """A value for the manifest: a location as shown (redacted), anything else as it is."""
    if isinstance(value, Location):
        return str(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def ray_submission_id() -> str | None:
    """The submission id when this driver runs under ``ray job submit`` (or a KubeRay RayJob), else None."""
    # Ray's job supervisor hands the driver its job config, metadata included, in this variable.
    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return None
    try:
        return json.loads(raw).get("metadata", {}).get("job_submission_id") or None
    except (ValueError, AttributeError):
        return None


def new_run_id(now: datetime.datetime) -> str:
    """A fresh run id: ``YYYYMMDDTHHMMSSZ-`` and 8 random hex digits."""
    return f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def versions() -> dict:
    """Versions of Python, NumPy, PyArrow, Ray and settopk (``"source"`` where it was not installed)."""
    import numpy as np
    import pyarrow
    import ray

    out = {"python": platform.python_version(), "numpy": np.__version__, "pyarrow": pyarrow.__version__, "ray": ray.__version__}
    try:
        from importlib.metadata import version

        out["settopk"] = version("settopk")
    except Exception:  # running from a source tree that was not installed
        out["settopk"] = "source"
    return out


def output_section(out_dir: Location, dataset_root: Location, day: datetime.date | None, n_parts: int) -> dict:
    """Where the result went: its directory, the dataset root, the ``dt`` partition (or None)
    and the number of part files."""
    return {
        "path": shown_absolute(out_dir),
        "dataset_root": shown_absolute(dataset_root),
        "partition": {"dt": day.isoformat()} if day else None,
        "parts": n_parts,
    }


def inputs_section(*, docs_path: Location, docs_format: str, docs_files, synthetic: bool, queries_path: Location | None,
                   queries_format: str, queries_files_count: int, self_join: str | None = None,
                   include_self: bool = False) -> dict:
    """The inputs: the corpus (path, format, files, whether generated) and the queries; for a
    self-join (``self_join``: its description) the queries are the corpus's docs. Locations are
    written as shown, without credentials."""
    docs_path, queries_path = _shown(docs_path), _shown(queries_path)
    docs = {"path": docs_path, "format": docs_format, "files": [_shown(f) for f in docs_files], "synthetic": synthetic}
    if self_join is None:
        queries = {"path": queries_path, "format": queries_format, "files_count": queries_files_count}
    else:
        queries = {"self_join": True, "include_self": include_self, "path": docs_path, "format": queries_format,
                   "files_count": queries_files_count, "description": self_join}
    return {"docs": docs, "queries": queries}


def shard_entries(plan: list[dict], infos: list[dict]) -> list[dict]:
    """One entry per actor: its shard's plan (``ShardSpec.to_dict()``), its replica number and its
    ``info()``; actor ``i`` is replica ``i // len(plan)`` of shard ``i % len(plan)``."""
    return [{**plan[i % len(plan)], "replica": i // len(plan), **info} for i, info in enumerate(infos)]


def _fingerprint_section(fingerprints: dict) -> dict:
    docs, queries = fingerprints["docs"]["sha256"], fingerprints["queries"]["sha256"]
    return {**fingerprints, "corpus": docs, "inputs": hashlib.sha256((docs + queries).encode()).hexdigest()}


def build_manifest(*, run_id: str, started: datetime.datetime, args: dict, submission_id: str | None, ray_job_id: str,
                   output: dict, inputs: dict, fingerprints: dict, counts: dict, score: str, backend: str,
                   shards: list[dict], config_source: str, config: dict, timings: dict, max_rss_bytes: int,
                   max_rss_by_phase: dict) -> dict:
    """The manifest of a finished run, ready for ``json.dump``.

    Parameters
    ----------
    run_id : str
    started : datetime.datetime
        Start of the run, UTC.
    args : dict
        The parsed command-line arguments (``vars(args)``); dates are written ISO, locations as
        shown (without credentials).
    submission_id : str or None
        The Ray job submission id (:func:`ray_submission_id`).
    ray_job_id : str
    output : dict
        :func:`output_section`.
    inputs : dict
        :func:`inputs_section`.
    fingerprints : dict
        ``{"docs": ..., "queries": ...}`` (:func:`settopk.shards.inputs.fingerprint`, each with ``sha256``);
        the manifest adds ``corpus`` and ``inputs`` (hash of both).
    counts : dict
        Docs, queries, rows, rejects and resumed chunks.
    score, backend : str
    shards : list of dict
        :func:`shard_entries`.
    config_source : str
        ``--config`` as given.
    config : dict
        The resolved config (``JobConfig.to_dict()``).
    timings : dict of str to float
        Seconds per phase; rounded to 0.1 ms.
    max_rss_bytes : int
        The driver's peak RSS.
    max_rss_by_phase : dict of str to dict
        The driver's RSS per phase: ``start``, ``end`` and ``peak`` (bytes, :class:`settopk.jobs.progress.PhaseClock`).

    Returns
    -------
    dict
    """
    return {
        "job": "settopk.score",
        "run_id": run_id,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime(_UTC),
        "started_utc": started.strftime(_UTC),
        "args": {key: _shown(value) for key, value in args.items()},
        "ray": {"submission_id": submission_id, "job_id": ray_job_id},
        "host": socket.gethostname(),
        "output": output,
        "inputs": inputs,
        "fingerprint": _fingerprint_section(fingerprints),
        "counts": counts,
        "score": score,
        "backend": backend,
        "shards": shards,
        "config_source": config_source,
        "config": config,
        "timings_s": {key: round(v, 4) for key, v in timings.items()},
        "driver_max_rss_bytes": max_rss_bytes,
        "driver_max_rss_bytes_by_phase": max_rss_by_phase,
        "versions": versions(),
    }
