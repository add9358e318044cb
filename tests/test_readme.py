"""The README's Library section, run as written: its make-corpus command, then each Python block
in order in one namespace, in a fresh directory (as a user would paste them)."""

from __future__ import annotations

import pathlib
import re
import shlex

import duckdb
import pytest

from settopk.jobs import make_corpus

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _library_section() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("\n## Library\n")
    return readme[start:readme.index("\n## ", start + 1)]


def test_library_section_has_two_python_blocks_and_a_corpus_command():
    section = _library_section()
    assert len(re.findall(r"```python\n", section)) == 2
    assert "python -m settopk make-corpus" in section


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_library_section_runs_as_written(ray_cluster, tmp_path, monkeypatch, capsys):
    section = _library_section()
    command = re.search(r"`python -m settopk make-corpus ([^`]*)`", section).group(1)
    monkeypatch.chdir(tmp_path)
    assert make_corpus.main(shlex.split(command)) == 0
    namespace: dict = {}
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 (the README's own code)
    top = namespace["top"]
    assert top.doc_ids.shape == (2, 3) and top.doc_ids[1, 1:].tolist() == [-1, -1]  # {8, 9} meets one doc
    assert top.to_arrow().num_rows == namespace["table"].num_rows == 4
    assert namespace["summary"]["status"] == "done"
    # The Ray Data pipeline's rows are the job's rows.
    for a, b in (("corpus-results", "corpus-ray-results"), ("corpus-ray-results", "corpus-results")):
        extra = duckdb.sql(f"SELECT * FROM read_parquet('{a}/*.parquet') EXCEPT ALL "
                           f"SELECT * FROM read_parquet('{b}/*.parquet')").fetchall()
        assert extra == []
    assert duckdb.sql("SELECT count(*) FROM read_parquet('corpus-results/*.parquet')").fetchone()[0] == 50 * 10
