"""The job's threshold search (``--threshold T``, config key ``threshold``; issue 32): what it can run.

The kernels of the CPU backends answer threshold searches exactly
(:meth:`settopk.kernels.NumpyShardIndex.threshold_search`,
:meth:`settopk.kernels.numba_index.NumbaShardIndex.threshold_search`); the job's shard actors,
merge tasks and result writer still carry top-k rows only. Until they carry threshold pairs, a
threshold run stops at its start with :class:`ThresholdSearchUnsupported`, before any input is
read or any actor starts: never a silent top-k in its place. The GPU backend (``cupy``) has no
threshold kernel at all, and says so by name.
"""

from __future__ import annotations

import settopk.configs

__all__ = ["ThresholdSearchUnsupported", "check_threshold_job"]


class ThresholdSearchUnsupported(settopk.configs.ConfigError, NotImplementedError):
    """A threshold run the job cannot do (yet). A :class:`settopk.configs.ConfigError`, so the
    command exits with the bad-input code (2) and no traceback; a ``NotImplementedError`` to say
    that the request is valid and the capability is what is missing."""


def check_threshold_job(cfg, backend: str | None = None) -> None:
    """Refuse a threshold run (``cfg.threshold`` set) that the job cannot do; nothing for top-k runs.

    Parameters
    ----------
    cfg : settopk.configs.JobConfig
        The run's config (``threshold``, ``backend``).
    backend : str, optional
        The resolved backend (``cfg.backend`` may be ``"auto"``, which becomes ``"cupy"`` on a GPU
        cluster); None: check ``cfg.backend`` only.

    Raises
    ------
    ThresholdSearchUnsupported
        With the GPU backend (no threshold kernel on CuPy), and for now with every backend: the
        job's search, merge and writer carry top-k rows only.
    """
    if cfg.threshold is None:
        return
    chosen = backend or cfg.backend
    if chosen == "cupy":
        raise ThresholdSearchUnsupported(
            f"threshold: {cfg.threshold} asks for a threshold search, which the cupy (GPU) backend does not have; "
            "run it with --backend cpu or --backend numpy, or drop --threshold for a top-k search on GPUs")
    raise ThresholdSearchUnsupported(
        f"threshold: {cfg.threshold} asks for a threshold search; the CPU kernels answer it "
        "(settopk.kernels NumpyShardIndex/NumbaShardIndex .threshold_search), but the job's shard actors, merge "
        "and writer carry top-k rows only so far (issue 32, step 3); drop --threshold, or call the kernels directly")
