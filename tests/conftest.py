"""Shared fixtures: one local Ray cluster per session, GPU detection, shared data paths."""

from __future__ import annotations

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# ../shared beside the checkout; SETTOPK_SHARED points elsewhere (the GPU machine gets a copy carried along).
SHARED = pathlib.Path(os.environ.get("SETTOPK_SHARED", ROOT.parent / "shared"))


def _cupy_has_device() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, or no device: all mean "no GPU here"
        return False


HAS_GPU = _cupy_has_device()


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU visible to CuPy")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster shared by the whole session (2 CPUs, small object store)."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        address="local",
        num_cpus=2,
        num_gpus=1 if HAS_GPU else 0,
        object_store_memory=256 * 2**20,
        include_dashboard=False,
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def golden_dir():
    """``../shared/golden`` when present; tests that need it skip otherwise."""
    path = SHARED / "golden"
    if not path.is_dir():
        pytest.skip("../shared/golden is not present")
    return path
