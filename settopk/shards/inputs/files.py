"""Which format an input path holds, which files it consists of, and their fingerprint; and
the few file operations the readers need, for a local path or a URI alike.

Nothing here reads a file's content: formats are chosen from names alone, so a reader that is
handed the wrong format reports it on the first line or row it cannot parse.

An input may be a local path or a URI of any filesystem PyArrow supports (``s3://``, ``gs://``,
``abfs://``, ``hdfs://``, ``file://``), taken as a :class:`~settopk.shards.location.Location`
(a string is made one on entry, :func:`as_location`). A file listed under a location is a location, so
every file these functions return can be handed to a reader task on any node, which opens the
store itself. A local path keeps the ``os`` calls it always had (which also
tell a FIFO from a file); a URI goes through its PyArrow filesystem, and a store's error
(missing bucket, refused credentials, unreachable endpoint) becomes an :class:`InputError`
naming the URI.
"""

from __future__ import annotations

import hashlib
import os
import stat

import pyarrow.fs as pafs

from ..location import Location, StorageError
from .errors import InputError

__all__ = [
    "corpus_format", "file_stat", "fingerprint", "is_dir", "is_hidden", "list_dir", "open_stream", "parquet_files",
    "is_fimi_name", "parquet_source", "queries_format", "query_files", "require_regular", "store_error", "as_location",
]


def as_location(path) -> Location:
    """``path`` as a :class:`~settopk.shards.location.Location` (the entry of every input
    function: a string given by a library caller becomes one here)."""
    return Location.of(path)


def _fs(loc: Location):
    """``(filesystem, path inside it)`` of a URI, a bad URI raised as an :class:`InputError`."""
    try:
        return loc.fs, loc.path
    except StorageError as e:
        raise InputError(str(e)) from None


def store_error(path: Location, exc: OSError) -> InputError:
    """A store's error on ``path`` (a URI) as an :class:`InputError` naming it and the fix."""
    return InputError(path.describe_os_error(exc))


def _uri_info(path: Location) -> pafs.FileInfo:
    fs, inner = _fs(path)
    try:
        return fs.get_file_info(inner)
    except OSError as e:
        raise store_error(path, e) from None


def is_dir(path) -> bool:
    """Whether ``path`` (a local path or a URI) is a directory (for a URI: a bucket or a key prefix)."""
    path = as_location(path)
    if path.local:
        return os.path.isdir(path.path)
    return _uri_info(path).type == pafs.FileType.Directory


def list_dir(path) -> list[tuple[str, bool]]:
    """The entries of directory ``path`` (a local path or a URI) as ``(name, is_directory)``,
    sorted by name, hidden names included; one listing request for a URI."""
    path = as_location(path)
    if path.local:
        return [(name, os.path.isdir(os.path.join(path.path, name))) for name in sorted(os.listdir(path.path))]
    fs, inner = _fs(path)
    try:
        infos = fs.get_file_info(pafs.FileSelector(inner, recursive=False))
    except OSError as e:
        raise store_error(path, e) from None
    return sorted((info.base_name, info.type == pafs.FileType.Directory) for info in infos)


def file_stat(path) -> tuple[int, int]:
    """``(size_bytes, mtime_ns)`` of the file ``path``, as its filesystem reports them (for an
    object store, the object's size and last-modified time).

    Raises
    ------
    InputError
        If nothing is there, or the store refuses access.
    """
    path = as_location(path)
    if path.local:
        st = os.stat(path.path)
        return st.st_size, st.st_mtime_ns
    info = _uri_info(path)
    if info.type != pafs.FileType.File:
        found, fix = path.describe_missing() if info.type == pafs.FileType.NotFound else ("a directory", "point to a file")
        raise InputError(path, "a file", found, fix)
    return int(info.size), int(info.mtime_ns or 0)


def open_stream(path):
    """``path`` opened for sequential binary reading (a Python file, or a PyArrow stream for a
    URI); both have ``read`` and ``readinto`` and are context managers. No decompression: a
    compressed file reads as its bytes, as for a local file.

    Raises
    ------
    OSError
        As ``open`` raises it (the callers word the message).
    InputError
        For an unusable URI.
    """
    path = as_location(path)
    if path.local:
        return open(path.path, "rb")
    fs, inner = _fs(path)
    return fs.open_input_stream(inner, compression=None)


def parquet_source(path) -> dict:
    """Keyword arguments that open ``path`` with :class:`pyarrow.parquet.ParquetFile`:
    ``{"source": path}`` for a local file, the URI's filesystem and inner path for a URI."""
    path = as_location(path)
    if path.local:
        return {"source": path.path}
    fs, inner = _fs(path)
    return {"source": inner, "filesystem": fs}


def _kind(mode: int) -> str:
    """What a non-regular, non-directory file is, in words."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a special file"


def require_regular(path) -> Location:
    """Refuse a path that is neither a regular file nor a directory (a FIFO, socket or device):
    opening one could block forever or read endless data.

    Raises
    ------
    InputError
        Naming the path and what it is.
    """
    path = as_location(path)
    mode = os.stat(path.path).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InputError(path, "a regular file or a directory", _kind(mode), "write the input to a regular file and pass that path")
    return path


def _require_exists(path) -> Location:
    path = as_location(path)
    if not path.local:
        kind = _uri_info(path).type
        if kind == pafs.FileType.NotFound:
            found, fix = path.describe_missing()
            raise InputError(path, "an existing file or directory", found, fix)
        return path
    if not os.path.exists(path.path):
        raise InputError(path, "an existing file or directory", "nothing at this path", "check the path and the working directory")
    return require_regular(path)


def _is_parquet_name(name: str) -> bool:
    return name.lower().endswith(".parquet")


def is_fimi_name(name: str) -> bool:
    """Whether a text input named ``name`` is in the FIMI format (a ``*.dat`` file: whitespace-separated
    ids, one set per line) rather than the STI2 comma-separated one."""
    return name.lower().endswith(".dat")


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
    return "parquet" if _is_parquet_name(path.name) or is_dir(path) else "text"


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
    if is_dir(path):
        names = [n for n, _ in list_dir(path) if not is_hidden(n)]
        return "parquet" if names and all(_is_parquet_name(n) for n in names) else "dir"
    return "parquet" if _is_parquet_name(path.name) else "text"


def parquet_files(path) -> list[Location]:
    """The Parquet files at ``path``: the file itself, or a directory's files in sorted name order.

    Names starting with ``.`` or ``_`` (``_SUCCESS``, ``.crc`` files) are skipped.

    Parameters
    ----------
    path : str, os.PathLike or Location
        A Parquet file or a directory of them.

    Returns
    -------
    list of Location
        The files to read, in read order.

    Raises
    ------
    InputError
        If the directory holds a subdirectory or a file without the ``.parquet`` suffix, or no
        Parquet file at all.
    """
    path = as_location(path)
    if not is_dir(path):
        return [path]
    files = []
    for name, directory in list_dir(path):
        full = path / name
        if is_hidden(name):
            continue
        if directory:
            raise InputError(full, "a *.parquet file (Parquet directories are read flat, without partitions)", "a subdirectory", "move the Parquet files of the subdirectory up into the directory, or remove it")
        if full.local:
            require_regular(full)
        if not _is_parquet_name(name):
            raise InputError(full, "only *.parquet files in a Parquet directory (names starting with '.' or '_' are skipped)", "a file without the .parquet suffix", "remove the file, or rename it to *.parquet if it is Parquet")
        files.append(full)
    if not files:
        raise InputError(path, "a directory holding at least one *.parquet file", "no Parquet file", "point to the directory that holds the Parquet files, or write a Parquet file with 0 rows for an empty input")
    return files


def query_files(path) -> list[Location]:
    """The files the queries at ``path`` consist of, listed without reading them: a text file
    itself, the Parquet files (:func:`parquet_files`), or a query directory's non-hidden entries
    in sorted name order (a reader may set some aside under quarantine).

    Raises
    ------
    InputError
        As :func:`queries_format` and :func:`parquet_files`.
    """
    path = as_location(path)
    fmt = queries_format(path)
    if fmt == "text":
        return [path]
    if fmt == "parquet":
        return parquet_files(path)
    return [path / name for name, _ in list_dir(path) if not is_hidden(name)]


def fingerprint(files, base) -> dict:
    """A cheap fingerprint of input files: SHA-256 over each file's name, size and mtime (for an
    object store, the object's size and last-modified time).

    Parameters
    ----------
    files : sequence of Location (or str)
        The files read, in the order read.
    base : Location (or str)
        The input path or URI given; names are taken relative to it when it is a
        directory, so moving the whole input (to another directory, bucket or store) keeps
        the fingerprint when the times move along. No credential a URI holds enters it: a
        rerun after a key rotation has the same fingerprint.

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
    base = as_location(base)
    base_is_dir = is_dir(base)
    for f in map(as_location, files):
        size, mtime_ns = file_stat(f)
        name = f.relative_to(base) if base_is_dir else f.name
        h.update(f"{name}\0{size}\0{mtime_ns}\n".encode())
        total_bytes += size
    return {"method": "sha256(name, size_bytes, mtime_ns per file)", "sha256": h.hexdigest(), "files": len(files), "bytes": total_bytes}
