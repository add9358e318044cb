"""``ray job submit`` for real: a local Ray head with the dashboard (Jobs API), the job submitted
with the README's command, its status, logs and Parquet output checked; a failing job must end
FAILED with the error in its logs. Also: the deploy examples parse, and Ray is the pinned version.

The head is started by this module, from this interpreter's environment (the job's entrypoint
``python`` is looked up on the head's PATH), with:

- token authentication and a per-run token in a temporary file (``RAY_AUTH_MODE=token``,
  ``RAY_AUTH_TOKEN_PATH``) for the head, the CLI and the client alike. Ray 2.60 replaces a
  loopback ``--node-ip-address`` by the machine's address and binds its gRPC servers on all
  interfaces, so the token is what keeps the test cluster closed (Rays before 2.52 have no token
  authentication and ignore these variables); the Jobs API (dashboard) listens on 127.0.0.1
  only, and every address used here is loopback;
- free ports everywhere (a developer's own cluster on the default ports is left alone), and a
  temporary ``--temp-dir`` so no other ``ray.init()`` on the machine attaches to it;
- ``--block`` in a process group of its own, so teardown stops exactly this head (SIGTERM to
  ``ray start``, which stops what it started, then SIGKILL to its group). ``ray stop`` is not
  used: it kills every Ray process of the user on the machine, including the test session's own
  cluster and other developers' ones. A watchdog stops the head if pytest itself is killed.
"""

from __future__ import annotations

import os
import pathlib
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from packaging.specifiers import SpecifierSet

from settopk.jobs import score
from settopk.jobs.output import RESULT_SCHEMA, read_manifest
from settopk.kernels import brute_force_topk

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "settopk" / "configs" / "deploy"
BIN = pathlib.Path(sys.executable).parent
HEAD_START_TIMEOUT_S = 180  # 2 cores with the dashboard's ten-odd processes: seconds usually, minutes under load
JOB_TIMEOUT_S = 240


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _head_dependencies_missing() -> str | None:
    if not (BIN / "ray").exists():
        return f"no `ray` command beside {sys.executable}"
    try:
        import aiohttp  # noqa: F401  (the dashboard's web server: only in ray[default])
    except ImportError:
        return "ray[default] is not installed (the Jobs API needs the dashboard)"
    return None


class HeadExited(RuntimeError):
    """`ray start --head` exited before its Jobs API answered, or its Jobs API never took a job."""


class Head:
    """A running local Ray head: its Jobs API address and the environment that reaches it."""

    def __init__(self, tmp: pathlib.Path):
        self.tmp = tmp
        token = tmp / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        self.token = token.read_text()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=str(token),
            RAY_USAGE_STATS_ENABLED="0",
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # the job's `python` is this venv's
        )
        gcs, dashboard, client, agent_http, agent_grpc, runtime_env_agent, metrics = _free_ports(7)
        self.address = f"http://127.0.0.1:{dashboard}"
        self.command = [
            str(BIN / "ray"), "start", "--head", "--block",
            f"--port={gcs}",
            "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
            f"--ray-client-server-port={client}",
            f"--dashboard-agent-listen-port={agent_http}", f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={runtime_env_agent}", f"--metrics-export-port={metrics}",
            "--num-cpus=2", "--num-gpus=0", f"--object-store-memory={256 * 2**20}",
            f"--temp-dir={tmp}", "--disable-usage-stats",
        ]
        self.log_path = tmp / "ray-start.log"
        self.process = None
        self.watchdog = None
        self._client = None

    def start(self) -> None:
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        # If pytest dies (CI timeout, SIGKILL), stop the head anyway.
        self.watchdog = subprocess.Popen(
            ["sh", "-c", f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; "
                         f"kill -TERM {self.process.pid}; sleep 15; kill -KILL -{self.process.pid}"],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + HEAD_START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise HeadExited(f"`ray start --head` exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                self.client().get_version()
                break
            except Exception as exc:  # not up yet: connection refused, 5xx while modules load
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the Jobs API at {self.address} did not answer in {HEAD_START_TIMEOUT_S} s ({exc}):\n{self.log_tail()}"
                    ) from exc
                time.sleep(0.5)
        self._wait_for_the_job_agent(deadline)

    def _wait_for_the_job_agent(self, deadline: float) -> None:
        """The Jobs API answers before the head's job agent has registered; until then a submission fails
        with "No available agent to submit job, please try again later" (seen on a loaded 2-core machine).
        Submit a no-op job until one is taken, and wait for it to end."""
        client = self.client()
        while True:
            try:
                probe = client.submit_job(entrypoint="true")
                break
            except Exception as exc:
                if "No available agent" not in str(exc) or time.monotonic() > deadline:
                    raise HeadExited(f"the head at {self.address} took no job ({exc}):\n{self.log_tail()}") from exc
                time.sleep(1)
        while str(client.get_job_status(probe).value) not in ("SUCCEEDED", "FAILED", "STOPPED"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the head's probe job {probe} did not end in {HEAD_START_TIMEOUT_S} s:\n{self.log_tail()}")
            time.sleep(0.5)

    def client(self):
        """The head's Jobs API client, made once. An explicit header: this pytest process's own Ray
        (the session cluster) runs without auth. RAY_API_SERVER_ADDRESS / RAY_ADDRESS would override
        the address given, so a developer's are hidden while it is made, and only where set: the
        session cluster's threads read the environment (getenv) while this process changes it, and
        restoring the whole of it on every call (``mock.patch.dict``, once per poll) crashed this
        process in getenv (SIGSEGV) on a loaded 2-core machine."""
        from ray.job_submission import JobSubmissionClient

        if self._client is None:
            hidden = {name: os.environ.pop(name) for name in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS") if name in os.environ}
            try:
                self._client = JobSubmissionClient(self.address, headers={"Authorization": f"Bearer {self.token}"})
            finally:
                os.environ.update(hidden)
        return self._client

    def ray_job(self, verb: str, *args: str, timeout: float = JOB_TIMEOUT_S, cwd: pathlib.Path = ROOT) -> subprocess.CompletedProcess:
        """Run ``ray job VERB --address <this head> ARGS`` from ``cwd`` (the repository root)."""
        return subprocess.run(
            [str(BIN / "ray"), "job", verb, "--address", self.address, *args],
            cwd=cwd, env=self.env, capture_output=True, text=True, timeout=timeout,
        )

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.kill()
            self.watchdog.wait()
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()  # `ray start --block` stops the processes it started
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # anything left in the head's own group
        except ProcessLookupError:
            pass
        self.process.wait()
        self._kill_strays()

    def _kill_strays(self) -> None:
        """Workers and job drivers run in groups of their own; they name our temp dir on their command line."""
        import psutil

        marker = str(self.tmp)
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                if marker in " ".join(proc.info["cmdline"] or []):
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass


@pytest.fixture(scope="module")
def ray_head():
    missing = _head_dependencies_missing()
    if missing:
        if os.environ.get("SETTOPK_CI"):
            pytest.fail(f"{missing}; CI installs the test extra: pip install -e '.[test]'")
        pytest.skip(f"{missing}; install the test extra: pip install -e '.[test]'")
    # A short path: Ray's Unix sockets live under --temp-dir and must stay under 108 bytes.
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="settopk-ray-", dir="/tmp"))
    head = Head(tmp)
    try:
        try:
            head.start()
        except HeadExited:
            # On a loaded 2-core machine the dashboard may miss Ray's own start deadline (`ray start
            # --head` gives up) or drop its connections before its job agent is up; one more try on
            # fresh ports. A second failure fails the test.
            head.stop()
            head = Head(tmp)
            head.start()
        yield head
    finally:
        head.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _sets(rng, n, vocab, max_len):
    return [rng.choice(vocab, size=rng.integers(0, max_len + 1), replace=False).tolist() for _ in range(n)]


def _write_sets(path, sets):
    path.write_text("".join(",".join(map(str, s)) + "\n" for s in sets))
    return path


def _submit_args(submission_id: str, *job_args: str) -> list[str]:
    """The README's command: ``ray job submit --working-dir . --runtime-env ... -- python -m settopk score ...``."""
    return [
        "--submission-id", submission_id,
        "--working-dir", ".", "--runtime-env", "settopk/configs/deploy/runtime-env.yaml",
        "--", "python", "-m", "settopk", "score", *job_args,
    ]


@pytest.mark.slow
@pytest.mark.timeout(HEAD_START_TIMEOUT_S + 2 * JOB_TIMEOUT_S + 120)
def test_submitted_nightly_job_succeeds_and_writes_the_partition(ray_head, tmp_path):
    """The README's command, from a checkout whose virtualenvs are not all named ``.venv``: the job
    runs from Ray's copy of the working directory, which holds the sources and none of them."""
    checkout = _checkout_with_odd_venvs(tmp_path / "checkout")
    rng = np.random.default_rng(5)
    docs = _sets(rng, 400, 30, 10)
    queries = _sets(rng, 12, 30, 10)
    docs_path = _write_sets(tmp_path / "docs.txt", docs)
    queries_path = _write_sets(tmp_path / "queries.txt", queries)
    root = tmp_path / "results"
    submission_id = f"settopk-test-{uuid.uuid4().hex[:8]}"

    done = ray_head.ray_job(
        "submit",
        *_submit_args(submission_id, "--config", "nightly", "--docs", str(docs_path), "--queries", str(queries_path),
                      "--out", str(root), "--date", "2026-11-20", "--k", "7"),
        cwd=checkout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    client = ray_head.client()
    assert client.get_job_status(submission_id).value == "SUCCEEDED"
    info = client.get_job_info(submission_id)
    assert info.driver_exit_code == 0
    logs = client.get_job_logs(submission_id)
    for phase in ("validate", "connect", "load", "search", "commit"):
        assert f"phase {phase}:" in logs, logs
    assert f"done: run {submission_id}: 12 queries x 400 docs, k=7" in logs
    assert "search: 100%" in logs  # the progress bar reached the job log

    part = root / "dt=2026-11-20"
    table = pq.read_table(part)
    assert table.schema.equals(RESULT_SCHEMA, check_metadata=False)
    got = list(zip(table["query_id"].to_pylist(), table["doc_id"].to_pylist(), table["overlap"].to_pylist()))
    expected = [
        (str(qi), doc_id, overlap)
        for qi, result in enumerate(brute_force_topk(docs, queries, 7))
        for doc_id, overlap, _ in result
    ]
    assert got == expected
    manifest = read_manifest(part)
    assert manifest["run_id"] == submission_id and manifest["ray"]["submission_id"] == submission_id
    assert pq.read_schema(part / "part-00000.parquet").metadata[b"settopk.run_id"] == submission_id.encode()

    again = ray_head.ray_job("submit", "--submission-id", submission_id, "--no-wait", "--", "true")
    assert again.returncode != 0 and "already exists" in again.stdout + again.stderr  # a date-based id runs once

    unpacked = [p for p in ray_head.tmp.glob("session_*/runtime_resources/working_dir_files/*") if (p / "settopk" / "jobs").is_dir()]
    assert unpacked, "Ray's copy of the working directory was not found on the head"
    for copy in unpacked:
        assert (copy / "settopk" / "jobs" / "score.py").is_file()
        assert not [n for n in _NOT_SOURCE if (copy / n).exists()], sorted(p.name for p in copy.iterdir())


@pytest.mark.slow
@pytest.mark.timeout(HEAD_START_TIMEOUT_S + JOB_TIMEOUT_S)
def test_failing_job_ends_failed_with_the_error_in_its_logs(ray_head, tmp_path):
    docs_path = tmp_path / "docs.txt"
    docs_path.write_text("1,2\n3,x\n")
    queries_path = _write_sets(tmp_path / "queries.txt", [[1, 2]])
    submission_id = f"settopk-test-bad-{uuid.uuid4().hex[:8]}"

    done = ray_head.ray_job(
        "submit",
        *_submit_args(submission_id, "--docs", str(docs_path), "--queries", str(queries_path), "--out", str(tmp_path / "out"), "--quiet"),
    )
    assert done.returncode == 1, done.stdout + done.stderr  # `ray job submit` exits 1 for a FAILED job
    client = ray_head.client()
    assert client.get_job_status(submission_id).value == "FAILED"
    info = client.get_job_info(submission_id)
    assert info.driver_exit_code == score.EXIT_BAD_INPUT
    logs = client.get_job_logs(submission_id)
    assert f"{docs_path}:2 (1-based line): expected" in logs and "'x'" in logs, logs
    assert not (tmp_path / "out").exists()


def _ray_requirements():
    """settopk's declared Ray requirements: (the core one, those of the ``test`` extra)."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    reqs = [Requirement(r) for r in requires("settopk")]
    core = [r for r in reqs if r.name == "ray" and r.marker is None]
    assert len(core) == 1, core
    test_extra = [r for r in reqs if r.name == "ray" and r.marker is not None and r.marker.evaluate({"extra": "test"})]
    return core[0], test_extra


@pytest.mark.timeout(30)
def test_installed_ray_is_in_the_pinned_range():
    import ray

    core, test_extra = _ray_requirements()
    assert ray.__version__ in core.specifier, (ray.__version__, str(core.specifier))
    assert test_extra and all("default" in r.extras and r.specifier == core.specifier for r in test_extra)


@pytest.mark.timeout(30)
def test_one_console_script_and_one_top_level_package():
    from importlib.metadata import distribution

    dist = distribution("settopk")
    scripts = [ep for ep in dist.entry_points if ep.group == "console_scripts"]
    assert [(ep.name, ep.value) for ep in scripts] == [("settopk", "settopk.cli:main")] and callable(scripts[0].load())


def _score_args(command: str) -> list[str]:
    """The arguments of ``python -m settopk score`` in a shell command, up to any redirection."""
    words = shlex.split(command)
    at = next(i for i in range(len(words) - 2) if words[i:i + 3] == ["-m", "settopk", "score"])
    args = words[at + 3:]
    stops = [i for i, w in enumerate(args) if w in (">", ">>", "2>&1", "|", "&&", ";")]
    return args[: stops[0]] if stops else args


@pytest.mark.timeout(30)
def test_kuberay_rayjob_example_is_consistent():
    text = (DEPLOY / "rayjob-nightly.yaml").read_text()
    docs = list(yaml.safe_load_all(text))
    job = next(d for d in docs if d and d.get("kind") == "RayJob")
    assert job["apiVersion"] == "ray.io/v1"
    spec = job["spec"]
    # The cluster's Ray is the image's, and settopk in the image must accept it; the installed
    # Ray here may be another release of the supported range (CI tests both ends).
    ray_version = spec["rayClusterSpec"]["rayVersion"]
    assert ray_version in _ray_requirements()[0].specifier, ray_version
    assert re.findall(r"rayproject/ray:([0-9.]+)-", text) == [ray_version]
    if spec["rayClusterSpec"].get("authOptions", {}).get("mode") == "token":  # Ray's token authentication came in 2.52
        assert ray_version in SpecifierSet(">=2.52"), ray_version
    args = score.build_parser().parse_args(_score_args(spec["entrypoint"]))
    assert args.config == "nightly" and args.quiet and args.docs and args.queries and os.path.isabs(args.out)
    assert spec["shutdownAfterJobFinishes"] is True and spec["backoffLimit"] >= 1


@pytest.mark.timeout(30)
def test_cron_example_parses():
    entries = [
        line for line in (DEPLOY / "settopk-nightly.cron").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#") and "=" not in line.split()[0]
    ]
    assert entries
    for line in entries:
        fields = line.split(None, 5)
        assert all(f.replace("*", "0").replace(",", "").replace("/", "").replace("-", "").isdigit() for f in fields[:5])
        command = fields[5].replace("\\%", "%")  # cron turns an unescaped % into a newline
        assert "%" not in fields[5].replace("\\%", "")
        command = command.replace('"$(date -u +%F)"', "2026-11-20")
        args = score.build_parser().parse_args(_score_args(command))
        assert args.config == "nightly" and args.quiet and str(args.date) == "2026-11-20"


def _checkout_with_odd_venvs(dst: pathlib.Path) -> pathlib.Path:
    """A copy of this checkout's tracked files, with virtualenvs not named ``.venv`` and build
    outputs beside them (what a developer's checkout may hold)."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs a git checkout (the tracked files are what is copied)")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dst / name)
    for venv in (".venv", "venv", "env", ".venv-test", "tools/py311"):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dst / venv)], check=True, timeout=120)
        assert (dst / venv / "pyvenv.cfg").exists()
        site = next((dst / venv / "lib").glob("python3*/site-packages"))
        (site / "big.bin").write_bytes(b"\0" * 2**20)  # stands for the packages
    for junk in ("build/lib/jobs/score.py", "dist/settopk-0.1.0-py3-none-any.whl", "settopk.egg-info/PKG-INFO",
                 "settopk/kernels/cuda/_ext.cpython-311-x86_64-linux-gnu.so", "settopk/jobs/__pycache__/score.cpython-311.pyc"):
        (dst / junk).parent.mkdir(parents=True, exist_ok=True)
        (dst / junk).write_text("x")
    return dst


_NOT_SOURCE = (".venv/", "venv/", "env/", ".venv-test/", "tools/", "build/", "dist/", "settopk.egg-info/")


@pytest.mark.timeout(120)
def test_runtime_env_excludes_any_virtualenv_and_build_outputs(tmp_path):
    """What `ray job submit --working-dir . --runtime-env settopk/configs/deploy/runtime-env.yaml` uploads,
    zipped by Ray's own packaging code, from a checkout whose venvs are not named `.venv`."""
    import inspect

    from ray._private.runtime_env.packaging import _zip_files

    checkout = _checkout_with_odd_venvs(tmp_path / "checkout")
    excludes = yaml.safe_load((DEPLOY / "runtime-env.yaml").read_text())["excludes"]
    # Later Rays take the .gitignore switch as an argument (what `ray job submit` passes: True);
    # earlier ones, Ray 2.50 among them, always honour .gitignore and have no such parameter.
    gitignore = {"include_gitignore": True} if "include_gitignore" in inspect.signature(_zip_files).parameters else {}
    _zip_files(str(checkout), excludes, str(tmp_path / "pkg.zip"), **gitignore)
    import zipfile

    names = set(zipfile.ZipFile(tmp_path / "pkg.zip").namelist())
    leaked = sorted(n for n in names if n.startswith(_NOT_SOURCE) or n.endswith((".so", ".pyc", ".whl")) or "pyvenv.cfg" in n)
    assert not leaked, leaked[:20]
    tracked = {str(p.relative_to(checkout)) for p in checkout.rglob("*") if p.is_file()} - {
        n for n in (str(p.relative_to(checkout)) for p in checkout.rglob("*") if p.is_file()) if n.startswith(_NOT_SOURCE)
        or n.endswith((".so", ".pyc", ".whl"))}
    assert tracked <= names, sorted(tracked - names)[:20]  # every source file goes


def _hold_default_ports() -> list[socket.socket]:
    """Listen on Ray's default ports where they are free, as another Ray on the machine would."""
    held = []
    for port in (6379, 8265, 10001, 52365):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
            held.append(s)
        except OSError:  # taken already: by someone else, which is the point
            s.close()
    return held


@pytest.mark.slow
@pytest.mark.timeout(HEAD_START_TIMEOUT_S + 2 * JOB_TIMEOUT_S)
def test_operations_recipe_runs_as_printed_with_the_default_ports_taken(tmp_path):
    missing = _head_dependencies_missing()
    if missing:
        pytest.skip(missing)
    import psutil

    text = (ROOT / "docs" / "operations.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S) if "ray start --head" in b)
    assert "ray stop" not in block.replace("`ray stop` would", "")
    block = block.replace("/tmp/settopk-corpus", str(tmp_path / "corpus")).replace("/tmp/settopk-demo", str(tmp_path / "demo"))
    home = tmp_path / "home"  # the recipe's auth token goes to ~/.ray: not the developer's
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0", PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    held = _hold_default_ports()
    head_dir = None
    try:
        done = subprocess.run(["bash", "-c", block + '\necho "HEAD_DIR=$HEAD_DIR"\n'], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=HEAD_START_TIMEOUT_S + 2 * JOB_TIMEOUT_S - 30)
        output = done.stdout + done.stderr
        head_dir = re.search(r"^HEAD_DIR=(\S+)$", done.stdout, flags=re.M).group(1)
        assert output.count("Job 'settopk-demo' succeeded") == 2, output[-5000:]  # `ray job logs --follow`, `ray job status`
        assert "submitted successfully" in output and "done: run settopk-demo" in output, output[-5000:]  # the job's log followed
        assert "the head did not come up" not in output
        manifest = read_manifest(tmp_path / "demo")
        assert manifest["run_id"] == "settopk-demo" and manifest["counts"]["n_queries"] == 50
        left = [p.info["pid"] for p in psutil.process_iter(["pid", "cmdline"]) if head_dir in " ".join(p.info["cmdline"] or [])]
        assert not left, f"processes of the recipe's head still running: {left}"
        for s in held:  # the ports another Ray held are still that Ray's
            assert s.fileno() != -1
    finally:
        for s in held:
            s.close()
        if head_dir:
            for p in psutil.process_iter(["pid", "cmdline"]):
                if head_dir in " ".join(p.info["cmdline"] or []):
                    p.kill()
            shutil.rmtree(head_dir, ignore_errors=True)
