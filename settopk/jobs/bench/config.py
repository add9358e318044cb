"""Benchmark configs: YAML files in ``settopk/configs/bench/`` loaded into a frozen dataclass.

``load_bench_config("sti2-zipf")`` reads ``settopk/configs/bench/sti2-zipf.yaml``; any
other argument is a path to a YAML file. Unknown keys, wrong types and values
out of range are rejected with the file named (:class:`settopk.configs.ConfigError`).
The search settings (backend, settopk.shards, k, score, routing, limits, synthetic corpus)
are the job's own (:class:`settopk.configs.SearchConfig`), with the same keys and checks. Each
run's section (``scaling``, ``library``, ...) is its mode's own dataclass, checked by its own
``problems(cfg)`` (:data:`settopk.jobs.bench.modes.MODES`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import List, Optional

import dacite

from settopk.configs import CONFIG_DIR, ConfigError, SearchConfig, SyntheticConfig, read_yaml_mapping, search_problems, synthetic_problems
from settopk.kernels import SCORES
from settopk.kernels.postings import ROUTINGS

from .baselines import BASELINES
from .modes import MODES
# The sections' types, for the fields of BenchConfig (dacite reads them from this module's names).
from .host import HostPathConfig
from .library import LibraryConfig
from .peers import PeersConfig
from .ray_data import RayDataConfig
from .real import RealConfig
from .scale import ScalingConfig
from .self_join import SelfJoinConfig
from .throughput import ThroughputConfig

__all__ = ["BENCH_DIR", "BASELINE_NAMES", "BenchConfig", "HostPathConfig", "LibraryConfig", "PeersConfig", "RayDataConfig",
           "ScalingConfig", "ThroughputConfig", "bench_config_names", "load_bench_config"]

BENCH_DIR = CONFIG_DIR / "bench"
#: Baselines the benchmark knows; ``auto`` means the ones for the backend's device.
BASELINE_NAMES = ("auto", *BASELINES)


@dataclass(frozen=True)
class BenchConfig(SearchConfig):
    """Settings of a benchmark run (``python -m settopk bench``).

    Attributes
    ----------
    backend, n_shards, gpus_per_shard, cpus_per_shard, k, score, routing, max_len, vocab_size, synthetic
        The search settings (:class:`settopk.configs.SearchConfig`): one actor per shard
        (``n_shards: auto``: one per GPU or CPU slot); the result JSON reports the
        routing's mix, the time per path and the postings' bytes; the corpus is
        generated once into ``synthetic.cache_dir``, or the directory given to
        ``--data-dir``.
    query_batch_size : int
        Queries per search request to the actors; 0 sends all queries at once
        (the search phase then times one request).
    warmup : int
        Untimed repetitions of every phase before the timed ones.
    repetitions : int
        Timed repetitions of every phase (median and min are reported).
    baseline_repetitions : int, optional
        Timed repetitions of each baseline's build and search (default:
        ``repetitions``): the baselines run far longer than the backend, and
        vary little from run to run.
    verify_queries : int
        Queries (a seeded sample) whose results, from the backend and from
        every baseline, are checked against the NumPy reference; at least 1:
        the check cannot be turned off.
    baselines : list of str
        Baselines to time against (:data:`settopk.jobs.bench.baselines.BASELINES`): ``spmm``,
        ``popc4`` (GPU, braun_blanquet only), ``scipy``, ``numpy`` (the NumPy index, any
        score), ``sparse_dot_topn`` (on ``cpus_per_shard`` threads) and ``sparse_dot_topn_1t``
        (one thread), both for ``overlap`` and ``cosine`` only; or ``auto`` (``spmm`` and
        ``popc4`` with the cupy backend, ``scipy`` otherwise). An empty list runs none.
    compare_scores : list of str
        Scores (:data:`settopk.kernels.SCORES`) to time the backend's search with on the same data,
        after the phases (the config's own too where listed), each checked against the NumPy
        reference; the result gives each score's search time and its ratio to ``overlap``'s.
        Every score's and routing's index is built first and held (on the GPU with ``cupy``)
        while they take turns, a search each. Default: none.
    compare_routings : list of str
        Routings (:data:`settopk.kernels.postings.ROUTINGS`) to time the backend's search with for the
        config's score, beside the config's own routing (timed again with them), each checked;
        the result gives the ratio to ``scan``'s time. Default: none.
    peak_checks_per_s : float, optional
        An estimate of the query-token checks per second the hardware can do; the result gives
        the measured throughput's ratio to it.
    peak_basis : str
        How ``peak_checks_per_s`` was estimated (printed and kept in the result beside it).
    seed : int
        Seed of the verified sample.
    scaling : ScalingConfig, optional
        Makes this a scaling run (:mod:`settopk.jobs.bench.scale`): ``n_shards`` and the
        baselines are then unused, and read and build are timed once per shard count.
    host : HostPathConfig, optional
        Makes this a host-path run (:mod:`settopk.jobs.bench.host`), with stand-in shards; as for
        ``throughput``, ``n_shards``, ``warmup``, ``repetitions`` and the baselines are unused.
    ray_data : RayDataConfig, optional
        Makes this a Ray Data run (:mod:`settopk.jobs.bench.ray_data`): the pipeline against the job on
        one shard; as for ``throughput``, ``n_shards``, ``warmup``, ``repetitions`` and the baselines are unused.
    throughput : ThroughputConfig, optional
        Makes this a whole-job throughput run (:mod:`settopk.jobs.bench.throughput`): ``n_shards``,
        ``warmup``, ``repetitions`` and the baselines are then unused; ``query_batch_size``
        must be >= 1.
    library : LibraryConfig, optional
        Makes this a library run (:mod:`settopk.jobs.bench.library`): ``settopk.Index.search`` in
        this process against the kernel alone; ``n_shards``, ``query_batch_size`` and the
        baselines are then unused.
    self_join : SelfJoinConfig, optional
        Makes this a self-join run (:mod:`settopk.jobs.bench.self_join`): the threshold self-join and
        its components against the top-k self-join, in this process; ``n_shards``,
        ``query_batch_size`` and the baselines are then unused.
    peers : PeersConfig, optional
        Makes this a peers run (:mod:`settopk.jobs.bench.peers`): settopk's exact threshold
        self-join against SetSimilaritySearch and datasketch on a corpus made in the process from
        ``synthetic`` (no cache); needs backend ``cpu`` and score ``jaccard``; ``n_shards``,
        ``k``, ``query_batch_size``, ``verify_queries`` and the baselines are then unused.
    """

    query_batch_size: int = 0
    warmup: int = 1
    repetitions: int = 5
    baseline_repetitions: Optional[int] = None
    verify_queries: int = 32
    baselines: List[str] = field(default_factory=lambda: ["auto"])
    seed: int = 0
    compare_scores: List[str] = field(default_factory=list)
    compare_routings: List[str] = field(default_factory=list)
    peak_checks_per_s: Optional[float] = None
    peak_basis: str = ""
    scaling: Optional[ScalingConfig] = None
    throughput: Optional[ThroughputConfig] = None
    host: Optional[HostPathConfig] = None
    library: Optional[LibraryConfig] = None
    ray_data: Optional[RayDataConfig] = None
    self_join: Optional[SelfJoinConfig] = None
    peers: Optional[PeersConfig] = None
    real: Optional[RealConfig] = None  # a real-data run (settopk.jobs.bench.real)

    def __post_init__(self) -> None:
        problems = []
        picked = [mode.key for mode in MODES if getattr(self, mode.key) is not None]
        if len(picked) > 1:
            problems.append(f"a config has one of the {', '.join(mode.key for mode in MODES[:-1])} and "
                            f"{MODES[-1].key} sections, not several")
        for key in picked:
            problems += getattr(self, key).problems(self)
        problems += search_problems(self)
        if self.cpus_per_shard == "auto":
            problems.append("cpus_per_shard must be a number in a benchmark (the CPUs its numbers were measured on), found 'auto'")
        if self.query_batch_size < 0:
            problems.append(f"query_batch_size must be >= 0 (0: all queries at once), found {self.query_batch_size}")
        if self.warmup < 0 or self.repetitions < 1:
            problems.append(f"warmup must be >= 0 and repetitions >= 1, found {self.warmup} and {self.repetitions}")
        if self.baseline_repetitions is not None and self.baseline_repetitions < 1:
            problems.append(f"baseline_repetitions must be >= 1, found {self.baseline_repetitions}")
        if self.verify_queries < 1:
            problems.append(f"verify_queries must be >= 1 (the exactness check is always on), found {self.verify_queries}")
        unknown = [b for b in self.baselines if b not in BASELINE_NAMES]
        if unknown:
            problems.append(f"baselines must be among {BASELINE_NAMES}, found {unknown}")
        elif self.scaling is None:
            problems += _baseline_score_problems(self.baselines, self.score, self.backend)
        bad_scores = [s for s in self.compare_scores if s not in SCORES]
        if bad_scores:
            problems.append(f"compare_scores must be among {SCORES}, found {bad_scores}")
        bad_routings = [r for r in self.compare_routings if r not in ROUTINGS]
        if bad_routings:
            problems.append(f"compare_routings must be among {ROUTINGS}, found {bad_routings}")
        if self.peak_checks_per_s is not None and (self.peak_checks_per_s <= 0 or not self.peak_basis.strip()):
            problems.append(f"peak_checks_per_s must be > 0 and come with peak_basis (how it was estimated), found "
                            f"{self.peak_checks_per_s} and {self.peak_basis!r}")
        problems += synthetic_problems(self.synthetic, self.vocab_size)
        if problems:
            raise ConfigError("; ".join(problems))

    def to_dict(self) -> dict:
        """Plain-data copy, for the result JSON."""
        return dataclasses.asdict(self)


def _baseline_problems_for(name: str, score: str) -> list[str]:
    scores = BASELINES[name].scores
    if score in scores:
        return []
    return [f"baseline {name} ranks by {', '.join(scores)} only, found score {score!r}; "
            f"drop it from baselines (baselines: [] runs none), or set score to one of {', '.join(scores)}"]


def _baseline_score_problems(names: list[str], score: str, backend: str) -> list[str]:
    """Baselines that cannot rank by ``score`` (``auto``: spmm and popc4 where the backend may be cupy)."""
    problems = []
    for name in names:
        if name != "auto":
            problems += _baseline_problems_for(name, score)
        elif backend in ("cupy", "auto") and score not in BASELINES["spmm"].scores:
            problems.append(f"baselines [auto] may pick spmm and popc4 (backend {backend!r}), which rank by "
                            f"braun_blanquet only, found score {score!r}; name the baselines (scipy, numpy and "
                            "sparse_dot_topn rank by other scores) or set baselines: []")
    return problems


def bench_config_names() -> list[str]:
    """Names of the benchmark configs shipped in ``settopk/configs/bench/``."""
    return sorted(p.stem for p in BENCH_DIR.glob("*.yaml"))


def load_bench_config(name_or_path: str) -> BenchConfig:
    """Load a shipped benchmark config by name, or a YAML file, into a :class:`BenchConfig`.

    Raises
    ------
    ConfigError
        If the file does not exist or is not a YAML mapping, a key is unknown,
        a value has the wrong type, or a value is out of range. The message
        names the file.
    """
    path, data = read_yaml_mapping(name_or_path, BENCH_DIR)
    try:
        return dacite.from_dict(BenchConfig, data, config=dacite.Config(strict=True))
    except dacite.UnexpectedDataError as exc:
        valid = sorted(f.name for f in dataclasses.fields(BenchConfig)) + [
            f"synthetic.{f.name}" for f in dataclasses.fields(SyntheticConfig)
        ] + [f"{mode.key}.{f.name}" for mode in MODES for f in dataclasses.fields(mode.section)]
        raise ConfigError(f"{path}: unknown key(s) {sorted(exc.keys)}; valid keys: {valid}") from None
    except dacite.DaciteError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
