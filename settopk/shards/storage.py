"""Where a path or URI lives: a PyArrow filesystem and the path inside it.

Every input and output location of a job is a string: a local path (``corpus/docs.txt``) or a URI
of any filesystem PyArrow supports (``s3://bucket/corpus/``, ``gs://``, ``abfs://``, ``hdfs://``,
``file://``). :func:`resolve` turns one into a :class:`pyarrow.fs.FileSystem` and the path inside
it; the other helpers build and compare such strings without touching the store, so a file listed
under a URI is itself a URI that a reader task on any node resolves again and reads straight from
the store.

Credentials come from each store's standard chain (for S3: environment, ``~/.aws``, instance
role). An S3-compatible store (MinIO, Ceph, R2, a test server) is reached through the standard
``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` setting, which boto3 and the AWS CLI honor and
PyArrow ignores: :func:`resolve` passes it on as ``endpoint_override`` and ``scheme``.
``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true`` turns that off, as in the AWS SDKs. Nothing here is
settopk-specific, and nothing imports Ray.
"""

from __future__ import annotations

import os
import posixpath
import re
import urllib.parse

import pyarrow.fs as pafs

__all__ = ["StorageError", "basename", "describe_missing", "describe_os_error", "is_uri", "join", "location", "overlaps", "parent", "relative", "resolve"]

_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+)://")
# Two or more characters before "://": "C://x" is a Windows drive, not a URI.

# Stores whose first path component is a bucket (each is optional in a PyArrow build).
_BUCKET_STORES = tuple(getattr(pafs, name) for name in ("S3FileSystem", "GcsFileSystem") if hasattr(pafs, name))

_SCHEMES = "s3://, gs://, abfs://, hdfs:// or file://"


class StorageError(ValueError):
    """A location that cannot be used: an unknown scheme, a missing bucket, no credentials.

    The message names the path or URI and says how to fix it.

    Attributes
    ----------
    uri : str
        The path or URI at fault.
    """

    def __init__(self, uri: str, message: str):
        self.uri = uri
        super().__init__(message)

    def __reduce__(self):  # keeps ``uri`` across pickling (Ray ships exceptions between processes)
        return (type(self), (self.uri, self.args[0]))


def is_uri(text) -> bool:
    """Whether ``text`` is a URI (``scheme://...``) rather than a local path.

    Parameters
    ----------
    text : str or os.PathLike
        A path or URI. A :class:`pathlib.Path` is always local.

    Returns
    -------
    bool
        True for ``s3://b/k``, ``file:///tmp/x``; False for ``data/x``, ``/tmp/x`` and ``C:/x``.
    """
    return isinstance(text, str) and _URI.match(text) is not None


def _scheme(uri: str) -> str:
    return _URI.match(uri).group(1).lower()


def _s3_endpoint() -> str | None:
    """The S3 endpoint the standard AWS settings name, or None for AWS itself."""
    if os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
        return None
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def _with_s3_endpoint(uri: str) -> str:
    """``uri`` with ``endpoint_override`` and ``scheme`` query parameters from the AWS endpoint
    setting, unless the URI sets an endpoint itself."""
    endpoint = _s3_endpoint()
    if endpoint is None:
        return uri
    parts = urllib.parse.urlsplit(uri)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    if any(key == "endpoint_override" for key, _ in query):
        return uri
    ep = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    if not ep.netloc or ep.scheme not in ("http", "https"):
        raise StorageError(uri, f"{uri}: the S3 endpoint setting {endpoint!r} (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL) "
                                "is not an http(s) URL; fix: set it to the store's URL, such as http://127.0.0.1:9000")
    query += [("endpoint_override", ep.netloc), ("scheme", ep.scheme)]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def resolve(path_or_uri) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding ``path_or_uri`` and the path inside it.

    Parameters
    ----------
    path_or_uri : str or os.PathLike
        A local path (relative paths are taken from the working directory) or a URI:
        ``s3://bucket/key``, ``gs://``, ``abfs://``, ``hdfs://``, ``file:///abs/path``, or any other
        scheme :meth:`pyarrow.fs.FileSystem.from_uri` accepts. An ``s3://`` URI goes to the
        endpoint in ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` where one is set.

    Returns
    -------
    filesystem : pyarrow.fs.FileSystem
        A :class:`~pyarrow.fs.LocalFileSystem` for a local path or ``file://``.
    path : str
        The path inside ``filesystem``: absolute for a local file, ``bucket/key`` for S3.

    Raises
    ------
    StorageError
        For an unknown or unsupported scheme or a malformed URI. Nothing is contacted here:
        a missing bucket or missing credentials show on the first access
        (see :func:`describe_os_error`).
    """
    if not is_uri(path_or_uri):
        return pafs.LocalFileSystem(), os.path.abspath(os.fspath(path_or_uri))
    uri = path_or_uri
    target = _with_s3_endpoint(uri) if _scheme(uri) in ("s3", "s3a") else uri
    if _scheme(uri) == "s3a":  # Hadoop's name for the same store
        target = "s3" + target[3:]
    try:
        fs, path = pafs.FileSystem.from_uri(target)
    except (ValueError, OSError, ImportError, NotImplementedError) as exc:
        text = str(exc)
        if "Unrecognized filesystem type" in text:
            fix = f"use a local path or a URI of a filesystem PyArrow supports ({_SCHEMES})"
            found = f"the unknown scheme {_scheme(uri)!r}"
        elif "libjvm" in text or "libhdfs" in text:
            fix = "install Java and Hadoop's libhdfs on every node (JAVA_HOME, HADOOP_HOME, CLASSPATH), or copy the data to another store"
            found = f"no HDFS client on this machine ({text.splitlines()[0]})"
        elif "not built with" in text.lower() or ("support" in text.lower() and "built" in text.lower()):
            fix = f"install a PyArrow build with {_scheme(uri)} support, or copy the data to a supported store ({_SCHEMES})"
            found = "a filesystem this PyArrow build lacks"
        else:
            fix = "check the URI's spelling (scheme://bucket/key) and its query parameters"
            found = f"an unusable URI ({text.splitlines()[0] if text else type(exc).__name__})"
        raise StorageError(uri, f"{uri}: expected a local path or a filesystem URI, found {found}; fix: {fix}") from exc
    if isinstance(fs, pafs.S3FileSystem) and not path.split("/", 1)[0]:
        raise StorageError(uri, f"{uri}: expected s3://BUCKET/KEY, found no bucket name; fix: name the bucket, as in s3://my-bucket/corpus/")
    return fs, path


def describe_os_error(path_or_uri: str, exc: BaseException) -> str:
    """What went wrong accessing ``path_or_uri`` and how to fix it, in one line.

    Parameters
    ----------
    path_or_uri : str
        The path or URI being accessed.
    exc : BaseException
        The error PyArrow raised (usually :class:`OSError`).

    Returns
    -------
    str
        ``"<uri>: <what>; fix: <how>"``: missing bucket, access denied or missing credentials,
        unreachable endpoint, or PyArrow's own message with a generic fix.
    """
    text = " ".join(str(exc).split())
    low = text.lower()
    if "nosuchbucket" in low or "no_such_bucket" in low or "bucket does not exist" in low:
        what, fix = "the bucket does not exist", "create the bucket or correct its name in the URI"
    elif any(s in low for s in ("accessdenied", "access denied", "access_denied", "forbidden", "invalidaccesskeyid", "signaturedoesnotmatch", "credential", "http status 403")):
        what, fix = "the store refused access (missing or wrong credentials)", (
            "provide credentials through the store's standard chain (for S3: AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE or an instance role) with access to this location")
    elif any(s in low for s in ("couldn't connect", "could not connect", "connection refused", "curl error", "timed out", "resolve host")):
        what, fix = "the store could not be reached", "check the endpoint (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL for an S3-compatible store) and the network"
    elif "invalidbucketname" in low or "unable to parse exceptionname" in low:
        what, fix = "the store rejected the request (an invalid bucket name?)", "use a bucket name of 3 to 63 lowercase letters, digits, dots and hyphens"
    else:
        what, fix = text or type(exc).__name__, "check the location and access to it"
    return f"{path_or_uri}: {what} ({text}); fix: {fix}" if what != text else f"{path_or_uri}: {what}; fix: {fix}"


def describe_missing(path_or_uri) -> tuple[str, str]:
    """Why nothing exists at ``path_or_uri``, as ``(found, fix)`` for an error message.

    For a URI of a bucket store (S3, GCS), a missing bucket is told apart from a missing key;
    this asks the store once.

    Parameters
    ----------
    path_or_uri : str or os.PathLike
        A location that was found missing.

    Returns
    -------
    found : str
        ``"nothing at this path"``, ``"no object or prefix at this URI"`` or ``"no bucket named B"``.
    fix : str
        How to fix it.
    """
    if not is_uri(path_or_uri):
        return "nothing at this path", "check the path and the working directory"
    try:
        fs, path = resolve(path_or_uri)
        bucket = path.split("/", 1)[0]
        if isinstance(fs, _BUCKET_STORES) and bucket and fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            return f"no bucket named {bucket!r}", "create the bucket or correct its name in the URI (and check the endpoint for an S3-compatible store)"
    except (OSError, StorageError):  # the store cannot tell: fall back to the general message
        pass
    return "no object or prefix at this URI", "check the URI (bucket, key and any trailing '/')"


def _split(uri: str) -> tuple[urllib.parse.SplitResult, str]:
    parts = urllib.parse.urlsplit(uri)
    return parts, parts.path


def join(base, *names: str) -> str:
    """``base`` with ``names`` appended, as a local path or a URI like ``base``.

    Parameters
    ----------
    base : str or os.PathLike
        A local path or a URI (its query parameters are kept).
    *names : str
        Path components, joined with ``/`` for a URI.

    Returns
    -------
    str
    """
    if not is_uri(base):
        return os.path.join(os.fspath(base), *names)
    parts, path = _split(base)
    for name in names:
        path = path.rstrip("/") + "/" + name.lstrip("/")
    return urllib.parse.urlunsplit(parts._replace(path=path))


def basename(path_or_uri) -> str:
    """The last component of a local path or a URI's path (trailing ``/`` ignored)."""
    if not is_uri(path_or_uri):
        return os.path.basename(os.path.normpath(os.fspath(path_or_uri)))
    path = _split(path_or_uri)[1].rstrip("/")
    return posixpath.basename(path) if path else urllib.parse.urlsplit(path_or_uri).netloc


def parent(path_or_uri) -> str:
    """The location holding ``path_or_uri``: ``os.path.dirname`` of a local path, or the URI with
    its last path component dropped (``s3://b/d/f`` → ``s3://b/d``)."""
    if not is_uri(path_or_uri):
        return os.path.dirname(os.path.abspath(os.fspath(path_or_uri)))
    parts, path = _split(path_or_uri)
    return urllib.parse.urlunsplit(parts._replace(path=posixpath.dirname(path.rstrip("/"))))


def relative(path_or_uri, base) -> str:
    """``path_or_uri`` relative to ``base`` (``/``-separated for a URI), e.g. a file's name within
    an input directory. Both must be of the same kind (two local paths, or two URIs)."""
    if not is_uri(path_or_uri):
        return os.path.relpath(os.fspath(path_or_uri), os.fspath(base))
    return posixpath.relpath(_split(path_or_uri)[1], _split(base)[1].rstrip("/") or "/")


def location(path_or_uri) -> tuple[str, str]:
    """A normalised ``(store, path)`` for comparing locations without touching them.

    Parameters
    ----------
    path_or_uri : str or os.PathLike
        A local path or a URI.

    Returns
    -------
    store : str
        ``"file"`` for a local path or ``file://`` URI; otherwise the lowercased scheme (``s3a``
        counts as ``s3``), with the endpoint where the URI names one.
    path : str
        An absolute, normalised path: the local path, or ``/bucket/key`` for a URI (no trailing
        ``/``, repeated ``/`` collapsed).
    """
    if not is_uri(path_or_uri):
        return "file", os.path.normpath(os.path.abspath(os.fspath(path_or_uri)))
    parts = urllib.parse.urlsplit(path_or_uri)
    scheme = parts.scheme.lower()
    if scheme == "file":
        return "file", os.path.normpath(urllib.parse.unquote(parts.path))
    scheme = "s3" if scheme == "s3a" else scheme
    endpoint = dict(urllib.parse.parse_qsl(parts.query)).get("endpoint_override")
    store = f"{scheme}@{endpoint}" if endpoint else scheme
    # The whole netloc: for abfs:// it is container@account, both part of the location.
    path = posixpath.normpath("/" + parts.netloc + "/" + parts.path.lstrip("/"))
    return store, path.rstrip("/") or "/"


def overlaps(a, b) -> bool:
    """Whether two locations are the same or one lies inside the other.

    Compares :func:`location` s component by component: ``s3://b/out`` and ``s3://b/out/part``
    overlap, ``s3://b/out`` and ``s3://b/output`` do not, and a URI never overlaps a local path
    (``file://`` URIs are local paths).
    """
    store_a, path_a = location(a)
    store_b, path_b = location(b)
    if store_a != store_b:
        return False
    shorter, longer = sorted((path_a, path_b), key=len)
    return longer == shorter or longer.startswith(shorter.rstrip("/") + "/")
