"""Large device-to-host copies through pinned staging buffers, the host side on several threads.

A copy from device memory into pageable host memory (``cupy.asnumpy``) is slow for large arrays:
the driver stages it through its own pinned buffers, and the destination's pages are first
touched, one fault at a time, by one thread. Here the device copies chunks into two pinned
buffers of this module (allocated once per process and device) while a few threads copy the
previous chunk into the destination, the two overlapping (docs/benchmarks.md, "Real data on one
GPU", measures both). Arrays of at most two chunks take ``cupy.asnumpy``.
CuPy is imported inside the function.
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = ["STAGE_BYTES", "to_host"]

#: Bytes per staging buffer (two per device); arrays of at most twice this are copied directly.
#: On an H200 host (docs/benchmarks.md, "Baskets and query logs") 16 MB buffers and 8 host threads
#: copied 42-168 MB at 12-14 GB/s, against 3-4 GB/s for ``cupy.asnumpy`` at those sizes; at 10 and
#: 21 MB ``cupy.asnumpy`` took 0.86 and 1.44 ms, as fast as staging, and takes no host thread.
STAGE_BYTES = 16 << 20
_HOST_THREADS = 8
_lock = threading.Lock()
_stages: dict[tuple[int, int], list] = {}  # (device id, bytes) -> two pinned uint8 buffers


def to_host(a) -> np.ndarray:
    """A host copy of the device array ``a``.

    Parameters
    ----------
    a : cupy.ndarray
        Any shape and dtype (copied C-contiguous).

    Returns
    -------
    numpy.ndarray
        Same shape and dtype, in pageable host memory owned by the caller.
    """
    import cupy

    if a.nbytes <= 2 * STAGE_BYTES:
        return cupy.asnumpy(a)
    import cupyx

    a = cupy.ascontiguousarray(a)
    out = np.empty(a.shape, a.dtype)
    src, dst = a.reshape(-1).view(cupy.uint8), out.reshape(-1).view(np.uint8)
    size = STAGE_BYTES
    with _lock:  # one copy at a time uses a device's buffers
        key = (cupy.cuda.Device().id, size)
        if key not in _stages:
            _stages[key] = [cupyx.empty_pinned(size, np.uint8) for _ in range(2)]
        stages = _stages[key]
        stream = cupy.cuda.get_current_stream()  # the stream that made ``a``: each chunk is read after its writes
        pending: list[list] = [[], []]
        with ThreadPoolExecutor(_HOST_THREADS, thread_name_prefix="settopk-copy") as pool:
            for i, lo in enumerate(range(0, src.size, size)):
                k, hi = i % 2, min(lo + size, src.size)
                for f in pending[k]:  # the host copies of the chunk this buffer held
                    f.result()
                src[lo:hi].get(stream=stream, out=stages[k][:hi - lo])  # returns once the chunk is on the host
                cuts = np.linspace(lo, hi, _HOST_THREADS + 1).astype(np.int64).tolist()
                pending[k] = [pool.submit(_copy, dst, stages[k], lo, c0, c1) for c0, c1 in itertools.pairwise(cuts)]
            for f in pending[0] + pending[1]:
                f.result()
    return out


def _copy(dst: np.ndarray, stage: np.ndarray, base: int, lo: int, hi: int) -> None:
    dst[lo:hi] = stage[lo - base:hi - base]
