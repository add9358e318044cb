"""The command line of the benchmark: ``python -m settopk bench --config NAME|FILE [--out FILE.json] [--data-dir DIR] [--quiet] [--peer-binary PATH]``.

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
from .host import IncompleteOutputError, format_host_table, run_host
from .library import format_library_table, run_library
from .peers import MissingPeerError, format_peers_table, run_peers
from .phases import format_phases_table, run_phases
from .ray_data import format_ray_data_table, run_ray_data
from .real import format_real_table, run_real
from .scale import format_scaling_table, run_scaling
from .self_join import format_self_join_table, run_self_join
from .throughput import format_throughput_table, run_throughput

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
    p.add_argument("--peer-binary", help="a real-data run's C++ peers: SSJOINLib's set_sim_join binary (default: none)")
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
    cfg = load_bench_config(args.config)
    name = Path(args.config).stem
    out_path = Path(args.out) if args.out else Path("out") / "bench" / f"{name}.json"
    data_dir = os.path.expanduser(args.data_dir or cfg.synthetic.cache_dir)
    if cfg.scaling is not None:
        result = run_scaling(cfg, name, data_dir)
        table = format_scaling_table(result)
    elif cfg.real is not None:  # a dataset file, no synthetic corpus
        try:
            result = run_real(cfg, name, args.peer_binary)
        except ExactnessError as exc:
            write_json(out_path, exc.result)
            raise
        table = format_real_table(result)
    elif cfg.peers is not None:  # its corpus is made in the process: no cache
        try:
            result = run_peers(cfg, name)
        except ExactnessError as exc:
            write_json(out_path, exc.result)
            raise
        table = format_peers_table(result)
    else:
        t = time.perf_counter()
        docs_path, queries_path = ensure_synthetic(synthetic_spec(cfg), data_dir)
        log.info("corpus ready in %.1f s: %s", time.perf_counter() - t, docs_path.parent)
        if cfg.library is not None:
            result = run_library(cfg, name, docs_path, queries_path)
            table = format_library_table(result)
        elif cfg.self_join is not None:
            result = run_self_join(cfg, name, docs_path, queries_path)
            table = format_self_join_table(result)
        elif cfg.host is not None:
            result = run_host(cfg, name, docs_path, queries_path)
            table = format_host_table(result)
        elif cfg.ray_data is not None:
            result = run_ray_data(cfg, name, docs_path, queries_path)
            table = format_ray_data_table(result)
        elif cfg.throughput is not None:
            result = run_throughput(cfg, name, docs_path, queries_path)
            table = format_throughput_table(result)
        else:
            try:
                result = run_phases(cfg, name, docs_path, queries_path)
            except ExactnessError as exc:
                if exc.result is not None:
                    write_json(out_path, exc.result)
                raise
            table = format_phases_table(result)
    write_json(out_path, result)
    print(table)
    print(f"written: {out_path}")
    return result


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
