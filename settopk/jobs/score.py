"""The command line of the scoring job: ``settopk score`` (and ``python -m settopk score``).

``settopk score --docs PATH --queries PATH --out DIR [--k 100] [--score NAME] [--config NAME|FILE] [--tsv FILE]``
``settopk score --config nightly --docs PATH --queries PATH --out ROOT [--date YYYY-MM-DD]``
``settopk score --self-join --docs PATH --out DIR [--include-self]``
``... [--backend B] [--routing R] [--shards N|auto] [--replicas N] [--gpus N] [--query-batch-size N|auto]`` (override the config)

This module only parses the arguments and maps the run's errors to exit codes; the run itself
is :func:`settopk.jobs.run.run`, which :func:`settopk.score` calls too.

Exit codes: 0 done (or the output was already complete), 2 bad input, config,
arguments or output path (nothing written), 1 any other failure (nothing written).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import re
import sys

import settopk.configs
from settopk.errors import SettopkError
from settopk.kernels import SCORES
from settopk.kernels.threshold import parse_threshold
from settopk.kernels.postings import ROUTINGS
from settopk.shards.searcher import ShardSearcher

from . import add_version, prog_name
from .output import DEFAULT_OUT

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT"]

log = logging.getLogger("settopk")
EXIT_OK = 0
"""Done, or ``--out`` already held a finished result (nothing to do)."""
EXIT_FAILED = 1
"""Any failure other than bad input (cluster, actor, disk); nothing was written."""
EXIT_BAD_INPUT = 2
"""Bad input, config, arguments or output path; nothing was written, a rerun fails the same way."""
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def build_parser(parser_class: type = argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The command-line interface of ``settopk score``.

    ``parser_class`` lets :func:`settopk.score` parse its keyword arguments with the same
    options, types and checks, raising instead of exiting.
    """
    p = parser_class(
        prog=prog_name("score"),
        description="Exact top-k set-overlap search (Braun-Blanquet by default); results as a Parquet dataset. "
        "Options that name a config key override the config's value.",
    )
    add_version(p)
    p.add_argument("--docs", help="corpus: STI2 docs.txt, or a Parquet file/directory (doc_id, tokens); a local path or a URI (s3://, gs://, abfs://, hdfs://, file://)")
    p.add_argument("--queries", help="queries: a directory of one-query files, a text file, or Parquet (query_id, tokens); a local path or a URI")
    p.add_argument(
        "--out", default=DEFAULT_OUT,
        help="result dataset directory, a local path or a URI (s3://bucket/prefix, ...); with a partitioned config "
             "(nightly) the dataset root (default: %(default)s)",
    )
    p.add_argument("--k", type=_k_value, metavar="K", help="results per query (default: the config's k, 100)")
    p.add_argument(
        "--score", choices=SCORES, metavar="NAME",
        help=f"what to rank by, one of {', '.join(SCORES)} (default: the config's score, braun_blanquet)",
    )
    p.add_argument(
        "--self-join", action="store_true",
        help="every doc of --docs is a query against the corpus (query_id: its doc id), its own doc left out; "
        "no --queries (config key self_join)",
    )
    p.add_argument(
        "--include-self", action="store_true",
        help="with --self-join: keep each doc in its own results (config key include_self)",
    )
    p.add_argument(
        "--threshold", type=_threshold_value, metavar="T",
        help="every pair with score >= T instead of the top-k: a decimal (0.8, read exactly as 4/5) or a fraction "
        "(2/3), in [0, 1] (overlap: any T >= 0); exact, ties pass; --k caps it (config key threshold)",
    )
    p.add_argument(
        "--dedup", action="store_true",
        help="with --self-join and --threshold: near-duplicate groups by connected components; --out DIR gets "
        "DIR/pairs/, DIR/groups/ and DIR/duplicates/, committed together (a local or shared-filesystem --out)",
    )
    p.add_argument(
        "--backend", choices=settopk.configs.BACKENDS,
        help="search backend: cupy (GPUs), cpu (compiled, CPUs), numpy (CPUs) or auto (cupy where the cluster has GPUs, else cpu) (config key backend)",
    )
    p.add_argument(
        "--routing", choices=ROUTINGS,
        help=f"how a shard finds its candidates, one of {', '.join(ROUTINGS)} (config key routing)",
    )
    p.add_argument(
        "--shards", dest="n_shards", type=_auto_or_positive_int, metavar="N|auto",
        help="length-bucket shards; auto: one per GPU (cupy) or per CPU slot (cpu, numpy) divided by --replicas (config key n_shards)",
    )
    p.add_argument("--replicas", type=_positive_int, metavar="N", help="actors per shard (config key replicas)")
    p.add_argument(
        "--gpus", type=_positive_int, metavar="N",
        help="GPUs the job uses: backend cupy, N / (replicas x gpus_per_shard) shards, replicas 1 unless --replicas; "
        "a cluster with fewer GPUs fails at the start (overrides backend, n_shards, replicas)",
    )
    p.add_argument(
        "--query-batch-size", dest="query_batch_size", type=_auto_or_positive_int, metavar="N|auto",
        help="queries per call to a shard actor; auto: the backend's default (config key query_batch_size)",
    )
    p.add_argument("--config", default="local", help=f"config name {settopk.configs.config_names()} or YAML path (default: %(default)s)")
    p.add_argument("--tsv", help="also write the competition's TSV result file here (a local path or a URI)")
    p.add_argument(
        "--dry-run", action="store_true",
        help="validate inputs, print the shard plan and whether the real run would do anything, and exit",
    )
    p.add_argument("--force", action="store_true", help="recompute even if --out already holds a finished result")
    p.add_argument("--quiet", action="store_true", help="no progress bars; warnings and errors only (for schedulers)")
    p.add_argument(
        "--date", type=_iso_date, metavar="YYYY-MM-DD",
        help="partition date of a partitioned config (nightly): writes OUT/dt=YYYY-MM-DD/ (default: today in UTC)",
    )
    p.add_argument(
        "--run-id", type=_run_id_arg,
        help="id recorded in the manifest and Parquet metadata (default: the Ray job's submission id, else a new one)",
    )
    return p


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, found {text!r}")
    return value


def _k_value(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= settopk.configs.MAX_K:
        raise argparse.ArgumentTypeError(
            f"expected an integer in [1, {settopk.configs.MAX_K}] (the result's rank column is int16), found {text!r}")
    return value


def _threshold_value(text: str) -> str:
    # The score's own upper bound (1, or none for overlap) is checked once the score is settled
    # (settopk.jobs.validate.settle); here only what no score takes.
    try:
        parse_threshold(text, "overlap")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a finite number >= 0, a decimal (0.8) or a fraction (2/3), found {text!r}") from None
    return text


def _auto_or_positive_int(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer >= 1, found {text!r}") from None


def _iso_date(text: str) -> datetime.date:
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%d").date()
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, found {text!r}") from None


def _run_id_arg(text: str) -> str:
    if not _RUN_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected 1-128 letters, digits, '.', '_', ':' or '-' (starting with a letter or digit), found {text!r}"
        )
    return text


def main(argv=None, *, searcher_cls: type = ShardSearcher) -> int:
    """Entry point of ``python -m settopk score`` and ``settopk score``.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).
    searcher_cls : type
        The class each shard actor wraps (see :func:`run`); not a command-line option.

    Returns
    -------
    int
        :data:`EXIT_OK` (0), :data:`EXIT_FAILED` (1) or :data:`EXIT_BAD_INPUT` (2);
        argparse exits with 2 itself on unknown or malformed arguments.
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s settopk %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    import ray  # here, not for --help

    from .cluster import stop_local_ray
    from .run import run

    ray_was_up = ray.is_initialized()
    try:
        summary = run(args, searcher_cls)
    except SettopkError as exc:
        log.error("%s", exc)
        return EXIT_BAD_INPUT
    except Exception:
        # One logged traceback and a definite exit code, rather than an uncaught exception,
        # so a scheduler's log ends with the cause.
        log.exception("failed: the result dataset was not written; a rerun with the same arguments resumes from the committed query chunks")
        return EXIT_FAILED
    finally:
        if not ray_was_up and ray.is_initialized():  # what this command started, it stops
            stop_local_ray()
    if summary["status"] == "dry-run":
        print("\n".join(summary["plan"] + [f"  output: {summary['out']}"]))
        if summary["no_op"]:
            print(f"  no-op: {summary['out']} already holds a finished result, so the real run would do nothing "
                  "(add --force to recompute)")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
