"""The in-process API: :class:`Index` (build once, search many times) and its result :class:`TopK`.

Shaped like the search libraries users know (FAISS ``Index.search``, cuVS build/search)::

    import settopk

    index = settopk.Index.build("docs.parquet")               # or an Arrow table, or a list of sets
    top = index.search([[1, 5, 9], [2, 3]], k=10)              # settopk.TopK, arrays of shape (2, 10)
    top.doc_ids, top.scores                                    # int64 and float64, best first
    table = top.to_arrow()                                     # the job's result schema

Results are exact and identical to the job's (``settopk score``) for the same docs, queries,
score and ``k``, on every backend: ranked by the score descending, ties to the lower doc id.
Tokens may be ids in ``[0, vocab_size)``, taken as they are, or any token values (strings, bytes,
64-bit or negative integers), searched through an exact dictionary of the docs' tokens
(:mod:`settopk.index.tokens`), as the job maps them.

Everything runs in this process: no Ray. CuPy is imported when a ``"cupy"`` index is built
(or ``backend="auto"`` looks for a GPU), Numba when a ``"cpu"`` one is; ``import settopk``
imports neither.
"""

from __future__ import annotations

import collections
import dataclasses
import numbers
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from settopk.kernels import DEFAULT_SCORE, SetBatch, build_index, check_score, score_definition, score_value
from settopk.kernels import TopK as _KernelTopK
from settopk.kernels.postings import check_routing
from settopk.kernels.sets import MAX_VOCAB
from settopk.shards.inputs import InputError, SetLimits
from settopk.shards.inputs.vocabulary import WideSets
from settopk.shards.results import RESULT_SCHEMA, results_table

from .inputs import SETS, TABLE, checked_query_ids, frame_table, read_doc_sets, read_query_sets
from .tokens import TokenDictionary

__all__ = ["BACKENDS", "Index", "InputError", "MAX_K", "TopK"]  # InputError: what build and search raise for bad input

BACKENDS = ("auto", "cpu", "numpy", "cupy")
"""What ``Index.build(backend=...)`` accepts, as a job config's ``backend`` (:data:`settopk.configs.BACKENDS`)."""

MAX_K = 32767
"""Largest ``k``: the result's ``rank`` column is int16, as the job's (:data:`settopk.configs.MAX_K`)."""

# Queries per call to the backend. NumPy's search holds (queries x docs) arrays, so its queries
# go in batches, as the job sends them (settopk.configs.AUTO_QUERY_BATCH_SIZE). The GPU gets
# 16 of its own 4096-query batches per call, so that a host thread copies and scores the rows
# of one call while the GPU searches the next: the host's work then hides behind the kernel's.
# "cpu" takes every query in one call (it spreads its query groups over its threads; host work
# beside it would only take their CPUs).
_BATCH_SIZE = {"numpy": 256, "cupy": 65536}
_FILL_ROWS = 4096  # rows scored at a time: the temporaries stay in cache
_PARALLEL_FILL = 1 << 22  # scores of one call filled by several threads from this many on
# max_len without one given: the job's default (settopk.configs.SearchConfig.max_len), so that
# every query the job takes by default is taken here, or the longest doc where that is longer.
_DEFAULT_MAX_LEN = 128
# Largest max_len of each backend (the GPU kernel counts in at most 13 bit planes) and score
# (cosine's keys come from a table with rows up to 4096; settopk.kernels.keys).
_MAX_LEN = 32767
_MAX_LEN_CUPY = 4096
_MAX_LEN_COSINE = 4096


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class TopK:
    """The top ``k`` docs of each query, best first (host memory, NumPy arrays).

    Attributes
    ----------
    doc_ids : numpy.ndarray of int64, shape (n_queries, k)
        Doc ids, ordered by score descending then doc id ascending. ``-1`` pads the end of every
        row when the index holds fewer than ``k`` docs (every doc is ranked, those sharing no id
        with the query included, so a row is padded only then).
    scores : numpy.ndarray of float64, shape (n_queries, k)
        The score of each doc (:func:`settopk.kernels.score_value`: the correctly rounded value of
        the fraction; ``0/0`` is 0.0), the job's ``score`` column. ``-inf`` where ``doc_ids == -1``,
        so every row is non-increasing.
    overlap : numpy.ndarray of int16, shape (n_queries, k)
        ``|q ∩ d|``, ids shared by the query and the doc; 0 where ``doc_ids == -1``.
    query_len : numpy.ndarray of int16, shape (n_queries,)
        ``|q|``, distinct ids of each query.
    doc_len : numpy.ndarray of int16, shape (n_queries, k)
        ``|d|``, distinct ids of each doc; 0 where ``doc_ids == -1``.
    score : str
        What the rows are ranked by, one of :data:`settopk.kernels.SCORES`.
    query_ids : tuple of str, optional
        The queries' ids where the input named them (a file, or a table with ``query_id``);
        None: rows are numbered ``"0"``, ``"1"``, ... as the job numbers the lines of a text file.

    Memory: ``20 * n_queries * k + 2 * n_queries`` bytes, host memory.
    """

    doc_ids: np.ndarray
    scores: np.ndarray
    overlap: np.ndarray
    query_len: np.ndarray
    doc_len: np.ndarray
    score: str = DEFAULT_SCORE
    query_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        shape = self.doc_ids.shape
        wanted = (("doc_ids", np.int64, shape), ("scores", np.float64, shape), ("overlap", np.int16, shape),
                  ("query_len", np.int16, shape[:1]), ("doc_len", np.int16, shape))
        if len(shape) != 2:
            raise ValueError(f"TopK.doc_ids must have shape (n_queries, k), found {shape}")
        for name, dtype, want in wanted:
            array = getattr(self, name)
            if not isinstance(array, np.ndarray) or array.dtype != dtype or array.shape != want:
                found = f"{array.dtype} {array.shape}" if isinstance(array, np.ndarray) else type(array).__name__
                raise ValueError(f"TopK.{name} must be a {np.dtype(dtype)} array of shape {want}, found {found}")
        check_score(self.score)
        if self.query_ids is not None:
            object.__setattr__(self, "query_ids", checked_query_ids(self.query_ids, shape[0]))

    @property
    def n_queries(self) -> int:
        """Number of queries (rows)."""
        return self.doc_ids.shape[0]

    @property
    def k(self) -> int:
        """Results per query (columns), padding included."""
        return self.doc_ids.shape[1]

    def __len__(self) -> int:
        return self.n_queries

    def __repr__(self) -> str:
        named = "" if self.query_ids is None else ", query_ids named"
        return f"settopk.TopK(n_queries={self.n_queries}, k={self.k}, score={self.score!r}{named})"

    def to_arrow(self, query_ids=None):
        """The rows as the job writes them: one row per (query, rank), padding dropped.

        Parameters
        ----------
        query_ids : sequence of str, or pyarrow.Array or ChunkedArray of strings, length n_queries, optional
            Ids to name the queries by. Default: :attr:`query_ids` where the input named its
            queries, else ``"0"``, ``"1"``, ... (as the job names the lines of a text file).

        Returns
        -------
        pyarrow.Table
            Schema :data:`settopk.shards.results.RESULT_SCHEMA` (``query_id`` string, ``rank`` int16
            from 1, ``doc_id`` int64, ``score`` float64, ``overlap``, ``query_len`` and ``doc_len``
            int16), rows in query order then rank, ``-1`` padding dropped; the schema metadata
            names the score (``settopk.score``) and ``k`` (``settopk.k``), as a part file's does.
            Equal to the job's result (``Table.equals``) for the same inputs.

        Raises
        ------
        ValueError
            If ``query_ids`` does not hold one unique string per query (a None or null names its
            position).
        """
        if query_ids is not None:
            ids = checked_query_ids(query_ids, self.n_queries)
        else:
            ids = self.query_ids if self.query_ids is not None else [str(i) for i in range(self.n_queries)]
        table = results_table(ids, self.query_len, _KernelTopK(self.doc_ids, self.overlap, self.doc_len), self.score)
        metadata = {**RESULT_SCHEMA.metadata, b"settopk.score": score_definition(self.score).encode(),
                    b"settopk.k": str(self.k).encode()}
        return table.replace_schema_metadata(metadata)


class Index:
    """An exact top-k set-similarity index over a corpus of token sets, in this process.

    Build it with :meth:`build` (``Index(docs, ...)`` is the same), then :meth:`search` it any
    number of times. The docs live in host memory (``"numpy"``, ``"cpu"``) or on the current
    CUDA device (``"cupy"``).

    The build decides once, from the docs alone, how tokens are read. Where every doc token is an
    integer in ``[0, vocab_size)``, the index is over token *ids*: they are the kernels' ids as
    they are, and a query must hold ids in the same range. Otherwise (a string, bytes, an integer
    outside that range, negative or up to ``2**64 - 1``) it is over token *values*: the docs'
    distinct values, sorted, make a dictionary (:attr:`token_values`) whose positions are the
    kernels' dense ids; a query's values are looked up in it (integers given as ids are values
    too), and a value no doc holds can match nothing yet counts in ``|q|``. Results are those of
    the values themselves, as the job's.

    Attributes
    ----------
    backend : str
        The backend the index runs on: ``"numpy"``, ``"cpu"`` or ``"cupy"`` (``"auto"`` resolved).
    score : str
        What searches rank by, one of :data:`settopk.kernels.SCORES`.
    routing : str
        ``"scan"``, ``"auto"`` or ``"postings"`` (:data:`settopk.kernels.postings.ROUTINGS`).
    max_len : int
        Most distinct ids a doc or a query may have.
    vocab_size : int
        Over token ids: ids lie in ``[0, vocab_size)`` (the argument). Over token values: the
        kernels' dense ids, ``len(token_values) + max_len`` (room for a query's tokens that no
        doc holds).
    token_values : pyarrow.Array or None
        Over token values: the docs' distinct tokens, sorted ascending (bytes by their bytes),
        a token's dense id its position; ``int64``, ``uint64`` (where some id is ``2**63`` or
        more) or ``large_binary`` (strings as their UTF-8 bytes, so ``"a"`` and ``b"a"`` are one
        token). Host memory: 8 bytes a token, plus its bytes for strings. None over token ids.
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        The docs' ids, strictly increasing (host memory).
    n_docs : int
        Number of docs.
    """

    def __init__(self, docs, *, score: str = DEFAULT_SCORE, backend: str = "auto", routing: str = "scan",
                 max_len: int | None = None, vocab_size: int = 65536, doc_ids=None, threads: int | None = None):
        check_score(score)
        check_routing(routing)
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, found {backend!r}")
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral) or not 1 <= vocab_size <= 1 << 24:
            raise ValueError(f"vocab_size must be an integer in [1, 16777216], found {vocab_size!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1):
            raise ValueError(f"threads must be an integer >= 1 or None (every CPU), found {threads!r}")
        self.backend = _resolve_backend(backend)
        limit = _max_len_limit(self.backend, score)
        if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, numbers.Integral)
                                    or not 1 <= max_len <= limit):
            raise ValueError(f"max_len must be an integer in [1, {limit}] for backend {self.backend!r} and score "
                             f"{score!r}, found {max_len!r}")
        docs = frame_table(docs)  # a data frame is read, and named in errors, as its Arrow table
        # Without max_len, docs may be as long as the backend and score allow; the longest sets it.
        ids, sets = read_doc_sets(docs, SetLimits(vocab_size=int(vocab_size), max_len=int(max_len or limit)), doc_ids)
        longest = int(sets.lengths.max()) if sets.n_sets else 0
        self.score = score
        self.routing = routing
        self.max_len = int(max_len) if max_len is not None else max(_DEFAULT_MAX_LEN, longest)
        self.vocab_size = int(vocab_size)
        # Decided once, from the docs: ids as they are, or token values through a dictionary.
        self._dictionary = None
        if isinstance(sets, WideSets):
            self._dictionary, sets = TokenDictionary.build(sets, self.max_len, _source_name(docs))
            self.vocab_size = self._dictionary.vocab_size
        self.threads = None if threads is None else int(threads)
        self.doc_ids = ids
        self._sets = sets  # the docs in the kernels' ids: a self-join's queries (settopk.index.join)
        self._join_corpus = None  # the docs prepared for self-joins at any threshold (settopk.kernels.join)
        # An empty corpus needs no backend index: every row of every search is padding.
        self._index = None if sets.n_sets == 0 else build_index(
            self.backend, ids, sets, max_len=self.max_len, vocab_size=self.vocab_size, score=score, routing=routing,
            threads=self.threads)

    @classmethod
    def build(cls, docs, *, score: str = DEFAULT_SCORE, backend: str = "auto", routing: str = "scan",
              max_len: int | None = None, vocab_size: int = 65536, doc_ids=None, threads: int | None = None) -> "Index":
        """Build an index over ``docs``.

        Parameters
        ----------
        docs : str, os.PathLike, pyarrow.Table, pyarrow.RecordBatch, pandas.DataFrame, settopk.kernels.SetBatch or sequence of sets
            The corpus, in any of these forms:

            - a path or URI (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``, ``file://``) in any
              corpus format the job reads: STI2 text (one doc per line, comma-separated 64-bit
              integers, the doc id its 0-based line number) or Parquet (a file or a directory of
              them, columns ``doc_id`` and ``tokens``), read whole into this process;
            - an Arrow table or record batch with ``tokens`` (a list of any integer type,
              ``string``, ``large_string``, ``binary`` or ``large_binary``) and ``doc_id``
              (integers in ``[0, 2**63)``, unique, any order; without it, rows are numbered from 0);
            - a pandas DataFrame with those columns, read as
              ``pyarrow.Table.from_pandas(df, preserve_index=False)`` (its index is not read), or
              another data frame exporting an Arrow stream (Polars), read as ``pyarrow.table(df)``;
            - a sequence of sets, each an iterable of ``int`` (within 64 bits, all signed or all
              unsigned), or of ``str`` and ``bytes`` (a ``set``, list or NumPy array), or a
              SetBatch (``uint16`` or ``uint32`` ids); the doc ids are their positions unless
              ``doc_ids`` is given.

            Tokens may come in any order and repeated; each set is sorted and de-duplicated.
            Where every token is an integer in ``[0, vocab_size)`` they are ids, as they are;
            otherwise the index is over token values: a dictionary of the docs' distinct
            tokens, host memory about their size (:attr:`token_values`), maps them to dense ids
            ``0 .. n - 1``, and ``n + max_len`` must not exceed ``2**24``.
        score : str, default "braun_blanquet"
            What to rank by, one of :data:`settopk.kernels.SCORES`: ``braun_blanquet``,
            ``jaccard``, ``cosine``, ``dice``, ``overlap``, ``containment``.
        backend : {"auto", "cpu", "numpy", "cupy"}, default "auto"
            ``"cupy"``: the current CUDA device; ``"cpu"``: compiled (Numba), ``threads`` threads;
            ``"numpy"``: vectorised NumPy. ``"auto"``: ``"cupy"`` where CuPy sees a GPU, else ``"cpu"``
            (as the job decides for its cluster). ``"cupy"`` where there is none fails here; it
            never falls back.
        routing : {"scan", "auto", "postings"}, default "scan"
            How the index finds candidates: scan every doc, or also hold an inverted index and
            route each query to the cheaper path (``"auto"``). Results are identical.
        max_len : int, optional
            Most distinct ids a doc or query may have, in ``[1, 32767]`` (``[1, 4096]`` for
            ``"cupy"`` and for ``cosine``). Default: 128 (the job's default), or the longest doc where
            that is longer; a longer query is refused at search. Results do not depend on it; the
            ``"cpu"`` backend's scan does a little more work per doc for a larger one.
        vocab_size : int, default 65536
            Integer tokens in ``[0, vocab_size)`` are ids, taken as they are, at most 16,777,216
            (2**24) on every backend (ids of 65536 and more are kept as ``uint32``; a SetBatch may
            hold ``uint32`` tokens). Docs holding any other token make an index over values.
        doc_ids : array_like of int, shape (n_docs,), optional
            Ids of a sequence of sets or a SetBatch, unique, in ``[0, 2**63)``, any order.
        threads : int, optional
            Threads of the ``"cpu"`` backend (the others ignore it). Default: every CPU this
            process may run on.

        Returns
        -------
        Index

        Raises
        ------
        settopk.shards.inputs.InputError
            (a ValueError) For a bad doc: a set longer than ``max_len``, a repeated ``doc_id``, a
            null, a token of no token type (a float, a bool) or of another kind than the others
            (integers beside strings, negative ids beside ids of ``2**63`` and more), more than
            ``2**24 - max_len`` distinct tokens in docs of token values, a wrong column type, or a
            missing or unreadable file. The message names the file and line, or the row, what was
            expected, what was found and how to fix it.
        ValueError
            For an unknown ``score``, ``backend`` or ``routing``, or ``max_len``, ``vocab_size``,
            ``threads`` or ``doc_ids`` out of range.
        TypeError
            If ``docs`` is none of the forms above.
        RuntimeError
            If ``backend="cupy"`` and CuPy sees no GPU.
        ImportError
            If ``backend="cupy"`` and CuPy is not installed.
        """
        return cls(docs, score=score, backend=backend, routing=routing, max_len=max_len, vocab_size=vocab_size,
                   doc_ids=doc_ids, threads=threads)

    @property
    def n_docs(self) -> int:
        """Number of docs."""
        return len(self.doc_ids)

    @property
    def token_values(self):
        """The docs' distinct token values (:class:`pyarrow.Array`, sorted; a value's dense id is its
        position), where the index was built over token values; None where over token ids."""
        return None if self._dictionary is None else self._dictionary.values

    @property
    def kernel(self):
        """The backend's own index (:class:`settopk.kernels.ShardIndex`) under this one, for its
        diagnostics (``last_routing``, ``postings_bytes``) and the benchmark's kernel-alone time;
        None for an empty corpus. Its ``search`` takes a validated SetBatch and returns the
        kernels' :class:`settopk.kernels.TopK` (no scores, no padding beyond ``n_docs``)."""
        return self._index

    def __len__(self) -> int:
        return self.n_docs

    def __repr__(self) -> str:
        tokens = "" if self._dictionary is None else f", token_values={self._dictionary.n_tokens} {self._dictionary.kind}"
        return (f"settopk.Index(n_docs={self.n_docs}, backend={self.backend!r}, score={self.score!r}, "
                f"routing={self.routing!r}, max_len={self.max_len}{tokens})")

    def search(self, queries, k: int = 100, *, batch_size: int | None = None) -> TopK:
        """The exact top ``k`` docs of each query.

        Parameters
        ----------
        queries : str, os.PathLike, pyarrow.Table, pyarrow.RecordBatch, pandas.DataFrame, settopk.kernels.SetBatch or sequence of sets
            The queries, in any form :meth:`build` takes docs, or a path or URI in any query
            format the job reads (a directory of one-query files, text, Parquet with
            ``query_id`` and ``tokens``). Each set: at most ``max_len`` distinct tokens; over
            token ids, ids in ``[0, vocab_size)``; over token values, tokens of the docs' kind
            (integers, or strings and bytes), mapped through :attr:`token_values` with one
            vectorised lookup (for strings, a hash of the dictionary built per call).
        k : int, default 100
            Results per query, in ``[1, 32767]``; larger than the corpus is allowed (rows are
            then padded).
        batch_size : int, optional
            Queries per call to the backend; bounds the search's temporary memory. Default:
            256 for ``"numpy"`` (its memory grows with queries x docs), 65536 for ``"cupy"`` (a
            host thread copies and scores one call's rows while the GPU searches the next), all
            at once for ``"cpu"`` (which spreads them over its threads). Results do not depend on it.

        Returns
        -------
        TopK
            Host arrays of shape ``(n_queries, k)``, in query order; ``query_ids`` set where the
            input named its queries.

        Raises
        ------
        settopk.shards.inputs.InputError
            (a ValueError) For a bad query: over token ids, an id outside ``[0, vocab_size)``;
            over token values, a token of another kind than the docs' (strings against integers,
            or the reverse; negative ids against docs with ids of ``2**63`` and more, or the
            reverse); more than ``max_len`` distinct tokens, a repeated ``query_id``, a null, a
            missing or unreadable file. The message names the row (or file and line, or query id).
        ValueError
            If ``k`` or ``batch_size`` is out of range.
        TypeError
            If ``queries`` is none of the accepted forms.
        """
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= MAX_K:
            raise ValueError(f"k must be an integer in [1, {MAX_K}] (the result's rank column is int16), found {k!r}")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral)
                                       or batch_size < 1):
            raise ValueError(f"batch_size must be an integer >= 1 or None, found {batch_size!r}")
        k = int(k)
        query_ids, sets = self._read_queries(queries)
        n = sets.n_sets
        query_len = sets.lengths.astype(np.int16)
        width = min(k, self.n_docs)  # the backend ranks every doc, so a row holds min(k, n_docs) of them
        if width == 0 or n == 0:
            found = _KernelTopK(np.full((n, width), -1, np.int64), np.zeros((n, width), np.int16), np.zeros((n, width), np.int16))
            scores = np.zeros((n, width))
        else:
            found, scores = self._search_batches(sets, query_len, width, batch_size or _BATCH_SIZE.get(self.backend, n))
        if width < k:
            found, scores = _pad(found, scores, k)
        return TopK(found.doc_ids, scores, found.overlap.astype(np.int16, copy=False), query_len,
                    found.doc_len.astype(np.int16, copy=False), self.score,
                    None if query_ids is None else tuple(query_ids))

    def threshold_search(self, queries, threshold, *, k: int | None = None):
        """Every (query, doc) pair whose score reaches ``threshold``, exactly (ties pass), best first.

        ``queries`` as :meth:`search` takes them; ``threshold`` exact (``"0.8"``, ``0.8`` and
        ``"4/5"`` are one); ``k`` caps each query's pairs (None: all). Returns a
        :class:`settopk.Pairs` (host arrays of shape (n_pairs,)); raises
        :class:`settopk.index.join.JoinArgumentError` for a bad ``threshold`` or ``k``, else as
        :meth:`search`. Parameters, returns and errors in full: :func:`settopk.index.join.threshold_search`.
        """
        from .join import threshold_search

        query_ids, sets = self._read_queries(queries)
        return threshold_search(self, query_ids, sets, threshold, k)

    def self_join(self, threshold, *, include_self: bool = False, k: int | None = None):
        """Every pair of docs whose score reaches ``threshold``, under the job's self-join rule: each
        unordered pair once, under its shorter doc (the lower id at equal lengths), for every score
        but containment (every ordered pair); a doc with itself only with ``include_self``.
        Returns a :class:`settopk.Pairs` whose ``query_index`` is the query doc's id. Parameters,
        returns and errors in full: :func:`settopk.index.join.self_join`.
        """
        from .join import self_join

        return self_join(self, self._sets, threshold, include_self, k)

    @property
    def join_corpus(self):
        """The docs prepared for the self-join on this index's backend: tokens in the docs' frequency
        order, identical docs grouped (host memory; on ``cupy`` their group sets on the device too:
        :func:`settopk.kernels.join.prepare_corpus`). Made at the first use and kept: it depends on
        the docs alone, so self-joins at other thresholds or scores skip it."""
        if self._join_corpus is None:
            from settopk.kernels.join import prepare_corpus

            self._join_corpus = prepare_corpus(self._sets, backend=self.backend)
        return self._join_corpus

    def _read_queries(self, queries):
        """``(query_ids or None, SetBatch in the kernels' ids)`` of queries as :meth:`search` takes them."""
        queries = frame_table(queries)
        if self._dictionary is None:
            return read_query_sets(queries, SetLimits(vocab_size=self.vocab_size, max_len=self.max_len))
        # any integer is a token value here: small ones come as ids, the others as values
        query_ids, sets = read_query_sets(queries, SetLimits(vocab_size=MAX_VOCAB, max_len=self.max_len), True)
        return query_ids, self._dictionary.queries(sets, _source_name(queries), query_ids)

    def _search_batches(self, sets: SetBatch, query_len: np.ndarray, k: int, batch_size: int):
        """The backend's TopK of every query and its float64 scores, shape (n_queries, k).

        One call: the backend's arrays are the result, their scores filled after it (by several
        threads where there are many). Several: each call's rows are copied and scored by a host
        thread while the backend searches the next call's.
        """
        n = sets.n_sets
        scores = np.empty((n, k))
        if batch_size >= n:
            found = self._index.search(sets, k)
            _fill_scores(found, query_len, scores, self.score, 0, n, parallel=True)
            return found, scores
        out = _KernelTopK(np.empty((n, k), np.int64), np.empty((n, k), np.int16), np.empty((n, k), np.int16))
        pending: collections.deque = collections.deque()
        with ThreadPoolExecutor(1, thread_name_prefix="settopk-index") as pool:
            try:
                for lo in range(0, n, batch_size):
                    hi = min(lo + batch_size, n)
                    part = self._index.search(sets.slice(lo, hi), k)
                    pending.append(pool.submit(_copy_and_score, part, out, query_len, scores, self.score, lo, hi))
                    while len(pending) > 2:  # at most two calls' rows held beside the result
                        pending.popleft().result()
                while pending:
                    pending.popleft().result()
            finally:
                for future in pending:
                    future.cancel()
        return out, scores


def _source_name(value) -> str:
    """How an error names an input: its path, or the kind of in-memory input."""
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    return TABLE if hasattr(value, "schema") else SETS


def _copy_and_score(part: _KernelTopK, out: _KernelTopK, query_len, scores, score: str, lo: int, hi: int) -> None:
    """Rows ``lo .. hi - 1`` of ``out`` from one call's result ``part``, and their scores."""
    for whole, piece in zip(out, part):
        whole[lo:hi] = piece
    _fill_scores(out, query_len, scores, score, lo, hi)


def _fill_scores(found: _KernelTopK, query_len, scores, score: str, lo: int, hi: int, parallel: bool = False) -> None:
    """``scores[lo:hi]`` from ``found``'s rows: :func:`score_value`, ``-inf`` at padding.

    In slices of :data:`_FILL_ROWS` rows, whose temporaries stay in cache; with ``parallel``
    and many rows, the slices are shared by several threads (NumPy releases the GIL).
    """
    starts = range(lo, hi, _FILL_ROWS)
    if parallel and (hi - lo) * scores.shape[1] >= _PARALLEL_FILL:
        threads = min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        if threads > 1:
            with ThreadPoolExecutor(threads, thread_name_prefix="settopk-scores") as pool:
                list(pool.map(lambda a: _fill_slice(found, query_len, scores, score, a, min(a + _FILL_ROWS, hi)), starts))
            return
    for a in starts:
        _fill_slice(found, query_len, scores, score, a, min(a + _FILL_ROWS, hi))


def _fill_slice(found: _KernelTopK, query_len, scores, score: str, a: int, b: int) -> None:
    scores[a:b] = score_value(found.overlap[a:b], query_len[a:b, None], found.doc_len[a:b], score)
    padded = np.flatnonzero(found.doc_ids[a:b, -1] < 0) + a  # padding comes last in a row: one column tells
    if len(padded):
        scores[padded] = np.where(found.doc_ids[padded] < 0, -np.inf, scores[padded])


def _pad(found: _KernelTopK, scores: np.ndarray, k: int) -> tuple[_KernelTopK, np.ndarray]:
    """Rows widened to ``k`` columns with padding: ids -1, scores -inf, overlap and doc_len 0."""
    n, width = scores.shape
    doc_ids = np.full((n, k), -1, np.int64)
    overlap, doc_len = np.zeros((n, k), np.int16), np.zeros((n, k), np.int16)
    wide = np.full((n, k), -np.inf)
    doc_ids[:, :width], overlap[:, :width], doc_len[:, :width], wide[:, :width] = found.doc_ids, found.overlap, found.doc_len, scores
    return _KernelTopK(doc_ids, overlap, doc_len), wide


def _cuda_devices() -> int:
    """GPUs CuPy sees; 0 where CuPy is missing or finds no driver or device."""
    try:
        import cupy
    except ImportError:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # CUDARuntimeError and kin: no driver, or no device, both mean no GPU here
        return 0


def _resolve_backend(backend: str) -> str:
    """``backend`` for this process: ``"auto"`` as the job's rule on one machine (cupy where CuPy
    sees a GPU, else the compiled ``"cpu"``); ``"cupy"`` checked to have a GPU, never a fallback."""
    if backend == "auto":
        return "cupy" if _cuda_devices() > 0 else "cpu"
    if backend == "cupy":
        try:
            import cupy  # noqa: F401
        except ImportError as exc:
            raise ImportError("backend 'cupy' needs CuPy: pip install 'settopk[gpu]' (CUDA 13 drivers) or "
                              "'settopk[gpu-cuda12]'; or build with backend='cpu' or 'auto'") from exc
        if _cuda_devices() == 0:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
            raise RuntimeError(f"backend 'cupy' asks for a GPU, but CuPy sees none{hint}; run on a GPU machine, "
                               "or build with backend='cpu', 'numpy' or 'auto'")
    return backend


def _max_len_limit(backend: str, score: str) -> int:
    """Largest ``max_len`` the backend and the score allow."""
    limit = _MAX_LEN_CUPY if backend == "cupy" else _MAX_LEN
    return min(limit, _MAX_LEN_COSINE) if score == "cosine" else limit

