"""The nightly dataset as analytics tools read it: DuckDB, Polars and pyarrow.dataset, with no help.

Two nights are written with the shipped ``nightly`` config into one dataset root; each reader
must see the same rows, the documented column types, a ``dt`` date column from the Hive
partition directories, and the run facts in the Parquet metadata.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import re

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from configs import load_config
from jobs import score
from jobs.output import DT_PARTITIONING, RESULT_SCHEMA, open_results

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.timeout(180)]

ROOT = pathlib.Path(__file__).resolve().parent.parent
NIGHTS = ("2026-11-19", "2026-11-20")
N_QUERIES, K = 37, 10


@pytest.fixture(scope="module")
def nightly_root(tmp_path_factory):
    """Two nights of results under one root, written by ``--config nightly``."""
    tmp = tmp_path_factory.mktemp("nightly")
    rng = np.random.default_rng(7)

    def sets(n):
        return [rng.choice(40, size=rng.integers(1, 12), replace=False).tolist() for _ in range(n)]

    (tmp / "docs.txt").write_text("".join(",".join(map(str, s)) + "\n" for s in sets(500)))
    (tmp / "queries.txt").write_text("".join(",".join(map(str, s)) + "\n" for s in sets(N_QUERIES)))
    root = tmp / "results"
    for night in NIGHTS:
        code = score.main([
            "--config", "nightly", "--docs", str(tmp / "docs.txt"), "--queries", str(tmp / "queries.txt"),
            "--out", str(root), "--date", night, "--k", str(K), "--quiet",
        ])
        assert code == 0
    return root


def _manifest(root, night):
    return json.loads((root / f"dt={night}" / "_manifest.json").read_text())


def test_nightly_config_partitions_by_date():
    cfg = load_config("nightly")
    assert cfg.output.partition == "dt" and cfg.k == 100 and cfg.backend == "auto"
    assert load_config("local").output.partition == "none"


def test_root_holds_only_partitions(nightly_root):
    assert sorted(p.name for p in nightly_root.iterdir()) == [f"dt={n}" for n in NIGHTS]
    for night in NIGHTS:
        names = sorted(p.name for p in (nightly_root / f"dt={night}").iterdir())
        assert names == ["_SUCCESS", "_manifest.json", "part-00000.parquet"]
    assert not [p for p in nightly_root.parent.iterdir() if p.name.startswith(".")]  # no staging left beside it


def test_pyarrow_dataset_with_pinned_partition_type(nightly_root):
    dataset = ds.dataset(nightly_root, format="parquet", partitioning=DT_PARTITIONING)
    expected = pa.schema(list(RESULT_SCHEMA) + [pa.field("dt", pa.date32())])
    assert dataset.schema.equals(expected)
    assert dataset.count_rows() == len(NIGHTS) * N_QUERIES * K
    night = dataset.to_table(filter=ds.field("dt") == datetime.date(2026, 11, 20))
    assert night.num_rows == N_QUERIES * K
    assert open_results(nightly_root).schema.equals(expected)  # the helper does the same
    assert night.drop_columns(["dt"]).equals(pq.read_table(nightly_root / "dt=2026-11-20"))


def test_duckdb_reads_types_rows_and_metadata(nightly_root):
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    rel = con.sql(
        f"SELECT * FROM read_parquet('{nightly_root}/*/*.parquet', hive_partitioning = true, hive_types = {{'dt': DATE}})"
    )
    assert dict(zip(rel.columns, map(str, rel.types))) == {
        "query_id": "VARCHAR",
        "rank": "SMALLINT",
        "doc_id": "BIGINT",
        "score": "DOUBLE",
        "overlap": "SMALLINT",
        "query_len": "SMALLINT",
        "doc_len": "SMALLINT",
        "dt": "DATE",
    }
    counts = con.sql(
        f"SELECT dt, count(*), count(DISTINCT query_id), max(rank) FROM read_parquet('{nightly_root}/*/*.parquet', "
        "hive_partitioning = true, hive_types = {'dt': DATE}) GROUP BY dt ORDER BY dt"
    ).fetchall()
    assert counts == [(datetime.date.fromisoformat(n), N_QUERIES * K, N_QUERIES, K) for n in NIGHTS]
    kv = con.sql(
        f"SELECT decode(key), decode(value) FROM parquet_kv_metadata('{nightly_root}/dt={NIGHTS[0]}/part-00000.parquet')"
    ).fetchall()
    meta = dict(kv)
    assert meta["settopk.run_id"] == _manifest(nightly_root, NIGHTS[0])["run_id"]
    assert meta["settopk.k"] == str(K) and meta["settopk.score"].startswith("Braun-Blanquet")


def test_readme_duckdb_query_runs(nightly_root):
    duckdb = pytest.importorskip("duckdb")
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sql\n(.*?)```", readme, flags=re.S)
    query = next(b for b in blocks if "read_parquet('results/" in b)
    rows = duckdb.connect().sql(query.replace("'results/", f"'{nightly_root}/")).fetchall()
    assert len(rows) == len(NIGHTS) * N_QUERIES * 3
    assert {r[0] for r in rows} == {datetime.date.fromisoformat(n) for n in NIGHTS}


def test_polars_reads_types_and_rows(nightly_root):
    pl = pytest.importorskip("polars")
    lf = pl.scan_parquet(f"{nightly_root}/**/*.parquet", hive_partitioning=True, hive_schema={"dt": pl.Date})
    assert dict(lf.collect_schema()) == {
        "query_id": pl.String,
        "rank": pl.Int16,
        "doc_id": pl.Int64,
        "score": pl.Float64,
        "overlap": pl.Int16,
        "query_len": pl.Int16,
        "doc_len": pl.Int16,
        "dt": pl.Date,
    }
    per_night = lf.group_by("dt").agg(pl.len().alias("rows")).sort("dt").collect()
    assert per_night.rows() == [(datetime.date.fromisoformat(n), N_QUERIES * K) for n in NIGHTS]
    meta = pl.read_parquet_metadata(nightly_root / f"dt={NIGHTS[1]}" / "part-00000.parquet")
    assert meta["settopk.run_id"] == _manifest(nightly_root, NIGHTS[1])["run_id"]


def test_row_groups_and_compression(nightly_root, tmp_path):
    meta = pq.ParquetFile(nightly_root / f"dt={NIGHTS[0]}" / "part-00000.parquet").metadata
    assert meta.num_row_groups == 1  # 370 rows: well under one group of the nightly config
    assert meta.row_group(0).column(0).compression == "ZSTD"
    cfg = tmp_path / "small-groups.yaml"
    cfg.write_text("backend: numpy\nn_shards: 1\ncpus_per_shard: 0.5\noutput:\n  partition: dt\n  row_group_rows: 45\n")
    manifest = _manifest(nightly_root, NIGHTS[0])
    out = tmp_path / "root"
    assert score.main([
        "--config", str(cfg), "--docs", manifest["inputs"]["docs"]["path"], "--queries", manifest["inputs"]["queries"]["path"],
        "--out", str(out), "--date", NIGHTS[0], "--k", str(K), "--quiet",
    ]) == 0
    meta = pq.ParquetFile(out / f"dt={NIGHTS[0]}" / "part-00000.parquet").metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sizes == [40] * 9 + [10]  # 45 rounded down to 4 whole queries of 10 rows
    first_ids = pq.read_table(out / f"dt={NIGHTS[0]}").column("query_id").to_pylist()
    assert first_ids == [str(i) for i in range(N_QUERIES) for _ in range(K)]  # query order, not string order
