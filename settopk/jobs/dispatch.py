"""Sending work to the shard actors with timeouts and bounded retries.

Searches are pure functions of (shard, query batch), so sending a batch again is
exact. Ray restarts a dead actor itself (``max_restarts``; the actor re-reads its
shard) and re-sends the calls it was running (``max_task_retries``). This module
adds what Ray does not: a timeout on every call, so a hung actor cannot hang the
run; a restart of an actor that timed out; a bounded number of tries with
exponential backoff (``tenacity``); and, when a shard keeps failing, an error that
names its node and GPU.
"""

from __future__ import annotations

import logging
import time

import ray
import tenacity

__all__ = ["ShardFailure", "gather"]

log = logging.getLogger("settopk")


class ShardFailure(RuntimeError):
    """One or more shards failed or timed out on a call, after every try."""


def _last_line(exc: Exception) -> str:
    """The cause of a Ray error: the last non-empty line of its message (the original exception)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def _where(info: dict) -> str:
    gpu = f", GPU {info['gpu_ids']}" if info.get("gpu_ids") else ""
    return f"shard {info['shard_id']} (node {info['node']}{gpu})"


def gather(
    actors, infos: list[dict], calls, what: str, timeout_s: float, attempts: int, backoff_s: float, on_done=None,
    submitted: list | None = None,
) -> list:
    """Run calls on the shard actors and return their results in call order.

    Parameters
    ----------
    actors : list of ray.actor.ActorHandle
    infos : list of dict
        ``info()`` of each actor (``shard_id``, ``node``, ``gpu_ids``), for messages.
    calls : callable or list of (int, callable)
        ``(i, call)`` pairs: ``call(actors[i]) -> ObjectRef``, called again for the calls
        that need a retry. A single callable means one call per actor.
    what : str
        What the calls do, for messages (``"search of queries 0..255"``).
    timeout_s : float
        Longest wait for one call, in seconds; a try waits this long times the most calls
        queued on one actor.
    attempts : int
        Tries per call, ``>= 1``.
    backoff_s : float
        Wait before the second try; doubles on each further one.
    on_done : callable, optional
        Called with no argument each time a call succeeds (progress bars).
    submitted : list of ObjectRef, optional
        The first try's references, one per call, where the caller already made the calls
        (so that they run while it prepares other work); retries call again. The wait for
        them starts here.

    Raises
    ------
    ShardFailure
        When a call has failed or timed out ``attempts`` times; names each such shard's
        node and GPU and the last error.
    """
    if callable(calls):
        calls = [(i, calls) for i in range(len(actors))]
    results: list = [None] * len(calls)
    todo = list(range(len(calls)))
    errors: dict[int, str] = {}

    def one_try() -> None:
        nonlocal todo, submitted
        pending = {}
        for c in todo:
            i, call = calls[c]
            pending[call(actors[i]) if submitted is None else submitted[c]] = c
        submitted = None
        per_actor = max(sum(1 for c in todo if calls[c][0] == i) for i in {calls[c][0] for c in todo})
        failed = []
        deadline = time.monotonic() + timeout_s * per_actor
        while pending and (left := deadline - time.monotonic()) > 0:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=left)
            for ref in done:
                c = pending.pop(ref)
                try:
                    results[c] = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
                    errors[c] = _last_line(exc)
                    failed.append(c)
                else:
                    if on_done is not None:
                        on_done()
        hung = sorted({calls[c][0] for c in pending.values()})
        for c in pending.values():
            errors[c] = f"no answer within {timeout_s * per_actor:g} s"
            failed.append(c)
        for i in hung:
            ray.kill(actors[i], no_restart=False)  # a hung actor: Ray restarts it and it reloads its shard
        todo = sorted(failed)
        if failed:
            where = sorted({calls[c][0] for c in failed})
            log.warning("%s failed on %s; retrying", what, ", ".join(
                f"{_where(infos[i])}: {next(errors[c] for c in failed if calls[c][0] == i)}" for i in where))
            raise ShardFailure(failed)

    try:
        for attempt in tenacity.Retrying(
            stop=tenacity.stop_after_attempt(attempts),
            wait=tenacity.wait_exponential(multiplier=backoff_s, max=60),
            retry=tenacity.retry_if_exception_type(ShardFailure),
            reraise=True,
        ):
            with attempt:
                one_try()
    except ShardFailure:
        where = sorted({calls[c][0] for c in todo})
        detail = "; ".join(f"{_where(infos[i])}: {next(errors[c] for c in todo if calls[c][0] == i)}" for i in where)
        raise ShardFailure(
            f"{what} failed {attempts} time(s) on {detail}; check that node and GPU (driver, memory, "
            "`nvidia-smi`), or raise faults.search_timeout_s if the shard is only slow"
        ) from None
    return results
