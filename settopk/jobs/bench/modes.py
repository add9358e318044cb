"""The runs a benchmark config can pick, one line each (:data:`MODES`).

A config picks a run by holding its section (``scaling: {...}``, ``library: {...}``, ...); one with
none is the phase run (:mod:`settopk.jobs.bench.phases`). Each mode's module owns its section's
dataclass (its keys, defaults and ``problems(cfg)``), its ``run_*`` and its ``format_*_table``; this
module imports them, and the config (:mod:`settopk.jobs.bench.config`) and the command line
(:mod:`settopk.jobs.bench.cli`) read them from here. No mode imports this module or the config
(but for annotations), so no modules import each other in a circle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .host import HostPathConfig, format_host_table, run_host
from .library import LibraryConfig, format_library_table, run_library
from .peers import PeersConfig, format_peers_table, run_peers
from .ray_data import RayDataConfig, format_ray_data_table, run_ray_data
from .real import RealConfig, format_real_table, run_real
from .scale import ScalingConfig, format_scaling_table, run_scaling
from .self_join import SelfJoinConfig, format_self_join_table, run_self_join
from .throughput import ThroughputConfig, format_throughput_table, run_throughput

__all__ = ["MODES", "Mode"]


@dataclass(frozen=True)
class Mode:
    """One run a config picks by holding its section.

    Attributes
    ----------
    key : str
        The section's key in the YAML file, and its field of :class:`~settopk.jobs.bench.config.BenchConfig`.
    section : type
        The section's frozen dataclass: its keys and defaults, and ``problems(cfg) -> list of str``
        (what is wrong with it, given the whole config; empty if nothing).
    run : callable
        The run; returns the result dict (written as JSON). Called as ``run(cfg, name, docs, queries)``
        on the config's synthetic corpus (generated once and cached) where ``corpus`` is
        ``"cached"``, ``run(cfg, name, data_dir)`` where ``"data_dir"`` (it generates its corpora
        itself), ``run(cfg, name)`` where ``"none"`` (its corpus is made in the process).
    table : callable
        ``table(result) -> str``: the printed table.
    corpus : str
        ``"cached"``, ``"data_dir"`` or ``"none"``, as for ``run``.
    """

    key: str
    section: type
    run: Callable[..., dict]
    table: Callable[[dict], str]
    corpus: str = "cached"


#: Every run but the phase run, in the order their keys are listed in the config's errors.
MODES = (
    Mode("scaling", ScalingConfig, run_scaling, format_scaling_table, corpus="data_dir"),
    Mode("throughput", ThroughputConfig, run_throughput, format_throughput_table),
    Mode("host", HostPathConfig, run_host, format_host_table),
    Mode("library", LibraryConfig, run_library, format_library_table),
    Mode("ray_data", RayDataConfig, run_ray_data, format_ray_data_table),
    Mode("self_join", SelfJoinConfig, run_self_join, format_self_join_table),
    Mode("peers", PeersConfig, run_peers, format_peers_table, corpus="none"),
    Mode("real", RealConfig, run_real, format_real_table, corpus="data_dir"),
)
