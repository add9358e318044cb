"""The in-process index: build once, search many times, in this process (no Ray).

Public surface: :class:`Index` and its result :class:`TopK` (:mod:`settopk.index.api`), the
constants ``BACKENDS`` and ``MAX_K``, and :class:`InputError`, what build and search raise for bad
input. Beside the API: :mod:`settopk.index.inputs` (what ``Index.build`` and ``Index.search``
accept, read into validated sets) and :mod:`settopk.index.tokens` (the exact dictionary of an index
built over token values).

The layers import downward only: this package takes from :mod:`settopk.kernels` and
:mod:`settopk.shards`, never from :mod:`settopk.jobs` or :mod:`settopk.ray`.
"""

from .api import BACKENDS, MAX_K, Index, InputError, TopK

__all__ = ["BACKENDS", "Index", "InputError", "MAX_K", "TopK"]
