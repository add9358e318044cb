"""The scoring job with stand-in shards: ``python -m settopk bench.standin_job <settopk.jobs.score arguments>``.

What :mod:`settopk.jobs.bench.host` runs for each layout: :func:`settopk.jobs.score.main` with its shard actors
wrapping :class:`settopk.jobs.bench.standin.StandInSearcher`. A module of its own, which the
``settopk.jobs.bench`` package does not import, so that running it as ``__main__`` does not load it twice.
"""

from __future__ import annotations

import sys

from settopk.jobs.bench.standin import StandInSearcher
from settopk.jobs.score import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], searcher_cls=StandInSearcher))
