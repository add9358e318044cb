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

__all__ = ["PhaseClock", "progress_bar", "max_rss_bytes"]

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


def max_rss_bytes() -> int:
    """Peak resident memory of this driver process so far, in bytes (Linux reports kilobytes)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class PhaseClock:
    """The run's clock: when it started, each phase's seconds and the driver's peak RSS after it.

    Attributes
    ----------
    started : datetime.datetime
        Start of the run, UTC.
    timings : dict of str to float
        ``NAME_s`` per phase (seconds), and whatever the stages add (``merge_s``, ``total_s``, ...).
    peaks : dict of str to int
        The driver's peak RSS so far after each phase, in bytes: the manifest shows which
        phase raised it.
    """

    def __init__(self) -> None:
        self._t0 = time.perf_counter()
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.timings: dict[str, float] = {}
        self.peaks: dict[str, int] = {}

    @contextlib.contextmanager
    def phase(self, name: str):
        """Time the ``with`` block as phase ``name`` and log its time and the peak RSS when it ends
        (not when it raises)."""
        t = time.perf_counter()
        yield
        self.timings[f"{name}_s"] = time.perf_counter() - t
        self.peaks[name] = max_rss_bytes()
        log.info("phase %s: %.3f s (driver peak RSS so far %.2f GB)", name, self.timings[f"{name}_s"], self.peaks[name] / 1e9)

    def stamp_total(self) -> float:
        """Set ``timings['total_s']`` to the seconds since the start, and return it."""
        self.timings["total_s"] = time.perf_counter() - self._t0
        return self.timings["total_s"]
