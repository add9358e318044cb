"""Near-duplicate groups from a threshold self-join (``--dedup``, issue 32): connected components.

A threshold self-join gives the pairs of docs whose score reaches ``T``; ``--dedup`` turns them
into groups, the connected components of the graph with the docs as nodes and the pairs as
edges (transitive: ``a ~ b`` and ``b ~ c`` put ``a`` and ``c`` in one group even when their own
score is below ``T``). Components come from :func:`scipy.sparse.csgraph.connected_components`
(breadth-first search over a CSR matrix, ``directed=False``), on one node.

Three datasets, which the job commits together (one manifest, written last):

``pairs/``
    The self-join's rows (:data:`settopk.jobs.output.RESULT_SCHEMA`).
``groups/``
    :data:`GROUPS_SCHEMA`: every doc that has at least one pair, its group (the least doc id of
    the group, so the labels do not depend on the order of the pairs) and the group's size.
``duplicates/``
    :data:`DUPLICATES_SCHEMA`: every doc to drop, and the doc kept in its place (its group's
    least id). Docs in no pair are in neither table: they are unique.

**Capacity of one node.** ``connected_components`` takes int32 CSR indices, so one call holds at
most ``2**31 - 1`` edges (about 2.1 billion pairs). Measured with SciPy 1.17 (tracemalloc, 20 M
random edges over 5 M nodes, 2-core VM): a peak of about 33 bytes per edge beyond the two int32
endpoint arrays (8 bytes per edge): the CSR (int32 indices, int8 data), its transpose, the
conversion's temporaries; about 41 bytes per edge in all, so 2.1 billion edges need about 88 GB,
within a 128 GiB node; 30 s per 20 M edges there. Ids are compacted to ``0 .. n_nodes - 1``
first (:func:`numpy.unique`), so the nodes are the docs in pairs, not the corpus.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .output import DATASETS, SUCCESS

__all__ = ["GROUPS_SCHEMA", "DUPLICATES_SCHEMA", "DATASETS", "MAX_EDGES", "components", "dedup_tables", "group_tables",
           "stage_dedup"]

MAX_EDGES = 2**31 - 1
"""Most pairs one call takes: ``connected_components`` indexes the CSR with int32."""

GROUPS_SCHEMA = pa.schema([
    pa.field("doc_id", pa.int64(), nullable=False),
    pa.field("group_id", pa.int64(), nullable=False),  # the least doc id of the group
    pa.field("group_size", pa.int64(), nullable=False),
])
DUPLICATES_SCHEMA = pa.schema([
    pa.field("doc_id", pa.int64(), nullable=False),  # dropped
    pa.field("kept_doc_id", pa.int64(), nullable=False),  # the group's least id, kept in its place
])


def components(left, right) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the undirected graph whose edges are the pairs ``(left[i], right[i])``.

    Parameters
    ----------
    left, right : array_like of int64, shape (n_pairs,)
        Doc ids of each pair (an unordered pair may appear once or twice; self-pairs are allowed).

    Returns
    -------
    (numpy.ndarray of int64, numpy.ndarray of int64), each of shape (n_nodes,)
        The doc ids in pairs, ascending, and each one's group id: the least doc id of its component.

    Raises
    ------
    ValueError
        If ``left`` and ``right`` differ in shape, or hold more than :data:`MAX_EDGES` pairs
        (split the graph, or run a distributed union-find).
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    left = np.asarray(left, dtype=np.int64)
    right = np.asarray(right, dtype=np.int64)
    if left.shape != right.shape or left.ndim != 1:
        raise ValueError(f"left and right must be 1-D of one shape, found {left.shape} and {right.shape}")
    if len(left) > MAX_EDGES:
        raise ValueError(f"{len(left)} pairs, more than the {MAX_EDGES} one connected_components call indexes "
                         "(int32); raise the threshold, or split the pairs into independent parts")
    nodes, compact = np.unique(np.concatenate([left, right]), return_inverse=True)
    n = len(nodes)
    if n == 0:
        return nodes, nodes.copy()
    compact = compact.astype(np.int32)
    graph = csr_matrix((np.ones(len(left), np.int8), (compact[: len(left)], compact[len(left):])), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    # Label by the least id: nodes ascend, so each label's first node is its least id.
    first = np.full(labels.max() + 1, n, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(n))
    return nodes, nodes[first[labels]]


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


def group_tables(nodes: np.ndarray, group: np.ndarray) -> tuple[pa.Table, pa.Table]:
    """The ``groups/`` and ``duplicates/`` tables from :func:`components`' ``(nodes, group)``."""
    _, inverse, sizes = np.unique(group, return_inverse=True, return_counts=True)
    groups = pa.Table.from_arrays([pa.array(nodes), pa.array(group), pa.array(sizes[inverse].astype(np.int64))],
                                  schema=GROUPS_SCHEMA)
    dropped = nodes != group
    duplicates = pa.Table.from_arrays([pa.array(nodes[dropped]), pa.array(group[dropped])], schema=DUPLICATES_SCHEMA)
    return groups, duplicates


def stage_dedup(work, part_names: list[str], out) -> tuple[object, dict]:
    """Build a ``--dedup`` run's three datasets in a staging directory beside ``out``, ready for
    :func:`settopk.jobs.output.commit_results` to rename into place in one step.

    The groups are computed first, from the checked parts' ``query_id`` and ``doc_id`` columns
    (16 bytes a pair in memory, plus :func:`components`' own); only then is the work directory
    moved, so a failure here leaves the parts for a rerun to resume from. Each dataset gets its
    ``_SUCCESS`` inside the staging directory: they appear with it, all at once.

    Parameters
    ----------
    work : Location
        The run's work directory (its parts, resume key already dropped); becomes ``pairs/``.
    part_names : list of str
        Its part files, in query order.
    out : Location
        The result directory ``DIR`` (local: the commit renames).

    Returns
    -------
    (Location, dict)
        The staging directory (``pairs/``, ``groups/``, ``duplicates/``), and the manifest's
        ``dedup`` section: counts and the components' time.
    """
    import time
    import uuid

    import pyarrow.compute as pc
    import pyarrow.parquet as pq


    start = time.perf_counter()
    left, right = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for name in part_names:
        part = work / name
        table = pq.read_table(part.path, filesystem=part.fs, columns=["query_id", "doc_id"])
        q, d = pc.cast(table["query_id"], pa.int64()).to_numpy(), table["doc_id"].to_numpy()
        keep = q != d  # a doc's pair with itself (--include-self) groups nothing
        left.append(q[keep])
        right.append(d[keep])
    read_s = time.perf_counter() - start
    left, right = np.concatenate(left), np.concatenate(right)
    nodes, group = components(left, right)
    groups, duplicates = group_tables(nodes, group)
    components_s = time.perf_counter() - start - read_s
    stage = out.sibling(f".{out.name}.dedup-{uuid.uuid4().hex}")
    for name, table in (("groups", groups), ("duplicates", duplicates)):
        (stage / name).make_dirs()
        file = stage / name / "part-00000.parquet"
        pq.write_table(table, file.path, filesystem=file.fs, compression="zstd")
    work.move_to(stage / "pairs")
    for name in DATASETS:
        (stage / name / SUCCESS).write_bytes(b"")
    section = {
        "edges": int(len(left)),
        "groups": int(len(np.unique(group))),
        "grouped_docs": groups.num_rows,
        "duplicates": duplicates.num_rows,
        "read_pairs_s": round(read_s, 3),
        "components_s": round(components_s, 3),
        "library": "scipy.sparse.csgraph.connected_components (one node, at most 2**31 - 1 edges)",
        "datasets": list(DATASETS),
    }
    return stage, section
