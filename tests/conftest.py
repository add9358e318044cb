"""Shared fixtures: one local Ray cluster per session, GPU detection, shared data paths."""

from __future__ import annotations

import contextlib
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# ../shared beside the checkout; SETTOPK_SHARED points elsewhere (the GPU machine gets a copy carried along).
SHARED = pathlib.Path(os.environ.get("SETTOPK_SHARED", ROOT.parent / "shared"))

# Every Ray cluster the tests start (the session's, and those of the drivers, heads and benches
# they run in subprocesses, which inherit this) keeps up to 6 idle worker processes per node
# instead of about one per CPU. A job run starts worker processes for its reader and merge tasks;
# Ray stops those beyond the limit a second after they idle, and the next run starts them again,
# each a Python process importing Ray and settopk (about 1.7 CPU seconds on 2 cores). With them
# kept, a test of five job runs took 31 s instead of 50 on CI's 2 cores.
os.environ.setdefault("RAY_num_workers_soft_limit", "6")


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


# How long a Ray test waits, before it starts, for the resources earlier tests held to come back.
_QUIET_WAIT_S = 60


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Start each test that uses the session's cluster on a quiet cluster: every CPU free.

    A Ray Data dataset that failed keeps its pool actors (and the CPUs they hold) for as long as
    its executor lives, and the executor is reachable from the exception's traceback. pytest's
    logging plugin keeps the test's log records, Ray Data's error record and its traceback among
    them, until the test is torn down; after that they are a reference cycle, freed at the next
    full garbage collection, which may come many tests later. A test that needs every CPU of the
    2-CPU cluster meanwhile waits in ``ray.wait``, which no SIGALRM interrupts. So: collect, wait
    (bounded) for the CPUs, and fail naming what still holds them instead of hanging.
    """
    if "ray_cluster" not in item.fixturenames:
        return
    import gc
    import time

    import ray

    if not ray.is_initialized():  # the fixture starts it on a fresh cluster
        return
    deadline = time.monotonic() + _QUIET_WAIT_S
    while True:
        gc.collect()
        total, free = ray.cluster_resources().get("CPU", 0.0), ray.available_resources().get("CPU", 0.0)
        if free >= total:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"the session's Ray cluster still has {total - free} of its {total} CPUs held {_QUIET_WAIT_S} s "
                        f"after the tests before {item.nodeid}; actors alive: {_alive_actors()}")
        time.sleep(0.2)


def _alive_actors() -> list[str]:
    """Class names of the live actors of the current Ray cluster (for an error message only)."""
    try:
        from ray._private import state  # the public state API needs the dashboard, which the tests leave off

        return sorted(a["ActorClassName"] for a in state.actors().values() if a.get("State") == "ALIVE")
    except Exception as exc:  # a Ray release that moved it: the message says so rather than failing twice
        return [f"(not listed: {exc!r})"]


@pytest.fixture(scope="session")
def golden_dir():
    """``../shared/golden`` when present; tests that need it skip otherwise."""
    path = SHARED / "golden"
    if not path.is_dir():
        pytest.skip("../shared/golden is not present")
    return path


@pytest.fixture(scope="session")
def retail_dat():
    """``../shared/data/retail.dat`` (RETAIL, FIMI). Where it is absent the tests that read it skip
    (the README's test command runs without ../shared); under CI (``SETTOPK_CI``) they fail, since
    CI has shared/ beside the clone."""
    path = SHARED / "data" / "retail.dat"
    if not path.is_file():
        if os.environ.get("SETTOPK_CI"):
            pytest.fail(f"{path} is missing: CI runs with shared/ beside the clone")
        pytest.skip(f"{path} is not present (../shared beside the repository)")
    return path


class S3Store:
    """A running S3-protocol server (moto's standalone server on localhost) that tests make buckets on.

    Attributes
    ----------
    endpoint : str
        The server's URL, also in ``AWS_ENDPOINT_URL`` while the session runs.
    """

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self._count = 0

    def filesystem(self):
        """A :class:`pyarrow.fs.S3FileSystem` on the server (credentials from the environment)."""
        from pyarrow import fs

        host = self.endpoint.split("://", 1)[1]
        return fs.S3FileSystem(endpoint_override=host, scheme="http", allow_bucket_creation=True, allow_bucket_deletion=True)

    def bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh ``test-bucket-N`` by default; names need >= 3 characters) and
        return its URI, ``s3://NAME``."""
        if name is None:
            self._count += 1
            name = f"test-bucket-{self._count}"
        self.filesystem().create_dir(name)
        return f"s3://{name}"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_server(**env):
    """moto's S3 server as a subprocess on a free localhost port (``env``: extra settings for it,
    e.g. ``INITIAL_NO_AUTH_ACTION_COUNT="0"`` to check credentials); yields its URL once it
    answers, and stops it on exit. Every wait is bounded."""
    import socket
    import subprocess
    import sys
    import time

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"moto's server exited with {proc.returncode} before answering on port {port}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"moto's server did not answer on port {port} within 60 s")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def s3():
    """moto's S3 server (:func:`moto_server`), with the standard AWS settings (``AWS_ENDPOINT_URL``,
    test credentials, region) pointing at it for the session (restored after); yields an
    :class:`S3Store`. Start Ray after this fixture: Ray workers keep the environment their
    cluster started with."""
    with moto_server() as endpoint, pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_ENDPOINT_URL", endpoint)
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata probe for credentials
        yield S3Store(endpoint)
