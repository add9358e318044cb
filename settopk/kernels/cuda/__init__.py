"""The CuPy backend (``backend="cupy"``): :class:`CupyShardIndex`, one shard's docs in GPU memory.

Imported only where that backend is used (:func:`settopk.kernels.build_index` imports it on demand);
importing the package needs no CuPy, which the functions import when they run.

Modules
-------
index
    :class:`CupyShardIndex`: input checks, the GPU layout build, the search's batches; :func:`warm_up`.
levels
    The search of one batch through the sampling levels (the algorithm is described there).
floors
    Threshold tables of a score floor.
postings
    The tiled inverted index and the launcher of its kernel (``routing="auto"``).
modules
    The one loader and per-device cache of the compiled CUDA sources.
``bitslice_topk.cu``, ``postings_topk.cu``, ``common.cuh``
    The kernels, and the device code both sources share.
"""

from .index import CupyShardIndex, warm_up

__all__ = ["CupyShardIndex", "warm_up"]
