"""The host path's capacity without GPUs: ``settopk.jobs.score`` end to end with stand-in shards.

Run by ``python -m settopk bench --config host-smoke`` (or any config with a ``host`` section).
Each layout of ``host`` (shards x replicas) runs the job as its own process, as the throughput
run does (:func:`settopk.jobs.bench.throughput.run_job`), but its shard actors wrap
:class:`settopk.jobs.bench.standin.StandInSearcher` (``python -m settopk bench.standin_job``): each answers its
batches at ``host.queries_per_s_per_actor`` (one H200's kernel rate by default; a stand-in of one
of ``n`` shards ``n`` times as fast) with result blocks of the real shape. The driver, the
dispatch, the merge and write tasks and the commit are the product's, so the queries per second
measured are what the host path carries when the GPUs keep that pace. Last, the layout with the
most stand-ins runs again without pacing: the host path's ceiling.

Every number is **simulated**: the table says so on every line, the JSON in ``simulated``.

Completeness: every part of every run is read back; it must hold ``rows_per_query = k`` rows per
query, the chunk's query ids in order, ranks 1..k and no padding (a doc id ``>= 0``). The rows are
not the queries' true results (the stand-ins answer each query with the real result of another
query of its length), so the NumPy reference is not compared.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from settopk.jobs.chunks import chunk_stream, plan_chunks
from settopk.jobs.output import part_name
from settopk.shards.inputs import QueryStream, SetLimits

from .layouts import layout_problems
from .standin import PACE_ENV
from .throughput import job_config, run_job

if TYPE_CHECKING:  # annotations only: the config imports every mode
    from .config import BenchConfig

__all__ = ["HostPathConfig", "IncompleteOutputError", "check_complete", "format_host_table", "run_host"]

log = logging.getLogger("settopk.bench")


#: The stand-ins' default pace: one H200's kernel rate at k = 100, so that the host path carries what
#: it carries with GPUs (docs/benchmarks.md, "Host path with stand-in shards", gives the rate).
H200_QUERIES_PER_S = 107_641.0


@dataclass(frozen=True)
class HostPathConfig:
    """A host-path run (:mod:`settopk.jobs.bench.host`): ``settopk.jobs.score`` end to end with stand-in shards
    (:mod:`settopk.jobs.bench.standin`) that answer at a GPU's pace, so that only the host path is measured.

    Attributes
    ----------
    shards : list of int
        Length-bucket shards of each run, in order; the first run is the baseline of the scaling.
    replicas : list of int, optional
        Replicas of every shard in each run, one entry per ``shards`` entry (default 1).
    query_chunk_size : int
        Queries per chunk, one committed part file each.
    queries_per_s_per_actor : float
        The pace of a stand-in holding the whole corpus (queries per second); a stand-in of one
        of ``n`` shards answers ``n`` times as fast (the kernel's time is its docs'). Default:
        one H200's kernel rate at k = 100.
    ceiling : bool
        Also run the layout with the most stand-ins without pacing: the host path's ceiling.
    """

    shards: List[int] = field(default_factory=lambda: [1])
    replicas: Optional[List[int]] = None
    query_chunk_size: int = 100_000
    queries_per_s_per_actor: float = H200_QUERIES_PER_S
    ceiling: bool = True

    @property
    def layouts(self) -> list[tuple[int, int]]:
        """``(n_shards, replicas)`` of each run, in order."""
        return list(zip(self.shards, self.replicas or [1] * len(self.shards)))

    def problems(self, cfg: BenchConfig) -> list[str]:
        """What is wrong with the section, given the whole config ``cfg`` (empty if nothing)."""
        problems = layout_problems("host", self.shards, self.replicas)
        if self.query_chunk_size < 1:
            problems.append(f"host.query_chunk_size must be >= 1, found {self.query_chunk_size}")
        if self.queries_per_s_per_actor <= 0:
            problems.append(f"host.queries_per_s_per_actor must be > 0, found {self.queries_per_s_per_actor}")
        if cfg.query_batch_size < 1:
            problems.append(f"query_batch_size must be >= 1 in a host run, found {cfg.query_batch_size}")
        return problems


class IncompleteOutputError(RuntimeError):
    """A part of a host-path run lacks rows or holds the wrong query ids or ranks."""


def check_complete(out: Path, queries: Path, limits: SetLimits, chunk_size: int, k: int) -> int:
    """Check that every part of a result holds ``k`` rows per query, its chunk's query ids in
    order, ranks ``1..k`` and no padding; returns the rows checked.

    Raises
    ------
    IncompleteOutputError
        At the first part that differs, naming it.
    """
    rows = 0
    ranks = np.arange(1, k + 1, dtype=np.int16)
    stream = QueryStream(str(queries), limits)
    for chunk, ids, _sets in chunk_stream(plan_chunks(stream.n_queries, chunk_size), stream.chunks(chunk_size), chunk_size):
        path = out / part_name(chunk.index)
        if not path.exists():
            raise IncompleteOutputError(f"{path}: missing")
        table = pq.read_table(path, columns=["query_id", "rank", "doc_id"])
        n = len(ids)
        if table.num_rows != n * k:
            raise IncompleteOutputError(f"{path}: {table.num_rows} rows, expected {n} queries x {k}")
        column = table.column("query_id")
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        encoded = column.combine_chunks().dictionary_encode()
        position = {qid: i for i, qid in enumerate(ids)}
        try:
            where = np.array([position[q] for q in encoded.dictionary.to_pylist()], dtype=np.int64)
        except KeyError as exc:
            raise IncompleteOutputError(f"{path}: query id {exc.args[0]!r} is not one of the chunk's") from None
        got = where[encoded.indices.to_numpy()]
        if not np.array_equal(got, np.repeat(np.arange(n), k)):
            raise IncompleteOutputError(f"{path}: the rows' query ids are not the chunk's, {k} each, in order")
        if not np.array_equal(table.column("rank").to_numpy(), np.tile(ranks, n)):
            raise IncompleteOutputError(f"{path}: ranks are not 1..{k} for each query")
        if (table.column("doc_id").to_numpy() < 0).any():
            raise IncompleteOutputError(f"{path}: a row holds no doc")
        rows += table.num_rows
    return rows


def _layouts(cfg: BenchConfig) -> list[tuple[int, int, bool]]:
    """``(n_shards, replicas, paced)`` of each run: the config's layouts, then the ceiling."""
    runs = [(s, r, True) for s, r in cfg.host.layouts]
    if cfg.host.ceiling:
        s, r = max(cfg.host.layouts, key=lambda layout: (layout[0] * layout[1], layout[1]))
        runs.append((s, r, False))
    return runs


def run_host(cfg: BenchConfig, name: str, docs: Path, queries: Path) -> dict:
    """Run every layout of ``cfg.host`` with stand-in shards, then the ceiling; returns the result.

    Raises
    ------
    IncompleteOutputError
        If a part of a run is not complete.
    RuntimeError
        If a job run fails.
    """
    h = cfg.host
    limits = SetLimits(vocab_size=cfg.vocab_size, max_len=cfg.max_len)
    node_cpus = os.cpu_count() or 1
    scratch = Path(tempfile.mkdtemp(prefix="settopk bench-host-"))
    runs = []
    try:
        for n_shards, replicas, paced in _layouts(cfg):
            pace = h.queries_per_s_per_actor * n_shards if paced else 0.0
            job_cfg = {**job_config(cfg, n_shards, replicas, h.query_chunk_size), "threshold_exchange": False}
            out = scratch / f"out-{n_shards}x{replicas}{'' if paced else '-ceiling'}"
            log.info("host: settopk.jobs.score with %d stand-in shard(s) x %d replica(s), %s", n_shards, replicas,
                     f"{pace:,.0f} queries/s each on its shard" if paced else "no pacing (ceiling)")
            run = run_job(cfg, n_shards, replicas, docs, queries, out, scratch, job_cfg=job_cfg, module="settopk.jobs.bench.standin_job",
                          env={PACE_ENV: repr(pace)}, tag="" if paced else "-ceiling")
            backends = {s["backend"] for s in run["shards"]}
            if backends != {"standin"}:
                raise RuntimeError(f"the actors ran backend(s) {sorted(backends)}, not the stand-in: {run['log']}")
            k_rows = run["rows"] // run["n_queries"]
            if k_rows != cfg.k:
                raise IncompleteOutputError(f"{k_rows} rows per query, expected k = {cfg.k} (the corpus has fewer docs?)")
            checked = check_complete(out, queries, limits, h.query_chunk_size, cfg.k)
            if checked != run["n_queries"] * cfg.k:
                raise IncompleteOutputError(f"{checked} rows in the parts, expected {run['n_queries']} x {cfg.k}")
            shutil.rmtree(out)
            n_actors = n_shards * replicas
            run.update(
                ceiling=not paced,
                simulated_queries_per_s_per_actor=h.queries_per_s_per_actor if paced else None,
                simulated_queries_per_s_per_shard_actor=pace if paced else None,
                simulated_kernel_s=run["n_queries"] / (h.queries_per_s_per_actor * n_actors) if paced else 0.0,
                templates_searched=sum(s.get("templates_searched", 0) for s in run["shards"]),
                node_cpus=node_cpus,
                cpus_left_to_host_path=node_cpus - n_actors * cfg.cpus_per_shard,
                rows_checked=checked,
            )
            run.pop("log")
            run.pop("shards")
            runs.append(run)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    base = runs[0]
    for run in runs:
        run["speedup"] = run["queries_per_s"] / base["queries_per_s"]
        run["scaling"] = run["speedup"] * base["n_actors"] / run["n_actors"]
        run["host_overhead"] = run["search_s"] / run["simulated_kernel_s"] if run["simulated_kernel_s"] > 0 else None
        run["simulated"] = True
    return {
        "benchmark": "settopk.bench.host",
        "simulated": True,
        "config": name,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": cfg.to_dict(),
        "n_queries": base["n_queries"],
        "simulated_queries_per_s_per_actor": h.queries_per_s_per_actor,
        "node_cpus": node_cpus,
        "runs": runs,
        "completeness": {"every_part_checked": True, "rows_per_query": cfg.k,
                         "checks": "rows = n_queries x k, query ids of each chunk in order, ranks 1..k, no padding"},
    }


def format_host_table(result: dict) -> str:
    """The printed summary of a host-path result; every line says the numbers are simulated."""
    pace = result["simulated_queries_per_s_per_actor"]
    lines = [
        f"simulated | settopk bench {result['config']}: host path with stand-in shards (no GPU), {result['n_queries']:,} queries, "
        f"k = {result['settings']['k']}, {pace:,.0f} simulated queries/s per actor, {result['node_cpus']} CPUs on the node",
        f"simulated | {'layout':>11}{'wall_s':>8}{'search_s':>9}{'queries/s':>11}{'kernel_s':>9}{'ratio':>7}{'busy':>6}"
        f"{'speedup':>8}{'scaling':>8}{'cpus_left':>10}{'rss_GB':>7}{'rows':>13}{'GB':>7}"
        " | phases (s): validate connect read load | stages (s): read_queries send merge write",
    ]
    for r in result["runs"]:
        st, ph = r["stages_s"], r["phases_s"]
        layout = f"{r['n_shards']}x{r['replicas']}" + (" ceil" if r["ceiling"] else "")
        ratio = f"{r['host_overhead']:>7.2f}" if r["host_overhead"] is not None else f"{'-':>7}"
        lines.append(
            f"simulated | {layout:>11}{r['wall_s']:>8.2f}{r['search_s']:>9.2f}{r['queries_per_s']:>11,.0f}"
            f"{r['simulated_kernel_s']:>9.2f}{ratio}{r['gpu_busy']:>6.2f}{r['speedup']:>8.2f}{r['scaling']:>8.2f}"
            f"{r['cpus_left_to_host_path']:>10g}{r['driver_max_rss_bytes'] / 1e9:>7.2f}{r['rows']:>13,}{r['bytes'] / 1e9:>7.2f}"
            f" | {ph.get('validate_s', 0):.2f} {ph.get('connect_s', 0):.2f} {ph.get('read_s', 0):.2f} {ph.get('load_s', 0):.2f} "
            f"| {st['read_queries_s']:.2f} {st['send_s']:.2f} {st['merge_s']:.2f} {st['write_s']:.2f}"
        )
    lines.append("simulated | layout: stand-in shards x replicas (ceil: no pacing); kernel_s: the queries at the simulated pace over "
                 "the layout's stand-ins; ratio: search_s / kernel_s (1.0 = the GPUs' pace); busy: stand-ins' time in the search / "
                 "search_s; speedup: queries/s over the first row's; scaling: speedup per stand-in against the first row; "
                 "cpus_left: the node's CPUs less the stand-ins' cpus_per_shard")
    lines.append(f"simulated | complete: every part of every run read back: {result['settings']['k']} rows per query, "
                 "each chunk's query ids in order, ranks 1..k, no padding")
    return "\n".join(lines)
