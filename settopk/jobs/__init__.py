"""The jobs: scoring (:mod:`settopk.jobs.score`), corpus generation, verification and the benchmark.

Shared by their command lines: :func:`prog_name` and :func:`add_version`.
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["prog_name", "package_version", "add_version"]


def prog_name(command: str) -> str:
    """The program name a command's ``--help`` and errors show.

    Parameters
    ----------
    command : str
        The subcommand, e.g. ``"score"``.

    Returns
    -------
    str
        ``settopk COMMAND`` where the process was started as the ``settopk`` console script,
        else ``python -m settopk COMMAND``.
    """
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return f"settopk {command}" if name == "settopk" else f"python -m settopk {command}"


def package_version() -> str:
    """The installed settopk's version (``pyproject.toml``), or ``unknown`` where it is not installed."""
    from importlib import metadata

    try:
        return metadata.version("settopk")
    except metadata.PackageNotFoundError:
        return "unknown"


def add_version(parser: argparse.ArgumentParser) -> None:
    """Add ``--version``: prints ``PROG VERSION`` and exits 0."""
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}",
                        help="print the settopk version and exit")
