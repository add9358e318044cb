"""The jobs: scoring (:mod:`jobs.score`), corpus generation, verification and the benchmark.

Shared by their command lines: :func:`prog_name` and :func:`add_version`.
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["prog_name", "package_version", "add_version"]


def prog_name(module: str) -> str:
    """The program name a command's ``--help`` and errors show.

    Parameters
    ----------
    module : str
        The job's module, e.g. ``"jobs.score"``.

    Returns
    -------
    str
        The console script's own name where it was started as one (``settopk-score``),
        else ``python -m MODULE``.
    """
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name.startswith("settopk-") else f"python -m {module}"


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
