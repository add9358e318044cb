"""The scoring job with stand-in shards: ``python -m jobs.bench.standin_job <jobs.score arguments>``.

What :mod:`jobs.bench.host` runs for each layout: :func:`jobs.score.main` with its shard actors
wrapping :class:`jobs.bench.standin.StandInSearcher`. A module of its own, which the
``jobs.bench`` package does not import, so that running it as ``__main__`` does not load it twice.
"""

from __future__ import annotations

import sys

from jobs.bench.standin import StandInSearcher
from jobs.score import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], searcher_cls=StandInSearcher))
