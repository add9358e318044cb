"""The lock of an output: one run at a time per result directory.

A local output is locked with an exclusive ``flock`` on a file beside its dataset root
(:class:`OutputLock`; the kernel drops it when the process dies); one on an object store with a
lock object there (:class:`ObjectLock`, best effort). :class:`settopk.jobs.target.Target` takes
and releases it; nothing else does.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pathlib
import socket
import uuid

from settopk.shards.location import Location

from .output import PathError

__all__ = ["ObjectLock", "OutputLock", "lock_output", "output_lock_path"]


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
        The result directory and its dataset root (:class:`settopk.jobs.target.Target`).
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
