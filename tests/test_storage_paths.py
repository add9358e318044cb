"""The job's path checks with URIs: outputs apart from inputs, and a URI output under a Ray job."""

from __future__ import annotations

import argparse

import pytest

from settopk.jobs.run import check_outputs_absolute_under_ray_job
from settopk.jobs.output import PathError
from settopk.jobs.target import check_outputs_apart
from settopk.jobs.validate import UsageError, locate_args


@pytest.mark.parametrize("out, given", [
    ("s3://b/data", "s3://b/data"),
    ("s3://b/data/out", "s3://b/data"),
    ("s3://b//data/", "s3://b/data/docs.txt"),
    ("S3://b/data/out", "s3a://b/data"),
])
def test_uri_outputs_overlapping_uri_inputs_are_refused(out, given):
    with pytest.raises(PathError, match=r"--out .*: expected an output apart from the inputs"):
        check_outputs_apart({"--out": out}, {"--docs": given})


@pytest.mark.parametrize("out, given", [
    ("s3://b/data-out", "s3://b/data"),
    ("s3://b/data", "s3://c/data"),
    ("s3://b/data", "gs://b/data"),
])
def test_uri_outputs_apart_from_uri_inputs_pass(out, given):
    check_outputs_apart({"--out": out}, {"--docs": given})


def test_a_uri_and_a_local_path_never_overlap(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "b").mkdir()
    check_outputs_apart({"--out": "s3://b/data"}, {"--docs": "b/data"})
    check_outputs_apart({"--out": str(tmp_path / "out")}, {"--docs": f"s3://b{tmp_path}/out"})  # the same key, another store


def test_a_file_uri_is_compared_as_the_local_path(tmp_path):
    (tmp_path / "in").mkdir()
    with pytest.raises(PathError, match="lies inside --queries"):
        check_outputs_apart({"--out": str(tmp_path / "in" / "out")}, {"--queries": f"file://{tmp_path}/in"})


def _args(out, tsv=None):
    return locate_args(argparse.Namespace(out=out, tsv=tsv))


def test_a_uri_output_passes_under_a_ray_job(monkeypatch):
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", '{"metadata": {"job_submission_id": "raysubmit_uri"}}')
    check_outputs_absolute_under_ray_job(_args("s3://b/results", "gs://b/results.tsv"))
    with pytest.raises(UsageError, match=r"--out results is a relative path.*give an absolute path or a URI"):
        check_outputs_absolute_under_ray_job(_args("results"))
