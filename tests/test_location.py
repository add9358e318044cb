"""settopk.shards.location: paths and URIs as locations (PyArrow filesystems, redacted display), against moto's S3 server on localhost."""

from __future__ import annotations

import os
import pickle

import pyarrow.fs as pafs
import pytest

from settopk.shards.location import Location, StorageError, is_uri, redact, resolve


@pytest.mark.parametrize("text, expected", [
    ("s3://bucket/key", True), ("file:///tmp/x", True), ("gs://b", True), ("abfs://c@a.dfs.core.windows.net/x", True),
    ("data/x.txt", False), ("/tmp/x", False), ("C://x", False), ("C:/x", False), ("", False), ("s3:/b/k", False),
])
def test_is_uri(text, expected):
    assert is_uri(text) is expected


def test_is_uri_pathlib_is_local(tmp_path):
    assert not is_uri(tmp_path)


def test_resolve_local_path_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fs, path = resolve("sub/docs.txt")
    assert isinstance(fs, pafs.LocalFileSystem)
    assert path == os.path.join(str(tmp_path), "sub", "docs.txt")


def test_resolve_file_uri(tmp_path):
    (tmp_path / "a.txt").write_text("1,2\n")
    fs, path = resolve(f"file://{tmp_path}/a.txt")
    assert isinstance(fs, pafs.LocalFileSystem)
    assert path == f"{tmp_path}/a.txt"
    assert fs.get_file_info(path).size == 4


def test_unknown_scheme_names_uri_and_fix():
    with pytest.raises(StorageError, match=r"foo://b/k: .*unknown scheme 'foo'.*fix: use a local path or a URI") as info:
        resolve("foo://b/k")
    assert info.value.uri == "foo://b/k"


def test_s3_without_bucket():
    with pytest.raises(StorageError, match=r"s3://: expected s3://BUCKET/KEY, found no bucket name"):
        resolve("s3://")


def test_bad_endpoint_setting(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "ftp://host:1")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", raising=False)
    with pytest.raises(StorageError, match=r"s3://b/k: the S3 endpoint setting 'ftp://host:1'.*fix: set it"):
        resolve("s3://b/k")


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
    loc = Location.of(base)
    for name in names:
        loc = loc / name
    assert str(loc) == expected


def test_basename_parent_relative():
    assert Location.of("s3://b/d/x.parquet").name == "x.parquet"
    assert Location.of("s3://b/d/").name == "d"
    assert Location.of("s3://b").name == "b"
    assert Location.of("/tmp/d/").name == "d"
    assert str(Location.of("s3://b/d/x").parent) == "s3://b/d"
    assert str(Location.of("/tmp/d/x").parent) == "/tmp/d"
    assert Location.of("s3://b/d/sub/x").relative_to(Location.of("s3://b/d/")) == "sub/x"
    assert Location.of("/tmp/d/x").relative_to(Location.of("/tmp/d")) == "x"


def test_location_normalises(tmp_path):
    assert Location.of("s3://b//d/out/").key == ("s3", "/b/d/out")
    assert Location.of("S3A://b/d").key == ("s3", "/b/d")
    assert Location.of(f"file://{tmp_path}/x/").key == ("file", f"{tmp_path}/x")
    assert Location.of(str(tmp_path / "x")).key == ("file", f"{tmp_path}/x")
    assert Location.of("s3://b/d?endpoint_override=h:1").key == ("s3@h:1", "/b/d")


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
    assert Location.of(a).overlaps(Location.of(b)) is expected
    assert Location.of(b).overlaps(Location.of(a)) is expected


@pytest.mark.parametrize("message, part", [
    ("AWS Error ACCESS_DENIED during HeadObject operation: No response body.", "refused access"),
    ("When reading information for key 'k' in bucket 'b': AWS Error NETWORK_CONNECTION during HeadObject operation: curl error", "could not be reached"),
    ("something else entirely", "check the location"),
])
def test_describe_os_error(message, part):
    text = Location.of("s3://b/k").describe_os_error(OSError(message))
    assert text.startswith("s3://b/k: ") and part in text and "fix: " in text


def test_describe_missing_local(tmp_path):
    assert Location.of(str(tmp_path / "none")).describe_missing()[0] == "nothing at this path"


# Against the S3 server (moto's, started by the ``s3`` fixture).


def test_s3_endpoint_from_environment(s3):
    bucket = s3.bucket()
    fs, path = resolve(f"{bucket}/dir/a.txt")
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
    fs, path = resolve(bucket)
    assert fs.get_file_info(path).type == pafs.FileType.Directory


@pytest.mark.slow
def test_s3_unreachable_endpoint_is_described(s3, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    fs, path = resolve("s3://some-bucket/k")
    with pytest.raises(OSError) as info:
        fs.get_file_info(path)
    assert "could not be reached" in Location.of("s3://some-bucket/k").describe_os_error(info.value)


def test_s3_missing_bucket_and_key_are_told_apart(s3):
    bucket = s3.bucket()
    assert Location.of("s3://no-such-bucket/k").describe_missing()[0] == "no bucket named 'no-such-bucket'"
    assert Location.of(f"{bucket}/no/such/key").describe_missing()[0] == "no object or prefix at this URI"


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
    a, b = Location.of("abfs://a@acct.dfs.core.windows.net/x"), Location.of("abfs://b@acct.dfs.core.windows.net/x")
    assert not a.overlaps(b)
    assert a.overlaps(Location.of("abfs://a@acct.dfs.core.windows.net/x/y"))


# Redaction: a URI's credentials never show.

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize("uri, shown", [
    (f"s3://AKIDEXAMPLE:{SECRET}@bucket/key", "s3://AKIDEXAMPLE:***@bucket/key"),
    (f"s3a://AKID:{SECRET}@bucket/a/b?endpoint_override=h:1&scheme=http", "s3a://AKID:***@bucket/a/b?endpoint_override=h:1&scheme=http"),
    (f"hdfs://user:{SECRET}@namenode:8020/data", "hdfs://user:***@namenode:8020/data"),
    ("abfs://container@acct.dfs.core.windows.net/d", "abfs://container@acct.dfs.core.windows.net/d"),
    # Azure SAS token: only the signature is a secret; the rest stays readable.
    (f"abfs://c@acct.dfs.core.windows.net/d/x.parquet?sv=2022-11-02&ss=b&srt=co&sp=rl&se=2030-01-01T00:00:00Z&spr=https&sig={SECRET}%3D",
     "abfs://c@acct.dfs.core.windows.net/d/x.parquet?sv=2022-11-02&ss=b&srt=co&sp=rl&se=2030-01-01T00:00:00Z&spr=https&sig=***"),
    # Presigned S3 and GCS parameters, any case.
    (f"s3://b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20260101%2Fus-east-1%2Fs3%2Faws4_request"
     f"&X-Amz-Security-Token={SECRET}&X-Amz-Signature={SECRET}",
     "s3://b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***&X-Amz-Security-Token=***&X-Amz-Signature=***"),
    (f"gs://b/k?x-goog-signature={SECRET}&x-goog-credential=sa%40p.iam", "gs://b/k?x-goog-signature=***&x-goog-credential=***"),
    (f"abfs://c@acct.dfs.core.windows.net/d?SIG={SECRET}#frag", "abfs://c@acct.dfs.core.windows.net/d?SIG=***#frag"),
    ("s3://b/k?sig=", "s3://b/k?sig="),  # nothing to hide
    ("/tmp/user:pass@x/y", "/tmp/user:pass@x/y"),  # a local path is shown as given
])
def test_redact(uri, shown):
    assert redact(uri) == shown
    loc = Location.of(uri)
    assert str(loc) == f"{loc}" == shown and repr(loc) == f"Location({shown!r})"
    assert loc.full == uri  # the readers and writers get it whole
    assert SECRET not in str(loc / "x") + str(loc.parent) + str(loc.sibling("y"))


def test_a_rotated_key_is_the_same_location():
    old, new = Location.of(f"s3://OLDKEY:{SECRET}@b/out"), Location.of("s3://NEWKEY:other@b/out/")
    assert old.key == new.key == ("s3", "/b/out")
    assert old.contains(new / "part-0.parquet")
    sas = Location.of("abfs://c@acct.dfs.core.windows.net/d?sv=1&sig=one")
    assert sas.key == Location.of("abfs://c@acct.dfs.core.windows.net/d?sv=2&sig=two").key == ("abfs", "/c@acct.dfs.core.windows.net/d")


def test_errors_name_the_uri_redacted(monkeypatch):
    with pytest.raises(StorageError) as info:
        resolve(f"foo://KEY:{SECRET}@b/k")
    assert SECRET not in str(info.value) and SECRET not in info.value.uri and "foo://KEY:***@b/k" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__  # PyArrow's own text may quote the URI
    loc = Location.of(f"s3://KEY:{SECRET}@b/k")
    text = loc.describe_os_error(OSError(f"failed for s3://KEY:{SECRET}@b/k: AccessDenied"))
    assert SECRET not in text and text.startswith("s3://KEY:***@b/k: the store refused access")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"ftp://u:{SECRET}@host:1")
    with pytest.raises(StorageError) as info:
        resolve("s3://b/k")
    assert SECRET not in str(info.value)


def test_a_location_pickles_whole_and_shows_redacted(tmp_path, monkeypatch):
    uri = f"s3://KEY:{SECRET}@b/k?endpoint_override=h:1&scheme=http"
    back = pickle.loads(pickle.dumps(Location.of(uri)))
    assert back.full == uri and back == Location.of(uri) and SECRET not in str(back)
    monkeypatch.chdir(tmp_path)
    local = Location.of("rel/x")
    monkeypatch.chdir("/")
    assert pickle.loads(pickle.dumps(local)).path == str(tmp_path / "rel" / "x")  # the driver's absolute path travels
    with pytest.raises(TypeError, match="is a URI, not a local path"):
        os.fspath(back)
    with pytest.raises(TypeError, match="expected a local path or a URI"):
        Location.of(None)
