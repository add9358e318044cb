"""The results as analytics tools read them: DuckDB, Polars, pandas and pyarrow (Spark where
installed), pointed at the directory, on both layouts; every reader line of the README is run as
written.

Two nights are written with the shipped ``nightly`` config into one dataset root; each reader
must see the same rows, the documented column types, a ``dt`` date column from the Hive
partition directories, and the run facts in the Parquet metadata. The result directories hold
only Parquet parts and an empty ``_SUCCESS``: the run record lies beside the root.
"""

from __future__ import annotations

import datetime
import pathlib
import re

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from settopk.configs import load_config
from settopk.jobs import score
from settopk.jobs.output import DT_PARTITIONING, RESULT_SCHEMA, manifest_path, open_results, read_manifest, rejected_path

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.timeout(180), pytest.mark.slow]

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
    return read_manifest(root / f"dt={night}")


def test_nightly_config_partitions_by_date():
    cfg = load_config("nightly")
    assert cfg.output.partition == "dt" and cfg.k == 100 and cfg.backend == "auto"
    assert load_config("local").output.partition == "none"


def test_root_holds_only_partitions(nightly_root):
    assert sorted(p.name for p in nightly_root.iterdir()) == [f"dt={n}" for n in NIGHTS]
    record = nightly_root.with_name("results.run")
    for night in NIGHTS:
        names = sorted(p.name for p in (nightly_root / f"dt={night}").iterdir())
        assert names == ["_SUCCESS", "part-00000.parquet"]
        assert (nightly_root / f"dt={night}" / "_SUCCESS").stat().st_size == 0
        assert sorted(p.name for p in (record / f"dt={night}").iterdir()) == ["manifest.json"]
        assert manifest_path(nightly_root / f"dt={night}") == record / f"dt={night}" / "manifest.json"
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
    rel = con.sql(f"SELECT * FROM read_parquet('{nightly_root}')")  # no glob, no Hive options
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
        f"SELECT dt, count(*), count(DISTINCT query_id), max(rank) FROM read_parquet('{nightly_root}') GROUP BY dt ORDER BY dt"
    ).fetchall()
    assert counts == [(datetime.date.fromisoformat(n), N_QUERIES * K, N_QUERIES, K) for n in NIGHTS]
    kv = con.sql(
        f"SELECT decode(key), decode(value) FROM parquet_kv_metadata('{nightly_root}/dt={NIGHTS[0]}/part-00000.parquet')"
    ).fetchall()
    meta = dict(kv)
    assert meta["settopk.run_id"] == _manifest(nightly_root, NIGHTS[0])["run_id"]
    assert meta["settopk.k"] == str(K) and meta["settopk.score"].startswith("Braun-Blanquet")


@pytest.fixture(scope="module")
def results_dir(nightly_root):
    """One result directory (the default, unpartitioned layout), with a quarantined line, so that
    its run record also holds ``rejected.parquet``."""
    manifest = _manifest(nightly_root, NIGHTS[0])
    tmp = nightly_root.parent
    docs = tmp / "docs-with-a-bad-line.txt"
    docs.write_text(pathlib.Path(manifest["inputs"]["docs"]["path"]).read_text() + "1,x\n")
    cfg = tmp / "quarantine.yaml"
    cfg.write_text("backend: numpy\nn_shards: 1\ncpus_per_shard: 0.5\non_invalid: quarantine\n")
    out = tmp / "one-result"
    assert score.main(["--config", str(cfg), "--docs", str(docs), "--queries", manifest["inputs"]["queries"]["path"],
                       "--out", str(out), "--k", str(K), "--quiet"]) == 0
    assert rejected_path(out).is_file() and manifest_path(out).is_file()
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "part-00000.parquet"]
    return out


def _readme_reader_lines() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "pl.read_parquet(" in b)
    return [line.split("  # ")[0].strip() for line in block.splitlines() if line.strip()]


def _as_arrow(result) -> pa.Table:
    """Whatever a reader returned, as an Arrow table (to compare rows and types)."""
    import pandas as pd
    import polars as pl

    if isinstance(result, pl.LazyFrame):
        result = result.collect()
    if isinstance(result, pl.DataFrame):
        return result.to_arrow()
    if isinstance(result, pd.DataFrame):
        return pa.Table.from_pandas(result, preserve_index=False)
    if isinstance(result, pa.Table):
        return result
    if hasattr(result, "toPandas"):  # a Spark DataFrame
        return pa.Table.from_pandas(result.toPandas(), preserve_index=False)
    return result.arrow().read_all() if hasattr(result.arrow(), "read_all") else result.arrow()  # a DuckDB relation


def _sorted_rows(table: pa.Table) -> pa.Table:
    """The result columns with the documented types, in (dt,) query and rank order."""
    keys = [("dt", "ascending")] if "dt" in table.column_names else []
    table = table.sort_by(keys + [("query_id", "ascending"), ("rank", "ascending")])
    return table.select(RESULT_SCHEMA.names).cast(RESULT_SCHEMA.remove_metadata())


def _check_types(table: pa.Table, line: str) -> None:
    """The documented column types; strings may come back as large strings (Polars, pandas)."""
    for field in RESULT_SCHEMA:
        got = table.schema.field(field.name).type
        assert got == field.type or (field.type == pa.string() and got == pa.large_string()), (line, field.name, got)


def test_readme_reader_one_liners_run_as_written(nightly_root, results_dir, tmp_path, monkeypatch):
    lines = _readme_reader_lines()
    assert lines[0].startswith("import ")
    readers = lines[1:]
    for name in ("duckdb.sql(", "pl.read_parquet(", "pl.scan_parquet(", "pd.read_parquet(", "pq.read_table(", "spark.read.parquet("):
        for layout in ("results", "nightly"):
            assert any(r.startswith(name) and re.search(f"[\"']{layout}[\"']", r) for r in readers), (name, layout)
    assert not [r for r in readers if "*" in r.replace("SELECT *", "")], "no reader needs a glob"
    (tmp_path / "results").symlink_to(results_dir)
    (tmp_path / "nightly").symlink_to(nightly_root)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(lines[0], namespace)  # the block's import line, as written
    try:
        from pyspark.sql import SparkSession

        namespace["spark"] = SparkSession.builder.master("local[1]").getOrCreate()
    except ImportError:
        readers = [r for r in readers if not r.startswith("spark.")]  # PySpark is not a test dependency
    run_id = read_manifest(results_dir)["run_id"]
    expected = {"results": _sorted_rows(pq.read_table(results_dir)),
                "nightly": _sorted_rows(open_results(nightly_root).to_table())}
    nightly_dt = sorted(open_results(nightly_root).to_table()["dt"].to_pylist())
    for line in readers:
        result = eval(line, namespace)  # noqa: S307 (the README's own line)
        if isinstance(result, dict):  # Polars' footer metadata
            assert result["settopk.run_id"] == run_id and result["settopk.k"] == str(K), line
            continue
        table = _as_arrow(result)
        if "parquet_kv_metadata" in line:
            kv = dict(zip(table["key"].to_pylist(), table["value"].to_pylist()))
            assert kv["settopk.run_id"] == run_id and isinstance(kv["settopk.run_id"], str), line
            assert set(kv) == {"settopk.run_id", "settopk.k", "settopk.score", "settopk.schema_version"}, line
            continue
        _check_types(table, line)
        if "nightly" in line:
            dt = table.schema.field("dt").type
            assert pa.types.is_date(dt) or pa.types.is_timestamp(dt), (line, dt)  # a date, not strings
            days = table["dt"].cast(pa.date32()).to_pylist()
            assert sorted(days) == nightly_dt and {d.isoformat() for d in days} == set(NIGHTS), line
            assert _sorted_rows(table.set_column(table.schema.get_field_index("dt"), "dt", table["dt"].cast(pa.date32()))).equals(
                expected["nightly"]), line
        else:
            assert "dt" not in table.column_names, line
            assert _sorted_rows(table).equals(expected["results"]), line


def test_without_a_partitioning_schema_pandas_and_pyarrow_read_dt_as_strings(nightly_root):
    """Why the README helps pandas and pyarrow: their Hive discovery infers integers and strings
    only, and a physical ``dt`` column in the files would clash with the inferred one."""
    pd = pytest.importorskip("pandas")
    assert isinstance(pd.read_parquet(nightly_root).dtypes["dt"], pd.CategoricalDtype)
    assert pq.read_table(nightly_root).schema.field("dt").type == pa.dictionary(pa.int32(), pa.string())


def test_polars_reads_types_and_rows(nightly_root):
    pl = pytest.importorskip("polars")
    lf = pl.scan_parquet(nightly_root)  # the directory, no glob, no Hive options
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


def test_verify_reads_the_manifest_of_a_partition(nightly_root):
    from settopk.jobs import verify

    manifest = _manifest(nightly_root, NIGHTS[0])
    assert verify.main(["--docs", manifest["inputs"]["docs"]["path"], "--queries", manifest["inputs"]["queries"]["path"],
                        "--results", str(nightly_root / f"dt={NIGHTS[0]}"), "--config", "nightly", "--sample", "10"]) == 0
