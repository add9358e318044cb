"""What a bad input becomes: :class:`InputError` (stop) or :class:`Rejected` (set aside), and the
limits every set is checked against.

Every reader of this package sends a bad line, row or file to one :class:`Rejects` collector, which
either raises the error at once (``on_invalid="error"``) or records it (``"quarantine"``), so the two
policies share one code path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from settopk.errors import SettopkError

from ..location import Location

__all__ = ["InputError", "ON_INVALID", "REMAP_FIX", "Rejected", "Rejects", "SetLimits"]

REMAP_FIX = "remap the token ids into [0, vocab_size), or raise vocab_size (at most 16777216)"
"""The fix an :class:`InputError` gives for a token id outside ``[0, vocab_size)`` where ids are
taken as they are (the in-memory :class:`settopk.Index`); the readers map any token instead
(:mod:`settopk.shards.inputs.vocabulary`)."""


class InputError(ValueError, SettopkError):
    """A bad input, located exactly.

    ``InputError(path, expected, found, fix, line=None, row=None)`` reads
    ``"<path>:<line> (1-based line): expected <expected>, found <found>; fix: <fix>"`` for a text line,
    ``"<path> row <row> (0-based row): ..."`` for a Parquet row (within the file), each message saying
    how it counts, and ``"<path>: ..."`` for the
    file as a whole. ``InputError(message)`` keeps a message written elsewhere (checks outside these
    readers); ``path``, ``line`` and ``row`` are then None.

    Attributes
    ----------
    path : str or None
        The file or directory at fault, as shown (a URI without its secrets:
        :func:`settopk.shards.location.redact`).
    line : int or None
        1-based line number, for text inputs.
    row : int or None
        0-based row number within the Parquet file ``path``.
    expected, found, fix : str or None
        What was expected, what was found, and how to fix it.
    """

    def __init__(self, path, expected: str | None = None, found: str | None = None, fix: str | None = None, line: int | None = None, row: int | None = None):
        self.expected = expected
        self.found = found
        self.fix = fix
        self.line = line
        self.row = row
        if expected is None:
            self.path = None
            super().__init__(str(path))
            return
        self.path = str(path) if isinstance(path, Location) else os.fspath(path)  # a Location: its redacted form
        where = self.path
        if line is not None:
            where = f"{self.path}:{line} (1-based line)"
        elif row is not None:
            where = f"{self.path} row {row} (0-based row)"
        super().__init__(f"{where}: expected {expected}, found {found}; fix: {fix}")

    def __reduce__(self):  # keeps the attributes across pickling (Ray ships exceptions between processes)
        if self.expected is None:
            return (type(self), self.args)
        return (type(self), (self.path, self.expected, self.found, self.fix, self.line, self.row))


@dataclass(frozen=True)
class SetLimits:
    """Bounds every set must respect: at most ``max_len`` distinct tokens. ``vocab_size`` is the
    kernels' dense id space, at most ``2**24`` (above 65536 on the cpu and numpy backends only): sets
    whose tokens are all integers in ``[0, min(vocab_size, 65536))`` are read as those ``uint16`` ids,
    others as token values mapped later (:mod:`settopk.shards.inputs.vocabulary`)."""

    vocab_size: int = 65536
    max_len: int = 128

    def __post_init__(self) -> None:
        if not 1 <= self.vocab_size <= 1 << 24:
            raise ValueError(f"vocab_size must be in [1, 16777216], found {self.vocab_size}")
        if self.max_len < 0:
            raise ValueError(f"max_len must be >= 0, found {self.max_len}")


ON_INVALID = ("error", "quarantine")
"""Policies for an invalid line or row: stop with :class:`InputError`, or set it aside as :class:`Rejected`."""


@dataclass(frozen=True)
class Rejected:
    """One invalid line or row set aside under ``on_invalid="quarantine"``.

    Attributes
    ----------
    path : str
        The file it came from.
    line : int or None
        1-based line number (text inputs).
    row : int or None
        0-based row within ``path`` (Parquet inputs).
    reason : str
        What was expected, what was found and how to fix it (the :class:`InputError` message
        without its location).
    """

    path: str
    line: int | None
    row: int | None
    reason: str


class Rejects:
    """Where readers send an invalid line or row: raised at once, or recorded (quarantine).

    Parameters
    ----------
    on_invalid : {"error", "quarantine"}
        One of :data:`ON_INVALID`.

    Attributes
    ----------
    quarantine : bool
        True under ``"quarantine"``: :meth:`add` records instead of raising.
    records : list of Rejected
        What :meth:`add` recorded, in the order it was added.

    Raises
    ------
    ValueError
        If ``on_invalid`` is not one of :data:`ON_INVALID`.
    """

    def __init__(self, on_invalid: str):
        if on_invalid not in ON_INVALID:
            raise ValueError(f"on_invalid must be one of {ON_INVALID}, found {on_invalid!r}")
        self.quarantine = on_invalid == "quarantine"
        self.records: list[Rejected] = []

    def add(self, error: InputError) -> None:
        """Raise ``error``, or under quarantine record it as a :class:`Rejected`.

        Raises
        ------
        InputError
            ``error`` itself, unless quarantining.
        """
        if not self.quarantine:
            raise error
        reason = f"expected {error.expected}, found {error.found}; fix: {error.fix}"
        self.records.append(Rejected(error.path, error.line, error.row, reason))
