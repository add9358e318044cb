"""The in-process index: build once, search many times, in this process (no Ray).

Public surface: :class:`Index` and its result :class:`TopK` (:mod:`settopk.index.api`), the
threshold join's result :class:`Pairs` (:mod:`settopk.index.join`) and :func:`dedup`
(:mod:`settopk.index.dedup`), the
constants ``BACKENDS`` and ``MAX_K``, and :class:`InputError`, what build and search raise for bad
input. Beside the API: :mod:`settopk.index.inputs` (what ``Index.build`` and ``Index.search``
accept, read into validated sets) and :mod:`settopk.index.tokens` (the exact dictionary of an index
built over token values).

The layers import downward only: this package takes from :mod:`settopk.kernels` and
:mod:`settopk.shards`, never from :mod:`settopk.jobs` or :mod:`settopk.ray`.
"""

from .api import BACKENDS, MAX_K, Index, InputError, TopK
from .dedup import dedup
from .join import JoinArgumentError, Pairs, ResultTooLarge

__all__ = ["BACKENDS", "Index", "InputError", "JoinArgumentError", "MAX_K", "Pairs", "ResultTooLarge", "TopK", "dedup"]
