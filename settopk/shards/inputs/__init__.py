"""Reading the inputs: the doc corpus and the queries, validated exactly, as CSR :class:`SetBatch` es.

The first stage of a job. Nothing here imports Ray: reader tasks and the driver call these
functions, and ``import settopk.shards.inputs`` works without a cluster.

Data flow
---------
* The corpus is read in *pieces* (:mod:`.pieces`): :func:`plan_pieces` lists them from file
  footers, a reader task decodes each with :func:`read_piece`, the driver checks doc ids across
  pieces (:func:`check_doc_ids`) and each shard takes its docs with :func:`assemble_shard`.
* The queries are read in *chunks* (:mod:`.query_stream`): :class:`QueryStream` validates them in
  one pass, then hands out one chunk at a time; :class:`DocQueryStream` reads the corpus as
  queries (a self-join).
* :func:`read_corpus` and :func:`read_queries` (:mod:`.readers`) read a whole input at once, with the
  same rules and the same errors (:func:`read_piece` is :func:`read_corpus` on one piece).

Modules, each with one job: :mod:`.vocabulary` (token types, the exact token map), :mod:`.errors` (:class:`InputError`, :class:`Rejected`,
:class:`SetLimits` and the collector of bad lines), :mod:`.files` (format detection, file
listing, :func:`fingerprint`), :mod:`.canonical` (the canonical form of a set), :mod:`.text` and
:mod:`.parquet` (the two file formats), :mod:`.readers`, :mod:`.query_stream`, :mod:`.pieces`.
Names listed in ``__all__`` below are the stage's interface; the modules' other public names are
shared between the modules of this package only.

Formats
-------
Corpus (docs), chosen by :func:`corpus_format`:

* ``text`` (the STI2 ``docs.txt`` format): one doc per line, comma-separated token ids; the doc id is
  the 0-based line number. An empty line is an empty doc. A final newline does not start another doc
  (``"1\\n2\\n"`` has 2 docs; ``"1\\n2"`` too; ``"1\\n\\n"`` has 2, the second empty). Lines end in
  ``\\n`` or ``\\r\\n``.
* ``text`` in the FIMI format, for a file whose name ends in ``.dat`` (``Corpus.fmt`` is still
  ``"text"``): one doc per line, ids separated by spaces or tabs (runs of them and any at a line's
  ends allowed), non-negative decimal integers below ``2**64``; doc id, empty lines and line
  endings as above; a comma, a sign or any other character is an error naming the line.
* ``parquet``: a ``*.parquet`` file, or a directory of them, with columns ``doc_id`` (any integer
  type, values in ``[0, 2**63)``, unique) and ``tokens`` (``list`` or ``large_list`` of any integer
  type, ``string``, ``large_string``, ``binary`` or ``large_binary``). Docs may come in any ``doc_id`` order; they are returned sorted by ``doc_id``.

Queries, chosen by :func:`queries_format`:

* ``dir``: a directory with one query per file (comma-separated ids on a single line, final newline
  optional); the query id is the file name; files are read in sorted name order. Names starting with
  ``.`` or ``_`` (``.DS_Store``, ``_SUCCESS``) are skipped; every other entry counts: a subdirectory,
  an unreadable file or a file with a second line is an error.
* ``text``: one query per line, as the corpus text format (FIMI for a ``*.dat`` file); the query id is
  the 0-based line number.
* ``parquet``: as the corpus, with ``query_id`` (string or integer, returned as strings, unique)
  instead of ``doc_id``; rows keep their input order.

Policies (the same for every format)
------------------------------------
* Tokens are integers of any width (text: any 64-bit integer, ``-`` allowed) or, in Parquet,
  strings or binary (:mod:`.vocabulary`). A set whose tokens are all integers in ``[0, vocab_size)``
  comes as a :class:`SetBatch` of those ids (sorted); any other as a
  :class:`.vocabulary.WideSets` of token values, which the job maps to dense ids
  (:class:`.vocabulary.TokenMap`). The order of ids in a set does not matter. A repeated id counts once; ``n_with_repeats`` counts the sets that had one. After
  de-duplication a set holds at most ``max_len`` ids. An empty set is valid.
* Text whitespace: spaces and tabs around an id are allowed (``" 1 ,\\t2 "`` is ``{1, 2}``), and a line
  holding only spaces and tabs is an empty set. Everything else is an error: an empty field (``1,,2``,
  a trailing or leading comma), a ``+`` sign, a decimal point, hex, any other character, a
  space inside an id (``1 2``), or a carriage return that does not end the line.
* A Parquet directory is read in sorted file-name order; names starting with ``.`` or ``_`` (such as
  ``_SUCCESS``) are skipped, as Arrow, Spark and DuckDB do, and the files read are listed in
  ``files``. Any other entry that is not a ``*.parquet`` file is an error.
* Every input path must be a regular file or a directory: a FIFO, socket or device is an error
  (reading one could block forever).
* An input may be a local path or a URI of any filesystem PyArrow supports (``s3://``, ``gs://``,
  ``abfs://``, ``hdfs://``, ``file://``; :mod:`settopk.shards.location`): a key prefix is a directory, files
  under a URI are named by their URIs (in messages, ``files`` and pieces), and a reader task opens
  the store itself. A missing bucket or key, refused credentials or an unreachable store is an
  :class:`InputError` naming the URI.
* A text line longer than 256 MiB is an error (a valid line is a few kB).
* Nothing is skipped silently: every problem raises :class:`InputError`, which names the file, the
  line (1-based, as editors count) or the Parquet row (0-based, within that file), what was expected,
  what was found and how to fix it. Readers stop at the first bad line or row in input order, unless
  ``on_invalid="quarantine"`` sets bad lines and rows aside, each listed as a :class:`Rejected`.
"""

from .errors import ON_INVALID, InputError, Rejected, SetLimits
from .files import corpus_format, fingerprint, queries_format, query_files
from .pieces import CorpusPiece, PieceSummary, assemble_shard, check_doc_ids, group_pieces, pieces_ordered, plan_pieces, read_piece
from .query_stream import DocQueryStream, QueryStream
from .readers import Corpus, Queries, read_corpus, read_queries

__all__ = [
    "ON_INVALID",
    "Corpus",
    "CorpusPiece",
    "DocQueryStream",
    "InputError",
    "PieceSummary",
    "Queries",
    "QueryStream",
    "Rejected",
    "SetLimits",
    "assemble_shard",
    "check_doc_ids",
    "corpus_format",
    "fingerprint",
    "group_pieces",
    "pieces_ordered",
    "plan_pieces",
    "queries_format",
    "query_files",
    "read_corpus",
    "read_piece",
    "read_queries",
]
