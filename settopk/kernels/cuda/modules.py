"""The one loader of the project's CUDA code: compiles a ``.cu`` source once per device and
process, and hands out its kernels.

Every GPU module of :mod:`settopk.kernels.cuda`, and the benchmark's baselines, get their kernels from
:func:`load_kernels`. A source is
compiled by NVRTC (:class:`cupy.RawModule` with ``name_expressions``, which instantiates the
templates named) the first time any thread asks for it on a device; later calls, from any index
or thread, get the same module. The sources include ``common.cuh`` from this directory (NVRTC
option ``-I``). CuPy also caches compiled binaries on disk, keyed by the source text and the
options but not by the headers a source includes, so the headers' digest is appended to the source
text as a comment: editing ``common.cuh`` compiles again instead of loading a stale binary.

CuPy is imported inside the functions, so importing this module needs no CuPy.
"""

from __future__ import annotations

import hashlib
import pathlib
import threading
from collections.abc import Sequence

__all__ = ["SOURCE_DIR", "load_kernels"]

SOURCE_DIR = pathlib.Path(__file__).resolve().parent
_OPTIONS = ("-std=c++17", f"-I{SOURCE_DIR}")

_lock = threading.Lock()
_modules: dict[tuple[str, int], tuple[tuple[str, ...], object]] = {}  # (str(source), device) -> (names, RawModule)


def load_kernels(source: str | pathlib.Path, name_expressions: Sequence[str], device_id: int) -> dict:
    """The kernels ``name_expressions`` of ``source`` compiled for device ``device_id``.

    Parameters
    ----------
    source : str or pathlib.Path
        File name of a CUDA source in :data:`SOURCE_DIR` (``"bitslice_topk.cu"``), or the path of
        a source elsewhere (it may include this directory's headers too).
    name_expressions : sequence of str
        The kernels wanted, as NVRTC name expressions (``"settopk::select_topk"``, or a template
        instance such as ``"settopk::count_emit<32, unsigned int, false>"``). A source is compiled
        once per device with the names of its first request; a later request may name only
        kernels among those.
    device_id : int
        CUDA device (CuPy's device id).

    Returns
    -------
    dict of str to cupy.RawKernel
        By name expression. Function attributes (``max_dynamic_shared_size_bytes``) set on a kernel
        hold for every holder of the module on that device.

    Raises
    ------
    ValueError
        If ``source`` was compiled for this device without one of ``name_expressions``.
    cupy.cuda.compiler.CompileException
        If NVRTC rejects the source.
    """
    import cupy

    names = tuple(name_expressions)
    with _lock:
        entry = _modules.get((str(source), device_id))
        if entry is None:
            code = (SOURCE_DIR / source).read_text() + f"\n// headers {_headers_digest()}\n"
            with cupy.cuda.Device(device_id):
                module = cupy.RawModule(code=code, options=_OPTIONS, name_expressions=names)
                module.compile()
            entry = _modules[(str(source), device_id)] = (names, module)
    compiled, module = entry
    missing = [name for name in names if name not in compiled]
    if missing:
        raise ValueError(f"{source} is compiled with kernels {list(compiled)}, without {missing}")
    return {name: module.get_function(name) for name in names}


def _headers_digest() -> str:
    """SHA-256 over the headers of :data:`SOURCE_DIR` (name and text of each ``*.cuh``)."""
    digest = hashlib.sha256()
    for header in sorted(SOURCE_DIR.glob("*.cuh")):
        digest.update(header.name.encode() + b"\0" + header.read_bytes())
    return digest.hexdigest()
