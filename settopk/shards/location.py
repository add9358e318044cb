"""Locations: every path and URI the job reads or writes, as one type that never shows a secret.

A path or URI becomes a :class:`Location` where it enters (the command line, a library call:
:meth:`Location.of`), and the code below takes that type, never a string. A location is a local
path (``corpus/docs.txt``) or a URI of any filesystem PyArrow supports (``s3://bucket/corpus/``,
``gs://``, ``abfs://``, ``hdfs://``, ``file://``). It holds the :class:`pyarrow.fs.FileSystem` and
the path inside it (:attr:`Location.fs`, :attr:`Location.path`), builds and compares locations
(``/``, :attr:`~Location.parent`, :meth:`~Location.contains`, :attr:`~Location.key`) and does
the few file operations the job needs. This module is the only one that parses a path or URI.

**Credentials in a URI.** PyArrow takes credentials inside a URI (``s3://KEY:SECRET@bucket/key``)
and other stores put them in the query string (Azure SAS ``?sv=...&sig=...``, presigned
``X-Amz-Signature``, ``X-Amz-Credential``, ``X-Amz-Security-Token``). A location's display form
(``str``, ``repr``, ``format``: every log line, error message, manifest and record the job
writes) is :func:`redact` of it: the user-info's password and the values of the known credential
parameters become ``***``. The readers and writers get the full URI (:attr:`Location.fs` is
built from it, and a location pickled for a Ray task carries it). Comparisons
(:attr:`Location.key`) leave the credentials out, so a rerun after a key rotation is the same run.

Other credentials come from each store's standard chain (for S3: environment, ``~/.aws``,
instance role). An S3-compatible store (MinIO, Ceph, R2, a test server) is reached through the
standard ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` setting, which boto3 and the AWS CLI
honor and PyArrow ignores: :func:`resolve` passes it on as ``endpoint_override`` and ``scheme``.
``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true`` turns that off, as in the AWS SDKs. Nothing here is
settopk-specific, and nothing imports Ray.
"""

from __future__ import annotations

import os
import posixpath
import re
import urllib.parse
import uuid

import pyarrow.fs as pafs

__all__ = ["CREDENTIAL_PARAMETERS", "Location", "MASK", "StorageError", "is_uri", "redact", "resolve"]

_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+)://")
# Two or more characters before "://": "C://x" is a Windows drive, not a URI.

# Stores whose first path component is a bucket (each is optional in a PyArrow build).
_BUCKET_STORES = tuple(getattr(pafs, name) for name in ("S3FileSystem", "GcsFileSystem") if hasattr(pafs, name))
# Schemes whose URI host is the bucket, so that any user-info is a credential (the access key id).
_BUCKET_SCHEMES = ("s3", "s3a", "gs", "gcs")

_SCHEMES = "s3://, gs://, abfs://, hdfs:// or file://"

MASK = "***"
"""What stands in a displayed URI for a password or a credential parameter's value."""

CREDENTIAL_PARAMETERS = frozenset({
    "sig", "signature",  # Azure SAS tokens, generic signed URLs
    "x-amz-signature", "x-amz-credential", "x-amz-security-token",  # S3 presigned URLs
    "x-goog-signature", "x-goog-credential",  # GCS signed URLs
    "access_key", "secret_key", "secret_access_key", "session_token", "security_token",
    "sas_token", "account_key", "client_secret", "password", "token", "api_key",
})
"""Query-string parameters whose values are credentials (compared case-insensitively): their
values are shown as :data:`MASK`."""


class StorageError(ValueError):
    """A location that cannot be used: an unknown scheme, a missing bucket, no credentials.

    The message names the location (redacted: :func:`redact`) and says how to fix it.

    Attributes
    ----------
    uri : str
        The path or URI at fault, redacted.
    """

    def __init__(self, uri, message: str):
        self.uri = redact(uri)
        super().__init__(message)

    def __reduce__(self):  # keeps ``uri`` across pickling (Ray ships exceptions between processes)
        return (type(self), (self.uri, self.args[0]))


def is_uri(text) -> bool:
    """Whether ``text`` is a URI (``scheme://...``) rather than a local path.

    Parameters
    ----------
    text : str, os.PathLike or Location
        A path or URI. A :class:`pathlib.Path` is always local.

    Returns
    -------
    bool
        True for ``s3://b/k``, ``file:///tmp/x``; False for ``data/x``, ``/tmp/x`` and ``C:/x``.
    """
    if isinstance(text, Location):
        return is_uri(text.full)
    return isinstance(text, str) and _URI.match(text) is not None


def _scheme(uri: str) -> str:
    return _URI.match(uri).group(1).lower()


def _redact_parameter(item: str) -> str:
    name, sep, value = item.partition("=")
    if sep and value and urllib.parse.unquote_plus(name).strip().lower() in CREDENTIAL_PARAMETERS:
        return f"{name}={MASK}"
    return item


def redact(text) -> str:
    """``text`` for display: a URI without the secrets it may hold, anything else as it is.

    Parameters
    ----------
    text : str, os.PathLike or Location
        A local path or a URI.

    Returns
    -------
    str
        The URI with the password of its user-info and the values of the credential parameters
        of its query string (:data:`CREDENTIAL_PARAMETERS`, any case) replaced by ``***``; the
        scheme, user name, host, path and other parameters stay readable:
        ``s3://KEY:SECRET@bucket/key`` shows as ``s3://KEY:***@bucket/key`` and
        ``abfs://c@acct.dfs.core.windows.net/d?sv=2022-11-02&sig=abc`` as ``...?sv=2022-11-02&sig=***``.
        A local path is returned as given.
    """
    if isinstance(text, Location):
        return str(text)
    text = os.fspath(text) if not isinstance(text, str) else text
    if not is_uri(text):
        return text
    scheme, rest = text.split("://", 1)
    authority_end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, tail = rest[:authority_end], rest[authority_end:]
    if "@" in authority:
        userinfo, host = authority.rsplit("@", 1)
        if ":" in userinfo:
            authority = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    before, qmark, query = tail.partition("?")
    if qmark:
        query, hash_, fragment = query.partition("#")
        query = "&".join(_redact_parameter(item) for item in query.split("&")) + hash_ + fragment
    return f"{scheme}://{authority}{before}{qmark}{query}"


def _secrets(uri: str) -> list[str]:
    """The secrets :func:`redact` hides in ``uri``, raw and percent-decoded (to scrub other texts)."""
    found = []
    rest = uri.split("://", 1)[1] if is_uri(uri) else ""
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority and ":" in authority.rsplit("@", 1)[0]:
        found.append(authority.rsplit("@", 1)[0].split(":", 1)[1])
    query = rest.partition("?")[2].partition("#")[0]
    for item in query.split("&") if query else ():
        name, sep, value = item.partition("=")
        if sep and value and urllib.parse.unquote_plus(name).strip().lower() in CREDENTIAL_PARAMETERS:
            found.append(value)
    out = []
    for secret in found:
        for form in (secret, urllib.parse.unquote(secret), urllib.parse.unquote_plus(secret)):
            if form and form not in out:
                out.append(form)
    return sorted(out, key=len, reverse=True)


def _scrub(text: str, uri: str) -> str:
    """``text`` (a message from PyArrow or a store) with every secret of ``uri`` masked."""
    for secret in _secrets(uri):
        text = text.replace(secret, MASK)
    return text


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
        raise StorageError(uri, f"{redact(uri)}: the S3 endpoint setting {redact(endpoint)!r} (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL) "
                                "is not an http(s) URL; fix: set it to the store's URL, such as http://127.0.0.1:9000")
    extra = urllib.parse.urlencode([("endpoint_override", ep.netloc), ("scheme", ep.scheme)])
    return urllib.parse.urlunsplit(parts._replace(query=f"{parts.query}&{extra}" if parts.query else extra))


def resolve(path_or_uri) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding ``path_or_uri`` and the path inside it.

    Parameters
    ----------
    path_or_uri : str, os.PathLike or Location
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
        For an unknown or unsupported scheme or a malformed URI, naming it redacted. Nothing is
        contacted here: a missing bucket or missing credentials show on the first access
        (:meth:`Location.describe_os_error`).
    """
    if isinstance(path_or_uri, Location):
        return path_or_uri.fs, path_or_uri.path
    if not is_uri(path_or_uri):
        return pafs.LocalFileSystem(), os.path.abspath(os.fspath(path_or_uri))
    uri = path_or_uri
    shown = redact(uri)
    target = _with_s3_endpoint(uri) if _scheme(uri) in ("s3", "s3a") else uri
    if _scheme(uri) == "s3a":  # Hadoop's name for the same store
        target = "s3" + target[3:]
    try:
        fs, path = pafs.FileSystem.from_uri(target)
    except (ValueError, OSError, ImportError, NotImplementedError) as exc:
        text = _scrub(str(exc), uri)
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
        # from None: PyArrow's own message may quote the URI with its secrets
        raise StorageError(uri, f"{shown}: expected a local path or a filesystem URI, found {found}; fix: {fix}") from None
    if isinstance(fs, pafs.S3FileSystem) and not path.split("/", 1)[0]:
        raise StorageError(uri, f"{shown}: expected s3://BUCKET/KEY, found no bucket name; fix: name the bucket, as in s3://my-bucket/corpus/")
    return fs, path


def _describe(shown: str, text: str) -> str:
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
        what, fix = text or "an error", "check the location and access to it"
    return f"{shown}: {what} ({text}); fix: {fix}" if what != text else f"{shown}: {what}; fix: {fix}"


class Location:
    """A local path or a URI: its filesystem, the path inside it, and a display form without secrets.

    Make one with :meth:`Location.of`; build others from it (``loc / "name"``, :attr:`parent`,
    :meth:`sibling`). Immutable; equal where the form given is equal; pickles with the full
    URI, so a Ray task on any node opens the store itself.

    Attributes
    ----------
    fs : pyarrow.fs.FileSystem
        Resolved on first use (:func:`resolve`); a :class:`~pyarrow.fs.LocalFileSystem` for a
        local path or a ``file://`` URI.
    path : str
        The path inside ``fs``: absolute for a local path, ``bucket/key`` (no trailing ``/``)
        for S3.
    full : str
        The form given, with any credentials: for readers and writers only, never to show.
    local : bool
        A local path or ``file://`` URI.

    Notes
    -----
    A location equals the string it was made from, and a local one is :class:`os.PathLike`
    (its absolute path). ``str``, ``repr`` and ``format`` give :func:`redact` of the form given, so every message,
    log line and record that names a location is free of its secrets.
    """

    __slots__ = ("_given", "_fs", "_path", "_local")

    def __init__(self, given, _fs=None, _path=None):
        given = given if isinstance(given, str) else os.fspath(given)
        self._given = given
        self._local = not is_uri(given) or _scheme(given) == "file"
        self._fs, self._path = _fs, _path
        if self._local:
            if self._path is None:
                inner = urllib.parse.unquote(urllib.parse.urlsplit(given).path) if is_uri(given) else given
                self._path = os.path.abspath(inner)
            self._fs = self._fs or pafs.LocalFileSystem()

    @classmethod
    def of(cls, location) -> "Location":
        """The location of a local path (``str`` or :class:`os.PathLike`) or a URI; a
        :class:`Location` is returned as it is.

        Raises
        ------
        TypeError
            For anything else (None included), naming what was found.
        """
        if isinstance(location, Location):
            return location
        if isinstance(location, (str, os.PathLike)):
            return cls(location)
        raise TypeError(f"expected a local path or a URI (str or os.PathLike), found {type(location).__name__} {location!r}")

    @classmethod
    def real(cls, location) -> "Location":
        """:meth:`of`, with a local path's symbolic links followed (:meth:`resolved`): for the
        outputs, so two spellings of one directory meet."""
        return cls.of(location).resolved()

    @classmethod
    def optional(cls, location) -> "Location | None":
        """:meth:`of`, or None for None (an option not given)."""
        return None if location is None else cls.of(location)

    # --- display -------------------------------------------------------------------------------
    def __str__(self) -> str:
        return redact(self._given)

    def __repr__(self) -> str:
        return f"Location({str(self)!r})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __reduce__(self):
        # The full form travels (a reader task needs its credentials); a local path keeps the
        # absolute path the driver resolved, whatever the worker's working directory.
        return (Location, (self._given, None, self._path if self._local else None))

    def __eq__(self, other) -> bool:
        if isinstance(other, str):  # the form it was made from (hash alike), for callers holding strings
            return other == self._given
        return isinstance(other, Location) and (self._given, self._path if self._local else None) == (
            other._given, other._path if other._local else None)

    def __fspath__(self) -> str:
        """The absolute local path (:class:`os.PathLike`); a URI has none."""
        if not self._local:
            raise TypeError(f"{self} is a URI, not a local path: open it through Location.fs and Location.path")
        return self._path

    def __hash__(self) -> int:
        return hash(self._given)

    def describe_os_error(self, exc: BaseException) -> str:
        """What went wrong accessing this location and how to fix it, in one line:
        ``"<location>: <what>; fix: <how>"`` (missing bucket, refused access, unreachable store,
        or the error's own text with a generic fix), secrets masked."""
        return _describe(str(self), _scrub(" ".join(str(exc).split()), self._given) or type(exc).__name__)

    def describe_missing(self) -> tuple[str, str]:
        """Why nothing exists here, as ``(found, fix)`` for an error message.

        For a bucket store (S3, GCS), a missing bucket is told apart from a missing key; this
        asks the store once.
        """
        if self.local:
            return "nothing at this path", "check the path and the working directory"
        try:
            bucket = self.path.split("/", 1)[0]
            if isinstance(self.fs, _BUCKET_STORES) and bucket and self.fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                return f"no bucket named {bucket!r}", "create the bucket or correct its name in the URI (and check the endpoint for an S3-compatible store)"
        except (OSError, StorageError):  # the store cannot tell: fall back to the general message
            pass
        return "no object or prefix at this URI", "check the URI (bucket, key and any trailing '/')"

    # --- what it is ----------------------------------------------------------------------------
    @property
    def full(self) -> str:
        return self._given

    @property
    def local(self) -> bool:
        return self._local

    @property
    def renames(self) -> bool:
        """The filesystem renames a directory in one atomic step (local disks; not object stores)."""
        return self._local

    @property
    def relative(self) -> bool:
        """A local path given relative to the working directory."""
        return not is_uri(self._given) and not os.path.isabs(self._given)

    def _resolve(self) -> None:
        if self._fs is None:
            fs, path = resolve(self._given)
            self._fs, self._path = fs, (path.rstrip("/") or path)

    @property
    def fs(self) -> pafs.FileSystem:
        self._resolve()
        return self._fs

    @property
    def path(self) -> str:
        self._resolve()
        return self._path

    def _uri_path(self) -> str:
        return urllib.parse.urlsplit(self._given).path

    @property
    def name(self) -> str:
        """The last component (trailing ``/`` ignored; a URI's host where its path is empty)."""
        if self._local:
            return posixpath.basename(self._path)
        path = self._uri_path().rstrip("/")
        return posixpath.basename(path) if path else urllib.parse.urlsplit(self._given).hostname or ""

    @property
    def key(self) -> tuple[str, str]:
        """``(store, path)`` for comparing locations without touching them, and without credentials.

        ``store`` is ``"file"`` for a local path, else the lowercased scheme (``s3a`` counts as
        ``s3``) with the endpoint where the URI names one; ``path`` is absolute and normalised:
        the local path, or ``/HOST/key`` for a URI (no trailing ``/``, repeated ``/``
        collapsed). The user-info of a bucket store (an access key) and any password are left out,
        so a rotated key gives the same key; a user name that is part of the location (an abfs
        container) stays.
        """
        if self._local:
            return "file", os.path.normpath(self._path)
        parts = urllib.parse.urlsplit(self._given)
        scheme = parts.scheme.lower()
        scheme = "s3" if scheme == "s3a" else scheme
        host = parts.netloc.rsplit("@", 1)[-1]
        if "@" in parts.netloc and scheme not in _BUCKET_SCHEMES:
            host = parts.netloc.rsplit("@", 1)[0].split(":", 1)[0] + "@" + host
        endpoint = dict(urllib.parse.parse_qsl(parts.query)).get("endpoint_override")
        store = f"{scheme}@{endpoint}" if endpoint else scheme
        path = posixpath.normpath("/" + host + "/" + parts.path.lstrip("/"))
        return store, path.rstrip("/") or "/"

    def contains(self, other: "Location") -> bool:
        """``other`` is this location or lies under it (compared by :attr:`key`, whole components)."""
        (store_a, a), (store_b, b) = self.key, other.key
        return store_a == store_b and (b == a or b.startswith(a.rstrip("/") + "/"))

    def overlaps(self, other: "Location") -> bool:
        """The two are the same, or one lies inside the other; a URI never overlaps a local path."""
        return self.contains(other) or other.contains(self)

    @property
    def shown(self):
        """The form for return values: a :class:`pathlib.Path` (absolute) for a local path, the
        location itself for a URI (its ``str`` redacted)."""
        import pathlib

        return pathlib.Path(self.path) if self._local else self

    def resolved(self) -> "Location":
        """A local path with its symbolic links followed (given as that path); a URI as it is."""
        if not self._local:
            return self
        real = os.path.realpath(self._path)
        return Location(real, pafs.LocalFileSystem(), real)

    # --- related locations ---------------------------------------------------------------------
    def __truediv__(self, name: str) -> "Location":
        """The location ``name`` inside this one (``/``-joined; a URI keeps its query)."""
        if self._local and not is_uri(self._given):
            return Location(os.path.join(self._given, name), self._fs, os.path.join(self._path, name))
        parts = urllib.parse.urlsplit(self._given)
        given = urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + name.lstrip("/")))
        if self._fs is None:
            return Location(given)
        return Location(given, self._fs, posixpath.join(self._path, name.strip("/")))

    @property
    def parent(self) -> "Location":
        """The location holding this one (``s3://b/d/f`` -> ``s3://b/d``; a local path's
        absolute directory)."""
        if self._local and not is_uri(self._given):
            up = os.path.dirname(self._path)
            return Location(up, self._fs, up)
        parts = urllib.parse.urlsplit(self._given)
        given = urllib.parse.urlunsplit(parts._replace(path=posixpath.dirname(parts.path.rstrip("/"))))
        if self._fs is None:
            return Location(given)
        return Location(given, self._fs, posixpath.dirname(self._path) or self._path)

    def sibling(self, name: str) -> "Location":
        """The location ``name`` beside this one."""
        return self.parent / name

    def relative_to(self, base: "Location") -> str:
        """This location's path relative to ``base`` (``/``-separated for a URI), e.g. a file's
        name within an input directory; both local, or both URIs."""
        if self._local:
            return os.path.relpath(self._path, base._path)
        return posixpath.relpath(self._uri_path(), base._uri_path().rstrip("/") or "/")

    # --- file operations -----------------------------------------------------------------------
    def info(self) -> pafs.FileInfo:
        return self.fs.get_file_info(self.path)

    def kind(self) -> pafs.FileType:
        return self.info().type

    def exists(self) -> bool:
        return self.kind() != pafs.FileType.NotFound

    def is_file(self) -> bool:
        return self.kind() == pafs.FileType.File

    def is_dir(self) -> bool:
        return self.kind() == pafs.FileType.Directory

    def children(self) -> list[pafs.FileInfo]:
        """The entries directly inside (none where nothing is there)."""
        return self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))

    def open_input_stream(self):
        """Opened for sequential binary reading, without decompression."""
        return self.fs.open_input_stream(self.path, compression=None)

    def read_bytes(self) -> bytes:
        with self.open_input_stream() as f:
            return f.read()

    def write_bytes(self, data: bytes) -> None:
        """Write ``data`` atomically, so no reader sees part of it: on a local disk to a temporary
        name beside, then renamed; on a store in one upload (an object appears whole or not at all)."""
        if not self.local:
            with self.fs.open_output_stream(self.path) as f:
                f.write(data)
            return
        tmp = self.sibling(f".{self.name}.tmp-{uuid.uuid4().hex}")
        try:
            with self.fs.open_output_stream(tmp.path) as f:
                f.write(data)
            tmp.move_to(self)
        finally:
            tmp.delete(missing_ok=True)

    def move_to(self, target: "Location") -> None:
        """Rename (local: ``os.replace`` for a file, ``os.rename`` for a directory) or move (a store)."""
        if self.local:
            (os.rename if os.path.isdir(self.path) else os.replace)(self.path, target.path)
        else:
            self.fs.move(self.path, target.path)

    def delete(self, missing_ok: bool = False) -> None:
        """Delete a file."""
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            if not missing_ok:
                raise
        except OSError:
            if not missing_ok or self.exists():
                raise

    def delete_tree(self) -> None:
        """Delete a directory and everything under it (nothing where nothing is there)."""
        if self.kind() == pafs.FileType.Directory:
            self.fs.delete_dir(self.path)

    def make_dirs(self) -> None:
        """Create the directory and its parents (a store has no directories: nothing to do)."""
        if self.local:
            self.fs.create_dir(self.path, recursive=True)
