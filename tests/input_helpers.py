"""What the input reader tests share: input files written in a line, and the check of an InputError."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq


def write(path, data: bytes | str):
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def write_parquet(path, columns: dict):
    pq.write_table(pa.table(columns), path)
    return path


def assert_error(excinfo, path, *parts, line=None, row=None):
    """The InputError names ``path`` (and ``line`` or ``row``), holds every one of ``parts`` and reads
    expected/found/fix."""
    e = excinfo.value
    message = str(e)
    assert os.fspath(path) in message
    assert e.path == os.fspath(path)
    if line is not None:
        assert e.line == line and f"{os.fspath(path)}:{line} (1-based line):" in message
    if row is not None:
        assert e.row == row and f"{os.fspath(path)} row {row} (0-based row):" in message
    for part in parts:
        assert part in message, (part, message)
    assert "expected" in message and "found" in message and "fix:" in message
