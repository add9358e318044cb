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

**Groups, then pairs.** Identical docs have one length, so they lie in one shard. For a
symmetric score at ``T > 0``, a shard groups its own docs from its groups of identical docs and
the passing pairs of distinct groups, each verified once (those of the self-join the shard keeps;
on ``numpy`` and ``cupy``, past that budget, verified by its index for the call), with GroupJoin's
rule and no pair of members listed (:meth:`settopk.shards.ShardSearcher.dedup_components`), and sends the
driver at most one row per doc (:func:`shard_groups`). The driver then reads from the parts only
the pairs it does not have that way: those across two shards, and those of a shard past its
budget (4 x ``output.pairs_per_piece`` entries). A run capped by ``--k`` groups the pairs it
wrote, all read.

**Memory.** The pairs are never all in one process: :func:`stage_dedup` reads the parts' ``query_id``
and ``doc_id`` columns a record batch at a time and contracts them into a streaming
:class:`settopk.shards.components.Components` every ``chunk_edges`` pairs, so the driver holds
16 bytes per grouped doc plus one chunk of pairs (the manifest's ``dedup.largest_chunk``), however
many pairs the run wrote.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from settopk.shards.components import CHUNK_EDGES, DUPLICATES_SCHEMA, GROUPS_SCHEMA, Components, components, group_tables
from settopk.shards.results import query_id_values

from .output import DATASETS, SUCCESS

__all__ = ["GROUPS_SCHEMA", "DUPLICATES_SCHEMA", "DATASETS", "ShardGroups", "components", "dedup_tables", "group_tables",
           "shard_groups", "stage_dedup"]

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


@dataclass(frozen=True)
class ShardGroups:
    """The shards' own groups (:meth:`settopk.shards.ShardSearcher.dedup_components`) for :func:`stage_dedup`.

    Attributes
    ----------
    groups : list of (numpy.ndarray of int64, numpy.ndarray of int64) or None
        Per shard of the plan: its grouped doc ids and their group (least doc id), or None for a
        shard without groups of its own (its pairs are read from the parts).
    shard_of_length : numpy.ndarray of int64, shape (max_len + 1,)
        The shard of each doc length (-1: none); a pair lies in one shard when both lengths map to it.
    seconds : float
        The driver's wait for them.
    """

    groups: list
    shard_of_length: np.ndarray
    seconds: float = 0.0

    @property
    def covered(self) -> list[int]:
        """The shards whose own pairs come from their groups."""
        return [s for s, g in enumerate(self.groups) if g is not None]


def shard_groups(actors, infos: list[dict], plan: list, cfg, cap: int | None) -> ShardGroups | None:
    """Ask one replica of each shard for its own groups (:meth:`settopk.shards.ShardSearcher.dedup_components`,
    with the arguments of the shards' kept self-join); None where a ``--k`` caps the run (its
    groups are those of the pairs it wrote) or no shard has groups of its own.

    Parameters
    ----------
    actors, infos : list
        The shard actors, ``replicas`` per shard of ``plan`` (the first ``len(plan)``: one of each).
    plan : list of ShardSpec
    cfg : settopk.configs.JobConfig
    cap : int or None
        The run's ``--k``.
    """
    from .dispatch import gather
    from .threshold_job import self_join_entries, shard_cap

    if cap is not None:
        return None
    start = time.perf_counter()
    n = len(plan)
    groups = gather(actors[:n], infos[:n], lambda a: a.dedup_components.remote(
        cfg.threshold, cfg.include_self, shard_cap(cap), self_join_entries(cfg.output.pairs_per_piece)),
        "the shards' own dedup groups", cfg.faults.search_timeout_s, 1, 0.0)
    if all(g is None for g in groups):
        return None
    shard_of_length = np.full(cfg.max_len + 1, -1, np.int64)
    for s, spec in enumerate(plan):
        shard_of_length[spec.min_len : spec.max_len + 1] = s
    return ShardGroups(groups, shard_of_length, time.perf_counter() - start)


def stage_dedup(work, part_names: list[str], out, chunk_edges: int = CHUNK_EDGES,
                from_shards: ShardGroups | None = None) -> tuple[object, dict]:
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
    from_shards : ShardGroups, optional
        The shards' own groups (:func:`shard_groups`): the pairs inside a shard they cover are
        not read. None: every pair is read.

    Returns
    -------
    (Location, dict)
        The staging directory (``pairs/``, ``groups/``, ``duplicates/``), and the manifest's
        ``dedup`` section: counts, the most pairs held at once, and the time.
    """
    import uuid

    import pyarrow.parquet as pq

    start = time.perf_counter()
    found = Components(chunk_edges)
    covered = np.zeros(0, bool)
    if from_shards is not None:
        for g in from_shards.groups:
            if g is not None:
                found.add_edges(*g)  # each doc to its group's least id: the shard's components
        covered = np.array([g is not None for g in from_shards.groups] + [False])  # index -1: no shard
    columns = ["query_id", "doc_id"] + (["query_len", "doc_len"] if from_shards is not None else [])
    edges = 0
    held: list[tuple[np.ndarray, np.ndarray]] = []
    held_rows = 0
    # One shard, grouped: every pair lies inside it, none is read.
    unread = from_shards is not None and covered[:-1].all() and len(from_shards.groups) == 1
    for name in [] if unread else part_names:
        part = work / name
        with part.fs.open_input_file(part.path) as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=min(_READ_ROWS, chunk_edges), columns=columns):
                if from_shards is not None:  # a pair inside a covered shard is in its groups already
                    home = from_shards.shard_of_length[batch.column(2).to_numpy()]
                    away = ~(covered[home] & (home == from_shards.shard_of_length[batch.column(3).to_numpy()]))
                    batch = batch.filter(pa.array(away))  # before the ids' text is parsed
                q = query_id_values(batch.column(0))
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
        "shards_from_groups": [] if from_shards is None else from_shards.covered,
        "shard_groups_s": 0.0 if from_shards is None else round(from_shards.seconds, 3),
        "library": "scipy.sparse.csgraph.connected_components, streamed: one chunk of pairs contracted at a time",
        "datasets": list(DATASETS),
    }
    return stage, section


def _contract(found: Components, held: list) -> None:
    """Add the pairs read since the last contraction (at most ``chunk_edges`` plus one batch)."""
    if held:
        found.add_edges(np.concatenate([q for q, _ in held]), np.concatenate([d for _, d in held]))
