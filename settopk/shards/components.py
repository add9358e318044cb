"""Near-duplicate groups: the connected components of a threshold self-join's pairs, streamed.

Shared by the job's ``--dedup`` (:mod:`settopk.jobs.dedup`, which reads its pairs part by part)
and the in-process :func:`settopk.dedup`; both group identical sets first (:func:`group_components`:
the components of the groups of identical sets and the verified pairs between groups). The graph has the docs as nodes and
the pairs as edges; a group is a component, transitive (``a ~ b`` and ``b ~ c`` put ``a`` and
``c`` in one group even when their own score is below ``T``), labelled by its least doc id, so the
labels depend on the pairs alone, never on their order or on how they were cut into chunks.

**Streaming.** :class:`Components` never holds more than one chunk of edges: it keeps each node
seen (its doc id, sorted) with its component's label (the position of its least id), and contracts a chunk by
:func:`scipy.sparse.csgraph.connected_components` (breadth-first search over a CSR matrix,
``directed=False``) on the chunk's edges between current labels, then relabels the nodes whose
label merged. Memory: 16 bytes per node (the docs in pairs, at most the corpus) plus about 40
bytes per edge of one chunk (:data:`CHUNK_EDGES` at most); time ``O(n_nodes)`` per chunk beside
the search, so chunks are large. The same contraction underlies the streaming union-finds of
graph-stream algorithms (the semi-streaming model: Feigenbaum, Kannan, McGregor, Suri, Zhang,
"On graph problems in a semi-streaming model", ICALP 2004).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["CHUNK_EDGES", "DUPLICATES_SCHEMA", "GROUPS_SCHEMA", "Components", "components", "group_components",
           "group_tables"]

CHUNK_EDGES = 1 << 24
"""Edges contracted by one ``connected_components`` call (its CSR is indexed by int32 and takes
about 40 bytes an edge, so 16 M edges hold about 0.7 GB at once)."""

GROUPS_SCHEMA = pa.schema([
    pa.field("doc_id", pa.int64(), nullable=False),
    pa.field("group_id", pa.int64(), nullable=False),  # the least doc id of the group
    pa.field("group_size", pa.int64(), nullable=False),
])
DUPLICATES_SCHEMA = pa.schema([
    pa.field("doc_id", pa.int64(), nullable=False),  # dropped
    pa.field("kept_doc_id", pa.int64(), nullable=False),  # the group's least id, kept in its place
])


class Components:
    """Connected components of an undirected graph whose edges arrive in chunks (host memory).

    Parameters
    ----------
    chunk_edges : int, default :data:`CHUNK_EDGES`
        Most edges one contraction takes; :meth:`add_edges` cuts longer inputs. Results do not
        depend on it.

    Attributes
    ----------
    largest_chunk : int
        The most edges one contraction held so far (what the streaming bound is checked by).

    Raises
    ------
    ValueError
        If ``chunk_edges < 1``.
    """

    def __init__(self, chunk_edges: int = CHUNK_EDGES):
        if chunk_edges < 1:
            raise ValueError(f"chunk_edges must be >= 1, found {chunk_edges}")
        self.chunk_edges = int(chunk_edges)
        self.largest_chunk = 0
        self._nodes = np.zeros(0, np.int64)  # ascending doc ids
        self._label = np.zeros(0, np.int64)  # each node's component: the position of its least id (a root's own)

    @property
    def n_nodes(self) -> int:
        """Nodes seen so far (endpoints of some edge)."""
        return len(self._nodes)

    def add_edges(self, left, right) -> None:
        """Add the edges ``(left[i], right[i])`` (doc ids; an edge may repeat, a self-edge adds its node).

        Parameters
        ----------
        left, right : array_like of int64, shape (n_edges,)

        Raises
        ------
        ValueError
            If ``left`` and ``right`` are not 1-D of one shape.
        """
        left = np.asarray(left, dtype=np.int64)
        right = np.asarray(right, dtype=np.int64)
        if left.shape != right.shape or left.ndim != 1:
            raise ValueError(f"left and right must be 1-D of one shape, found {left.shape} and {right.shape}")
        for lo in range(0, len(left), self.chunk_edges):
            self._contract(left[lo : lo + self.chunk_edges], right[lo : lo + self.chunk_edges])

    def _contract(self, left: np.ndarray, right: np.ndarray) -> None:
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components

        m = len(left)
        self.largest_chunk = max(self.largest_chunk, m)
        ends, end_of = _unique_inverse(np.concatenate([left, right]))
        n_old = len(self._nodes)
        at = np.searchsorted(self._nodes, ends)
        known = at < n_old
        known[known] = self._nodes[at[known]] == ends[known]
        if not known.all():  # new nodes, each its own component; the old ones move up past them
            new, where = ends[~known], at[~known]
            moved = np.arange(n_old) + np.cumsum(np.bincount(where, minlength=n_old + 1))[:n_old]
            self._label = np.insert(moved[self._label], where, where + np.arange(len(new)))
            self._nodes = np.insert(self._nodes, where, new)
            at = np.searchsorted(self._nodes, ends)
        a = self._label[at[end_of[:m]]]
        b = self._label[at[end_of[m:]]]
        cross = a != b
        if not cross.any():
            return
        roots, compact = _unique_inverse(np.concatenate([a[cross], b[cross]]))
        k, n = int(cross.sum()), len(roots)
        graph = csr_matrix((np.ones(k, np.int8), (compact[:k].astype(np.int32), compact[k:].astype(np.int32))),
                           shape=(n, n))
        _, merged = connected_components(graph, directed=False)
        first = np.full(merged.max() + 1, n, dtype=np.int64)
        np.minimum.at(first, merged, np.arange(n))  # roots ascend: a component's first root is its least id
        relabel = np.arange(len(self._nodes))
        relabel[roots] = roots[first[merged]]
        self._label = relabel[self._label]  # every label is a root: one gather relabels the merged ones

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """``(nodes, group)``: the doc ids seen, ascending, and each one's group id (the least doc
        id of its component); int64 arrays of shape (n_nodes,), copies."""
        return self._nodes.copy(), self._nodes[self._label]


def _unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``numpy.unique(x, return_inverse=True)`` by one sort (NumPy's hash-based unique is slower here)."""
    order = np.argsort(x, kind="stable")
    s = x[order]
    step = np.empty(len(s), bool)
    step[:1] = True
    np.not_equal(s[1:], s[:-1], out=step[1:])
    inverse = np.empty(len(x), np.int64)
    inverse[order] = np.cumsum(step) - 1
    return s[step], inverse


def components(left, right, chunk_edges: int = CHUNK_EDGES) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the undirected graph whose edges are the pairs ``(left[i], right[i])``.

    Parameters
    ----------
    left, right : array_like of int64, shape (n_pairs,)
        Doc ids of each pair (an unordered pair may appear once or twice; self-pairs are allowed).
    chunk_edges : int, default :data:`CHUNK_EDGES`
        Edges contracted at a time (:class:`Components`); results do not depend on it.

    Returns
    -------
    (numpy.ndarray of int64, numpy.ndarray of int64), each of shape (n_nodes,)
        The doc ids in pairs, ascending, and each one's group id: the least doc id of its component.

    Raises
    ------
    ValueError
        If ``left`` and ``right`` are not 1-D of one shape.
    """
    found = Components(chunk_edges)
    found.add_edges(left, right)
    return found.result()


def group_components(groups, doc_ids, self_pass, group_a, group_b) -> tuple[np.ndarray, np.ndarray]:
    """The components of every passing pair of a corpus, from its groups of identical sets and the
    passing pairs of distinct groups, without a pair of members (GroupJoin: Bouros, Ge, Mamoulis,
    "Spatio-textual similarity joins", PVLDB 2012).

    The graph's nodes are the groups, its edges the pairs of groups
    (:func:`scipy.sparse.csgraph.connected_components`). A doc is grouped where its group's
    component holds another group, or its group holds another doc and its set passes with itself.
    A group that fails with itself (an empty set, an overlap below ``T``) has no passing pair with
    another group either (no set scores higher with another than with itself); were one given, its
    members would be grouped through it, so that the rule above is all there is.

    Parameters
    ----------
    groups : settopk.kernels.join.prepare.JoinSets
        The corpus prepared (``settopk.kernels.join.prepare_corpus``; host memory).
    doc_ids : numpy.ndarray of int64, shape (n_docs,)
        Strictly increasing: each group's first member holds its least id.
    self_pass : numpy.ndarray of bool, shape (n_groups,)
        Whether each group's sets pass with each other (``settopk.kernels.join.self_passing``).
    group_a, group_b : numpy.ndarray of int, shape (n_group_pairs,)
        The passing pairs of distinct groups (``settopk.kernels.join.group_pairs``, or a
        ``SelfJoin``'s ``group_pairs``): indexes into ``groups``, either direction.

    Returns
    -------
    (numpy.ndarray of int64, numpy.ndarray of int64), each of shape (n_grouped,)
        As :meth:`Components.result`: the grouped doc ids, ascending, and each one's group (the
        least doc id of its component).
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    ids = np.asarray(doc_ids, dtype=np.int64)
    n = groups.n_groups
    size = groups.group_size
    graph = csr_matrix((np.ones(len(group_a), np.int8), (np.asarray(group_a, np.int32), np.asarray(group_b, np.int32))),
                       shape=(n, n))
    n_comp, comp = connected_components(graph, directed=False)
    rep_id = ids[groups.group_rep]
    least = np.full(n_comp, np.iinfo(np.int64).max)
    np.minimum.at(least, comp, rep_id)
    grouped = (np.bincount(comp, minlength=n_comp)[comp] > 1) | (np.asarray(self_pass, bool) & (size > 1))
    member = np.repeat(grouped, size)
    nodes = ids[groups.group_members[member]]
    label = np.repeat(least[comp], size)[member]
    order = np.argsort(nodes, kind="stable")
    return nodes[order], label[order]


def group_tables(nodes: np.ndarray, group: np.ndarray) -> tuple[pa.Table, pa.Table]:
    """The ``groups`` and ``duplicates`` tables from :func:`components`' ``(nodes, group)``.

    Returns
    -------
    (pyarrow.Table, pyarrow.Table)
        :data:`GROUPS_SCHEMA` rows (every node, its group id and the group's size) and
        :data:`DUPLICATES_SCHEMA` rows (every node but its group's least id, with that id), both
        ordered by ``doc_id``.
    """
    nodes, group = np.asarray(nodes, np.int64), np.asarray(group, np.int64)
    _, inverse, sizes = np.unique(group, return_inverse=True, return_counts=True)
    groups = pa.Table.from_arrays([pa.array(nodes), pa.array(group), pa.array(sizes[inverse].astype(np.int64))],
                                  schema=GROUPS_SCHEMA)
    dropped = nodes != group
    duplicates = pa.Table.from_arrays([pa.array(nodes[dropped]), pa.array(group[dropped])], schema=DUPLICATES_SCHEMA)
    return groups, duplicates
