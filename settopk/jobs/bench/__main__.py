"""``python -m settopk bench``: see :mod:`settopk.jobs.bench.cli`."""

from .cli import main

raise SystemExit(main())
