"""``python -m jobs.bench``: see :mod:`jobs.bench.cli`."""

from .cli import main

raise SystemExit(main())
