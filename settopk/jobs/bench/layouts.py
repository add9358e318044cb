"""What the layout-running modes' config sections share (scaling, throughput, host): the checks of
their ``shards`` and ``replicas`` lists. Imports no mode, so every mode may import it."""

from __future__ import annotations

__all__ = ["layout_problems"]


def layout_problems(section: str, shards: list[int], replicas: list[int] | None) -> list[str]:
    """Problems of a section's ``shards`` and ``replicas`` lists (``section``: its name, for the messages)."""
    problems = []
    if not shards or any(n < 1 for n in shards):
        problems.append(f"{section}.shards must list shard counts >= 1, found {shards}")
    if replicas is not None and (len(replicas) != len(shards) or any(r < 1 for r in replicas)):
        problems.append(f"{section}.replicas must list one count >= 1 per {section}.shards entry, found {replicas}")
    return problems
