"""Fault injection for the chaos tests: a shard searcher that dies or hangs on purpose.

The job takes the class its shard actors wrap (``settopk.jobs.score.main(argv, searcher_cls=...)``,
``settopk.jobs.score.run``); the chaos tests pass a :class:`CrashingSearcher` made by
:func:`crashing_searcher`, so the product code holds no fault hooks.

Ray pickles the classes of this module by value (registered below): its workers rebuild
them from the pickle and never import ``tests``, which is not an installed package and is
on a worker's ``sys.path`` only where the driver's working directory is the checkout.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import ray.cloudpickle

from settopk.shards.searcher import ShardSearcher

__all__ = ["CrashingSearcher", "crashing_searcher"]

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class CrashingSearcher(ShardSearcher):
    """A shard searcher whose process exits, or whose call never returns, at its n-th search.

    Configured by class attributes (see :func:`crashing_searcher`):

    Attributes
    ----------
    crash_shard : int
        The shard whose searcher fails; the others search as :class:`ShardSearcher` does.
    crash_after : int
        The search call (1-based, counted per actor life) that fails.
    crash_marker : str
        File created before the failure, so that a restarted actor does not fail again;
        ``""``: every life of the actor fails.
    crash_mode : str
        ``"exit"`` (the process dies, as a worker killed by the OS or a GPU fault) or
        ``"hang"`` (the call never returns, as on a stuck GPU).
    """

    crash_shard = 0
    crash_after = 1
    crash_marker = ""
    crash_mode = "exit"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._calls = 0
        self._calls_lock = threading.Lock()  # GPU actors run two searches at once

    def search(self, queries, k, rows=None, home_rows=(), *home_results):
        if self.spec.shard_id == self.crash_shard:
            with self._calls_lock:
                self._calls += 1
                crash = self._calls == self.crash_after
            if crash and not (self.crash_marker and os.path.exists(self.crash_marker)):
                if self.crash_marker:
                    open(self.crash_marker, "w").close()
                if self.crash_mode == "hang":
                    time.sleep(24 * 3600)
                os._exit(1)
        return super().search(queries, k, rows, home_rows, *home_results)


def crashing_searcher(shard: int, after: int, marker: str = "", mode: str = "exit") -> type:
    """A :class:`CrashingSearcher` subclass: shard ``shard`` fails at its ``after``-th search
    (``mode`` ``"exit"`` or ``"hang"``), once per ``marker`` file (every time where ``marker`` is ``""``).

    Raises
    ------
    ValueError
        If ``mode`` is neither ``"exit"`` nor ``"hang"``.
    """
    if mode not in ("exit", "hang"):
        raise ValueError(f"mode must be 'exit' or 'hang', found {mode!r}")
    attributes = {"crash_shard": shard, "crash_after": after, "crash_marker": str(marker), "crash_mode": mode}
    return type("CrashingSearcher", (CrashingSearcher,), attributes)
