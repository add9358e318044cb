"""The ``settopk`` command: ``settopk SUBCOMMAND [ARGS ...]`` and ``python -m settopk SUBCOMMAND``.

Each subcommand's own parser lives with its job (:mod:`settopk.jobs.score`, ...); this module only
picks the subcommand and imports its module when it is run, so ``settopk --help`` starts no Ray.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["COMMANDS", "main"]

#: Subcommand -> (module with ``main(argv) -> int``, one-line summary).
COMMANDS = {
    "score": ("settopk.jobs.score", "run the top-k search job and write Parquet results"),
    "make-corpus": ("settopk.jobs.make_corpus", "write a synthetic corpus and queries as Parquet"),
    "verify": ("settopk.jobs.verify", "check a sample of a result against the brute-force oracle"),
    "bench": ("settopk.jobs.bench.cli", "run a benchmark config and print its ratios to the baselines"),
}


def _parser() -> argparse.ArgumentParser:
    from settopk.jobs import add_version, prog_name

    prog = prog_name("").rstrip()
    p = argparse.ArgumentParser(prog=prog, description="Exact top-k set-similarity search at corpus scale.",
                                epilog=f"'{prog} SUBCOMMAND --help' for a subcommand's options.")
    add_version(p)
    sub = p.add_subparsers(dest="command", metavar="SUBCOMMAND", required=True)
    for name, (_, summary) in COMMANDS.items():
        sub.add_parser(name, help=summary, add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``settopk SUBCOMMAND ARGS``; returns the subcommand's exit code (2 for a bad subcommand)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        _parser().parse_args(argv)  # prints help, the version, or the usage error and exits
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])
