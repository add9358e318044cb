"""The driver's progress: one bar per long phase, and each phase's time and peak memory.

A bar is tqdm on stderr. Under a Ray job that is the job log: updates at most once a
second; locally a bar is shown only for phases longer than :data:`_BAR_DELAY_S` so that
short runs stay quiet.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import sys
import time

from .manifest import ray_submission_id

__all__ = ["PhaseClock", "progress_bar", "max_rss_bytes", "rss_bytes"]

log = logging.getLogger("settopk")
_BAR_DELAY_S = 2.0


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


_SCALE_FROM = 100_000
"""Totals from which counts and rates are shown with SI prefixes (``1.20M/3.00M queries``);
below it, as plain integers (``3/40 pieces``)."""
_BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}{unit} [{elapsed}<{remaining}, {rate_noinv_fmt}]"


def progress_bar(desc: str, total: int, unit: str, quiet: bool):
    """A progress bar for one phase: ``update(n)`` and ``close()``; does nothing where ``quiet``.

    Parameters
    ----------
    desc : str
        The phase (``read``, ``load``, ``search``).
    total : int
        Units of work in the phase.
    unit : str
        The unit in the plural as a person reads it: ``pieces``, ``shards``, ``queries``; the
        bar reads ``3/40 pieces [00:02<00:10, 1.50 pieces/s]``.
    quiet : bool
        No bar at all.
    """
    if quiet:
        return _NoBar()
    from tqdm import tqdm

    # Ray's tqdm_ray always scales units (``1.00/1.00 piece``); the driver's stderr is the job
    # log under `ray job submit` anyway, so plain tqdm, at most one update a second there.
    under_job = ray_submission_id() is not None
    return tqdm(
        desc=desc, total=total, unit=f" {unit}", unit_scale=total >= _SCALE_FROM, bar_format=_BAR_FORMAT,
        file=sys.stderr, delay=0.0 if under_job else _BAR_DELAY_S, mininterval=1.0 if under_job else 0.1,
        dynamic_ncols=True,
    )


_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"
_run_peak = 0  # the driver's peak RSS over the windows whose high-water mark was reset


def _status_bytes(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes; None off Linux."""
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_bytes() -> int:
    """Resident memory of this driver process now, in bytes (0 where ``/proc`` is missing)."""
    return _status_bytes("VmRSS") or 0


def _window_peak() -> int:
    """Peak RSS since the last :func:`_reset_peak` (since the start where none ran)."""
    import resource

    hwm = _status_bytes("VmHWM")
    return hwm if hwm is not None else int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _reset_peak() -> bool:
    """Start a new peak window: the kernel's high-water mark is set to the current RSS
    (``clear_refs`` 5, Linux >= 4.0); the old window's peak is kept in :data:`_run_peak`.
    Returns False where it cannot be reset (the peak is then the process's so far)."""
    global _run_peak
    _run_peak = max(_run_peak, _window_peak())
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def max_rss_bytes() -> int:
    """Peak resident memory of this driver process so far, in bytes."""
    return max(_run_peak, _window_peak(), rss_bytes())


class PhaseClock:
    """The run's clock: when it started, each phase's seconds and the driver's memory in it.

    Attributes
    ----------
    started : datetime.datetime
        Start of the run, UTC.
    timings : dict of str to float
        ``NAME_s`` per phase (seconds), and whatever the stages add (``merge_s``, ``total_s``, ...).
    peaks : dict of str to dict
        Per phase, the driver's RSS in bytes: ``start`` and ``end`` of the phase and ``peak``,
        the highest within the phase by itself (where the kernel lets the high-water mark be
        reset; else the peak so far). Phases that overlap work of the driver's own threads
        (the queries' validation runs during ``read`` and ``load``) include its memory.
    """

    def __init__(self) -> None:
        self._t0 = time.perf_counter()
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.timings: dict[str, float] = {}
        self.peaks: dict[str, dict] = {}

    @contextlib.contextmanager
    def phase(self, name: str, timing: str | None = None, since: float | None = None):
        """Time the ``with`` block as phase ``name``, measure the driver's RSS in it and log both
        when it ends (not when it raises).

        ``timing`` names the seconds' key instead of ``NAME_s``; ``since`` (a
        ``time.perf_counter()`` value) starts the time earlier than the block, for work
        started before the driver waits for it (the actors' loading).
        """
        start_rss = rss_bytes()
        own = _reset_peak()
        t = time.perf_counter() if since is None else since
        yield
        self.timings[timing or f"{name}_s"] = time.perf_counter() - t
        end_rss = rss_bytes()
        # Other threads of the driver allocate too: the peak read after the end is at least the end.
        peak = max(end_rss, start_rss, _window_peak() if own else max_rss_bytes())
        self.peaks[name] = {"start": start_rss, "end": end_rss, "peak": peak}
        log.info("phase %s: %.3f s (driver RSS %.2f -> %.2f GB, peak %.2f GB)", name, self.timings[timing or f"{name}_s"],
                 start_rss / 1e9, end_rss / 1e9, peak / 1e9)

    def stamp_total(self) -> float:
        """Set ``timings['total_s']`` to the seconds since the start, and return it."""
        self.timings["total_s"] = time.perf_counter() - self._t0
        return self.timings["total_s"]
