"""settopk: exact top-k set-similarity search over token sets, on GPUs or CPUs, alone or as a Ray job.

Subpackages: :mod:`settopk.kernels` (the scoring kernels and their oracle),
:mod:`settopk.shards` (inputs, length-bucket plans, shard searchers and the exact merge),
:mod:`settopk.jobs` (the Ray job, corpus generation, verification, the benchmark) and
:mod:`settopk.configs` (named YAML configs). The command line is :mod:`settopk.cli`.

``import settopk`` imports no Ray, CuPy or Numba: each is imported where it is first needed.
"""
