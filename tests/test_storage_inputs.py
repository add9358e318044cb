"""settopk.shards.inputs reading ``s3://`` URIs from moto's S3 server on localhost: the same docs, queries,
pieces and errors as from local copies, with files named by their URIs."""

from __future__ import annotations

import pathlib

import numpy as np
import pyarrow.fs as pafs
import pytest

from settopk.shards.location import Location
from settopk.shards.inputs import (
    InputError, QueryStream, SetLimits, corpus_format, fingerprint, plan_pieces, queries_format, query_files, read_corpus,
    read_piece, read_queries,
)
from tests.piece_helpers import random_sets, write_parquet

LIMITS = SetLimits(vocab_size=100, max_len=8)


def upload(s3, local: pathlib.Path, uri: str) -> str:
    """Copy a local file or directory tree to ``uri`` on the test server; returns ``uri``."""
    loc = Location.of(uri)
    fs, inner = loc.fs, loc.path
    if local.is_dir():
        pafs.copy_files(str(local), inner, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    else:
        with fs.open_output_stream(inner) as f:
            f.write(local.read_bytes())
    return uri


@pytest.fixture(scope="module")
def inputs(s3, tmp_path_factory):
    """The same inputs locally and in a bucket: ``(local_root, uri_root)``, each holding a text
    corpus ``docs.txt``, a Parquet corpus directory ``docs/`` (3 files, several row groups, a
    ``_SUCCESS``), text and Parquet queries and a query directory (with hidden names)."""
    rng = np.random.default_rng(21)
    root = tmp_path_factory.mktemp("storage-inputs")
    sets = random_sets(rng, 40)
    (root / "docs.txt").write_text("".join(",".join(map(str, s)) + "\n" for s in sets))
    (root / "docs").mkdir()
    ids = np.sort(rng.choice(10_000, size=40, replace=False))
    for name, lo, hi in (("a.parquet", 0, 15), ("b.parquet", 15, 30), ("c.parquet", 30, 40)):
        write_parquet(root / "docs" / name, ids[lo:hi], sets[lo:hi], 4)
    (root / "docs" / "_SUCCESS").write_text("")
    queries = random_sets(rng, 9)
    (root / "queries.txt").write_text("".join(",".join(map(str, q)) + "\n" for q in queries))
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "qparquet").mkdir()
    pq.write_table(pa.table({"query_id": [f"q{i}" for i in range(9)], "tokens": pa.array(queries, pa.list_(pa.int32()))}),
                   root / "qparquet" / "part-0.parquet", row_group_size=4)
    (root / "qdir").mkdir()
    for i, q in enumerate(queries):
        (root / "qdir" / f"query-{i}").write_text(",".join(map(str, q)))
    (root / "qdir" / ".DS_Store").write_text("junk")
    (root / "qdir" / "_SUCCESS").write_text("")
    bucket = s3.bucket("inputs-bucket")
    upload(s3, root, f"{bucket}/data")
    return root, f"{bucket}/data"


def _uri_names(files, uri_root):
    return [f.relative_to(Location.of(uri_root)) for f in files]


def test_formats_and_files_from_names(inputs):
    local, uri = inputs
    for name in ("docs.txt", "docs"):
        assert corpus_format(f"{uri}/{name}") == corpus_format(local / name)
    for name, fmt in (("queries.txt", "text"), ("qparquet", "parquet"), ("qdir", "dir")):
        assert queries_format(f"{uri}/{name}") == queries_format(local / name) == fmt
    files = query_files(f"{uri}/qdir/")  # a trailing '/' names the same prefix
    assert files == [f"{uri}/qdir/query-{i}" for i in range(9)]  # hidden names skipped, sorted


@pytest.mark.parametrize("name", ["docs.txt", "docs", "docs/b.parquet"])
def test_corpus_from_a_bucket_equals_the_local_read(inputs, name):
    local, uri = inputs
    here, there = read_corpus(local / name, LIMITS), read_corpus(f"{uri}/{name}", LIMITS)
    assert there.doc_ids.tolist() == here.doc_ids.tolist()
    assert there.docs.to_lists() == here.docs.to_lists()
    assert there.n_with_repeats == here.n_with_repeats and there.fmt == here.fmt
    assert [f.relative_to(Location.of(uri)) for f in there.files] == [str(pathlib.Path(f).relative_to(local)) for f in here.files]


@pytest.mark.parametrize("name", ["queries.txt", "qparquet", "qdir"])
def test_queries_from_a_bucket_equal_the_local_read(inputs, name):
    local, uri = inputs
    here, there = read_queries(local / name, LIMITS), read_queries(f"{uri}/{name}", LIMITS)
    assert there.query_ids == here.query_ids
    assert there.queries.to_lists() == here.queries.to_lists()
    stream = QueryStream(f"{uri}/{name}", LIMITS)
    chunks = list(stream.chunks(4))
    assert [q for ids, _ in chunks for q in ids] == here.query_ids
    assert [s for _, batch in chunks for s in batch.to_lists()] == here.queries.to_lists()


def test_pieces_name_uris_and_read_as_one_read(inputs):
    local, uri = inputs
    pieces, fmt, files = plan_pieces(f"{uri}/docs", 4)
    assert fmt == "parquet" and len(files) == 3 and all(str(f).startswith(f"{uri}/docs/") for f in files)
    assert len(pieces) == 4 + 4 + 3 and all(str(p.path).startswith("s3://") and p.size_bytes > 0 and p.mtime_ns > 0 for p in pieces)
    corpora = [read_piece(p, LIMITS)[1] for p in pieces]
    whole = read_corpus(local / "docs", LIMITS)
    assert [d for c in corpora for d in c.doc_ids.tolist()] == whole.doc_ids.tolist()
    assert [s for c in corpora for s in c.docs.to_lists()] == whole.docs.to_lists()


def test_fingerprint_counts_objects_and_bytes(inputs):
    local, uri = inputs
    files = plan_pieces(f"{uri}/docs", 1)[2]
    there = fingerprint(files, f"{uri}/docs")
    here = fingerprint(plan_pieces(local / "docs", 1)[2], str(local / "docs"))
    assert (there["files"], there["bytes"]) == (here["files"], here["bytes"]) == (3, sum(f.stat().st_size for f in (local / "docs").glob("*.parquet")))
    assert fingerprint(files, f"{uri}/docs") == there  # stable while the objects stay


def test_a_replaced_object_changes_the_fingerprint_and_is_refused_by_its_piece(s3, tmp_path):
    bucket = s3.bucket()
    path = tmp_path / "docs.txt"
    path.write_text("1,2\n3\n")
    uri = upload(s3, path, f"{bucket}/docs.txt")
    before = fingerprint([uri], uri)
    (piece,), _, _ = plan_pieces(uri, 1)
    path.write_text("1,2\n3,4\n")
    upload(s3, path, uri)
    assert fingerprint([uri], uri) != before
    with pytest.raises(InputError, match=r"s3://test-bucket-\d+/docs.txt: expected input files that stay unchanged"):
        read_piece(piece, LIMITS)


def test_a_bad_line_in_a_bucket_names_the_uri_and_line(s3, tmp_path):
    bucket = s3.bucket()
    path = tmp_path / "docs.txt"
    path.write_text("1,2\n3\n4,x\n")
    uri = upload(s3, path, f"{bucket}/in/docs.txt")
    with pytest.raises(InputError) as info:
        read_corpus(uri, LIMITS)
    assert info.value.path == uri and info.value.line == 3
    assert str(info.value).startswith(f"{uri}:3 (1-based line): expected")


def test_a_bad_parquet_row_in_a_bucket_names_the_uri_and_row(s3, tmp_path):
    bucket = s3.bucket()
    (tmp_path / "d").mkdir()
    write_parquet(tmp_path / "d" / "a.parquet", [0, 1], [[1], [2]], 1)
    write_parquet(tmp_path / "d" / "b.parquet", [2, 3, 4], [[1], [2], [5, None]], 2)
    uri = upload(s3, tmp_path / "d", f"{bucket}/d")
    with pytest.raises(InputError) as info:
        read_corpus(uri, LIMITS)
    assert info.value.path == f"{uri}/b.parquet" and info.value.row == 2
    assert f"{uri}/b.parquet row 2 (0-based row): expected token ids without nulls" in str(info.value)


def test_a_bad_query_file_in_a_bucket_directory_names_its_uri(s3, tmp_path):
    bucket = s3.bucket()
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "a").write_text("1,2")
    (tmp_path / "q" / "b").write_text("1,,2")
    uri = upload(s3, tmp_path / "q", f"{bucket}/q")
    with pytest.raises(InputError) as info:
        read_queries(uri, LIMITS)
    assert str(info.value).startswith(f"{uri}/b:1 (1-based line): expected")


def test_a_missing_bucket_is_named(s3):
    with pytest.raises(InputError) as info:
        corpus_format("s3://no-such-bucket/docs.txt")
    assert "s3://no-such-bucket/docs.txt: expected an existing file or directory, found no bucket named 'no-such-bucket'" in str(info.value)
    assert "create the bucket" in str(info.value)


def test_a_missing_key_is_named(s3):
    bucket = s3.bucket()
    with pytest.raises(InputError, match=rf"{bucket}/none.txt: expected an existing file or directory, found no object or prefix"):
        read_queries(f"{bucket}/none.txt", LIMITS)


def test_a_parquet_directory_with_another_object_is_refused(s3, tmp_path):
    bucket = s3.bucket()
    (tmp_path / "d").mkdir()
    write_parquet(tmp_path / "d" / "a.parquet", [0], [[1]], 1)
    (tmp_path / "d" / "notes.txt").write_text("x")
    uri = upload(s3, tmp_path / "d", f"{bucket}/d")
    with pytest.raises(InputError, match=rf"{uri}/notes.txt: expected only \*.parquet files"):
        plan_pieces(uri, 1)


def test_an_unknown_scheme_is_an_input_error():
    with pytest.raises(InputError, match=r"nope://b/docs.txt: .*unknown scheme 'nope'"):
        read_corpus("nope://b/docs.txt", LIMITS)


def test_a_self_join_stream_from_a_bucket_equals_the_local_one(inputs):
    from settopk.shards.inputs import DocQueryStream

    local, uri = inputs
    here, there = DocQueryStream(local / "docs", LIMITS), DocQueryStream(f"{uri}/docs", LIMITS)
    assert there.n_queries == here.n_queries == 40
    assert [(ids, b.to_lists()) for ids, b in there.chunks(16)] == [(ids, b.to_lists()) for ids, b in here.chunks(16)]


def test_a_bucket_root_is_a_directory(s3, tmp_path):
    bucket = s3.bucket()
    write_parquet(tmp_path / "a.parquet", [5, 6], [[1], [2, 3]], 1)
    upload(s3, tmp_path / "a.parquet", f"{bucket}/a.parquet")
    for root in (bucket, f"{bucket}/"):
        assert corpus_format(root) == "parquet"
        assert read_corpus(root, LIMITS).doc_ids.tolist() == [5, 6]
