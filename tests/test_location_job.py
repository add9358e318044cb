"""A run with credentials in every URI (``s3://KEY:SECRET@bucket/...``) against moto's S3 server on
localhost: it works, and the secrets appear in none of the bytes it wrote.

The runs: one killed mid-run (its committed parts stay in the store), its rerun with a rotated key
(it resumes them), a rerun with another key (a no-op: the same inputs and settings), and a run on
a bad input (exit 2). Then the log of every run, every object in the store and every local file
the runs wrote are searched for each secret.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse

import numpy as np
import pyarrow.fs as pafs
import pytest

from settopk.jobs.output import read_manifest, work_dir
from tests.job_helpers import ROOT, write_sets
from tests.test_storage_inputs import upload

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

_DRIVER = """
import json, sys
import ray
from settopk.jobs import score

ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=256 * 2**20, log_to_driver=False)
print("RESULTS " + json.dumps([score.main(argv) for argv in json.loads(sys.argv[1])]), flush=True)
"""
SECRETS = {"first": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYFIRSTKEY", "rotated": "je7MtGbClwBF/2Zp9Utk+h3yCo8nvROTATED",
           "third": "AbCdEfGhIjKlMnOpQrStUvWxYz0123456THIRD"}
N_QUERIES = 400


def _with_key(uri: str, key: str, secret: str) -> str:
    """``s3://bucket/...`` with ``KEY:SECRET@`` (percent-encoded, as a URI needs) before the bucket."""
    return uri.replace("s3://", f"s3://{key}:{urllib.parse.quote(secret, safe='')}@", 1)


def _forms(secret: str) -> list[bytes]:
    return [form.encode() for form in {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}]


def _driver(runs: list[list[str]]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen([sys.executable, "-c", _DRIVER, json.dumps(runs)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc: subprocess.Popen) -> tuple[list[int], bytes]:
    stdout, stderr = proc.communicate(timeout=500)
    lines = [line for line in stdout.decode().splitlines() if line.startswith("RESULTS ")]
    assert proc.returncode == 0 and lines, (stdout[-3000:] + stderr[-5000:]).decode(errors="replace")
    return json.loads(lines[-1][len("RESULTS "):]), stdout + stderr


def _parts(s3, work) -> int:
    path = str(work).split("://", 1)[1]
    infos = s3.filesystem().get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sum(1 for i in infos if i.base_name.startswith("part-"))


def _every_object(s3) -> dict[str, bytes]:
    fs = s3.filesystem()
    out = {}
    for info in fs.get_file_info(pafs.FileSelector("", recursive=True)):
        if info.type == pafs.FileType.File:
            with fs.open_input_stream(info.path) as f:
                out[info.path] = f.read()
    return out


@pytest.fixture(scope="module")
def runs(s3, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("location-job")
    rng = np.random.default_rng(11)
    (tmp / "in").mkdir()
    write_sets(tmp / "in" / "docs.txt", [rng.choice(40, size=rng.integers(0, 12), replace=False).tolist() for _ in range(2000)])
    write_sets(tmp / "in" / "queries.txt", [rng.choice(40, size=rng.integers(0, 12), replace=False).tolist() for _ in range(N_QUERIES)])
    (tmp / "in" / "bad.txt").write_text("1,2\n3\n4,5.5\n")
    bucket = s3.bucket("secret-job")
    upload(s3, tmp / "in", f"{bucket}/in")
    cfg = tmp / "c.yaml"  # one query per batch, 20 per chunk: many small parts, so a kill lands mid-run
    cfg.write_text("backend: numpy\nn_shards: 1\ncpus_per_shard: 0.5\nquery_batch_size: 1\nquery_chunk_size: 20\n")

    def argv(who: str, docs: str = "docs.txt") -> list[str]:
        key, secret = f"AKID{who.upper()}", SECRETS[who]
        return ["--docs", _with_key(f"{bucket}/in/{docs}", key, secret), "--queries", _with_key(f"{bucket}/in/queries.txt", key, secret),
                "--out", _with_key(f"{bucket}/results", key, secret), "--tsv", _with_key(f"{bucket}/results.tsv", key, secret),
                "--k", "10", "--config", str(cfg), "--run-id", "run-1"]

    work = work_dir(f"{bucket}/results")  # the same with or without credentials
    killed = _driver([argv("first")])  # not --quiet: the progress bars are searched too
    deadline = time.monotonic() + 300
    while _parts(s3, work) < 2 and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    killed.send_signal(signal.SIGKILL)
    out, err = killed.communicate(timeout=60)
    committed = _parts(s3, work)
    codes, log = _finish(_driver([argv("rotated"), argv("third"), argv("third", "bad.txt") + ["--force"]]))
    return {"codes": codes, "committed": committed, "killed": killed.returncode, "log": out + err + log,
            "bucket": bucket, "tmp": tmp, "objects": _every_object(s3)}


def test_the_runs_work_with_credentials_in_every_uri(runs):
    assert runs["killed"] == -signal.SIGKILL and runs["committed"] >= 2, "the first run must be killed mid-run"
    assert runs["codes"] == [0, 0, 2]
    manifest = read_manifest(f"{runs['bucket']}/results")
    assert manifest["counts"]["chunks_resumed"] >= runs["committed"] - 1  # resumed under a rotated key
    assert manifest["counts"]["n_queries"] == N_QUERIES and manifest["run_id"] == "run-1"
    assert manifest["inputs"]["docs"]["path"].startswith("s3://AKIDROTATED:***@secret-job/in/docs.txt")
    assert manifest["args"]["out"].startswith("s3://AKIDROTATED:***@secret-job/results")
    log = runs["log"].decode(errors="replace")
    assert "already holds a finished result of these inputs and settings; nothing to do" in log  # the third key: a no-op
    assert "s3://AKIDTHIRD:***@secret-job/in/bad.txt" in log and "3 (1-based line)" in log  # exit 2 names it, redacted
    assert f"{runs['bucket'][5:]}/results.tsv" in runs["objects"]


def test_no_secret_in_any_byte_the_runs_wrote(runs):
    written = {"the log": runs["log"], **{f"object {k}": v for k, v in runs["objects"].items()}}
    for path in runs["tmp"].rglob("*"):
        if path.is_file():
            written[f"local file {path}"] = path.read_bytes()
    assert len(written) > 5
    for who, secret in SECRETS.items():
        for form in _forms(secret):
            leaks = [name for name, data in written.items() if form in data]
            assert not leaks, f"the {who} secret ({form!r}) is in {leaks}"
