"""The scoring job as a Python function: :func:`score`, what ``settopk score`` runs, minus the exit codes."""

from __future__ import annotations

import argparse

from settopk.shards.location import Location

from .score import build_parser
from .validate import UsageError

__all__ = ["score"]

# Keyword -> the command line's option, where the two names differ.
_OPTION = {"n_shards": "--shards"}


class _RaisingParser(argparse.ArgumentParser):
    """The command line's parser, raising :class:`UsageError` where argparse would print and exit."""

    def error(self, message):
        raise UsageError(f"settopk.score: {message.replace('argument --', 'argument ')}")


def score(docs=None, queries=None, out=None, **settings) -> dict:
    """Run the whole scoring job: top-k (default 100) docs per query, written as a Parquet dataset.

    The same run as ``settopk score`` (:mod:`settopk.jobs.run`): it attaches to the Ray
    cluster this process is connected to, or under ``ray job submit`` the job's cluster, or
    starts a local one; results are exact, a rerun with the same inputs and settings is a
    no-op, and nothing is written unless the whole run succeeds.

    Parameters
    ----------
    docs, queries : str, os.PathLike or settopk.shards.location.Location, optional
        The corpus and the queries: a local path or a URI (``s3://``, ``gs://``, ...), in any
        format the job reads (README: Inputs). With neither, the config's synthetic corpus.
    out : str, os.PathLike or settopk.shards.location.Location, optional
        The result dataset directory (default ``out/settopk-results``), or the dataset root for
        a partitioned config such as ``nightly``.
    **settings
        The command line's options by their keyword names: ``k``, ``score``, ``config``,
        ``self_join``, ``include_self``, ``backend``, ``routing``, ``n_shards``, ``replicas``,
        ``gpus``, ``query_batch_size``, ``tsv``, ``dry_run``, ``force``, ``quiet``, ``date``
        (``datetime.date`` or ``"YYYY-MM-DD"``), ``run_id``. Each takes what its option takes
        (``settopk score --help``); flags take ``True``.

    Returns
    -------
    dict
        ``status`` (``"done"``, ``"no-op"`` or ``"dry-run"``), ``out``, and the result's
        ``manifest`` (``counts``: ``n_docs``, ``n_queries``, ``k``, ``rows``, ...;
        ``fingerprints``; ``timings`` in seconds; ``shards``), or for a dry run ``plan`` (lines)
        and ``no_op``. See :func:`settopk.jobs.run.run`.

    Raises
    ------
    settopk.errors.SettopkError
        Bad input (naming the file and line or row), config, settings or output path; nothing
        was written. Subclasses: :class:`settopk.shards.inputs.InputError`,
        :class:`settopk.configs.ConfigError`, :class:`settopk.jobs.validate.UsageError`,
        :class:`settopk.jobs.output.PathError`, :class:`settopk.jobs.output.OutputExistsError`.
    TypeError
        A keyword that is not a setting.
    Exception
        Any other failure of the run (cluster, actor, disk); nothing was written, and a rerun
        with the same arguments resumes from the query chunks already committed.

    Examples
    --------
    >>> summary = settopk.score(docs="docs.parquet", queries="queries.parquet", out="results", k=10)  # doctest: +SKIP
    >>> summary["manifest"]["counts"]["rows"]  # doctest: +SKIP
    """
    from .run import run

    parser = build_parser(_RaisingParser)
    options = {a.dest: a for a in parser._actions if a.option_strings}
    unknown = sorted(set(settings) - set(options) - {"help", "version"})
    if unknown:
        raise TypeError(f"settopk.score() got unexpected keyword(s) {unknown}; expected some of {sorted(set(options) - {'help', 'version'})}")
    places = {"docs": docs, "queries": queries, "out": out, "tsv": settings.pop("tsv", None)}
    argv = []
    for name, value in settings.items():
        if value is None or value is False:
            continue
        option = _OPTION.get(name, options[name].option_strings[-1])
        # "--threshold=-1/3": a value that starts with "-" is the option's, not another option.
        argv += [option] if value is True and options[name].nargs == 0 else [f"{option}={value}"]
    args = parser.parse_args(argv)
    # Paths and URIs go in as they are (never through str(), which hides a URI's credentials).
    for name, value in places.items():
        if value is not None:
            setattr(args, name, Location.of(value))
    return run(args)
