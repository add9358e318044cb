"""The corpus side of a Ray Data search: read once into the object store, planned into shards, held.

:func:`load_corpus` reads the corpus as the job does (reader tasks, one per piece,
:func:`settopk.shards.reading.read_corpus_pieces`), plans the length-bucket shards from the readers'
length histograms (:func:`settopk.shards.plan_shards_from_counts`) and hands the pieces' object
references to a holder actor (:class:`CorpusHolder`). What it returns, a
:class:`CorpusHandle`, is small and picklable: it travels in ``fn_constructor_kwargs`` to the pool
actors of :class:`settopk.ray.ShardSearch`, which take their shard's docs from the holder in their
constructor, the first time and after a restart alike. References passed in a constructor's
arguments would not be kept alive for a restart (ray-project/ray#53727), and the holder keeps the
pieces alive as long as any copy of the handle lives (the datasets planned with it included).
"""

from __future__ import annotations

import dataclasses
import logging
import os

import pyarrow as pa
import ray
import ray.data

from settopk.configs import MAX_K, gpu_routing_problems, max_len_problems, vocab_size_problems
from settopk.shards.reading import pieces_for_cluster, read_corpus_pieces
from settopk.kernels import SCORES, registered_backends, search_cost_per_doc
from settopk.kernels.postings import ROUTINGS
from settopk.shards import ShardSpec, plan_shards_from_counts
from settopk.shards.inputs import ON_INVALID, InputError, SetLimits

from .tables import read_arrow_corpus

__all__ = ["CorpusHandle", "CorpusHolder", "check_search_settings", "load_corpus", "resolve_backend", "shard_of"]

log = logging.getLogger("settopk")


@ray.remote(num_cpus=0, max_restarts=0)
class CorpusHolder:
    """Holds the corpus pieces' references and the plan for the search actors (see the module's docstring).

    Built with ``[(shards, refs, drops, ordered)]``, nested in a list so that Ray passes the references
    themselves. :meth:`take` answers each call with a new object holding them: a restarted actor's call
    has the same task id as its first life's, and on Ray 2.50 an actor that returned the same nested
    references under that id again failed a reference-counting check and died.
    """

    def __init__(self, held: list):
        self._shards, self._refs, self._drops, self._ordered = held[0]

    def take(self, shard: int) -> list:
        """``[ref]``: an object holding ``[spec, references, drops, ordered]`` of ``shard``."""
        return [ray.put([self._shards[shard], list(self._refs), self._drops, self._ordered])]


@dataclasses.dataclass(frozen=True)
class CorpusHandle:
    """A corpus read into the object store and planned into length-bucket shards, with the search settings.

    Made by :func:`load_corpus`; pass it to :class:`settopk.ray.ShardSearch` (``fn_constructor_kwargs``).
    It pickles small: the docs stay in the object store, referenced by the holder actor.

    Attributes
    ----------
    holder : ray.actor.ActorHandle
        The :class:`CorpusHolder` actor that holds the pieces' references and each shard's spec;
        it lives while a copy of this handle does.
    shards : tuple of ShardSpec
        The plan, in length order; a pool searches shard ``i`` (``ShardSearch(corpus, shard=i)``).
    n_docs : int
        Docs in the corpus (after quarantine).
    k : int
        Results per query, in ``[1, 32767]``.
    score : str
        What results are ranked by, one of :data:`settopk.kernels.SCORES`.
    backend : str
        ``"cupy"``, ``"cpu"`` or ``"numpy"`` (``"auto"`` resolved against the cluster).
    routing : str
        One of :data:`settopk.kernels.postings.ROUTINGS`.
    max_len, vocab_size : int
        Bounds every set (doc and query) must respect.
    threads : int or None
        CPU threads of a ``"cpu"`` index (None: every CPU of the actor's process).
    """

    holder: object
    shards: tuple
    n_docs: int
    k: int = 100
    score: str = "braun_blanquet"
    backend: str = "cpu"
    routing: str = "scan"
    max_len: int = 128
    vocab_size: int = 65536
    threads: int | None = None

    @property
    def limits(self) -> SetLimits:
        """``SetLimits(vocab_size, max_len)`` of the run."""
        return SetLimits(vocab_size=self.vocab_size, max_len=self.max_len)

    @property
    def n_shards(self) -> int:
        """Shards planned (1 unless the corpus was split on purpose)."""
        return len(self.shards)


def check_search_settings(k, score: str, backend: str, routing: str, max_len, vocab_size) -> None:
    """Raise :class:`ValueError` naming the first setting out of its range, and the values it may take."""
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise ValueError(f"k must be an integer in [1, {MAX_K}] (the result's rank column is int16), found {k!r}")
    if score not in SCORES:
        raise ValueError(f"score must be one of {', '.join(SCORES)}, found {score!r}")
    backends = ("auto", *registered_backends())
    if backend not in backends:
        raise ValueError(f"backend must be one of {', '.join(backends)}, found {backend!r}")
    if routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {', '.join(ROUTINGS)}, found {routing!r}")
    problems = max_len_problems(max_len) + vocab_size_problems(vocab_size)
    if backend == "cupy" and not problems:
        problems = gpu_routing_problems(routing, max_len)
    if problems:
        raise ValueError(problems[0])


def resolve_backend(backend: str, routing: str = "scan", max_len: int = 1) -> str:
    """``backend``, or for ``"auto"`` ``"cupy"`` where the connected cluster has a GPU, else ``"cpu"`` (as the job).

    Raises
    ------
    ValueError
        If ``"cupy"`` is asked for on a cluster without a GPU, or ``"auto"`` picks it with
        ``routing="postings"`` for sets the GPU postings do not take
        (:func:`settopk.configs.gpu_routing_problems`; it never falls back to the CPU unasked).
    """
    gpus = float(ray.cluster_resources().get("GPU", 0))
    if backend == "auto":
        why = f"backend 'auto' (it picks cupy: the Ray cluster has {gpus:g} GPU(s))"
        problems = gpu_routing_problems(routing, max_len, why) if gpus > 0 else []
        if problems:
            raise ValueError(problems[0])
        return "cupy" if gpus > 0 else "cpu"
    if backend == "cupy" and gpus == 0:
        raise ValueError("backend 'cupy' needs GPUs, and the Ray cluster has none; connect to a GPU cluster "
                         "or use backend 'cpu', 'numpy' or 'auto'")
    return backend


def load_corpus(docs, *, k: int = 100, score: str = "braun_blanquet", n_shards: int = 1, backend: str = "auto",
                routing: str = "scan", max_len: int = 128, vocab_size: int = 65536, threads: int | None = None,
                on_invalid: str = "error") -> CorpusHandle:
    """Read ``docs`` into the object store with Ray tasks, plan its shards, and hold it for the search actors.

    Runs now (not lazily): the reader tasks validate every doc, so a bad doc raises here. Starts
    a local Ray instance if none is connected.

    Parameters
    ----------
    docs : str, os.PathLike, pyarrow.Table or ray.data.Dataset
        The corpus in one of the job's formats: STI2 ``docs.txt`` (doc id = 0-based line), or a
        Parquet file or directory with columns ``doc_id`` (integer, unique) and ``tokens``
        (list of integer); a local path or a URI (``s3://``, ``gs://``, ...). Or a table or a
        dataset with those columns, put into the object store once (a table cut into about one
        piece per CPU, a dataset as its Arrow blocks, ``Dataset.to_arrow_refs``) and checked by
        reader tasks as a Parquet file is, a bad row named by its 0-based row in the table or
        dataset (:mod:`settopk.ray.tables`).
    k : int
        Results per query, in ``[1, 32767]``.
    score : str
        One of :data:`settopk.kernels.SCORES`.
    n_shards : int
        Most length-bucket shards (>= 1). One holds the whole corpus in each actor; more split it
        by doc length, each searched by its own pool, and the lists merged exactly: use them when
        the corpus does not fit one actor's memory (GPU memory for ``"cupy"``).
    backend : str
        ``"auto"`` (``"cupy"`` where the cluster has GPUs, else ``"cpu"``), ``"cupy"``, ``"cpu"``, ``"numpy"``.
    routing : str
        One of :data:`settopk.kernels.postings.ROUTINGS`.
    max_len, vocab_size : int
        Sets hold at most ``max_len`` distinct ids (at most 4096), each in
        ``[0, vocab_size)`` (at most 2**24).
    threads : int, optional
        CPU threads of each ``"cpu"`` index.
    on_invalid : str
        ``"error"`` (a bad doc raises) or ``"quarantine"`` (bad docs are left out and logged).

    Returns
    -------
    CorpusHandle

    Raises
    ------
    ValueError
        A setting out of its range (the message names it).
    TypeError
        ``docs`` neither a path, a table nor a dataset.
    settopk.shards.inputs.InputError
        A bad doc, a missing file, or an empty corpus (the message names the file and row or line).
    """
    check_search_settings(k, score, backend, routing, max_len, vocab_size)
    if not isinstance(n_shards, int) or isinstance(n_shards, bool) or n_shards < 1:
        raise ValueError(f"n_shards must be an integer >= 1, found {n_shards!r}")
    if on_invalid not in ON_INVALID:
        raise ValueError(f"on_invalid must be one of {', '.join(ON_INVALID)}, found {on_invalid!r}")
    in_memory = isinstance(docs, pa.Table) or isinstance(docs, ray.data.Dataset)
    if not (in_memory or isinstance(docs, (str, os.PathLike))):
        raise TypeError(f"docs must be a path or URI of a corpus (docs.txt, or Parquet with doc_id and tokens), a "
                        f"pyarrow.Table or a ray.data.Dataset with doc_id and tokens, found {type(docs).__name__}")
    if not ray.is_initialized():
        ray.init()
    backend = resolve_backend(backend, routing, max_len)
    limits = SetLimits(vocab_size=vocab_size, max_len=max_len)
    if in_memory:
        corpus, docs = read_arrow_corpus(docs, limits, on_invalid, float(ray.cluster_resources().get("CPU", 1)))
    else:
        docs = os.fspath(docs)
        pieces, _, _ = pieces_for_cluster(docs, float(ray.cluster_resources().get("CPU", 1)))
        corpus = read_corpus_pieces(pieces, limits, on_invalid)
    if corpus.n_docs == 0:
        raise InputError(f"{docs}: the corpus has no docs; expected at least one")
    if corpus.rejected:
        log.warning("on_invalid: quarantine left out %d doc line(s)/row(s) of %s", len(corpus.rejected), docs)
    shards = plan_shards_from_counts(corpus.length_counts, n_shards, doc_cost=search_cost_per_doc(backend, max_len))
    # The holder borrows the references: Ray keeps the pieces while it holds them, after this driver's copies go.
    holder = CorpusHolder.remote([(tuple(shards), list(corpus.corpus_refs), corpus.drops, corpus.ordered)])
    log.info("corpus: %d docs from %s in %d shard(s), backend %s", corpus.n_docs, docs, len(shards), backend)
    return CorpusHandle(holder, tuple(shards), corpus.n_docs, k, score, backend, routing, max_len, vocab_size, threads)


def shard_of(corpus: CorpusHandle, shard: int) -> ShardSpec:
    """``corpus.shards[shard]``; :class:`ValueError` naming the plan's size where there is none such."""
    if not isinstance(shard, int) or not 0 <= shard < corpus.n_shards:
        raise ValueError(f"shard must be an integer in [0, {corpus.n_shards - 1}] (the corpus has {corpus.n_shards} "
                         f"shard(s)), found {shard!r}")
    return corpus.shards[shard]
