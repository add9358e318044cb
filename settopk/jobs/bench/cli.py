"""The command line of the benchmark: ``python -m settopk bench --config NAME|FILE [--out FILE.json] [--data-dir DIR] [--quiet]``.

The config picks the run: a ``scaling`` section the scaling run (:mod:`settopk.jobs.bench.scale`),
a ``throughput`` section the whole-job run (:mod:`settopk.jobs.bench.throughput`), a ``host`` section
the host-path run with stand-in shards (:mod:`settopk.jobs.bench.host`), a ``library`` section
``settopk.Index.search`` in-process against the kernel alone (:mod:`settopk.jobs.bench.library`), a
``ray_data`` section the Ray Data pipeline against the job (:mod:`settopk.jobs.bench.ray_data`), a
``self_join`` section the threshold self-join against the top-k one (:mod:`settopk.jobs.bench.self_join`), a
``peers`` section the exact threshold self-join against SetSimilaritySearch and datasketch
(:mod:`settopk.jobs.bench.peers`), a ``real`` section the exact threshold self-join on a FIMI dataset against
the C++ joins of ``--peer-binary`` and SetSimilaritySearch (:mod:`settopk.jobs.bench.real`), none the phase run (:mod:`settopk.jobs.bench.phases`). The result
is written as JSON and summed up in a printed table.

Exit codes: 0 done; 1 results differ from the reference (or a host-path part is not
complete, or a peer the peers run times is not installed), or another failure;
2 bad config or input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

import settopk.configs
from settopk.jobs import add_version, prog_name
from settopk.jobs.synthetic import ensure_synthetic
from settopk.shards.inputs import InputError

from .common import ExactnessError, synthetic_spec
from .config import bench_config_names, load_bench_config
from .host import IncompleteOutputError
from .modes import MODES
from .peers import MissingPeerError
from .phases import format_phases_table, run_phases

__all__ = ["EXIT_BAD_INPUT", "EXIT_MISMATCH", "EXIT_OK", "build_parser", "main", "run"]

log = logging.getLogger("settopk.bench")

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2

_DESCRIPTION = "Benchmark job: time every phase of a search on a seeded corpus, against baselines, exactly checked."


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of ``settopk.jobs.bench``."""
    p = argparse.ArgumentParser(prog=prog_name("bench"), description=_DESCRIPTION)
    add_version(p)
    p.add_argument("--config", required=True, help=f"benchmark config name {bench_config_names()} or YAML path")
    p.add_argument("--out", help="result JSON file (default: out/bench/<config name>.json)")
    p.add_argument("--data-dir", help="where the corpus is generated and cached (default: the config's synthetic.cache_dir)")
    p.add_argument("--quiet", action="store_true", help="warnings and errors only (the table is still printed)")
    p.add_argument("--peer-binary", help="a real-data run's C++ peers: SSJOINLib's set_sim_join (sets real.peer_binary)")
    return p


def run(args: argparse.Namespace) -> dict:
    """Run the benchmark for parsed arguments; returns the result (also written as JSON and printed).

    Raises
    ------
    settopk.configs.ConfigError, settopk.shards.inputs.InputError
        Bad config or inputs.
    ExactnessError
        A result differs from the NumPy reference (for the phase run, the JSON file then
        holds the mismatches and no timings), or the peers run's pairs from SetSimilaritySearch's
        (likewise).
    MissingPeerError
        The peers run's SetSimilaritySearch or datasketch is not installed.
    RuntimeError
        A whole-job run failed.
    """
    cfg = _with_peer_binary(load_bench_config(args.config), args.peer_binary)
    name = Path(args.config).stem
    out_path = Path(args.out) if args.out else Path("out") / "bench" / f"{name}.json"
    data_dir = os.path.expanduser(args.data_dir or cfg.synthetic.cache_dir)
    mode = next((m for m in MODES if getattr(cfg, m.key) is not None), None)
    run_mode, format_table = (mode.run, mode.table) if mode is not None else (run_phases, format_phases_table)
    try:
        if mode is not None and mode.corpus == "data_dir":
            result = run_mode(cfg, name, data_dir)
        elif mode is not None and mode.corpus == "none":  # its corpus is made in the process: no cache
            result = run_mode(cfg, name)
        else:
            t = time.perf_counter()
            docs_path, queries_path = ensure_synthetic(synthetic_spec(cfg), data_dir)
            log.info("corpus ready in %.1f s: %s", time.perf_counter() - t, docs_path.parent)
            result = run_mode(cfg, name, docs_path, queries_path)
    except ExactnessError as exc:  # a run that got as far as a result writes it, with its mismatches
        if exc.result is not None:
            write_json(out_path, exc.result)
        raise
    table = format_table(result)
    write_json(out_path, result)
    print(table)
    print(f"written: {out_path}")
    return result


def _with_peer_binary(cfg, peer_binary: str | None):
    """``cfg`` with ``real.peer_binary`` set from ``--peer-binary`` (a ConfigError without a ``real`` section)."""
    if peer_binary is None:
        return cfg
    if cfg.real is None:
        raise settopk.configs.ConfigError(f"--peer-binary {peer_binary} applies to a real-data run (a config with a "
                                          "'real' section, e.g. real-retail); leave it out for this config")
    return dataclasses.replace(cfg, real=dataclasses.replace(cfg.real, peer_binary=peer_binary))


def write_json(path: Path, result: dict) -> None:
    """Write ``result`` as indented JSON at ``path``, atomically (parent directories created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m settopk bench`` and ``settopk bench``; returns the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s settopk %(levelname)s %(message)s", stream=sys.stderr)
    try:
        run(args)
    except (InputError, settopk.configs.ConfigError) as exc:
        log.error("%s", exc)
        return EXIT_BAD_INPUT
    except ExactnessError as exc:
        log.error("no timings printed: %s", exc)
        return EXIT_MISMATCH
    except IncompleteOutputError as exc:
        log.error("no timings printed: a part is not complete: %s", exc)
        return EXIT_MISMATCH
    except MissingPeerError as exc:
        log.error("%s", exc)
        return EXIT_MISMATCH
    return EXIT_OK
