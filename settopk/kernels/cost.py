"""Cost models of the backends, in plain NumPy (no CuPy): what the shard planner balances, and
which path (scan or postings) an index sends a query down.

Two kinds of model live here:

* Per-doc search cost, by doc length (:func:`cupy_search_cost_per_doc`,
  :func:`numpy_search_cost_per_doc`): the work one doc of each length adds to
  every search of its shard. The shard planner balances it across shards
  (``settopk.shards.plan_shards_from_counts(doc_cost=...)``); :func:`settopk.kernels.search_cost_per_doc`
  picks the backend's.
* Routing (:func:`cupy_route_mask`, :func:`numpy_postings_cheaper`): the
  modelled seconds of a query's scan against its ScanCount through the postings
  (:mod:`settopk.kernels.postings`, :mod:`settopk.kernels.cuda.postings`), from the postings
  entries its ids read. Results never depend on the route, only time does.

The constants are fits to measurements (docs/kernels.md, "Cost models", has the
measurements behind them); refit them on hardware whose balance differs.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "DOC_OVERHEAD_SLOTS",
    "WIDE_PASS_S_PER_SLOT",
    "cupy_route_mask",
    "cupy_search_cost_per_doc",
    "numpy_postings_cheaper",
    "numpy_search_cost_per_doc",
]

# ---- per-doc search cost (the planner) ------------------------------------------

_IDS_PER_GROUP = 8  # kIdsPerGroup in settopk/kernels/cuda/bitslice_topk.cu: a doc's ids are read 8 at a time
# Per-doc work of the GPU count kernel beyond its ids (its slot length and position, the threshold compare
# across the counter planes, the emission check), in id slots: a fit to per-shard search times on 4 GPUs.
DOC_OVERHEAD_SLOTS = 16


def cupy_search_cost_per_doc(max_len: int) -> np.ndarray:
    """Count-kernel work of one doc of each length, in id slots: the length rounded up to a multiple
    of 8 (one 16-byte group per 8 ids) plus a per-doc overhead (:data:`DOC_OVERHEAD_SLOTS`).

    With this weighting a shard of many short docs is given fewer ids than one of long docs, as its
    search takes longer per id.

    Parameters
    ----------
    max_len : int
        Longest set, ``>= 0``.

    Returns
    -------
    numpy.ndarray of int64, shape (max_len + 1,)
        Cost of a doc of each length ``0 .. max_len``.
    """
    lengths = np.arange(max_len + 1, dtype=np.int64)
    return -(-lengths // _IDS_PER_GROUP) * _IDS_PER_GROUP + DOC_OVERHEAD_SLOTS


def numpy_search_cost_per_doc(max_len: int) -> np.ndarray:
    """Search work of one doc of each length on the CPU: its ids (the lane-packed scan gathers one
    table word per doc id), the planner's default weighting.

    Parameters
    ----------
    max_len : int
        Longest set, ``>= 0``.

    Returns
    -------
    numpy.ndarray of int64, shape (max_len + 1,)
        ``0 .. max_len``.
    """
    return np.arange(max_len + 1, dtype=np.int64)


# ---- routing: GPU ------------------------------------------------------------------

# Seconds per query, fitted on one GPU of the bench's STI2 configs: the scan, its share of the last level's
# count kernel per id slot of the layout; the postings, per postings entry and per tile (clearing 64 KiB of
# counters, reading the segment bounds). A routed batch runs levels of its own and waits once for the
# bounds, so routing pays only where the modelled saving of the batch exceeds ROUTING_BATCH_S
# (docs/benchmarks.md, "Kernel with postings routing", has the runs).
SCAN_S_PER_SLOT = 1.1e-14
POSTINGS_S_PER_ENTRY = 4.0e-12
POSTINGS_S_PER_TILE = 1.0e-8
ROUTING_BATCH_S = 1.0e-3
# A wide shard builds the postings of the routed queries' ids for each chunk of queries in one or two passes
# over its layout: seconds per id slot and pass, fitted to the sti2-uniform-vocab shapes' builds
# (docs/benchmarks.md, "Wide vocabularies on the GPU").
WIDE_PASS_S_PER_SLOT = 0.75e-11


def cupy_route_mask(routing: str, entries: np.ndarray, n_tiles: int, scan_slots: int,
                    group_size: int = 1, build_s: float = 0.0) -> np.ndarray:
    """Which queries the GPU cost model sends to the postings (host bool array of shape (n_queries,)).

    Parameters
    ----------
    routing : str
        ``"scan"``: none; ``"postings"``: all; ``"auto"``: where the modelled postings time is below
        the scan's, provided the batch's modelled saving exceeds ``ROUTING_BATCH_S`` (else none).
    entries : numpy.ndarray of int64, shape (n_queries,)
        Host array: the postings entries of each query's ids
        (:meth:`settopk.kernels.cuda.postings.GpuPostings.entries`).
    n_tiles : int
        Tiles of the postings.
    scan_slots : int
        Id slots the scan reads per query group (the layout's size).
    group_size : int
        Queries the scan serves together, at the cost of a full group however few they are: in
        ``"auto"``, the queries left over a whole number of groups go to the postings too where their
        postings cost less than one group's scan.
    build_s : float
        Seconds the postings cost once any query of the batch goes to them (a wide shard builds them:
        ``WIDE_PASS_S_PER_SLOT * scan_slots`` per pass); ``"auto"`` routes only where the batch saves more.
    """
    n = len(entries)
    if routing == "scan" or n == 0:
        return np.zeros(n, dtype=bool)
    if routing == "postings":
        return np.ones(n, dtype=bool)
    postings_s = POSTINGS_S_PER_ENTRY * entries + POSTINGS_S_PER_TILE * n_tiles
    scan_s = SCAN_S_PER_SLOT * scan_slots
    saving = scan_s - postings_s
    routed = saving > 0
    if saving[routed].sum() <= ROUTING_BATCH_S + build_s:
        return np.zeros(n, dtype=bool)
    scanned = np.flatnonzero(~routed)
    left = len(scanned) % max(1, group_size)
    if left:
        cheapest = scanned[np.argsort(postings_s[scanned], kind="stable")[:left]]
        if postings_s[cheapest].sum() < group_size * scan_s:
            routed[cheapest] = True
    return routed


# ---- routing: CPU ------------------------------------------------------------------

# Seconds, fitted on 2 CPU cores: the lane-packed scan per doc id per query; ScanCount through the
# postings per postings entry, plus a fixed cost per query (the NumPy calls it makes).
NUMPY_SCAN_S_PER_ID = 0.6e-9
NUMPY_POSTINGS_S_PER_ENTRY = 35e-9
NUMPY_POSTINGS_S_PER_QUERY = 0.35e-3


def numpy_postings_cheaper(entries: np.ndarray, n_doc_ids: int) -> np.ndarray:
    """Which queries the CPU cost model sends to the postings: those whose ScanCount is modelled
    cheaper than a scan of the shard.

    Parameters
    ----------
    entries : numpy.ndarray of int64, shape (n_queries,)
        The postings entries of each query's ids (:func:`settopk.kernels.postings.postings_cost`).
    n_doc_ids : int
        Ids held by the shard's docs (what the scan reads per query).

    Returns
    -------
    numpy.ndarray of bool, shape (n_queries,)
    """
    postings_s = NUMPY_POSTINGS_S_PER_ENTRY * entries + NUMPY_POSTINGS_S_PER_QUERY
    scan_s = NUMPY_SCAN_S_PER_ID * n_doc_ids
    return postings_s < scan_s
