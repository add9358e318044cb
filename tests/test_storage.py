"""settopk.shards.storage: paths and URIs to PyArrow filesystems, against moto's S3 server on localhost."""

from __future__ import annotations

import os
import pickle

import pyarrow.fs as pafs
import pytest

from settopk.shards import storage
from settopk.shards.storage import StorageError


@pytest.mark.parametrize("text, expected", [
    ("s3://bucket/key", True), ("file:///tmp/x", True), ("gs://b", True), ("abfs://c@a.dfs.core.windows.net/x", True),
    ("data/x.txt", False), ("/tmp/x", False), ("C://x", False), ("C:/x", False), ("", False), ("s3:/b/k", False),
])
def test_is_uri(text, expected):
    assert storage.is_uri(text) is expected


def test_is_uri_pathlib_is_local(tmp_path):
    assert not storage.is_uri(tmp_path)


def test_resolve_local_path_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fs, path = storage.resolve("sub/docs.txt")
    assert isinstance(fs, pafs.LocalFileSystem)
    assert path == os.path.join(str(tmp_path), "sub", "docs.txt")


def test_resolve_file_uri(tmp_path):
    (tmp_path / "a.txt").write_text("1,2\n")
    fs, path = storage.resolve(f"file://{tmp_path}/a.txt")
    assert isinstance(fs, pafs.LocalFileSystem)
    assert path == f"{tmp_path}/a.txt"
    assert fs.get_file_info(path).size == 4


def test_unknown_scheme_names_uri_and_fix():
    with pytest.raises(StorageError, match=r"foo://b/k: .*unknown scheme 'foo'.*fix: use a local path or a URI") as info:
        storage.resolve("foo://b/k")
    assert info.value.uri == "foo://b/k"


def test_s3_without_bucket():
    with pytest.raises(StorageError, match=r"s3://: expected s3://BUCKET/KEY, found no bucket name"):
        storage.resolve("s3://")


def test_bad_endpoint_setting(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "ftp://host:1")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", raising=False)
    with pytest.raises(StorageError, match=r"s3://b/k: the S3 endpoint setting 'ftp://host:1'.*fix: set it"):
        storage.resolve("s3://b/k")


def test_storage_error_pickles():
    err = pickle.loads(pickle.dumps(StorageError("s3://b/k", "s3://b/k: broken; fix: mend")))
    assert err.uri == "s3://b/k" and str(err) == "s3://b/k: broken; fix: mend"


@pytest.mark.parametrize("base, names, expected", [
    ("s3://b/dir", ("x.parquet",), "s3://b/dir/x.parquet"),
    ("s3://b/dir/", ("x.parquet",), "s3://b/dir/x.parquet"),
    ("s3://b", ("d", "x"), "s3://b/d/x"),
    ("s3://b/d?endpoint_override=h:1&scheme=http", ("x",), "s3://b/d/x?endpoint_override=h:1&scheme=http"),
    ("/tmp/d", ("x",), "/tmp/d/x"),
])
def test_join(base, names, expected):
    assert storage.join(base, *names) == expected


def test_basename_parent_relative():
    assert storage.basename("s3://b/d/x.parquet") == "x.parquet"
    assert storage.basename("s3://b/d/") == "d"
    assert storage.basename("s3://b") == "b"
    assert storage.basename("/tmp/d/") == "d"
    assert storage.parent("s3://b/d/x") == "s3://b/d"
    assert storage.parent("/tmp/d/x") == "/tmp/d"
    assert storage.relative("s3://b/d/sub/x", "s3://b/d/") == "sub/x"
    assert storage.relative("/tmp/d/x", "/tmp/d") == "x"


def test_location_normalises(tmp_path):
    assert storage.location("s3://b//d/out/") == ("s3", "/b/d/out")
    assert storage.location("S3A://b/d") == ("s3", "/b/d")
    assert storage.location(f"file://{tmp_path}/x/") == ("file", f"{tmp_path}/x")
    assert storage.location(str(tmp_path / "x")) == ("file", f"{tmp_path}/x")
    assert storage.location("s3://b/d?endpoint_override=h:1") == ("s3@h:1", "/b/d")


@pytest.mark.parametrize("a, b, expected", [
    ("s3://b/out", "s3://b/out/part-0.parquet", True),
    ("s3://b/out/", "s3://b//out", True),
    ("s3://b/out", "s3://b/output", False),
    ("s3://b/out", "s3://c/out", False),
    ("s3://b/out", "gs://b/out", False),
    ("s3://b/tmp/out", "/tmp/out", False),
    ("/data/in", "/data/in/docs.txt", True),
    ("file:///data/in", "/data/in/docs.txt", True),
    ("/data/in", "/data/input", False),
])
def test_overlaps(a, b, expected):
    assert storage.overlaps(a, b) is expected
    assert storage.overlaps(b, a) is expected


@pytest.mark.parametrize("message, part", [
    ("AWS Error ACCESS_DENIED during HeadObject operation: No response body.", "refused access"),
    ("When reading information for key 'k' in bucket 'b': AWS Error NETWORK_CONNECTION during HeadObject operation: curl error", "could not be reached"),
    ("something else entirely", "check the location"),
])
def test_describe_os_error(message, part):
    text = storage.describe_os_error("s3://b/k", OSError(message))
    assert text.startswith("s3://b/k: ") and part in text and "fix: " in text


def test_describe_missing_local(tmp_path):
    assert storage.describe_missing(str(tmp_path / "none"))[0] == "nothing at this path"


# Against the S3 server (moto's, started by the ``s3`` fixture).


def test_s3_endpoint_from_environment(s3):
    bucket = s3.bucket()
    fs, path = storage.resolve(f"{bucket}/dir/a.txt")
    assert isinstance(fs, pafs.S3FileSystem)
    assert path == f"{bucket[5:]}/dir/a.txt"
    with fs.open_output_stream(path) as f:
        f.write(b"1,2\n")
    # Read back through a filesystem made apart from resolve(): the write went to the test server.
    assert s3.filesystem().get_file_info(path).size == 4


def test_s3_endpoint_specific_setting_wins(s3, monkeypatch):
    bucket = s3.bucket()
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.endpoint)
    fs, path = storage.resolve(bucket)
    assert fs.get_file_info(path).type == pafs.FileType.Directory


def test_s3_unreachable_endpoint_is_described(s3, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    fs, path = storage.resolve("s3://some-bucket/k")
    with pytest.raises(OSError) as info:
        fs.get_file_info(path)
    assert "could not be reached" in storage.describe_os_error("s3://some-bucket/k", info.value)


def test_s3_missing_bucket_and_key_are_told_apart(s3):
    bucket = s3.bucket()
    assert storage.describe_missing("s3://no-such-bucket/k")[0] == "no bucket named 'no-such-bucket'"
    assert storage.describe_missing(f"{bucket}/no/such/key")[0] == "no object or prefix at this URI"


def test_refused_credentials_are_described(s3, monkeypatch):
    from settopk.shards.inputs import InputError, read_corpus
    from tests.conftest import moto_server

    with moto_server(INITIAL_NO_AUTH_ACTION_COUNT="0") as endpoint:  # this server checks credentials
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        with pytest.raises(InputError) as info:
            read_corpus("s3://locked-bucket/docs.txt")
    text = str(info.value)
    assert text.startswith("s3://locked-bucket/docs.txt: the store refused access (missing or wrong credentials)")
    assert "fix: provide credentials through the store's standard chain" in text


def test_abfs_containers_of_one_account_are_apart():
    assert not storage.overlaps("abfs://a@acct.dfs.core.windows.net/x", "abfs://b@acct.dfs.core.windows.net/x")
    assert storage.overlaps("abfs://a@acct.dfs.core.windows.net/x", "abfs://a@acct.dfs.core.windows.net/x/y")
