"""The benchmark: ``python -m settopk bench --config NAME|FILE`` (``settopk bench``), outside the product modules.

Named configs live in ``settopk/configs/bench/`` and pick one of these runs:

* the phase run (``sti2-zipf``, ``sti2-uniform``, ``sti2-neardup``, ``smoke``;
  :mod:`settopk.jobs.bench.phases`): read, build, search, merge and write timed on one
  corpus, against the baselines (:mod:`settopk.jobs.bench.baselines`);
* the scaling run (``scale-weak``, ``scale-strong``, ``scale-smoke``;
  :mod:`settopk.jobs.bench.scale`): the same search on several shard and replica counts;
* the whole-job run (``job-1m``, ``job-1m-uniform``, ``job-1m-2gpu``, ``job-1m-4gpu``, ``job-10m-4gpu``, ``job-smoke``;
  :mod:`settopk.jobs.bench.throughput`): ``settopk.jobs.score`` end to end on each layout, against
  the kernel alone;
* the Ray Data run (``ray-data-1m``, ``ray-data-1m-2gpu``, ``ray-data-smoke``;
  :mod:`settopk.jobs.bench.ray_data`): ``read_parquet`` -> ``settopk.ray.search`` -> ``write_parquet``
  against the job on the same inputs, every row compared;
* the host-path run (``host-smoke``, ``host-1m``; :mod:`settopk.jobs.bench.host`): the same,
  with stand-in shards (:mod:`settopk.jobs.bench.standin`) answering at a GPU's pace, no GPU
  needed; every number is simulated, and every part is checked complete (the stand-ins'
  rows are not the queries' true results, so no reference sample is compared);
* the library run (``library-1m``, ``library-smoke``; :mod:`settopk.jobs.bench.library`):
  ``settopk.Index.search`` in this process against the kernel alone, on the same data;
* the peers run (``threshold-peers``, ``threshold-peers-smoke``; :mod:`settopk.jobs.bench.peers`):
  the exact threshold self-join against SetSimilaritySearch and datasketch's MinHash LSH, on a
  corpus with planted near-duplicates made in the process (:mod:`settopk.jobs.bench.peers_corpus`).

Every other run but the peers run (its pairs are checked against SetSimilaritySearch's)
generates the config's synthetic corpus once (into ``--data-dir`` or ``synthetic.cache_dir``) and checks its results against the NumPy reference on a
seeded sample of queries before it reports a number. Modules: :mod:`.cli` (the
command line), :mod:`.config` (the config, sharing :class:`settopk.configs.SearchConfig`
with the job's), :mod:`.modes` (the runs a config picks), :mod:`.common` (timing, the
exactness check, corpus and actors), :mod:`.shard` (the bench actor).

Each mode owns its config: its module defines its section's frozen dataclass (keys, defaults and
``problems(cfg)``, the section's checks given the whole config), its ``run_*`` and its
``format_*_table``, and imports the config for annotations only. Registering a mode is one line
in :data:`.modes.MODES` (``Mode("key", Section, run, format_table)``) and the section's
``Optional`` field ``key`` in :class:`.config.BenchConfig`; the config's checks, its list of
valid keys and the command line's dispatch all read :data:`.modes.MODES`.
"""

from .cli import build_parser, main, run
from .common import ExactnessError

__all__ = ["ExactnessError", "build_parser", "main", "run"]
