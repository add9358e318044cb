"""Bad paths and bad arguments stop the job with exit 2 before any work, inputs untouched and
nothing written: outputs overlapping inputs, unwritable outputs, special files as inputs, k out
of range, a rerun with other inputs or settings, and a second run on a locked output."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

from settopk.jobs import score
from settopk.jobs.lock import lock_output, output_lock_path
from settopk.jobs.output import manifest_path, read_manifest, rejected_path
from tests.job_helpers import ROOT, job_config, result_rows, write_sets

DOCS = [[1, 2, 3], [2, 3], [3, 4, 5], [1, 5], [7]]
QUERIES = [[1, 2], [3, 5], [7, 1]]


def _inputs(tmp_path):
    docs = write_sets(tmp_path / "docs.txt", DOCS)
    qdir = tmp_path / "queries"
    qdir.mkdir()
    for i, q in enumerate(QUERIES):
        (qdir / f"q{i}").write_text(",".join(map(str, q)) + "\n")
    return docs, str(qdir)


def _snapshot(*paths):
    """Every file under ``paths`` with its bytes, to show the inputs stayed untouched."""
    out = {}
    for p in map(pathlib.Path, paths):
        for f in [p] if p.is_file() else sorted(p.rglob("*")):
            out[str(f)] = f.read_bytes() if f.is_file() else None
    return out


def _refused(tmp_path, caplog, args, *needles):
    """Run with ``args``; assert exit 2, a message holding ``needles``, and nothing new in tmp_path."""
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with caplog.at_level(logging.ERROR, logger="settopk"):
        code = score.main([*args, "--quiet"])
    assert code == 2, caplog.text
    for needle in needles:
        assert needle in caplog.text, (needle, caplog.text)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before, "nothing may be written"
    return caplog.text


# (1) outputs never overlap inputs

def test_tsv_naming_the_docs_file_is_refused_and_the_docs_stay(tmp_path, caplog):
    docs, queries = _inputs(tmp_path)
    kept = _snapshot(docs, queries)
    cfg = job_config(tmp_path)
    text = _refused(tmp_path, caplog, ["--docs", docs, "--queries", queries, "--out", str(tmp_path / "out"), "--config", cfg,
                                       "--tsv", str(tmp_path / "." / "docs.txt")], "--tsv", "--docs", "replace")
    assert "expected an output apart from the inputs" in text
    assert _snapshot(docs, queries) == kept


def test_out_inside_the_queries_directory_is_refused(tmp_path, caplog):
    docs, queries = _inputs(tmp_path)
    _refused(tmp_path, caplog, ["--docs", docs, "--queries", queries, "--out", str(pathlib.Path(queries) / "out"),
                                "--config", job_config(tmp_path)], "--out", "lies inside --queries")


def test_out_holding_an_input_and_tsv_inside_out_are_refused(tmp_path, caplog):
    docs, queries = _inputs(tmp_path)
    cfg = job_config(tmp_path)
    _refused(tmp_path, caplog, ["--docs", docs, "--queries", queries, "--out", str(tmp_path), "--config", cfg], "inside it")
    caplog.clear()
    _refused(tmp_path, caplog, ["--docs", docs, "--queries", queries, "--out", str(tmp_path / "o"), "--config", cfg,
                                "--tsv", str(tmp_path / "o" / "r.tsv")], "--tsv", "--out")


def test_an_input_inside_the_run_record_or_a_tsv_there_is_refused(tmp_path, caplog):
    """The run record ``OUT.run`` beside the result is an output too: it must not hold an input."""
    docs, queries = _inputs(tmp_path)
    cfg = job_config(tmp_path)
    record = tmp_path / "out.run"
    record.mkdir()
    moved = record / "docs.txt"
    pathlib.Path(docs).rename(moved)
    _refused(tmp_path, caplog, ["--docs", str(moved), "--queries", queries, "--out", str(tmp_path / "out"), "--config", cfg],
             "--out (its run record)", "--docs")
    caplog.clear()
    _refused(tmp_path, caplog, ["--docs", str(moved), "--queries", queries, "--out", str(tmp_path / "o"), "--config", cfg,
                                "--tsv", str(tmp_path / "o.run" / "r.tsv")], "--tsv", "--out (its run record)")


def test_tsv_through_a_symlink_to_an_input_is_refused(tmp_path, caplog):
    docs, queries = _inputs(tmp_path)
    (tmp_path / "link.tsv").symlink_to(docs)
    kept = _snapshot(docs)
    _refused(tmp_path, caplog, ["--docs", docs, "--queries", queries, "--out", str(tmp_path / "out"),
                                "--config", job_config(tmp_path), "--tsv", str(tmp_path / "link.tsv")], "--tsv")
    assert _snapshot(docs) == kept


# (2) special files refused for every input path, never a hang

@pytest.mark.parametrize("where", ["docs", "queries", "query_file", "parquet_dir"])
def test_a_fifo_as_input_is_refused_without_hanging(tmp_path, caplog, where):
    docs, queries = _inputs(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    args = {"docs": docs, "queries": queries}
    if where in ("docs", "queries"):
        args[where] = str(fifo)
    elif where == "query_file":
        os.rename(fifo, pathlib.Path(queries) / "q9")
        fifo = pathlib.Path(queries) / "q9"
    else:
        pdir = tmp_path / "pq"
        pdir.mkdir()
        os.rename(fifo, pdir / "a.parquet")
        fifo = pdir / "a.parquet"
        args["docs"] = str(pdir)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("code", score.main(
        ["--docs", args["docs"], "--queries", args["queries"], "--out", str(tmp_path / "out"), "--config", job_config(tmp_path), "--quiet"])), daemon=True)
    with caplog.at_level(logging.ERROR, logger="settopk"):
        t.start()
        t.join(60)
    if t.is_alive():  # unblock the reader so the test process can end
        with open(fifo, "wb"):
            pass
        pytest.fail("the job hung on a FIFO")
    assert result["code"] == 2
    assert "FIFO" in caplog.text or "special file" in caplog.text
    assert not (tmp_path / "out").exists()


# (3) every output checked writable before the search

def test_tsv_a_directory_or_in_a_missing_directory_is_refused_before_the_search(tmp_path, caplog):
    docs, queries = _inputs(tmp_path)
    cfg = job_config(tmp_path)
    (tmp_path / "adir").mkdir()
    base = ["--docs", docs, "--queries", queries, "--out", str(tmp_path / "out"), "--config", cfg]
    _refused(tmp_path, caplog, [*base, "--tsv", str(tmp_path / "adir")], "--tsv", "found a directory")
    caplog.clear()
    _refused(tmp_path, caplog, [*base, "--tsv", str(tmp_path / "missing" / "r.tsv")], "--tsv", "found nothing there")


def test_outputs_on_an_unwritable_filesystem_are_refused_with_the_reason(tmp_path, caplog):
    docs, queries = _inputs(tmp_path)
    cfg = job_config(tmp_path)
    base = ["--docs", docs, "--queries", queries, "--config", cfg]
    # /proc takes no new files, even from root: it stands in for a read-only filesystem.
    _refused(tmp_path, caplog, [*base, "--out", str(tmp_path / "out"), "--tsv", "/proc/r.tsv"], "--tsv /proc/r.tsv", "not writable")
    caplog.clear()
    text = _refused(tmp_path, caplog, [*base, "--out", "/proc/settopk-out"], "--out /proc/settopk-out", "not writable")
    assert "Traceback" not in text


# (4), (9) k bounds, named after where they came from

@pytest.mark.parametrize("k", ["0", "-3", "33000", "1000000000"])
def test_k_out_of_range_on_the_command_line_is_refused_naming_k(tmp_path, capsys, k):
    docs, queries = _inputs(tmp_path)
    config = job_config(tmp_path)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exc:
        score.main(["--docs", docs, "--queries", queries, "--out", str(tmp_path / "out"),
                    "--config", config, "--k", k, "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --k" in err and "32767" in err and repr(k) in err, err
    assert "c.yaml" not in err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before, "nothing may be written"


def test_k_out_of_range_in_the_config_names_the_config(tmp_path, caplog):
    docs, queries = _inputs(tmp_path)
    _refused(tmp_path, caplog, ["--docs", docs, "--queries", queries, "--out", str(tmp_path / "out"),
                                "--config", job_config(tmp_path, k=40000)], "c.yaml", "k must be in [1, 32767]")


def test_k_at_the_limit_on_a_tiny_corpus_runs_with_buffers_of_the_corpus_size(tmp_path, ray_cluster):
    docs, queries = _inputs(tmp_path)
    out = tmp_path / "out"
    assert score.main(["--docs", docs, "--queries", queries, "--out", str(out), "--config", job_config(tmp_path),
                       "--k", "32767", "--quiet"]) == 0
    rows = result_rows(out)
    assert len(rows) == len(QUERIES) * len(DOCS)
    assert max(r[1] for r in rows) == len(DOCS)  # rank


# (8) hidden entries in a query directory are skipped

def test_hidden_files_in_a_query_directory_are_skipped(tmp_path, ray_cluster):
    docs, queries = _inputs(tmp_path)
    (pathlib.Path(queries) / ".DS_Store").write_bytes(b"\x00\x01Bud1\x00garbage\n\x00")
    (pathlib.Path(queries) / ".hidden").write_text("1,2,3\n")
    (pathlib.Path(queries) / "_SUCCESS").write_text("")
    out = tmp_path / "out"
    assert score.main(["--docs", docs, "--queries", queries, "--out", str(out), "--config", job_config(tmp_path), "--k", "2", "--quiet"]) == 0
    assert sorted({r[0] for r in result_rows(out)}) == ["q0", "q1", "q2"]


# (6) a rerun on a finished result: same is a no-op, different is refused, --force replaces

@pytest.mark.slow
def test_rerun_with_other_inputs_or_settings_is_refused_naming_what_differs(tmp_path, ray_cluster, caplog):
    docs, queries = _inputs(tmp_path)
    cfg = job_config(tmp_path)
    out = tmp_path / "out"
    base = ["--docs", docs, "--queries", queries, "--out", str(out), "--config", cfg, "--quiet"]
    assert score.main([*base, "--k", "2"]) == 0
    made = manifest_path(out).read_text()
    assert score.main([*base, "--k", "2"]) == 0  # same: a no-op
    assert manifest_path(out).read_text() == made
    other_docs = write_sets(tmp_path / "docs2.txt", DOCS[:3])
    for extra, needle in ((["--k", "3"], "k (2 there, 3 now)"), (["--k", "2", "--score", "jaccard"], "score"),
                          (["--k", "2", "--docs", other_docs], "the docs")):
        caplog.clear()
        args = [*base, *extra]
        with caplog.at_level(logging.ERROR, logger="settopk"):
            assert score.main(args) == 2, extra
        assert needle in caplog.text and "--force" in caplog.text, caplog.text
        assert manifest_path(out).read_text() == made
    assert score.main([*base, "--k", "3", "--force"]) == 0
    assert read_manifest(out)["config"]["k"] == 3


@pytest.mark.slow
def test_rerun_under_quarantine_with_a_rejected_query_file_is_a_no_op(tmp_path, ray_cluster):
    docs, queries = _inputs(tmp_path)
    (pathlib.Path(queries) / "bad").write_text("1,x\n")
    cfg = job_config(tmp_path, on_invalid="quarantine")
    out = tmp_path / "out"
    base = ["--docs", docs, "--queries", queries, "--out", str(out), "--config", cfg, "--k", "2", "--quiet"]
    assert score.main(base) == 0
    made = manifest_path(out).read_text()
    assert score.main(base) == 0
    assert manifest_path(out).read_text() == made


def _spark_output(directory):
    """A directory as Spark leaves it, with a user's file beside: not a settopk result."""
    directory.mkdir(parents=True)
    (directory / "_SUCCESS").write_bytes(b"")
    (directory / "part-00000-c000.snappy.parquet").write_bytes(b"PAR1 not settopk's PAR1")
    (directory / "important.txt").write_text("the user's notes\n")
    return directory


@pytest.mark.parametrize("extra", [[], ["--force"], ["--dry-run"], ["--dry-run", "--force"]])
def test_an_out_that_is_not_a_settopk_result_is_never_replaced(tmp_path, caplog, extra):
    """Another tool's directory with ``_SUCCESS`` has no settopk run record: refused, --force or not."""
    docs, queries = _inputs(tmp_path)
    out = _spark_output(tmp_path / "out")
    kept = _snapshot(out)
    text = _refused(tmp_path, caplog, ["--docs", docs, "--queries", queries, "--out", str(out), "--config",
                                       job_config(tmp_path), *extra],
                    f"{out}: expected a new or empty directory or a settopk result", "is not a settopk result",
                    "important.txt", "part-00000-c000.snappy.parquet", "choose another --out, or move those files away")
    assert "could not be read" not in text and "pass --force" not in text
    assert _snapshot(out) == kept


def test_a_nightly_partition_that_is_not_a_settopk_result_is_never_replaced(tmp_path, caplog):
    docs, queries = _inputs(tmp_path)
    root = tmp_path / "nightly"
    partition = _spark_output(root / "dt=2026-11-20")
    kept = _snapshot(root)
    cfg = job_config(tmp_path, output={"partition": "dt"})
    for extra in ([], ["--force"]):
        caplog.clear()
        _refused(tmp_path, caplog, ["--docs", docs, "--queries", queries, "--out", str(root), "--date", "2026-11-20",
                                    "--config", cfg, *extra], f"{partition}:", "is not a settopk result", "important.txt")
        assert _snapshot(root) == kept


def test_a_directory_of_other_files_is_never_replaced(tmp_path, caplog):
    """No ``_SUCCESS`` and no run record: not a settopk run's leftover either."""
    docs, queries = _inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "important.txt").write_text("keep\n")
    _refused(tmp_path, caplog, ["--docs", docs, "--queries", queries, "--out", str(out), "--config", job_config(tmp_path),
                                "--force"], "is not a settopk result", "important.txt")
    assert (out / "important.txt").read_text() == "keep\n"


# (7) one run at a time on an output

_HOLD = """
import sys, time
sys.path.insert(0, {root!r})
from settopk.jobs.lock import lock_output
lock = lock_output({out!r}, {out!r}, "holder-run")
print("locked", flush=True)
time.sleep(120)
"""


def _holder(out):
    proc = subprocess.Popen([sys.executable, "-c", _HOLD.format(root=str(ROOT), out=str(out))], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_run_on_a_locked_output_is_refused_naming_the_holder(tmp_path, caplog):
    docs, queries = _inputs(tmp_path)
    out = tmp_path / "out"
    proc = _holder(out)
    try:
        with caplog.at_level(logging.ERROR, logger="settopk"):
            code = score.main(["--docs", docs, "--queries", queries, "--out", str(out), "--config", job_config(tmp_path), "--quiet"])
        assert code == 2
        assert "holder-run" in caplog.text and f"pid {proc.pid}" in caplog.text and "host " in caplog.text
        assert not out.exists()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path, ray_cluster):
    docs, queries = _inputs(tmp_path)
    out = tmp_path / "out"
    proc = _holder(out)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert output_lock_path(out, out).exists()  # the killed run's file stays; its lock does not
    assert score.main(["--docs", docs, "--queries", queries, "--out", str(out), "--config", job_config(tmp_path),
                       "--k", "2", "--quiet"]) == 0
    assert not output_lock_path(out, out).exists()


def test_the_lock_is_released_and_retaken(tmp_path):
    out = tmp_path / "o"
    first = lock_output(out, out, "a")
    first.release()
    second = lock_output(out, out, "b")
    assert json.loads(output_lock_path(out, out).read_text())["run_id"] == "b"
    second.release()
    assert not output_lock_path(out, out).exists()


# (11) a successful --quiet run prints nothing

def test_restartable_shard_actors_take_no_object_store_arguments(tmp_path, ray_cluster, capfd):
    docs, queries = _inputs(tmp_path)
    capfd.readouterr()
    assert score.main(["--docs", docs, "--queries", queries, "--out", str(tmp_path / "out"), "--config", job_config(tmp_path),
                       "--k", "2", "--quiet"]) == 0
    err = capfd.readouterr().err
    assert "constructor arguments in the object store" not in err, err


@pytest.mark.slow
def test_a_quiet_successful_run_prints_nothing(tmp_path):
    """A run of its own (its own local Ray instance, as a user starts it): Ray's start-up lines too must stay quiet."""
    docs, queries = _inputs(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "settopk", "score", "--docs", docs, "--queries", queries, "--out", str(tmp_path / "out"),
                           "--config", job_config(tmp_path), "--k", "2", "--quiet"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout, proc.stderr) == ("", "")


# (5) list<uint16> Parquet: quarantine works, a repeated query_id is exit 2 with file and row

def _uint16_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    tokens = pa.list_(pa.uint16())
    pq.write_table(pa.table({"doc_id": pa.array([0, 1, 2, 3], pa.int64()),
                             "tokens": pa.array([[1, 2], [2, None], [3, 4], [1]], tokens)}), tmp_path / "docs.parquet")
    pq.write_table(pa.table({"query_id": ["a", "b", "a"], "tokens": pa.array([[1], [2, 3], [4]], tokens)}), tmp_path / "q.parquet")
    return str(tmp_path / "docs.parquet"), str(tmp_path / "q.parquet")


def test_repeated_query_id_in_uint16_parquet_is_exit_2_with_file_and_row(tmp_path, caplog):
    docs, queries = _uint16_parquet(tmp_path)
    _refused(tmp_path, caplog, ["--docs", docs, "--queries", queries, "--out", str(tmp_path / "out"), "--config", job_config(tmp_path)],
             f"{queries} row 2 (0-based row)", "query_id 'a' again")


@pytest.mark.slow
def test_quarantine_on_uint16_parquet_sets_the_bad_rows_aside(tmp_path, ray_cluster):
    import pyarrow.parquet as pq

    docs, queries = _uint16_parquet(tmp_path)
    out = tmp_path / "out"
    assert score.main(["--docs", docs, "--queries", queries, "--out", str(out), "--config", job_config(tmp_path, on_invalid="quarantine"),
                       "--k", "2", "--quiet"]) == 0
    rejected = pq.read_table(rejected_path(out)).to_pydict()
    assert sorted(zip(rejected["input"], rejected["row"])) == [("docs", 1), ("queries", 2)]
    assert sorted({r[0] for r in result_rows(out)}) == ["a", "b"]
