"""The README's Library section, run as written: its make-corpus command, then each Python block
in order in one namespace, in a fresh directory (as a user would paste them)."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest


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
@pytest.mark.timeout(900)
def test_library_section_runs_as_written(tmp_path):
    """In a fresh process whose working directory holds the corpus, as a user's notebook would:
    Ray's workers resolve the relative paths there too. Only Ray's start is the test's own (a
    small object store, no dashboard), before the README's blocks."""
    duckdb = pytest.importorskip("duckdb")
    section = _library_section()
    command = re.search(r"`python -m settopk make-corpus ([^`]*)`", section).group(1)
    subprocess.run([sys.executable, "-m", "settopk", "make-corpus", *shlex.split(command)], cwd=tmp_path, check=True, timeout=300)
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    start = "import ray\nray.init(num_cpus=2, object_store_memory=256 * 2**20, include_dashboard=False)\n"
    checks = (
        # jaccard: {2, 3} scores 2/3, 1/2, 0, 1/3 on the docs; {8, 9} 0, 0, 1/3, 0 (ties: lower id).
        "assert top.doc_ids.tolist() == [[0, 1, 3], [2, 0, 1]], top.doc_ids\n"
        "assert table.num_rows == 6 and table.column('query_id').to_pylist() == ['a'] * 3 + ['b'] * 3\n"
        "assert summary['status'] == 'done'\n"
    )
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", start + "\n".join(blocks) + checks], cwd=tmp_path, env=env, check=True, timeout=800)
    # The Ray Data pipeline's rows are the job's rows.
    job, ray_rows = tmp_path / "corpus-results", tmp_path / "corpus-ray-results"
    for a, b in ((job, ray_rows), (ray_rows, job)):
        extra = duckdb.sql(f"SELECT * FROM read_parquet('{a}/*.parquet') EXCEPT ALL "
                           f"SELECT * FROM read_parquet('{b}/*.parquet')").fetchall()
        assert extra == []
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{job}/*.parquet')").fetchall() == [(50 * 10,)]
