"""Near-duplicate groups from a threshold self-join (``--dedup``, issue 32): connected components.

A threshold self-join gives the pairs of docs whose score reaches ``T``; ``--dedup`` turns them
into groups, the connected components of the graph with the docs as nodes and the pairs as
edges (:mod:`settopk.shards.components`, shared with the in-process :func:`settopk.dedup`).

Three datasets, which the job commits together (one manifest, written last):

``pairs/``
    The self-join's rows (:data:`settopk.jobs.output.RESULT_SCHEMA`).
``groups/``
    :data:`GROUPS_SCHEMA`: every doc that has at least one pair, its group (the least doc id of
    the group, so the labels do not depend on the order of the pairs) and the group's size.
``duplicates/``
    :data:`DUPLICATES_SCHEMA`: every doc to drop, and the doc kept in its place (its group's
    least id). Docs in no pair are in neither table: they are unique.

**Memory.** The pairs are never all in one process: :func:`stage_dedup` reads the parts' ``query_id``
and ``doc_id`` columns a record batch at a time and contracts them into a streaming
:class:`settopk.shards.components.Components` every ``chunk_edges`` pairs, so the driver holds
16 bytes per grouped doc plus one chunk of pairs (the manifest's ``dedup.largest_chunk``), however
many pairs the run wrote.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from settopk.shards.components import CHUNK_EDGES, DUPLICATES_SCHEMA, GROUPS_SCHEMA, Components, components, group_tables

from .output import DATASETS, SUCCESS

__all__ = ["GROUPS_SCHEMA", "DUPLICATES_SCHEMA", "DATASETS", "components", "dedup_tables", "group_tables",
           "stage_dedup"]

_READ_ROWS = 1 << 20  # pairs read from a part at a time: two int64 columns, 16 MiB


def dedup_tables(pairs: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The ``groups/`` and ``duplicates/`` tables of a threshold self-join's rows.

    Parameters
    ----------
    pairs : pyarrow.Table
        Result rows with ``query_id`` (a doc id, as text) and ``doc_id`` columns.

    Returns
    -------
    (pyarrow.Table, pyarrow.Table)
        :data:`GROUPS_SCHEMA` rows ordered by ``doc_id``, and :data:`DUPLICATES_SCHEMA` rows ordered by
        ``doc_id`` (every grouped doc but its group's least id).

    Raises
    ------
    ValueError
        If a ``query_id`` is not an integer doc id (not a self-join's rows), or as :func:`components`.
    """
    query_ids = pairs["query_id"].to_pylist()
    try:
        left = np.array([int(q) for q in query_ids], dtype=np.int64)
    except ValueError:
        raise ValueError("dedup needs a self-join's rows: every query_id a doc id; found a query_id that is not "
                         "an integer; run with --self-join") from None
    keep = left != pairs["doc_id"].to_numpy()  # a doc's pair with itself (--include-self) groups nothing
    return group_tables(*components(left[keep], pairs["doc_id"].to_numpy()[keep]))


def stage_dedup(work, part_names: list[str], out, chunk_edges: int = CHUNK_EDGES) -> tuple[object, dict]:
    """Build a ``--dedup`` run's three datasets in a staging directory beside ``out``, ready for
    :func:`settopk.jobs.output.commit_results` to rename into place in one step.

    The groups are computed first, from the checked parts' ``query_id`` and ``doc_id`` columns,
    read a record batch at a time and contracted every ``chunk_edges`` pairs (module docstring:
    the pairs are never all in memory); only then is the work directory moved, so a failure
    here leaves the parts for a rerun to resume from. Each dataset gets its ``_SUCCESS`` inside
    the staging directory: they appear with it, all at once.

    Parameters
    ----------
    work : Location
        The run's work directory (its parts, resume key already dropped); becomes ``pairs/``.
    part_names : list of str
        Its part files, in query order.
    out : Location
        The result directory ``DIR`` (local: the commit renames).
    chunk_edges : int, default :data:`settopk.shards.components.CHUNK_EDGES`
        Most pairs held at once; results do not depend on it.

    Returns
    -------
    (Location, dict)
        The staging directory (``pairs/``, ``groups/``, ``duplicates/``), and the manifest's
        ``dedup`` section: counts, the most pairs held at once, and the time.
    """
    import time
    import uuid

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    start = time.perf_counter()
    found = Components(chunk_edges)
    edges = 0
    held: list[tuple[np.ndarray, np.ndarray]] = []
    held_rows = 0
    for name in part_names:
        part = work / name
        with part.fs.open_input_file(part.path) as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=min(_READ_ROWS, chunk_edges),
                                                        columns=["query_id", "doc_id"]):
                q = pc.cast(batch.column(0), pa.int64()).to_numpy()
                d = batch.column(1).to_numpy()
                keep = q != d  # a doc's pair with itself (--include-self) groups nothing
                held.append((q[keep], d[keep]))
                held_rows += int(keep.sum())
                edges += int(keep.sum())
                if held_rows >= chunk_edges:
                    _contract(found, held)
                    held, held_rows = [], 0
    _contract(found, held)
    nodes, group = found.result()
    groups, duplicates = group_tables(nodes, group)
    components_s = time.perf_counter() - start
    stage = out.sibling(f".{out.name}.dedup-{uuid.uuid4().hex}")
    for name, table in (("groups", groups), ("duplicates", duplicates)):
        (stage / name).make_dirs()
        file = stage / name / "part-00000.parquet"
        pq.write_table(table, file.path, filesystem=file.fs, compression="zstd")
    work.move_to(stage / "pairs")
    for name in DATASETS:
        (stage / name / SUCCESS).write_bytes(b"")
    section = {
        "edges": edges,
        "groups": int(len(np.unique(group))),
        "grouped_docs": groups.num_rows,
        "duplicates": duplicates.num_rows,
        "largest_chunk": found.largest_chunk,
        "components_s": round(components_s, 3),
        "library": "scipy.sparse.csgraph.connected_components, streamed: one chunk of pairs contracted at a time",
        "datasets": list(DATASETS),
    }
    return stage, section


def _contract(found: Components, held: list) -> None:
    """Add the pairs read since the last contraction (at most ``chunk_edges`` plus one batch)."""
    if held:
        found.add_edges(np.concatenate([q for q, _ in held]), np.concatenate([d for _, d in held]))
