"""The base of every error settopk raises for something its user can fix.

Each such error also derives from the built-in type it always had (``ValueError``,
``FileExistsError``), so code that caught those goes on working. A caller of the library
(:func:`settopk.score`, :class:`settopk.Index`) catches :class:`SettopkError` for bad input,
config, arguments or output paths; anything else is a failure of the run itself.
"""

from __future__ import annotations

__all__ = ["SettopkError"]


class SettopkError(Exception):
    """Bad input, config, arguments or output path: the message says what was expected, what
    was found, where (file, line or row) and how to fix it. A rerun with the same arguments
    fails the same way; the command line exits 2."""
