"""Benchmark configs: YAML files in ``settopk/configs/bench/`` loaded into a frozen dataclass.

``load_bench_config("sti2-zipf")`` reads ``settopk/configs/bench/sti2-zipf.yaml``; any
other argument is a path to a YAML file. Unknown keys, wrong types and values
out of range are rejected with the file named (:class:`settopk.configs.ConfigError`).
The search settings (backend, settopk.shards, k, score, routing, limits, synthetic corpus)
are the job's own (:class:`settopk.configs.SearchConfig`), with the same keys and checks.
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
from .library import LibraryConfig, section_fields as library_fields
from .self_join import SelfJoinConfig, section_fields as self_join_fields
from .peers import PeersConfig, section_fields as peers_fields
from .real import RealConfig, section_fields as real_fields

__all__ = ["BENCH_DIR", "BASELINE_NAMES", "BenchConfig", "HostPathConfig", "LibraryConfig", "PeersConfig", "RayDataConfig",
           "ScalingConfig", "ThroughputConfig", "bench_config_names", "load_bench_config"]

BENCH_DIR = CONFIG_DIR / "bench"
#: Baselines the benchmark knows; ``auto`` means the ones for the backend's device.
BASELINE_NAMES = ("auto", *BASELINES)


@dataclass(frozen=True)
class ScalingConfig:
    """A scaling run: the same search on several shard counts, one shard per GPU (or CPU slot).

    Attributes
    ----------
    mode : str
        ``"strong"``: the same corpus on every shard count; ``"weak"``: a corpus of
        ``synthetic.n_docs`` times the shard count (same length histogram and id law).
    shards : list of int
        Shard counts to run, in order; the first is the baseline of the ratios.
    replicas : list of int, optional
        Replicas of every shard in each run (``settopk.configs.JobConfig.replicas``), one entry per
        ``shards`` entry; a run uses ``shards[i] * replicas[i]`` GPUs (or CPU slots).
        Default: 1 for every run.
    """

    mode: str = "strong"
    shards: List[int] = field(default_factory=lambda: [1, 4])
    replicas: Optional[List[int]] = None

    @property
    def layouts(self) -> list[tuple[int, int]]:
        """``(n_shards, replicas)`` of each run, in order."""
        return list(zip(self.shards, self.replicas or [1] * len(self.shards)))


@dataclass(frozen=True)
class ThroughputConfig:
    """A whole-job throughput run (:mod:`settopk.jobs.bench.throughput`): ``settopk.jobs.score`` end to end on each layout.

    Attributes
    ----------
    shards : list of int
        Length-bucket shards of each run, in order; the first run is the baseline of the
        speed-ups and the reference the others' results must equal.
    replicas : list of int, optional
        Replicas of every shard in each run, one entry per ``shards`` entry (default 1);
        a run uses ``shards[i] * replicas[i]`` GPUs (or CPU slots).
    query_chunk_size : int
        Queries per chunk, one committed part file each (``settopk.configs.JobConfig.query_chunk_size``).
    """

    shards: List[int] = field(default_factory=lambda: [1])
    replicas: Optional[List[int]] = None
    query_chunk_size: int = 100_000

    @property
    def layouts(self) -> list[tuple[int, int]]:
        """``(n_shards, replicas)`` of each run, in order."""
        return list(zip(self.shards, self.replicas or [1] * len(self.shards)))


@dataclass(frozen=True)
class RayDataConfig:
    """A Ray Data run (:mod:`settopk.jobs.bench.ray_data`): ``settopk.ray.search`` Parquet to Parquet against the job.

    Attributes
    ----------
    replicas : list of int
        Search actors (one shard, that many replicas) of each run, in order; each runs the job and
        the pipeline on ``replicas`` GPUs (or CPU slots).
    query_chunk_size : int
        The job's queries per chunk (one part file each). The pipeline writes the job's rows
        (``rows="per_rank"``), compared row for row.
    batch_size : int, optional
        The pipeline's queries per block (``settopk.ray.search``'s ``batch_size``); None: its
        default for the backend. The job's batch is ``query_batch_size``.
    """

    replicas: List[int] = field(default_factory=lambda: [1])
    query_chunk_size: int = 100_000
    batch_size: Optional[int] = None


#: One H200's kernel rate at k = 100 as ``job-1m`` measured it (docs/benchmarks.md): the default pace.
H200_QUERIES_PER_S = 107_641.0


@dataclass(frozen=True)
class HostPathConfig:
    """A host-path run (:mod:`settopk.jobs.bench.host`): ``settopk.jobs.score`` end to end with stand-in shards
    (:mod:`settopk.jobs.bench.standin`) that answer at a GPU's pace, so that only the host path is measured.

    Attributes
    ----------
    shards : list of int
        Length-bucket shards of each run, in order; the first run is the baseline of the scaling.
    replicas : list of int, optional
        Replicas of every shard in each run, one entry per ``shards`` entry (default 1).
    query_chunk_size : int
        Queries per chunk, one committed part file each.
    queries_per_s_per_actor : float
        The pace of a stand-in holding the whole corpus (queries per second); a stand-in of one
        of ``n`` shards answers ``n`` times as fast (the kernel's time is its docs'). Default:
        one H200's kernel rate at k = 100.
    ceiling : bool
        Also run the layout with the most stand-ins without pacing: the host path's ceiling.
    """

    shards: List[int] = field(default_factory=lambda: [1])
    replicas: Optional[List[int]] = None
    query_chunk_size: int = 100_000
    queries_per_s_per_actor: float = H200_QUERIES_PER_S
    ceiling: bool = True

    @property
    def layouts(self) -> list[tuple[int, int]]:
        """``(n_shards, replicas)`` of each run, in order."""
        return list(zip(self.shards, self.replicas or [1] * len(self.shards)))


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
    real: Optional[RealConfig] = None  # a real-data run (settopk.jobs.bench.real): the other sections' settings unused

    def __post_init__(self) -> None:
        problems = []
        sections = (self.scaling, self.throughput, self.host, self.library, self.ray_data, self.self_join, self.peers,
                    self.real)
        if sum(x is not None for x in sections) > 1:
            problems.append("a config has one of the scaling, throughput, host, library, ray_data, self_join and "
                            "peers sections, not several")
        for section in (self.library, self.self_join, self.real):
            if section is not None:
                problems += section.problems()
        if self.peers is not None:
            problems += self.peers.problems(self)
        if self.ray_data is not None:
            r = self.ray_data
            if not r.replicas or any(n < 1 for n in r.replicas):
                problems.append(f"ray_data.replicas must list replica counts >= 1, found {r.replicas}")
            if r.query_chunk_size < 1:
                problems.append(f"ray_data.query_chunk_size must be >= 1, found {r.query_chunk_size}")
            if r.batch_size is not None and r.batch_size < 1:
                problems.append(f"ray_data.batch_size must be >= 1 (or left out for the default), found {r.batch_size}")
            if self.query_batch_size < 1:
                problems.append(f"query_batch_size must be >= 1 in a ray_data run, found {self.query_batch_size}")
        if self.host is not None:
            h = self.host
            if self.scaling is not None or self.throughput is not None:
                problems.append("a config has one of the scaling, throughput and host sections, not several")
            problems += _layout_problems("host", h.shards, h.replicas)
            if h.query_chunk_size < 1:
                problems.append(f"host.query_chunk_size must be >= 1, found {h.query_chunk_size}")
            if h.queries_per_s_per_actor <= 0:
                problems.append(f"host.queries_per_s_per_actor must be > 0, found {h.queries_per_s_per_actor}")
            if self.query_batch_size < 1:
                problems.append(f"query_batch_size must be >= 1 in a host run, found {self.query_batch_size}")
        if self.throughput is not None:
            t = self.throughput
            if self.scaling is not None:
                problems.append("a config has a scaling or a throughput section, not both")
            problems += _layout_problems("throughput", t.shards, t.replicas)
            if t.query_chunk_size < 1:
                problems.append(f"throughput.query_chunk_size must be >= 1, found {t.query_chunk_size}")
            if self.query_batch_size < 1:
                problems.append(f"query_batch_size must be >= 1 in a throughput run, found {self.query_batch_size}")
        if self.scaling is not None:
            if self.scaling.mode not in ("strong", "weak"):
                problems.append(f"scaling.mode must be 'strong' or 'weak', found {self.scaling.mode!r}")
            problems += _layout_problems("scaling", self.scaling.shards, self.scaling.replicas)
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


def _layout_problems(section: str, shards: list[int], replicas: list[int] | None) -> list[str]:
    """Problems of a section's ``shards`` and ``replicas`` lists (``section``: its name, for the messages)."""
    problems = []
    if not shards or any(n < 1 for n in shards):
        problems.append(f"{section}.shards must list shard counts >= 1, found {shards}")
    if replicas is not None and (len(replicas) != len(shards) or any(r < 1 for r in replicas)):
        problems.append(f"{section}.replicas must list one count >= 1 per {section}.shards entry, found {replicas}")
    return problems


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
        ] + [f"scaling.{f.name}" for f in dataclasses.fields(ScalingConfig)] + [
            f"throughput.{f.name}" for f in dataclasses.fields(ThroughputConfig)] + [
            f"host.{f.name}" for f in dataclasses.fields(HostPathConfig)] + library_fields() + [
            f"ray_data.{f.name}" for f in dataclasses.fields(RayDataConfig)] + self_join_fields() + peers_fields() + real_fields()
        raise ConfigError(f"{path}: unknown key(s) {sorted(exc.keys)}; valid keys: {valid}") from None
    except dacite.DaciteError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
