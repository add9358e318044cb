"""Named job configs: YAML files in this package loaded into frozen dataclasses.

``load_config("local")`` reads ``settopk/configs/local.yaml``; any other argument is a path
to a YAML file. Unknown keys and wrong types are rejected with the file named.
YAML is parsed with ``yaml.safe_load`` (no object construction).
"""

from __future__ import annotations

import dataclasses
import pathlib
from dataclasses import dataclass, field
from typing import Union

import dacite
import yaml

from settopk.errors import SettopkError
from settopk.kernels.keys import SCORES
from settopk.kernels.postings import ROUTINGS
from settopk.kernels.sets import MAX_VOCAB, NARROW_VOCAB
from settopk.kernels.threshold import parse_threshold

__all__ = [
    "MAX_K",
    "MAX_LEN",
    "AUTO_QUERY_BATCH_SIZE",
    "AUTO_THRESHOLD_BATCH_SIZE",
    "ConfigError",
    "FaultConfig",
    "JobConfig",
    "OutputConfig",
    "SearchConfig",
    "SyntheticConfig",
    "load_config",
    "config_names",
    "read_yaml_mapping",
    "search_problems",
    "max_len_problems",
    "gpu_routing_problems",
    "synthetic_problems",
    "CONFIG_DIR",
]

CONFIG_DIR = pathlib.Path(__file__).resolve().parent
BACKENDS = ("auto", "cpu", "numpy", "cupy")
PARTITIONS = ("none", "dt")
MAX_K = 32767
"""The largest ``k``: the result's ``rank`` column is int16 (ranks 1..k)."""
MAX_LEN = 4096
"""The largest ``max_len`` (distinct ids per set) of every backend and score."""
_GPU_POSTINGS_MAX_LEN = 255  # the GPU postings count overlaps in bytes


class ConfigError(ValueError, SettopkError):
    """A config file is missing, not valid YAML, or has unknown keys or bad values."""


@dataclass(frozen=True)
class SyntheticConfig:
    """The corpus generated when the job gets no ``--docs``/``--queries``.

    Attributes
    ----------
    n_docs, n_queries : int
        Corpus and query-set sizes.
    seed : int
        Seed of the generator; the same config always gives the same corpus.
    vocab_size : int
        Token ids are drawn from ``[0, vocab_size)``; the competition has 50001. Up to 2**24;
        above 65536 the tokens must be stored as ``int64`` or ``string`` (``token_type``).
    id_dist : str
        ``"zipf"`` or ``"uniform"`` law of token ids.
    zipf_s : float
        Zipf exponent.
    near_duplicate_fraction : float
        Share of queries made by perturbing a random doc; the rest are random sets.
    token_type, token_offset, length_law, duplicate_fraction, duplicate_zipf_s
        How tokens are stored, the law of set lengths, and the share of docs that are exact
        copies of earlier ones and their skew (:class:`settopk.jobs.synthetic.SyntheticSpec`).
    cache_dir : str
        Where generated corpora are kept (``~`` expanded); reused when present.
    """

    n_docs: int = 200_000
    n_queries: int = 1_000
    seed: int = 0
    vocab_size: int = 50_001
    id_dist: str = "zipf"
    zipf_s: float = 1.0
    near_duplicate_fraction: float = 0.5
    token_type: str = "uint16"
    token_offset: int = 0
    length_law: str = "sti2"
    duplicate_fraction: float = 0.0
    duplicate_zipf_s: float = 1.0
    cache_dir: str = "~/.cache/settopk"


@dataclass(frozen=True)
class SearchConfig:
    """The settings a scoring run (:class:`JobConfig`) and a benchmark run
    (:class:`settopk.jobs.bench.config.BenchConfig`) share: defined once here, the same YAML keys in both.

    A base class: each config checks these fields in its ``__post_init__``
    (:func:`search_problems`, :func:`synthetic_problems`) along with its own.

    Attributes
    ----------
    backend : str
        ``"auto"`` (CuPy when the cluster has GPUs, else ``"cpu"``; the log says which),
        ``"numpy"`` (vectorised NumPy), ``"cpu"`` (compiled with Numba, ``cpus_per_shard``
        threads per actor) or ``"cupy"`` (fails at start when no GPU is available).
    n_shards : int or "auto"
        Number of length-bucket shards (a job runs ``replicas`` actors of each). ``"auto"``:
        one per GPU slot (``cupy``) or CPU slot (``numpy``) of the cluster.
    gpus_per_shard : float
        GPUs each shard actor reserves (``cupy`` only), in (0, 1].
    cpus_per_shard : float or "auto"
        CPUs each shard actor reserves (Ray's ``num_cpus``), ``>= 0``; the ``cpu`` backend's index
        runs that many threads. ``"auto"``: for ``cpu``, the CPUs of the cluster's smallest node
        divided by ``replicas`` (whole nodes per shard: a shard's threads cost no second threshold
        round and no merge, which more shards on one node do); 1 for ``numpy`` and ``cupy``.
    k : int
        Results per query.
    score : str
        What the top-k ranks by, one of :data:`settopk.kernels.SCORES`: ``"braun_blanquet"``
        ``|q∩d| / max(|q|, |d|)`` (the default), ``"jaccard"`` ``|q∩d| / |q∪d|``,
        ``"cosine"`` ``|q∩d| / sqrt(|q| |d|)``, ``"dice"`` ``2 |q∩d| / (|q| + |d|)``,
        ``"overlap"`` ``|q∩d|`` or ``"containment"`` ``|q∩d| / |q|`` (0/0 counts as 0;
        ties go to the lower doc id). ``settopk.jobs.score --score`` overrides it.
    routing : str
        How each shard searches (:data:`settopk.kernels.postings.ROUTINGS`): ``"scan"`` scans
        every doc for every query; ``"auto"`` also builds an inverted index per shard
        (about the docs' size again, in GPU or host memory) and sends each query where
        the cost model says it is cheaper; ``"postings"`` sends every query to it.
        Results are identical in every mode.
    max_len : int
        Most ids a doc or query may have (after de-duplication), in ``[1, 4096]``
        (:func:`max_len_problems`).
    vocab_size : int
        The kernels' dense ids: ``[0, vocab_size)``, at most 16,777,216 (2**24) on every backend
        (uint32 ids above 65,536; on ``cupy`` a shard's layout then takes 3 bytes per id and a
        2-byte working copy, :mod:`settopk.kernels.cuda.wide`). Tokens that are not integers in ``[0, vocab_size)`` are mapped
        to dense ids; only the distinct tokens found in both queries and docs must fit.
    synthetic : SyntheticConfig
        The corpus generated when a job gets no inputs; a benchmark's corpus.
    """

    backend: str = "auto"
    n_shards: Union[int, str] = "auto"
    gpus_per_shard: float = 1.0
    cpus_per_shard: Union[float, str] = 1.0
    k: int = 100
    score: str = "braun_blanquet"
    routing: str = "scan"
    max_len: int = 128
    vocab_size: int = 65_536
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)


def search_problems(cfg: SearchConfig) -> list[str]:
    """What is wrong with the search settings of ``cfg`` (empty if nothing): ``backend``,
    ``n_shards``, ``gpus_per_shard``, ``cpus_per_shard``, ``k``, ``max_len``, ``vocab_size``, ``score``
    and ``routing`` (``synthetic``: :func:`synthetic_problems`)."""
    problems = []
    if cfg.score not in SCORES:
        problems.append(f"score must be one of {', '.join(SCORES)}; found {cfg.score!r}")
    if cfg.routing not in ROUTINGS:
        problems.append(f"routing must be one of {', '.join(ROUTINGS)}; found {cfg.routing!r}")
    if cfg.backend not in BACKENDS:
        problems.append(f"backend must be one of {BACKENDS}, found {cfg.backend!r}")
    if cfg.n_shards != "auto" and (isinstance(cfg.n_shards, str) or cfg.n_shards < 1):
        problems.append(f"n_shards must be 'auto' or an integer >= 1, found {cfg.n_shards!r}")
    if not 0 < cfg.gpus_per_shard <= 1:
        problems.append(f"gpus_per_shard must be in (0, 1], found {cfg.gpus_per_shard!r}")
    cpus = cfg.cpus_per_shard
    if cpus != "auto" and (isinstance(cpus, (str, bool)) or cpus < 0):
        problems.append(f"cpus_per_shard must be 'auto' or a number >= 0, found {cpus!r}")
    if not 1 <= cfg.k <= MAX_K:
        problems.append(f"k must be in [1, {MAX_K}] (the result's rank column is int16), found {cfg.k}")
    problems += max_len_problems(cfg.max_len)
    problems += vocab_size_problems(cfg.vocab_size)
    if cfg.backend == "cupy" and not problems:
        problems += gpu_routing_problems(cfg.routing, cfg.max_len)
    return problems


def vocab_size_problems(vocab_size: int) -> list[str]:
    """What is wrong with ``vocab_size`` (empty if nothing): every backend takes up to ``2**24`` dense ids."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or not 1 <= vocab_size <= MAX_VOCAB:
        return [f"vocab_size must be an integer in [1, {MAX_VOCAB}] (2**24, the cpu and numpy backends' limit), "
                f"found {vocab_size!r}"]
    return []


def max_len_problems(max_len) -> list[str]:
    """What is wrong with ``max_len`` (empty if nothing): it must be an integer in ``[1, MAX_LEN]``, for
    every backend and score."""
    if isinstance(max_len, bool) or not isinstance(max_len, int) or not 1 <= max_len <= MAX_LEN:
        return [f"max_len must be an integer in [1, {MAX_LEN}], found {max_len!r}"]
    return []


def gpu_routing_problems(routing: str, max_len: int, why: str = "backend 'cupy'") -> list[str]:
    """What is wrong with ``routing`` on the GPU (empty if nothing): the GPU postings count overlaps in
    bytes, so ``routing: postings`` needs ``max_len <= 255`` (``auto`` scans such shards instead).
    ``why``: how cupy was chosen, for the message."""
    if routing != "postings" or max_len <= _GPU_POSTINGS_MAX_LEN:
        return []
    return [f"routing 'postings' with {why} needs max_len <= {_GPU_POSTINGS_MAX_LEN} (the GPU postings count "
            f"overlaps in bytes), found {max_len}; use routing 'auto' (which scans such shards) or 'scan'"]


def synthetic_problems(synthetic: SyntheticConfig, vocab_size: int | None) -> list[str]:
    """What is wrong with a ``synthetic`` section (empty if nothing).

    ``vocab_size``: the run's, which the synthetic ids must fit, where the run uses the synthetic
    corpus; None where that is not known yet (a job config: only a run without ``--docs`` and
    ``--queries`` uses it, and :func:`settopk.jobs.validate.settle` checks it there).
    """
    problems = []
    if synthetic.id_dist not in ("zipf", "uniform"):
        problems.append(f"synthetic.id_dist must be 'zipf' or 'uniform', found {synthetic.id_dist!r}")
    if vocab_size is not None and synthetic.vocab_size > vocab_size:
        problems.append(f"synthetic.vocab_size must not exceed vocab_size, found {synthetic.vocab_size} > {vocab_size}")
    if synthetic.vocab_size > NARROW_VOCAB and synthetic.token_type == "uint16":
        problems.append(f"synthetic.token_type 'uint16' holds ids below {NARROW_VOCAB}, found synthetic.vocab_size "
                        f"{synthetic.vocab_size}; use token_type 'int64' (or 'string') for a larger vocabulary")
    if synthetic.token_type not in ("uint16", "int64", "string"):
        problems.append(f"synthetic.token_type must be 'uint16', 'int64' or 'string', found {synthetic.token_type!r}")
    if synthetic.token_offset and synthetic.token_type == "uint16":
        problems.append("synthetic.token_offset needs synthetic.token_type 'int64' or 'string'")
    if not 0 <= synthetic.token_offset < 2**62:
        problems.append(f"synthetic.token_offset must be in [0, 2**62), found {synthetic.token_offset}")
    if synthetic.length_law not in ("sti2", "uniform", "lognormal", "retail"):
        problems.append(f"synthetic.length_law must be 'sti2', 'uniform', 'lognormal' or 'retail', found {synthetic.length_law!r}")
    if not 0.0 <= synthetic.duplicate_fraction < 1.0:
        problems.append(f"synthetic.duplicate_fraction must be in [0, 1), found {synthetic.duplicate_fraction}")
    if not 0.0 <= synthetic.duplicate_zipf_s <= 10.0:
        problems.append(f"synthetic.duplicate_zipf_s must be in [0, 10], found {synthetic.duplicate_zipf_s}")
    return problems


@dataclass(frozen=True)
class OutputConfig:
    """Layout of the result dataset.

    Attributes
    ----------
    partition : str
        ``"none"``: ``--out`` is the result directory. ``"dt"``: ``--out`` is a dataset
        root and a run writes the Hive partition ``<out>/dt=YYYY-MM-DD/`` (the date
        from ``--date``, else today in UTC), so a nightly schedule fills one table.
    row_group_rows : int
        Target rows per Parquet row group; the writer rounds it down to whole
        queries (a multiple of the rows per query) so no query spans two groups.
    pairs_per_piece : int
        A threshold run's bound on the pairs one step holds (issue 46): a merge task merges and
        writes a batch's pairs in pieces of whole queries of about this many (one query alone
        may pass it, by at most its own pairs), the driver cuts the query batches so that a
        shard's answer to one holds about this many (the first chunk's after a call of
        ``pairs_per_piece // shard_cap`` queries (at least one), whose answers cannot pass it (nor one
        query's cap, where that is more):
        :func:`settopk.jobs.threshold_job.shard_cap`), a shard keeps its own self-join, and
        groups its own docs for ``--dedup``, only within 4 x this many entries
        (:func:`settopk.jobs.threshold_job.self_join_entries`), and ``--dedup`` contracts this
        many pairs at a time. Results do not depend on it.
    """

    partition: str = "none"
    row_group_rows: int = 131_072
    pairs_per_piece: int = 1 << 22


@dataclass(frozen=True)
class FaultConfig:
    """Timeouts and retries, so a hung or dying actor cannot hang or corrupt a run.

    Attributes
    ----------
    load_timeout_s : float
        Longest a shard actor may take to read its docs and build its index.
    search_timeout_s : float
        Longest one query batch may take on one shard before the shard's actor is
        restarted and the batch sent again.
    search_attempts : int
        Tries per (batch, shard) before the run stops with a message naming the
        shard's node and GPU.
    actor_restarts : int
        Times Ray restarts a dead shard actor (which takes its docs again from the object store).
    retry_backoff_s : float
        First wait before a retry; it doubles on each further try.
    """

    load_timeout_s: float = 3600.0
    search_timeout_s: float = 600.0
    search_attempts: int = 3
    actor_restarts: int = 2
    retry_backoff_s: float = 1.0


AUTO_QUERY_BATCH_SIZE = {"cupy": 4096, "cpu": 512, "numpy": 256}
"""Queries per request with ``query_batch_size: auto``. For cupy, 4096 is the GPU index's own
batch, so each request pays the per-batch steps (sampling levels, selections, transfers) once
for as many queries as the GPU searches at a time; smaller batches pay them more often. For
numpy, 256: the NumPy search holds arrays of (batch x shard docs) elements (overlaps, keys,
sort values), so the batch bounds an actor's memory. For cpu, 512: one scan group of the compiled
index (a bit per query in a 512-bit vector). Measurements: docs/benchmarks.md,
"Settings chosen from these measurements"."""


AUTO_THRESHOLD_BATCH_SIZE = {"cupy": 4096, "cpu": 16384, "numpy": 256}
"""A threshold run's queries per request with ``query_batch_size: auto``. For cpu, 16,384: the
join's per-request steps (the queries' frequency order and groups, their length plan, the
hand-off to the probe's threads, and the driver's sending) cost more than a small batch's
probe, and a self-join's home queries only read the shard's self-join (docs/benchmarks.md,
"Real data", has the job's search phase in both batch sizes). The job cuts batches to
``output.pairs_per_piece`` over the pairs per query seen. numpy and cupy keep their top-k sizes
(:data:`AUTO_QUERY_BATCH_SIZE`)."""


@dataclass(frozen=True)
class JobConfig(SearchConfig):
    """Settings of a scoring run.

    Attributes
    ----------
    backend, n_shards, gpus_per_shard, cpus_per_shard, k, score, routing, max_len, vocab_size, synthetic
        The search settings (:class:`SearchConfig`); ``n_shards: auto`` divides the
        cluster's slots by ``replicas``.
    replicas : int
        Actors holding each shard, ``>= 1``. Each batch of queries goes to one replica of
        every shard (batches take turns), so replicas search different queries at the
        same time. Sharding splits the scan of each query, but every shard still pays the
        per-query steps (bounds, selection, transfers); replicas pay them once per query.
        Where a shard fits on one GPU and queries are many, replicas scale better
        (docs/benchmarks.md, "Scaling").
    query_batch_size : int or "auto"
        Queries sent to the actors per request. ``"auto"``: :data:`AUTO_QUERY_BATCH_SIZE`
        of the backend (see :meth:`batch_size_for`).
    output : OutputConfig
        Partitioning and row-group size of the result dataset.
    on_invalid : str
        ``"error"`` (stop at the first bad line or row, writing nothing) or
        ``"quarantine"`` (set bad lines and rows aside, listed with the reason in the run
        record's ``rejected.parquet`` beside the results, and count them in the manifest).
    query_chunk_size : int
        Queries per committed part file. Each chunk is merged and written by a Ray task as
        soon as it is searched (the driver holds no results), and a run that is killed resumes
        from the chunks already committed.
    threshold_exchange : bool or "auto"
        Search each batch in two rounds: first every shard its home queries (length in its
        range), then the others with the home shard's k-th score as a floor, so shards skip
        docs and queries that cannot enter the top-k. Exact either way; off sends every query
        to every shard at once. ``"auto"``: on with the numpy backend, off with cupy, where
        the second call per batch costs more than the work the floors skip
        (docs/benchmarks.md, "Settings chosen from these measurements").
    self_join : bool
        Search the corpus against itself: every doc is a query (its id, as text, is the
        ``query_id``; there are no separate queries), and by default its own doc is left out
        of its results, so a query gets ``min(k, n_docs - 1)`` rows. ``--self-join`` sets it.
    include_self : bool
        With ``self_join``: keep each doc in its own results (``min(k, n_docs)`` rows, as
        for other queries). ``--include-self`` sets it; it needs ``self_join``.
    threshold : str or None
        A threshold search (issue 32): every (query, doc) pair with ``score >= threshold``
        instead of the top-k. Given as decimal text or a number (``0.8``, ``"4/5"``), read
        exactly (:func:`settopk.kernels.parse_threshold`) and kept as the canonical fraction
        text (``"4/5"``), so that ``0.8`` and ``0.80`` are the same run. None (default): top-k.
        ``--threshold`` sets it.
    faults : FaultConfig
        Timeouts and retries.
    """

    replicas: int = 1
    query_batch_size: Union[int, str] = "auto"
    output: OutputConfig = field(default_factory=OutputConfig)
    on_invalid: str = "error"
    query_chunk_size: int = 100_000
    threshold_exchange: Union[bool, str] = "auto"
    self_join: bool = False
    include_self: bool = False
    threshold: Union[str, float, int, None] = None
    faults: FaultConfig = field(default_factory=FaultConfig)

    def __post_init__(self) -> None:
        problems = search_problems(self)
        if self.replicas < 1:
            problems.append(f"replicas must be an integer >= 1, found {self.replicas!r}")
        batch = self.query_batch_size
        if batch != "auto" and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
            problems.append(f"query_batch_size must be an integer >= 1 or 'auto', found {batch!r}")
        problems += synthetic_problems(self.synthetic, None)  # its fit to vocab_size: where it is used
        if self.output.partition not in PARTITIONS:
            problems.append(f"output.partition must be one of {PARTITIONS}, found {self.output.partition!r}")
        if self.output.row_group_rows < 1:
            problems.append(f"output.row_group_rows must be >= 1, found {self.output.row_group_rows}")
        if isinstance(self.output.pairs_per_piece, bool) or not isinstance(self.output.pairs_per_piece, int) \
                or self.output.pairs_per_piece < 1:
            problems.append(f"output.pairs_per_piece must be an integer >= 1, found {self.output.pairs_per_piece!r}")
        if self.on_invalid not in ("error", "quarantine"):
            problems.append(f"on_invalid must be 'error' or 'quarantine', found {self.on_invalid!r}")
        if self.threshold_exchange not in (True, False, "auto"):
            problems.append(f"threshold_exchange must be true, false or 'auto', found {self.threshold_exchange!r}")
        if self.include_self and not self.self_join:
            problems.append("include_self: true needs self_join: true (it keeps each doc in its own results of a "
                            "self-join); set self_join: true (--self-join), or drop include_self (--include-self)")
        if self.query_chunk_size < 1:
            problems.append(f"query_chunk_size must be >= 1, found {self.query_chunk_size}")
        if self.threshold is not None:
            try:  # canonical exact text: 0.8, "0.80" and "4/5" are one setting (the rerun guard compares it)
                object.__setattr__(self, "threshold", str(parse_threshold(self.threshold, self.score)))
            except ValueError as e:
                problems.append(f"threshold: {e}")
        f = self.faults
        if min(f.load_timeout_s, f.search_timeout_s) <= 0 or f.search_attempts < 1 or f.actor_restarts < 0 or f.retry_backoff_s < 0:
            problems.append("faults: timeouts must be > 0, search_attempts >= 1, actor_restarts and retry_backoff_s >= 0")
        if problems:
            raise ConfigError("; ".join(problems))

    def batch_size_for(self, backend: str) -> int:
        """Queries per request for ``backend`` (``"numpy"`` or ``"cupy"``): ``query_batch_size``,
        or the backend's :data:`AUTO_QUERY_BATCH_SIZE` where it is ``"auto"`` (a threshold run's:
        :data:`AUTO_THRESHOLD_BATCH_SIZE`)."""
        if self.query_batch_size != "auto":
            return self.query_batch_size
        return (AUTO_THRESHOLD_BATCH_SIZE if self.threshold is not None else AUTO_QUERY_BATCH_SIZE)[backend]

    def to_dict(self) -> dict:
        """Plain-data copy, for manifests and logs."""
        return dataclasses.asdict(self)


def config_names() -> list[str]:
    """Names of the configs shipped in this package."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def read_yaml_mapping(name_or_path: str, directory: pathlib.Path) -> tuple[pathlib.Path, dict]:
    """Read a YAML mapping from a path, or from ``directory / f"{name}.yaml"`` for a shipped name.

    Parameters
    ----------
    name_or_path : str
        A path to a YAML file, or the stem of a file in ``directory``.
    directory : pathlib.Path
        Where shipped configs of this kind live.

    Returns
    -------
    (pathlib.Path, dict)
        The file read and its top-level mapping (empty for an empty file).

    Raises
    ------
    ConfigError
        If there is no such file or shipped name, the text is not valid YAML
        (``yaml.safe_load``: no object construction), or it is not a mapping.
    """
    path = pathlib.Path(name_or_path).expanduser()
    if not path.is_file():
        shipped = directory / f"{name_or_path}.yaml"
        if not shipped.is_file():
            names = sorted(p.stem for p in directory.glob("*.yaml"))
            raise ConfigError(
                f"config {name_or_path!r}: no such file, and not a shipped config name; "
                f"expected a YAML path or one of {names}"
            )
        path = shipped
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, found {type(data).__name__}")
    return path, data


def load_config(name_or_path: str = "local", overrides: dict | None = None) -> JobConfig:
    """Load a named config or a YAML file into a :class:`JobConfig`.

    Parameters
    ----------
    name_or_path : str
        A shipped config name (see :func:`config_names`) or a path to a YAML file.
    overrides : dict, optional
        Top-level values that replace the file's (e.g. ``{"k": 10}`` from the CLI).

    Raises
    ------
    ConfigError
        If the file does not exist or is not a YAML mapping, a key is unknown, a
        value has the wrong type, or a value is out of range. The message names
        the file.
    """
    path, data = read_yaml_mapping(name_or_path, CONFIG_DIR)
    data = {**data, **(overrides or {})}
    try:
        return dacite.from_dict(JobConfig, data, config=dacite.Config(strict=True))
    except dacite.UnexpectedDataError as exc:
        valid = sorted(f.name for f in dataclasses.fields(JobConfig)) + [
            f"synthetic.{f.name}" for f in dataclasses.fields(SyntheticConfig)
        ] + [f"output.{f.name}" for f in dataclasses.fields(OutputConfig)] + [f"faults.{f.name}" for f in dataclasses.fields(FaultConfig)]
        raise ConfigError(f"{path}: unknown key(s) {sorted(exc.keys)}; valid keys: {valid}") from None
    except dacite.DaciteError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
