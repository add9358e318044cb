"""Which format an input path holds, which files it consists of, and their fingerprint.

Nothing here reads a file's content: formats are chosen from names alone, so a reader that is
handed the wrong format reports it on the first line or row it cannot parse.
"""

from __future__ import annotations

import hashlib
import os
import stat

from .errors import InputError

__all__ = ["corpus_format", "fingerprint", "is_hidden", "parquet_files", "queries_format", "query_files", "require_regular"]


def _kind(mode: int) -> str:
    """What a non-regular, non-directory file is, in words."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a special file"


def require_regular(path) -> str:
    """Refuse a path that is neither a regular file nor a directory (a FIFO, socket or device):
    opening one could block forever or read endless data.

    Raises
    ------
    InputError
        Naming the path and what it is.
    """
    path = os.fspath(path)
    mode = os.stat(path).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InputError(path, "a regular file or a directory", _kind(mode), "write the input to a regular file and pass that path")
    return path


def _require_exists(path) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(path, "an existing file or directory", "nothing at this path", "check the path and the working directory")
    return require_regular(path)


def _is_parquet_name(name: str) -> bool:
    return name.lower().endswith(".parquet")


def is_hidden(name: str) -> bool:
    """Names starting with ``.`` or ``_`` (``_SUCCESS``, ``.DS_Store``, ``.crc`` files): skipped in
    every input directory, as Arrow, Spark and DuckDB do."""
    return name.startswith((".", "_"))


def corpus_format(path) -> str:
    """``"parquet"`` for a directory or a ``*.parquet`` file, else ``"text"``.

    Raises
    ------
    InputError
        If nothing exists at ``path``.
    """
    path = _require_exists(path)
    return "parquet" if os.path.isdir(path) or _is_parquet_name(path) else "text"


def queries_format(path) -> str:
    """``"parquet"`` for a ``*.parquet`` file or a directory of them, ``"dir"`` for another directory,
    else ``"text"``.

    A directory is Parquet when it has at least one entry not starting with ``.`` or ``_`` and all such
    entries end in ``.parquet``.

    Raises
    ------
    InputError
        If nothing exists at ``path``.
    """
    path = _require_exists(path)
    if os.path.isdir(path):
        names = [n for n in os.listdir(path) if not is_hidden(n)]
        return "parquet" if names and all(_is_parquet_name(n) for n in names) else "dir"
    return "parquet" if _is_parquet_name(path) else "text"


def parquet_files(path: str) -> list[str]:
    """The Parquet files at ``path``: the file itself, or a directory's files in sorted name order.

    Names starting with ``.`` or ``_`` (``_SUCCESS``, ``.crc`` files) are skipped.

    Parameters
    ----------
    path : str
        A Parquet file or a directory of them.

    Returns
    -------
    list of str
        The files to read, in read order.

    Raises
    ------
    InputError
        If the directory holds a subdirectory or a file without the ``.parquet`` suffix, or no
        Parquet file at all.
    """
    if not os.path.isdir(path):
        return [path]
    files = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if is_hidden(name):
            continue
        if os.path.isdir(full):
            raise InputError(full, "a *.parquet file (Parquet directories are read flat, without partitions)", "a subdirectory", "move the Parquet files of the subdirectory up into the directory, or remove it")
        require_regular(full)
        if not _is_parquet_name(name):
            raise InputError(full, "only *.parquet files in a Parquet directory (names starting with '.' or '_' are skipped)", "a file without the .parquet suffix", "remove the file, or rename it to *.parquet if it is Parquet")
        files.append(full)
    if not files:
        raise InputError(path, "a directory holding at least one *.parquet file", "no Parquet file", "point to the directory that holds the Parquet files, or write a Parquet file with 0 rows for an empty input")
    return files


def query_files(path) -> list[str]:
    """The files the queries at ``path`` consist of, listed without reading them: a text file
    itself, the Parquet files (:func:`parquet_files`), or a query directory's non-hidden entries
    in sorted name order (a reader may set some aside under quarantine).

    Raises
    ------
    InputError
        As :func:`queries_format` and :func:`parquet_files`.
    """
    fmt = queries_format(path)
    path = os.fspath(path)
    if fmt == "text":
        return [path]
    if fmt == "parquet":
        return parquet_files(path)
    return [os.path.join(path, name) for name in sorted(os.listdir(path)) if not is_hidden(name)]


def fingerprint(files, base: str) -> dict:
    """A cheap fingerprint of input files: SHA-256 over each file's name, size and mtime.

    Parameters
    ----------
    files : sequence of str
        The files read, in the order read.
    base : str
        The input path given; names are taken relative to it when it is a
        directory, so moving the whole input keeps the fingerprint.

    Returns
    -------
    dict
        ``sha256`` (hex), ``files`` (count), ``bytes`` (total size) and ``method``.
        Reading no content keeps this instant at corpus scale; a copy that keeps
        modification times (``cp -p``, ``rsync -a``) keeps the fingerprint, and an
        edit that changes neither size nor mtime goes unnoticed.
    """
    h = hashlib.sha256()
    total_bytes = 0
    for f in files:
        st = os.stat(f)
        name = os.path.relpath(f, base) if os.path.isdir(base) else os.path.basename(f)
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        total_bytes += st.st_size
    return {"method": "sha256(name, size_bytes, mtime_ns per file)", "sha256": h.hexdigest(), "files": len(files), "bytes": total_bytes}
