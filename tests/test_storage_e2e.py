"""End to end on object storage: ``jobs.score`` with ``--docs``, ``--queries``, ``--out`` and
``--tsv`` all in buckets of moto's S3 server on localhost, against the same run on local copies.

One driver process with its own local Ray cluster runs every job, started after the ``s3``
fixture set the AWS settings (Ray workers keep the environment their cluster started with):
reader and merge tasks open the store themselves on their worker.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest


from jobs.location import Place  # noqa: E402
from jobs.output import open_results, read_manifest, rejected_path  # noqa: E402
from shards import storage  # noqa: E402
from tests.job_helpers import job_config  # noqa: E402
from tests.test_storage_inputs import upload  # noqa: E402
from tests.test_storage_job import _inputs, _run_all  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _rows(table) -> list[tuple]:
    return sorted(zip(*(table[name].to_pylist() for name in table.column_names)))


@pytest.fixture(scope="module")
def e2e(s3, tmp_path_factory):
    """The runs: ``{name: result}``, with the local root, the input URI and the output bucket."""
    tmp = tmp_path_factory.mktemp("storage-e2e")
    local = _inputs(tmp / "in")
    (local / "quarantine.txt").write_text("1,2\n3\nnot,ids\n4\n")
    uri = upload(s3, local, f"{s3.bucket('e2e-inputs')}/in")
    out = s3.bucket("e2e-results")
    config, self_join = job_config(tmp, k=5), job_config(tmp, "self", k=5, self_join="true")
    quarantine = job_config(tmp, "quarantine", k=5, on_invalid="quarantine")
    plan = {
        "local": ["--docs", f"{local}/docs", "--queries", f"{local}/qdir", "--config", config, "--out", str(tmp / "local"),
                  "--tsv", str(tmp / "local.tsv")],
        "store": ["--docs", f"{uri}/docs", "--queries", f"{uri}/qdir", "--config", config, "--out", f"{out}/results",
                  "--tsv", f"{out}/results.tsv"],
        "self_local": ["--docs", f"{local}/docs.txt", "--config", self_join, "--out", str(tmp / "self")],
        "self_store": ["--docs", f"{uri}/docs.txt", "--config", self_join, "--out", f"{out}/self"],
        "quarantine": ["--docs", f"{uri}/quarantine.txt", "--queries", f"{uri}/queries.txt", "--config", quarantine,
                       "--out", f"{out}/quarantine"],
        "out_in_input": ["--docs", f"{uri}/docs", "--queries", f"{uri}/qdir", "--config", config, "--out", f"{uri}/docs/results"],
    }
    results = _run_all([argv + ["--quiet"] for argv in plan.values()])
    return dict(zip(plan, results)), tmp, uri, out


def test_inputs_and_output_in_buckets_give_the_local_result(e2e):
    runs, tmp, uri, out = e2e
    assert runs["local"]["code"] == 0 and runs["store"]["code"] == 0, (runs["local"], runs["store"])
    there = open_results(f"{out}/results").to_table()
    assert there.num_rows > 0 and _rows(there) == _rows(pq.read_table(tmp / "local"))
    assert Place.of(f"{out}/results.tsv").read_bytes() == (tmp / "local.tsv").read_bytes()


def test_the_manifest_names_the_input_and_output_uris(e2e):
    _, _, uri, out = e2e
    manifest = read_manifest(f"{out}/results")
    assert manifest["inputs"]["docs"]["path"] == f"{uri}/docs"
    assert manifest["inputs"]["docs"]["files"] == [f"{uri}/docs/part-{i}.parquet" for i in range(3)]
    assert manifest["inputs"]["queries"]["path"] == f"{uri}/qdir"
    assert manifest["output"]["path"] == f"{out}/results"


def test_a_self_join_in_buckets_gives_the_local_result(e2e):
    runs, tmp, _, out = e2e
    assert runs["self_local"]["code"] == 0 and runs["self_store"]["code"] == 0, (runs["self_local"], runs["self_store"])
    assert _rows(open_results(f"{out}/self").to_table()) == _rows(pq.read_table(tmp / "self"))


def test_quarantined_lines_in_a_bucket_are_listed_by_uri(e2e):
    runs, _, uri, out = e2e
    assert runs["quarantine"]["code"] == 0, runs["quarantine"]
    fs, path = storage.resolve(rejected_path(f"{out}/quarantine"))
    rejected = pq.read_table(path, filesystem=fs).to_pylist()
    assert [(r["input"], r["path"], r["line"]) for r in rejected] == [("docs", f"{uri}/quarantine.txt", 3)]
    assert read_manifest(f"{out}/quarantine")["counts"]["rejected_docs"] == 1


def test_an_output_inside_an_input_prefix_is_exit_2(e2e):
    runs, _, uri, _ = e2e
    result = runs["out_in_input"]
    assert result["code"] == 2
    assert any(f"--out {uri}/docs/results: expected an output apart from the inputs" in line for line in result["log"]), result["log"]


def test_verify_rechecks_a_result_with_everything_in_buckets(e2e):
    from jobs import verify

    _, tmp, uri, out = e2e
    assert verify.main(["--docs", f"{uri}/docs", "--queries", f"{uri}/qdir", "--results", f"{out}/results",
                        "--config", str(tmp / "c.yaml"), "--sample", "10"]) == 0
