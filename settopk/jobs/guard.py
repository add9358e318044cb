"""What the job checks about its paths before any work: outputs apart from the inputs, every
output writable, one run at a time per output (a lock), and a finished result made by the
same inputs and settings before a rerun skips it.

Every check here runs in the validate stage (:func:`settopk.jobs.validate.settle`), so a bad path
stops the run with exit 2 before anything is read or written.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import pathlib
import socket
import tempfile
import uuid

import pyarrow.fs as pafs

from settopk.errors import SettopkError
from settopk.shards.location import Location, StorageError

from .output import read_manifest

__all__ = ["ObjectLock", "OutputLock", "PathError", "check_outputs_apart", "check_writable", "differences", "lock_output", "output_lock_path"]

RESULT_SETTINGS = ("k", "score", "self_join", "include_self", "threshold", "vocab_size", "max_len", "on_invalid")
"""The config keys a result depends on; a rerun that changes one of them is not the same run."""


class PathError(ValueError, SettopkError):
    """An output path the run cannot use (overlapping an input, not writable, or locked)."""




def check_outputs_apart(outputs: dict, inputs: dict) -> None:
    """Refuse an output that is an input, lies inside an input directory, or holds an input.

    Local paths are compared resolved (symlinks and ``..`` followed), so two spellings of one file
    meet; URIs normalised (scheme, bucket, then key prefixes by whole components), so
    ``s3://b/out`` holds ``s3://b//out/x`` but not ``s3://b/output``. A URI and a local path never
    overlap (a ``file://`` URI is a local path).

    Parameters
    ----------
    outputs, inputs : dict
        ``{"--out": Location, "--tsv": Location, ...}``; None values are skipped.

    Raises
    ------
    PathError
        Naming both paths: writing the output would replace, delete or add to the input.
    """
    for out_name, out_path in outputs.items():
        if out_path is None:
            continue
        out = Location.real(out_path)
        for in_name, in_path in inputs.items():
            if in_path is None:
                continue
            given = Location.real(in_path)
            if given.contains(out):
                same = out.key == given.key
                what = "is" if same else "lies inside"
                raise PathError(
                    f"{out_name} {out_path}: expected an output apart from the inputs, found that it {what} {in_name} {in_path} "
                    f"(writing it would {'replace' if same else 'add files to'} the input); fix: choose another {out_name}"
                )
            if out.contains(given):
                raise PathError(
                    f"{out_name} {out_path}: expected an output apart from the inputs, found {in_name} {in_path} inside it "
                    f"(replacing the output would delete the input); fix: move the input out, or choose another {out_name}"
                )


def _existing_ancestor(path: pathlib.Path) -> pathlib.Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _probe(directory: pathlib.Path, option: str, shown) -> None:
    """Create and remove a file in ``directory``: the one test that sees permissions,
    read-only mounts and full inode tables alike (``os.access`` misses some, and root passes it)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".settopk-probe-", dir=directory)
    except OSError as e:
        reason = os.strerror(e.errno) if e.errno else str(e)
        if e.errno == errno.EROFS:
            reason += " (a read-only filesystem)"
        raise PathError(
            f"{option} {shown}: expected a writable directory at {directory}, found it is not writable ({reason}); "
            f"fix: choose another {option}, or make {directory} writable"
        ) from e
    os.close(fd)
    os.unlink(name)


def check_writable(option: str, path, *, file: bool, creates_parents: bool) -> None:
    """Check, before any work, that ``path`` can be written.

    Parameters
    ----------
    option : str
        The option that named it (``--out``, ``--tsv``), for the message.
    path : Location
        A file (``file=True``, e.g. the TSV) or a result directory.
    file : bool
        The output is one file: it must not be a directory, and its directory must exist.
    creates_parents : bool
        The run creates missing parent directories (the result directory); otherwise a
        missing parent is refused.

    Raises
    ------
    PathError
        With the path and the reason. A URI is checked by writing and deleting a probe object
        beside it: a missing bucket, refused credentials or an unreachable store fail here.
    """
    path = Location.of(path)
    if not path.local:
        _check_writable_uri(option, path, file)
        return
    p = pathlib.Path(path.path)
    if file and p.is_dir():
        raise PathError(f"{option} {path}: expected a file path, found a directory; fix: name a file, e.g. {p / 'results.tsv'}")
    if file and p.exists() and not p.is_file():
        raise PathError(f"{option} {path}: expected a regular file path, found a special file; fix: name a regular file")
    parent = p.parent
    if not parent.exists():
        if not creates_parents:
            raise PathError(f"{option} {path}: expected an existing directory {parent}, found nothing there; fix: create it first, or choose another {option}")
        parent = _existing_ancestor(parent)
    if not parent.is_dir():
        raise PathError(f"{option} {path}: expected {parent} to be a directory, found a file; fix: choose another {option}")
    _probe(parent, option, path)


def _check_writable_uri(option: str, place: Location, file: bool) -> None:
    try:
        if file and place.kind() == pafs.FileType.Directory:
            raise PathError(f"{option} {place}: expected an object name, found a prefix holding objects; fix: name an object, e.g. {place / 'results.tsv'}")
        probe = place.parent / f".settopk-probe-{uuid.uuid4().hex}"
        with probe.fs.open_output_stream(probe.path) as f:
            f.write(b"")
        probe.delete(missing_ok=True)
    except StorageError as e:
        raise PathError(f"{option} {e}") from None
    except OSError as e:
        raise PathError(f"{option} {place.describe_os_error(e)}") from None


def output_lock_path(out_dir, dataset_root):
    """The lock of the result directory ``out_dir``: beside the dataset root (never inside it,
    so scans of the root never see it), named after ``out_dir`` (its credentials left out: a
    rotated key finds the same lock); a :class:`pathlib.Path`, or a Location on a store."""
    root, out = Location.real(dataset_root), Location.real(out_dir)
    if not root.local:
        tag = hashlib.sha256(":".join(out.key).encode()).hexdigest()[:12]
        return root.sibling(f".{root.name}.lock-{tag}").shown
    tag = hashlib.sha256(out.path.encode()).hexdigest()[:12]
    return pathlib.Path(root.parent.path) / f".{root.name}.lock-{tag}"


class OutputLock:
    """An exclusive ``flock`` on the output's lock file, holding who took it.

    The kernel drops the lock when its process dies, so a run killed with SIGKILL leaves no
    lock behind: the next run takes it over. :meth:`release` removes the file.
    """

    def __init__(self, path: pathlib.Path, fd: int):
        self.path, self._fd = path, fd

    def release(self) -> None:
        """Unlock and remove the lock file (idempotent)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # while still held: a waiter then finds a fresh file
        finally:
            os.close(self._fd)
            self._fd = None


def lock_output(out_dir, dataset_root, run_id: str) -> "OutputLock | ObjectLock":
    """Take the output's lock, or refuse naming the run that holds it: a ``flock`` for a local
    path (:class:`OutputLock`), an object for a URI (:class:`ObjectLock`, best effort).

    Parameters
    ----------
    out_dir, dataset_root : path or str
        The result directory and its dataset root (:class:`settopk.jobs.validate.Target`).
    run_id : str
        Written into the lock file with the host and pid, for the message another run gives.

    Raises
    ------
    PathError
        If another live process holds the lock (its run, host and pid named).
    """
    if not Location.of(dataset_root).local:
        return _lock_object(out_dir, output_lock_path(out_dir, dataset_root), run_id)
    path = output_lock_path(out_dir, dataset_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise PathError(
                f"--out {out_dir}: expected no other run on this output, found run {holder.get('run_id', '?')} "
                f"(host {holder.get('host', '?')}, pid {holder.get('pid', '?')}) holding its lock {path}; "
                "fix: wait for that run to finish, or use another --out"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the holder released (and removed) it between our open and our lock: try again
            os.close(fd)
            continue
        info = json.dumps({"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid()}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
        return OutputLock(path, fd)
    raise PathError(f"--out {out_dir}: could not take the lock {path} (it kept being replaced); fix: rerun")


class ObjectLock:
    """The lock of an output on an object store: an object holding the run id, host, pid and a
    token. A store offers no lock the job can rely on (no ``flock``, no conditional write in
    PyArrow), so this is best effort: a second run sees the object and refuses, but two runs
    starting within the same moment may both go ahead. A run killed on this host leaves the
    object behind; the next run on this host sees that its pid is gone and takes it over.
    :meth:`release` deletes it if it still holds this run's token.
    """

    def __init__(self, place: Location, token: str):
        self.path, self._place, self._token = place.shown, place, token

    def release(self) -> None:
        """Delete the lock object if it is still this run's (idempotent)."""
        if self._place is None:
            return
        try:
            if json.loads(self._place.read_bytes()).get("token") == self._token:
                self._place.delete(missing_ok=True)
        except (OSError, ValueError):
            pass
        self._place = None


def _alive_here(holder: dict) -> bool:
    """Whether the holder could still be running: on another host (unknown: assume so), or a live
    pid on this one."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return True
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lock_object(out_dir, place: Location, run_id: str) -> ObjectLock:
    uri = place
    try:
        holder = json.loads(place.read_bytes()) if place.is_file() else None
    except ValueError:
        holder = {}
    if holder is not None and _alive_here(holder):
        raise PathError(
            f"--out {out_dir}: expected no other run on this output, found run {holder.get('run_id', '?')} "
            f"(host {holder.get('host', '?')}, pid {holder.get('pid', '?')}) holding its lock object {uri}; "
            "fix: wait for that run to finish, or use another --out; if that run is dead (killed on another host), delete the lock object"
        )
    token = uuid.uuid4().hex
    info = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(), "token": token}
    place.write_bytes(json.dumps(info).encode())
    try:
        won = json.loads(place.read_bytes()).get("token") == token  # the last writer of a near-simultaneous start wins
    except (OSError, ValueError):
        won = False
    if not won:
        raise PathError(f"--out {out_dir}: another run took the lock object {uri} at the same moment; fix: wait for it to finish, or use another --out")
    return ObjectLock(place, token)


def _holder(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}


def differences(out_dir, dataset_root, fingerprints: dict, settings: dict) -> list[str]:
    """What differs between the finished result at ``out_dir`` and a run asked for now.

    Parameters
    ----------
    out_dir, dataset_root : path
        A finished result and its dataset root (its manifest: :func:`settopk.jobs.output.read_manifest`).
    fingerprints : dict
        ``{"docs": ..., "queries": ...}`` of the inputs now (:func:`settopk.shards.inputs.fingerprint`).
    settings : dict
        The config values of :data:`RESULT_SETTINGS` now.

    Returns
    -------
    list of str
        One phrase per difference (empty: the same run).
    """
    try:
        manifest = read_manifest(out_dir, dataset_root)
    except (OSError, ValueError) as e:
        return [f"its manifest could not be read ({e})"]
    diffs = []
    recorded = manifest.get("fingerprint", {})
    for name in ("docs", "queries"):
        old = (recorded.get(name) or {}).get("sha256")
        if old != fingerprints[name]["sha256"]:
            diffs.append(f"the {name} (fingerprint {str(old)[:12]} there, {fingerprints[name]['sha256'][:12]} now)")
    config = manifest.get("config", {})
    for key in RESULT_SETTINGS:
        if key in settings and config.get(key) != settings[key]:
            diffs.append(f"{key} ({config.get(key)!r} there, {settings[key]!r} now)")
    return diffs
