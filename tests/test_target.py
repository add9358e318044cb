"""The output target (settopk.jobs.target.Target): one test per decision it makes about ``--out``:
write, no-op, refuse a result of other inputs or settings, replace under ``--force``, refuse a
directory that is not a settopk result, refuse while another run holds the lock. No Ray: the
decisions are made before any cluster work."""

from __future__ import annotations

import datetime
import json

import numpy as np
import pytest

from settopk.jobs.output import OutputExistsError, PathError, read_manifest, results_table, write_part, write_results
from settopk.jobs.target import RESULT_SETTINGS, Decision, Target, ThisRun
from settopk.kernels import TopK

pytestmark = pytest.mark.timeout(60)

SETTINGS = {key: None for key in RESULT_SETTINGS} | {"k": 2, "score": "braun_blanquet", "self_join": False}
PRINTS = {"docs": {"sha256": "d" * 64}, "queries": {"sha256": "q" * 64}}


def _table():
    topk = TopK(np.array([[5, 2], [7, 1]], np.int64), np.array([[2, 1], [1, 1]], np.int16), np.array([[3, 4], [2, 2]], np.int16))
    return results_table(["a", "b"], np.array([2, 2]), topk)


def _finished(out, dataset_root=None, **manifest):
    """A settopk result at ``out``, its manifest recording PRINTS and SETTINGS."""
    record = {"fingerprint": PRINTS, "config": SETTINGS, **manifest}
    write_results(out, _table(), record, dataset_root=dataset_root)
    return record


def _never():
    raise AssertionError("the inputs must not be fingerprinted for this decision")


def _stage(tmp_path):
    stage = tmp_path / ".stage"
    stage.mkdir()
    write_part(stage, 0, _table())
    return stage


def test_write_where_nothing_is_there(tmp_path):
    target = Target.of(tmp_path / "new")
    assert target.decide(False, _never) is Decision.WRITE and target.decision is Decision.WRITE
    (tmp_path / "empty").mkdir()
    assert Target.of(tmp_path / "empty").decide(True, _never) is Decision.WRITE  # nothing to lose
    day = datetime.date(2026, 11, 20)
    nightly = Target.of(tmp_path / "root", day)
    assert str(nightly.out_dir) == str(tmp_path / "root" / "dt=2026-11-20") and nightly.day == day
    assert nightly.record_dir == tmp_path / "root.run" / "dt=2026-11-20"
    assert nightly.decide(False, _never) is Decision.WRITE
    nightly.commit(_stage(tmp_path), {"run": 1})
    assert read_manifest(nightly.out_dir, nightly.dataset_root) == {"run": 1} == nightly.read_manifest()


def test_no_op_on_a_finished_result_of_the_same_run(tmp_path):
    out = tmp_path / "res"
    made = _finished(out)
    asked = []
    target = Target.of(out)
    assert target.decide(False, lambda: asked.append(1) or ThisRun(PRINTS, SETTINGS, False)) is Decision.NO_OP
    assert asked == [1] and target.read_manifest() == made
    assert Target.of(out).decide(False, None) is Decision.NO_OP  # --dry-run: not compared


def test_refuse_a_finished_result_of_other_inputs_or_settings(tmp_path):
    out = tmp_path / "res"
    made = _finished(out)
    other = ThisRun({"docs": {"sha256": "e" * 64}, "queries": PRINTS["queries"]}, SETTINGS | {"k": 3}, True)
    target = Target.of(out)
    with pytest.raises(PathError) as refused:
        target.decide(False, lambda: other)
    text = str(refused.value)
    for needle in ("the docs (fingerprint dddddddddddd there, eeeeeeeeeeee now)", "k (2 there, 3 now)",
                   "--dedup (a no dedup result there, --dedup now)", "fix: pass --force to replace it, or choose another --out"):
        assert needle in text, (needle, text)
    assert "the queries" not in text and "score" not in text
    assert target.decision is None and read_manifest(out) == made


def test_replace_a_finished_result_under_force(tmp_path):
    out = tmp_path / "res"
    _finished(out)
    target = Target.of(out)
    assert target.decide(True, _never) is Decision.REPLACE
    target.commit(_stage(tmp_path), {"run": 2})
    assert read_manifest(out) == {"run": 2}
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "part-00000.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res", "res.run"]  # no stage or trash left


@pytest.mark.parametrize("force", [False, True])
def test_refuse_a_directory_that_is_not_a_settopk_result(tmp_path, force):
    out = tmp_path / "spark"
    out.mkdir()
    for name, data in (("_SUCCESS", b""), ("part-00000-c000.snappy.parquet", b"PAR1"), ("important.txt", b"notes")):
        (out / name).write_bytes(data)
    target = Target.of(out)
    with pytest.raises(OutputExistsError, match=r"is not a settopk result \(no settopk run record .*spark.run/manifest.json; "
                                                r"it holds _SUCCESS, important.txt, part-00000-c000.snappy.parquet\)"):
        target.decide(force, _never)
    assert target.decision is None
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "important.txt", "part-00000-c000.snappy.parquet"]


def test_the_commit_refuses_files_added_after_the_decision(tmp_path):
    out = tmp_path / "res"
    out.mkdir()
    target = Target.of(out)
    assert target.decide(False, _never) is Decision.WRITE
    (out / "important.txt").write_text("added while the run searched")
    with pytest.raises(OutputExistsError, match="no settopk run record .*it holds important.txt"):
        target.commit(_stage(tmp_path), {"run": 1})
    assert [p.name for p in out.iterdir()] == ["important.txt"]


def test_refuse_while_another_run_holds_the_lock(tmp_path):
    out = tmp_path / "res"
    first, second = Target.of(out), Target.of(out)
    first.take_lock("run-a")
    try:
        with pytest.raises(PathError, match="found run run-a .* holding its lock .*fix: wait for that run to finish"):
            second.take_lock("run-b")
        assert second.lock is None
    finally:
        first.release()
    second.take_lock("run-b")
    assert json.loads(second.lock.path.read_text())["run_id"] == "run-b"
    second.release()
    second.release()  # idempotent
    assert not second.lock.path.exists()


def test_replace_a_dedup_result_under_force(tmp_path):
    """A ``--dedup`` result's ``pairs/``, ``groups/`` and ``duplicates/`` are settopk's own: replaced."""

    def dedup_stage(name):
        stage = tmp_path / name
        for dataset in ("pairs", "groups", "duplicates"):
            (stage / dataset).mkdir(parents=True)
            write_part(stage / dataset, 0, _table())
            (stage / dataset / "_SUCCESS").write_bytes(b"")
        return stage

    out = tmp_path / "dedup"
    Target.of(out).commit(dedup_stage(".s1"), {"run": 1, "dedup": {}})
    target = Target.of(out)
    assert target.decide(True, _never) is Decision.REPLACE
    target.commit(dedup_stage(".s2"), {"run": 2, "dedup": {}})
    assert read_manifest(out) == {"run": 2, "dedup": {}}
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "duplicates", "groups", "pairs"]
