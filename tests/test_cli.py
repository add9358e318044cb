"""The command lines: flags that override the config, ``--version``, each console script's own
name in its help, help text on every option, ``--dry-run``'s no-op note, progress units."""

from __future__ import annotations

import datetime
import json
import pathlib
import subprocess
import sys

import pytest

import settopk.jobs
from settopk.jobs import bench, make_corpus, score, verify
from settopk.jobs.output import manifest_path
from settopk.jobs.progress import progress_bar
from settopk.jobs.validate import locate_args, settle
from tests.job_helpers import job_config, write_sets

BIN = pathlib.Path(sys.executable).parent
COMMANDS = ("score", "verify", "make-corpus", "bench")
PARSERS = {"score": score.build_parser, "verify": verify.build_parser, "make_corpus": make_corpus.build_parser,
           "bench": bench.build_parser}


@pytest.mark.parametrize("command", [c if c == COMMANDS[0] else pytest.param(c, marks=pytest.mark.slow) for c in COMMANDS])
def test_console_script_help_and_version_show_its_own_name(command):
    script = BIN / "settopk"
    if not script.exists():
        pytest.skip(f"settopk is not installed beside {sys.executable} (pip install -e .)")
    shown = subprocess.run([str(script), command, "--help"], capture_output=True, text=True, timeout=120, check=True).stdout
    assert shown.startswith(f"usage: settopk {command} ")
    version = subprocess.run([str(script), command, "--version"], capture_output=True, text=True, timeout=120, check=True).stdout
    assert version.strip() == f"settopk {command} {settopk.jobs.package_version()}" and settopk.jobs.package_version() != "unknown"


def test_settopk_lists_its_subcommands_and_refuses_others():
    shown = subprocess.run([sys.executable, "-m", "settopk", "--help"], capture_output=True, text=True, timeout=120, check=True).stdout
    assert shown.startswith("usage: python -m settopk ") and all(c in shown for c in COMMANDS)
    bad = subprocess.run([sys.executable, "-m", "settopk", "search"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "invalid choice: 'search'" in bad.stderr


def test_module_help_names_the_module(capsys):
    with pytest.raises(SystemExit) as exc:
        score.main(["--help"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("usage: python -m settopk score ")


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_option_has_help_text(name):
    parser = PARSERS[name]()
    missing = [a.option_strings for a in parser._actions if not (a.help and a.help.strip())]
    assert not missing, f"{name}: options without help: {missing}"


def _settle(tmp_path, *argv):
    """The settled job of these arguments, its output lock already released (only its config is read)."""
    args = locate_args(score.build_parser().parse_args(["--out", str(tmp_path / "out"), *argv]))
    job = settle(args, datetime.datetime.now(datetime.timezone.utc))
    if job.lock is not None:
        job.lock.release()
    return job


def test_flags_override_the_config(tmp_path):
    docs = write_sets(tmp_path / "docs.txt", [[1, 2], [2, 3]])
    cfg_file = job_config(tmp_path, backend="cupy", routing="scan", n_shards=3, replicas=2, query_batch_size=64)
    job = _settle(tmp_path, "--docs", docs, "--queries", docs, "--config", cfg_file, "--backend", "numpy",
                  "--routing", "postings", "--shards", "2", "--replicas", "1", "--query-batch-size", "7")
    cfg = job.cfg
    assert (cfg.backend, cfg.routing, cfg.n_shards, cfg.replicas, cfg.query_batch_size) == ("numpy", "postings", 2, 1, 7)
    job = _settle(tmp_path, "--docs", docs, "--queries", docs, "--config", cfg_file, "--shards", "auto", "--query-batch-size", "auto")
    assert (job.cfg.backend, job.cfg.n_shards, job.cfg.query_batch_size) == ("cupy", "auto", "auto")  # the rest: the file's


@pytest.mark.parametrize("flag, value", [
    ("--backend", "gpu"), ("--routing", "index"), ("--shards", "0"), ("--shards", "two"), ("--replicas", "0"),
    ("--replicas", "auto"), ("--query-batch-size", "-5"), ("--k", "0"),
])
def test_bad_flag_values_exit_2_naming_the_flag(flag, value, capsys):
    with pytest.raises(SystemExit) as exc:
        score.main([flag, value, "--dry-run"])
    assert exc.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


@pytest.mark.usefixtures("ray_cluster")
def test_dry_run_says_the_run_would_be_a_no_op(tmp_path, capsys):
    docs = write_sets(tmp_path / "docs.txt", [[1, 2], [2, 3], [4]])
    base = ["--docs", docs, "--queries", docs, "--config", job_config(tmp_path), "--dry-run"]
    out = tmp_path / "out"
    assert score.main(base + ["--out", str(out)]) == 0
    assert "no-op" not in capsys.readouterr().out
    out.mkdir()
    (out / "_SUCCESS").write_text("")  # what marks a finished result (settopk.jobs.output) ...
    manifest_path(out).parent.mkdir()
    manifest_path(out).write_text("{}")  # ... with its run record: a settopk result
    assert score.main(base + ["--out", str(out)]) == 0
    assert f"no-op: {out} already holds a finished result" in capsys.readouterr().out
    assert score.main(base + ["--out", str(out), "--force"]) == 0
    assert "no-op" not in capsys.readouterr().out


def test_progress_units_read_as_a_person_would(monkeypatch, capsys):
    # Under a Ray job (its config in the environment) the bar is drawn at once, in the job log.
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"metadata": {"job_submission_id": "raysubmit_x"}}))
    for desc, total, unit, step in (("read", 40, "pieces", 3), ("load", 1, "shards", 1), ("search", 3_000_000, "queries", 1_200_000)):
        bar = progress_bar(desc, total, unit, quiet=False)
        bar.update(step)
        bar.close()
    err = capsys.readouterr().err
    assert "3/40 pieces" in err and " pieces/s" in err
    assert "1/1 shards" in err and "1.00" not in err.split("search")[0]
    assert "1.20M/3.00M queries" in err and "queries/s" in err and "Mquery" not in err
    slow = progress_bar("read", 4, "pieces", quiet=False)
    slow.start_t -= 200  # a piece every 100 s: tqdm would otherwise invert the rate ("100.00s/ pieces")
    slow.last_print_t -= 200
    slow.update(2)
    slow.close()
    err = capsys.readouterr().err
    assert "2/4 pieces" in err and "0.01 pieces/s" in err and "s/ pieces" not in err
    assert progress_bar("read", 40, "pieces", quiet=True).update(1) is None and not capsys.readouterr().err


def _under_ray_job(monkeypatch, submission_id="raysubmit_test"):
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"metadata": {"job_submission_id": submission_id}}))


@pytest.mark.parametrize("out_args", [[], ["--out", "results"], ["--out", "results", "--tsv", "/tmp/x.tsv"],
                                      ["--out", "/abs/results", "--tsv", "x.tsv"]])
def test_relative_output_under_a_ray_job_is_refused(tmp_path, monkeypatch, caplog, out_args):
    docs = write_sets(tmp_path / "docs.txt", [[1, 2], [2, 3]])
    _under_ray_job(monkeypatch)
    monkeypatch.chdir(tmp_path)
    with caplog.at_level("ERROR", logger="settopk"):
        code = score.main(["--docs", docs, "--queries", docs, "--config", job_config(tmp_path), "--quiet", *out_args])
    assert code == 2
    assert "give an absolute path or a URI" in caplog.text and "raysubmit_test" in caplog.text
    if not out_args:
        assert "out/settopk-results (the default)" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "docs.txt"]  # nothing written


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_summary_line_names_the_absolute_result_path_and_quiet_stays_silent(tmp_path, monkeypatch, caplog, capsys):
    docs = write_sets(tmp_path / "docs.txt", [[1, 2], [2, 3], [4]])
    monkeypatch.chdir(tmp_path)
    args = ["--docs", docs, "--queries", docs, "--config", job_config(tmp_path), "--out", "rel-out"]
    with caplog.at_level("INFO", logger="settopk"):
        assert score.main(args) == 0
    done = [r.getMessage() for r in caplog.records if r.getMessage().startswith("done: run")]
    assert len(done) == 1 and f"-> {tmp_path / 'rel-out'} |" in done[0]
    capsys.readouterr()
    assert score.main(args + ["--force", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "done" not in captured.err
