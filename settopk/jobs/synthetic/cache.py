"""A synthetic corpus on disk: its Parquet files, and a cache keyed by the spec."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from settopk.kernels.sets import SetBatch

from .generate import generate_docs, generate_queries
from .spec import GENERATOR_VERSION, SyntheticSpec, length_histogram

__all__ = ["cache_name", "ensure_synthetic", "query_ids", "write_parquet"]

# Rows parquet files are written in per batch (and per row group).
_WRITE_BATCH_ROWS = 1 << 18  # also the Parquet row group: readers decode row groups in parallel


_TOKEN_ARROW_TYPES = {"uint16": "uint16", "int64": "int64", "string": "string"}


def _token_values(ids: np.ndarray, token_type: str, token_offset: int):
    """The tokens as written: the ids, or each id plus ``token_offset`` as int64 or as its decimal text."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if token_type == "uint16":
        return pa.array(ids)
    shifted = pa.array(ids.astype(np.int64) + np.int64(token_offset))
    return shifted if token_type == "int64" else pc.cast(shifted, pa.string())


def _list_array(batch: SetBatch, lo: int, hi: int, token_type: str = "uint16", token_offset: int = 0):
    import pyarrow as pa

    start, stop = batch.offsets[lo], batch.offsets[hi]
    # Rebased per batch so int32 list offsets suffice whatever the corpus size.
    offsets = (batch.offsets[lo : hi + 1] - start).astype(np.int32)
    values = _token_values(batch.tokens[start:stop], token_type, token_offset)
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=pa.list_(values.type))


def _write_sets(batch: SetBatch, path: Path, id_name: str, make_ids: Callable[[int, int], object], id_type,
                token_type: str = "uint16", token_offset: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    value_type = pa.string() if token_type == "string" else getattr(pa, _TOKEN_ARROW_TYPES[token_type])()
    schema = pa.schema([(id_name, id_type), ("tokens", pa.list_(value_type))])
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            for lo in range(0, max(batch.n_sets, 1), _WRITE_BATCH_ROWS):
                hi = min(lo + _WRITE_BATCH_ROWS, batch.n_sets)
                table = pa.Table.from_arrays([make_ids(lo, hi), _list_array(batch, lo, hi, token_type, token_offset)], schema=schema)
                writer.write_table(table, row_group_size=_WRITE_BATCH_ROWS)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def query_ids(lo: int, hi: int, n_total: int) -> list[str]:
    """Query ids ``q000000``-style for rows ``lo..hi-1``, zero-padded to fit ``n_total``."""
    width = max(6, len(str(max(n_total - 1, 0))))
    return [f"q{i:0{width}d}" for i in range(lo, hi)]


def write_parquet(docs: SetBatch, queries: SetBatch, out_dir, spec: SyntheticSpec | None = None) -> tuple[Path, Path]:
    """Write ``docs.parquet`` and ``queries.parquet`` into ``out_dir``, each atomically.

    Parameters
    ----------
    docs : SetBatch
        Shape (n_docs, <= max_len); doc ``i`` gets ``doc_id`` ``i``.
    queries : SetBatch
        Shape (n_queries, <= max_len); query ``i`` gets ``query_id`` ``f"q{i:06d}"``
        (wider when ``n_queries > 10**6``).
    out_dir : str or os.PathLike
        Created if missing.
    spec : SyntheticSpec, optional
        Its ``token_type`` and ``token_offset`` say how tokens are stored (default: the
        ids as ``uint16``).

    Returns
    -------
    (pathlib.Path, pathlib.Path)
        The docs file (``doc_id`` int64, ``tokens`` list<uint16>, or list<int64> or
        list<string> as ``spec.token_type`` says) and the queries file (``query_id``
        string, ``tokens`` of the same type). Each is written under
        a temporary name in ``out_dir`` and then renamed, so a reader never sees a
        partial file.

    Raises
    ------
    OSError
        If ``out_dir`` cannot be created or written.
    """
    import pyarrow as pa

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    docs_path, queries_path = out / "docs.parquet", out / "queries.parquet"
    tokens = (spec.token_type, spec.token_offset) if spec is not None else ("uint16", 0)
    _write_sets(docs, docs_path, "doc_id", lambda lo, hi: pa.array(np.arange(lo, hi, dtype=np.int64)), pa.int64(), *tokens)
    nq = queries.n_sets
    _write_sets(queries, queries_path, "query_id", lambda lo, hi: pa.array(query_ids(lo, hi, nq), pa.string()), pa.string(), *tokens)
    return docs_path, queries_path


_KEYLESS_DEFAULTS = {"token_type": "uint16", "token_offset": 0, "length_law": "sti2", "duplicate_fraction": 0.0,
                     "duplicate_zipf_s": 1.0}


def cache_name(spec: SyntheticSpec) -> str:
    """Directory name of a spec's corpus in a cache: a hash of the spec, the
    generator version and the length histogram."""
    fields = dataclasses.asdict(spec)
    for name, default in _KEYLESS_DEFAULTS.items():  # fields added later: at their default, the name stays the same
        if fields[name] == default:
            del fields[name]
    key = {
        "generator_version": GENERATOR_VERSION,
        "spec": fields,
        "histogram_sha256": hashlib.sha256(length_histogram().tobytes()).hexdigest(),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return f"synthetic-v{GENERATOR_VERSION}-{spec.n_docs}d-{spec.n_queries}q-{digest}"


def _complete(path: Path) -> bool:
    return (path / "docs.parquet").is_file() and (path / "queries.parquet").is_file()


def ensure_synthetic(spec: SyntheticSpec, cache_dir, *, workers: int | None = None) -> tuple[Path, Path]:
    """The spec's corpus in ``cache_dir``, generated only if it is not there yet.

    The corpus lives in ``cache_dir / cache_name(spec)`` (``docs.parquet``,
    ``queries.parquet``, ``spec.json``). It is generated into a temporary directory
    next to it and renamed into place, so the directory is complete whenever it
    exists; when two processes race, the first rename wins and the other keeps
    the winner's files (they are identical).

    Parameters
    ----------
    spec : SyntheticSpec
    cache_dir : str or os.PathLike
        Created if missing.
    workers : int, optional
        Threads for generation; the output does not depend on it.

    Returns
    -------
    (pathlib.Path, pathlib.Path)
        Paths of ``docs.parquet`` and ``queries.parquet``.

    Raises
    ------
    OSError
        If the cache directory cannot be created or written.
    """
    cache = Path(cache_dir).expanduser()
    target = cache / cache_name(spec)
    if not _complete(target):
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=cache))
        try:
            docs = generate_docs(spec, workers=workers)
            queries = generate_queries(spec, docs, workers=workers)
            write_parquet(docs, queries, tmp, spec)
            del docs, queries
            meta = {"generator_version": GENERATOR_VERSION, "spec": dataclasses.asdict(spec)}
            (tmp / "spec.json").write_text(json.dumps(meta, indent=2) + "\n")
            _publish(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target / "docs.parquet", target / "queries.parquet"


def _publish(tmp: Path, target: Path) -> None:
    try:
        os.rename(tmp, target)
        return
    except OSError:
        if _complete(target):
            return  # another process finished first: keep its (identical) corpus
    # A target without both files was damaged by hand: move it aside, then publish.
    trash = target.with_name(f".{target.name}.stale-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.rename(target, trash)
    except FileNotFoundError:
        pass
    try:
        os.rename(tmp, target)
    except OSError:
        if not _complete(target):
            raise
    shutil.rmtree(trash, ignore_errors=True)
