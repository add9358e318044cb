"""The output target: where a run writes, and the one place that decides whether it may.

A :class:`Target` is built once from the arguments (:meth:`Target.of`) and owns the run's
output: the result directory (``--out``, or its partition ``ROOT/dt=YYYY-MM-DD``) and its dataset
root, the run record and the work directory beside the root, the lock, the decision and the
commit. The decision (:meth:`Target.decide`) is made in the validate stage
(:func:`settopk.jobs.validate.settle`), before anything is read or written:

- write: nothing there, an empty directory, or (on a store) a commit of this job cut off halfway;
- no-op: a finished settopk result of the same inputs and settings;
- replace: a finished settopk result, under ``--force``;
- refuse (exit 2): a directory that is not a settopk result (whatever ``--force`` says), a
  finished result of other inputs or settings without ``--force``, an output that overlaps an
  input or cannot be written, or one that another run holds (its lock).

The result's layout, its Parquet writing and its atomic commit are :mod:`settopk.jobs.output`'s;
the lock's mechanism is :mod:`settopk.jobs.lock`'s.
"""

from __future__ import annotations

import datetime
import enum
import errno
import os
import pathlib
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Callable

import pyarrow.fs as pafs

from settopk.shards.location import Location, StorageError

from . import output
from .lock import ObjectLock, OutputLock, lock_output
from .output import PARTITION_NAME, RECORD_SUFFIX, SUCCESS, OutputExistsError, PathError, foreign_entries, read_manifest

__all__ = ["RESULT_SETTINGS", "Decision", "Target", "ThisRun", "check_dataset_root", "check_output_dir", "check_outputs_apart",
           "check_writable", "differences"]

RESULT_SETTINGS = ("k", "score", "self_join", "include_self", "threshold", "vocab_size", "max_len", "on_invalid")
"""The config keys a result depends on; a rerun that changes one of them is not the same run."""


class Decision(enum.Enum):
    """What a run does with its output (:meth:`Target.decide`); a refusal raises instead."""

    WRITE = "write"  # nothing to keep there
    NO_OP = "no-op"  # a finished result of the same run: nothing to do
    REPLACE = "replace"  # a finished settopk result, replaced under --force


@dataclass(frozen=True)
class ThisRun:
    """What the run asked for now, to compare with a finished result (:func:`differences`)."""

    fingerprints: dict  # {"docs": ..., "queries": ...} (settopk.shards.inputs.fingerprint)
    settings: dict  # the config values of RESULT_SETTINGS
    dedup: bool  # a --dedup run


@dataclass(eq=False)
class Target:
    """Where a run's result goes, and whether the run may write there.

    Attributes
    ----------
    out_dir : Location
        The result directory: ``--out``, or its partition ``ROOT/dt=YYYY-MM-DD``.
    dataset_root : Location
        What readers scan: ``out_dir`` itself, or the root of the ``dt=`` partitions. The run
        record, the work directory, staging and the lock lie beside it, never inside it.
    day : datetime.date or None
        The partition's date, for a partitioned config.
    lock : OutputLock, ObjectLock or None
        The output's lock while the run holds it (:meth:`take_lock`).
    decision : Decision or None
        What :meth:`decide` decided.
    """

    out_dir: Location
    dataset_root: Location
    day: datetime.date | None = None
    lock: OutputLock | ObjectLock | None = field(default=None, repr=False)
    decision: Decision | None = None

    @classmethod
    def of(cls, out, day: datetime.date | None = None) -> "Target":
        """The target of ``--out`` (a path or URI): the result directory itself, or, given the
        ``day`` of a partitioned config, its partition ``out/dt=YYYY-MM-DD`` under the root ``out``."""
        out = Location.of(out)
        if day is None:
            return cls(out, out, None)
        return cls(Location.of(output.partition_dir(out, day)), out, day)

    # --- where things go ---------------------------------------------------------------------------
    @property
    def record_dir(self):
        """The run record (:func:`settopk.jobs.output.record_dir`): a path, or a Location on a store."""
        return output.record_dir(self.out_dir, self.dataset_root)

    @property
    def rejected_path(self):
        """The quarantined lines in the run record (:func:`settopk.jobs.output.rejected_path`)."""
        return output.rejected_path(self.out_dir, self.dataset_root)

    @property
    def work_dir(self):
        """Where the run's parts accumulate before the commit (:func:`settopk.jobs.output.work_dir`)."""
        return output.work_dir(self.out_dir, self.dataset_root)

    def read_manifest(self) -> dict:
        """The finished result's manifest (:func:`settopk.jobs.output.read_manifest`)."""
        return read_manifest(self.out_dir, self.dataset_root)

    def rejected_inputs(self, input_name: str) -> set[str]:
        """The files of ``input_name`` (``"docs"``, ``"queries"``) the finished result set aside."""
        return output.rejected_paths(self.out_dir, input_name, self.dataset_root)

    # --- checks before any work ---------------------------------------------------------------
    def check_root(self) -> None:
        """A store that cannot be reached (with the reason), and a nightly root holding anything
        but ``dt=`` partitions; checked first, before the inputs are looked at.

        Raises
        ------
        PathError, OutputExistsError
        """
        if not self.dataset_root.local:
            check_writable("--out", self.dataset_root, file=False, creates_parents=True)
        if self.day is not None:
            check_dataset_root(self.dataset_root)

    def check_paths(self, inputs: dict, tsv) -> None:
        """The outputs (result, run record, ``--tsv``) apart from the inputs, and writable.

        Parameters
        ----------
        inputs : dict
            ``{"--docs": Location, "--queries": Location or None}``.
        tsv : Location or None
            ``--tsv``.

        Raises
        ------
        PathError
        """
        outputs = {"--out": self.dataset_root, "--out (its run record)": Location.of(output.record_dir(self.dataset_root))}
        check_outputs_apart({**outputs, "--tsv": tsv}, inputs)
        if tsv is not None:
            check_outputs_apart({"--tsv": tsv}, outputs)
            check_writable("--tsv", tsv, file=True, creates_parents=False)
        check_writable("--out", self.dataset_root, file=False, creates_parents=True)

    # --- the lock -----------------------------------------------------------------------------
    def take_lock(self, run_id: str) -> None:
        """Take the output's lock (:func:`settopk.jobs.lock.lock_output`), held until :meth:`release`.

        Raises
        ------
        PathError
            If another run holds it (its run id, host and pid named).
        """
        self.lock = lock_output(self.out_dir, self.dataset_root, run_id)

    def release(self) -> None:
        """Release the lock, if held (idempotent)."""
        if self.lock is not None:
            self.lock.release()

    # --- the decision -------------------------------------------------------------------------
    def decide(self, force: bool, this_run: Callable[[], ThisRun] | None = None) -> Decision:
        """Decide whether the run may write its result here: the one place that does.

        Parameters
        ----------
        force : bool
            ``--force``: replace a finished settopk result.
        this_run : callable returning ThisRun, optional
            What the run asks for now; called only where a finished result is there and
            ``force`` is false (fingerprinting reads the inputs' listings). None
            (``--dry-run``): a finished result is taken for a no-op without comparing.

        Returns
        -------
        Decision
            Also kept as :attr:`decision`.

        Raises
        ------
        OutputExistsError
            The output is a file, or a directory that is not a settopk result, whatever ``force``
            says (:func:`check_output_dir`).
        PathError
            A finished result of other inputs or settings, without ``force`` (each difference named).
        """
        if not _finished_result(self.out_dir, self.dataset_root, force):
            self.decision = Decision.WRITE
        elif force:
            self.decision = Decision.REPLACE
        else:
            if this_run is not None:
                self._refuse_another_run(this_run())
            self.decision = Decision.NO_OP
        return self.decision

    def _refuse_another_run(self, now: ThisRun) -> None:
        diffs = differences(self.out_dir, self.dataset_root, now.fingerprints, now.settings)
        try:
            dedup_there = "dedup" in self.read_manifest()
        except (OSError, ValueError):  # differences() has said why it could not be read
            dedup_there = now.dedup
        if dedup_there != now.dedup:
            diffs.append(f"--dedup (a{'' if dedup_there else ' no'} dedup result there, {'' if now.dedup else 'no '}--dedup now)")
        if diffs:
            raise PathError(
                f"--out {self.out_dir}: expected a finished result of the same inputs and settings (a rerun is then a no-op), "
                f"found one that differs in {'; '.join(diffs)}; fix: pass --force to replace it, or choose another --out"
            )

    # --- the commit ---------------------------------------------------------------------------
    def commit(self, stage, manifest: dict, rejected=None):
        """Make the staged result visible with its run record (:func:`settopk.jobs.output.commit_results`,
        which refuses again, at the last moment, to remove anything but a settopk result).

        Parameters
        ----------
        stage : path or Location
            The parts (the work directory, or a ``--dedup`` run's staging directory).
        manifest : dict
        rejected : pyarrow.Table, optional
            The quarantined lines (None: not under quarantine).

        Returns
        -------
        pathlib.Path or Location
            The result directory.
        """
        return output.commit_results(stage, self.out_dir, manifest, dataset_root=self.dataset_root, rejected=rejected)


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


def check_output_dir(out_dir, force: bool, dataset_root=None) -> bool:
    """Whether ``out_dir`` (a path or URI) holds a finished settopk result that a run without
    ``force`` leaves as it is (:meth:`Target.decide` makes the whole decision).

    Only a settopk result is ever replaced: a directory holding ``_SUCCESS`` whose run record
    (:func:`settopk.jobs.output.manifest_path`) exists, and nothing but the files a settopk run
    writes there (:func:`settopk.jobs.output.foreign_entries`). Anything else that holds files
    (another tool's output, a user's files) is refused, with or without ``force``.

    Parameters
    ----------
    out_dir : path or str
        The result directory (for a nightly run, the partition ``ROOT/dt=...``).
    force : bool
        ``--force``: a finished settopk result is to be replaced.
    dataset_root : path or str, optional
        Its dataset root (see :func:`settopk.jobs.output.record_dir`).

    Returns
    -------
    bool
        True if ``out_dir`` already holds a finished settopk result and ``force`` is false.

    Raises
    ------
    OutputExistsError
        If ``out_dir`` is a file, or a directory that is not a settopk result: it holds files
        but no run record, no ``_SUCCESS`` (on a store, a prefix holding only part files and
        the run record is a commit that was cut off, and is taken back), or, under ``force``,
        files other than a settopk result's (they would be deleted with it).
    """
    return _finished_result(out_dir, dataset_root, force) and not force


def _finished_result(out_dir, dataset_root, force: bool) -> bool:
    """Whether a finished settopk result is at ``out_dir`` (False: nothing there to keep); refuses
    anything else, as :func:`check_output_dir` says."""
    out = Location.real(out_dir)
    _refuse_a_record(out)
    kind = out.kind()
    if kind == pafs.FileType.NotFound:
        if out.local and out.parent.is_file():
            raise OutputExistsError(f"{out}: {out.parent} is a file, not a directory; choose another --out")
        return False
    if kind != pafs.FileType.Directory:
        raise OutputExistsError(f"{out}: expected a result directory, found a file; fix: choose another --out, or move the file away")
    names = sorted(e.base_name for e in out.children())
    if not names:
        return False  # an empty directory: nothing to lose
    record = Location.of(output.manifest_path(out_dir, dataset_root))
    if not record.is_file():
        raise OutputExistsError.not_a_result(out, names, f"no settopk run record {record}")
    strays = foreign_entries(out)
    if SUCCESS in names:
        if force and strays:
            raise OutputExistsError.not_a_result(
                out, strays, "besides a settopk result it holds files a settopk run never writes, which --force would delete")
        return True
    if not out.renames and not strays:
        return False  # a commit cut off on a store: its run record was written, then some parts moved
    raise OutputExistsError.not_a_result(out, names, f"no {SUCCESS}, and files a settopk run never leaves there")


def check_dataset_root(root) -> None:
    """Check that ``root`` (a path or URI) can hold ``dt=YYYY-MM-DD`` partitions, before any work starts.

    Raises
    ------
    OutputExistsError
        If ``root`` is a file, or a directory holding anything other than
        ``dt=YYYY-MM-DD`` partitions and hidden (``.``/``_``) entries, for example
        an unpartitioned result: readers of the root would then mix the two.
    """
    root = Location.real(root)
    _refuse_a_record(root)
    kind = root.kind()
    if kind == pafs.FileType.NotFound:
        if root.local and root.parent.is_file():
            raise OutputExistsError(f"{root}: {root.parent} is a file, not a directory; choose another --out")
        return
    if kind != pafs.FileType.Directory:
        raise OutputExistsError(f"{root}: is a file; --out of a partitioned config must be a dataset root directory")
    strays = sorted(
        e.base_name for e in root.children()
        if not e.base_name.startswith((".", "_"))
        and not (e.type == pafs.FileType.Directory and PARTITION_NAME.fullmatch(e.base_name))
    )
    if strays:
        raise OutputExistsError(
            f"{root}: expected a dataset root holding only dt=YYYY-MM-DD partitions, found {strays[:3]}; "
            "choose another --out for the partitioned (nightly) dataset"
        )


def _refuse_a_record(place: Location) -> None:
    """Refuse an output that is the run record of a result beside it (``X.run`` next to ``X``)."""
    if place.name.endswith(RECORD_SUFFIX):
        result = place.sibling(place.name[: -len(RECORD_SUFFIX)])
        if result.kind() == pafs.FileType.Directory:
            raise OutputExistsError(
                f"{place}: expected a result path, found the run record (manifest) of {result}; choose another --out"
            )


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
