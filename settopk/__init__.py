"""settopk: exact top-k set-similarity search over token sets, on GPUs or CPUs, alone or as a Ray job.

Subpackages: :mod:`settopk.kernels` (the scoring kernels and their oracle),
:mod:`settopk.shards` (inputs, length-bucket plans, shard searchers and the exact merge),
:mod:`settopk.jobs` (the Ray job, corpus generation, verification, the benchmark) and
:mod:`settopk.configs` (named YAML configs). The command line is :mod:`settopk.cli`.

``import settopk`` imports no Ray, CuPy or Numba: each is imported where it is first needed.
"""

from __future__ import annotations

import importlib

__all__ = ["Index", "Pairs", "TopK", "dedup", "score", "__version__"]

# Public name -> the module that defines it, imported on first access (PEP 562) so that
# ``import settopk`` stays cheap.
_LAZY = {
    "Index": "settopk.index",
    "TopK": "settopk.index",
    "Pairs": "settopk.index",
    "dedup": "settopk.index",
    "score": "settopk.jobs.api",
}


def __getattr__(name: str):
    if name == "__version__":
        from settopk.jobs import package_version

        return package_version()
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'settopk' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
