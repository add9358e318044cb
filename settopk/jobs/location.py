"""Where an output goes: a PyArrow filesystem, the path in it, and the form the user gave.

The job's outputs (result directory, run record, work directory, lock, TSV) may be local paths or
URIs of any store PyArrow reaches (:func:`settopk.shards.storage.resolve`). A :class:`Place` carries both
forms, so the commit code is one piece of code over a filesystem; only the step that makes a
result visible differs where a store has no atomic rename (:attr:`Place.renames`).
"""

from __future__ import annotations

import os
import pathlib
import posixpath
import uuid
from dataclasses import dataclass

import pyarrow.fs as pafs

from settopk.shards import storage

__all__ = ["Place", "absolute"]


@dataclass(frozen=True)
class Place:
    """A location on a filesystem.

    Attributes
    ----------
    fs : pyarrow.fs.FileSystem
    path : str
        The path inside ``fs``: absolute and resolved (symbolic links followed) for a local
        path, ``bucket/key`` for S3.
    uri : str or None
        The URI the path came from (None for a local path); names in messages and manifests.
    """

    fs: pafs.FileSystem
    path: str
    uri: str | None = None

    @classmethod
    def of(cls, location) -> "Place":
        """The place of a local path, a URI, or a :class:`Place` (returned as is)."""
        if isinstance(location, Place):
            return location
        if storage.is_uri(location):
            fs, path = storage.resolve(location)
            if isinstance(fs, pafs.LocalFileSystem):  # file:// is a local path
                return cls(fs, os.path.realpath(path))
            uri = location if "?" in location else location.rstrip("/")  # a query (?endpoint_override=...) stays as given
            return cls(fs, path.rstrip("/"), uri)
        return cls(pafs.LocalFileSystem(), os.path.realpath(os.fspath(location)))

    @property
    def local(self) -> bool:
        """A local path."""
        return isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def renames(self) -> bool:
        """The filesystem renames a directory in one atomic step (local disks; not object stores)."""
        return self.local

    @property
    def shown(self):
        """The form for users and return values: a :class:`pathlib.Path`, or the URI."""
        return self.uri if self.uri is not None else pathlib.Path(self.path)

    def __str__(self) -> str:
        return str(self.shown)

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def parent(self) -> "Place":
        return Place(self.fs, posixpath.dirname(self.path), storage.parent(self.uri) if self.uri is not None else None)

    def __truediv__(self, name: str) -> "Place":
        return Place(self.fs, posixpath.join(self.path, name), storage.join(self.uri, name) if self.uri is not None else None)

    def sibling(self, name: str) -> "Place":
        """The place named ``name`` beside this one."""
        return self.parent / name

    def relative_to(self, other: "Place") -> str:
        return posixpath.relpath(self.path, other.path)

    def contains(self, other: "Place") -> bool:
        """``other`` is this place or lies under it."""
        return other.path == self.path or other.path.startswith(self.path.rstrip("/") + "/")

    def kind(self) -> pafs.FileType:
        return self.fs.get_file_info(self.path).type

    def exists(self) -> bool:
        return self.kind() != pafs.FileType.NotFound

    def is_file(self) -> bool:
        return self.kind() == pafs.FileType.File

    def children(self) -> list[pafs.FileInfo]:
        """The entries directly inside (none where nothing is there)."""
        return self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.path) as f:
            return f.read()

    def write_bytes(self, data: bytes) -> None:
        """Write ``data`` atomically, so no reader sees part of it: on a local disk to a temporary
        name beside, then renamed; on a store in one upload (an object appears whole or not at all)."""
        if not self.local:
            with self.fs.open_output_stream(self.path) as f:
                f.write(data)
            return
        tmp = self.sibling(f".{self.name}.tmp-{uuid.uuid4().hex}")
        try:
            with self.fs.open_output_stream(tmp.path) as f:
                f.write(data)
            tmp.move_to(self)
        finally:
            tmp.delete(missing_ok=True)

    def move_to(self, target: "Place") -> None:
        """Rename (local: ``os.replace`` for a file, ``os.rename`` for a directory) or move (a store)."""
        if self.local:
            (os.rename if os.path.isdir(self.path) else os.replace)(self.path, target.path)
        else:
            self.fs.move(self.path, target.path)

    def delete(self, missing_ok: bool = False) -> None:
        """Delete a file."""
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            if not missing_ok:
                raise
        except OSError:
            if not missing_ok or self.exists():
                raise

    def delete_tree(self) -> None:
        """Delete a directory and everything under it (nothing where nothing is there)."""
        if self.kind() == pafs.FileType.Directory:
            self.fs.delete_dir(self.path)

    def make_dirs(self) -> None:
        """Create the directory and its parents (a store has no directories: nothing to do)."""
        if self.local:
            self.fs.create_dir(self.path, recursive=True)


def absolute(location) -> str:
    """``location`` for logs, manifests and keys: an absolute local path, or the URI as given."""
    return location if storage.is_uri(location) else os.path.abspath(os.fspath(location))
