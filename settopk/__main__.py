"""``python -m settopk SUBCOMMAND ...``: see :mod:`settopk.cli`."""

from settopk.cli import main

raise SystemExit(main())
