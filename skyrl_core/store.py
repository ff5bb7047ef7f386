"""Where a run store lives: a local folder, or any fsspec URL (``s3://bucket/prefix``, ``memory://x``).

Both kinds answer the same few calls (read, read a byte range, put a whole file atomically, list one
folder, delete), so the run store's reader and writer (``skyrl_core.runs``) and the checkpoint code
(``skyrl_engine.checkpoint``) are written once against them. A local folder keeps what the run store
always did there: ``put`` is a temp file, fsync and rename; ``append`` is an append. An object store
has no append and no rename: ``put`` is one object PUT (atomic by itself) and the run store's logs are
rolled segments rewritten whole (see ``skyrl_core.runs``).

fsspec (and s3fs for ``s3://``) is imported only by an object store, so a local run store never needs it.
Every listing of an object store asks the server (fsspec's listings cache is bypassed): a reader
following a run must see what a writer on another machine put a moment ago.
"""

from __future__ import annotations

import errno
import html
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_URL_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def url_scheme(location: str | os.PathLike[str]) -> str | None:
    """The scheme of an fsspec URL (``s3`` for ``s3://b/x``); None for a local path (``file://`` too)."""
    m = _URL_RE.match(os.fspath(location))
    if not m or m.group(1).lower() == "file":
        return None
    return m.group(1).lower()


def is_url(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` names an object store (an fsspec URL other than ``file://``), not a local path."""
    return url_scheme(location) is not None


def join(base: str | os.PathLike[str], *names: str) -> str | Path:
    """``base / names``: a Path for a local folder, ``base/names`` with ``/`` for a URL."""
    if is_url(base):
        return "/".join([os.fspath(base).rstrip("/"), *(n.strip("/") for n in names if n)])
    return Path(os.path.expanduser(os.fspath(base)).removeprefix("file://")).joinpath(*names)


_S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
S3_BUCKET_RULE = "bucket: 3-63 lowercase letters, digits, '.' and '-'"


def s3_bucket_prefix(url: Any) -> tuple[str, str] | None:
    """``(bucket, prefix)`` of ``s3://bucket/prefix`` (the prefix without its outer slashes; "" when none), or None
    when ``url`` is not an ``s3://`` URL with a valid bucket name (`S3_BUCKET_RULE`)."""
    if not isinstance(url, str) or not url.startswith("s3://"):
        return None
    bucket, _, prefix = url[len("s3://"):].partition("/")
    if not _S3_BUCKET.fullmatch(bucket) or ".." in bucket:
        return None
    return bucket, prefix.strip("/")


def location_key(location: str | os.PathLike[str]) -> str:
    """One spelling per run directory, to match them up: a URL without a trailing ``/``, an absolute path."""
    if is_url(location):
        return os.fspath(location).rstrip("/")
    return os.path.abspath(os.path.expanduser(os.fspath(location)))


def url_problem(url: str, key: str, *, check_files: bool = True) -> str | None:
    """The one-line problem with an object-store URL used as ``key``, or None.

    The scheme must be one fsspec knows, with a bucket (or host) after it; with ``check_files``, the
    package that serves the scheme (s3fs for ``s3://``) must be importable here. No request is made.
    """
    scheme = url_scheme(url)
    rest = url[len(scheme) + 3:] if scheme else ""
    if not rest.strip("/"):
        return f"{key}: {url!r} names no bucket; use {scheme}://<bucket>/<prefix>"
    try:
        from fsspec.registry import known_implementations, registry
    except ImportError:
        return f"{key}: {url!r} needs fsspec (pip install 'skyrl-nb[aws]' for s3://)"
    if scheme not in known_implementations and scheme not in registry:
        return (f"{key}: {url!r} has the scheme {scheme!r}, which fsspec does not know; use a local path or "
                "s3://<bucket>/<prefix>")
    if check_files:
        try:
            from fsspec.registry import get_filesystem_class

            get_filesystem_class(scheme)
        except (ImportError, ValueError) as err:
            hint = "pip install 'skyrl-nb[aws]'" if scheme in ("s3", "s3a") else str(err).split("\n")[0][:120]
            return f"{key}: {url!r} needs the package that serves {scheme}:// ({hint})"
    return None


@dataclass(frozen=True)
class Entry:
    """One file in a listing: its size and a tag that changes whenever it is rewritten (ETag, inode)."""

    size: int
    tag: str


def os_reason(err: OSError) -> str:
    """Why a file or folder could not be read, in words: ``a symbolic-link loop``, ``permission denied``."""
    if err.errno == errno.ELOOP:
        return "a symbolic-link loop"
    if err.errno in (errno.EACCES, errno.EPERM):
        return "permission denied for this user"
    if err.errno == errno.ENOTDIR:
        return "a file, not a folder"
    return err.strerror or " ".join(str(err).split())[:120] or type(err).__name__


def _joined(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _note(problems: list[str], name: str, err: OSError) -> None:
    line = f"{name} cannot be read ({os_reason(err)}); skipped"
    if line not in problems:
        problems.append(line)


class LocalStore:
    """A folder on this machine's disk."""

    local = True

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(os.path.expanduser(os.fspath(root)).removeprefix("file://"))

    @property
    def url(self) -> str:
        return str(self.root)

    def path(self, name: str = "") -> Path:
        return self.root / name if name else self.root

    def read(self, name: str) -> bytes:
        """The file's bytes; FileNotFoundError when it is missing."""
        return self.path(name).read_bytes()

    def read_range(self, name: str, start: int, end: int) -> bytes:
        with self.path(name).open("rb") as f:
            f.seek(start)
            return f.read(end - start)

    def put(self, name: str, data: bytes) -> None:
        """Replace the file atomically (temp file in the same folder, fsync, rename)."""
        path = self.path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        # pid and thread in the name: a heartbeat thread and the main loop may both write status.json
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def append(self, name: str, data: bytes) -> None:
        with self.path(name).open("ab") as f:
            f.write(data)
            f.flush()

    def list(self, folder: str = "", *, problems: list[str] | None = None) -> dict[str, Entry]:
        """The files directly in ``folder`` (names relative to it): ``{name: Entry}``; {} when it is missing.

        With ``problems`` (a list), what cannot be read is skipped and named there, one line each: the
        folder itself (not a folder, unreadable for this user, a symbolic-link loop) or one entry in it
        (a link loop, an entry this user may not look at). Without it such a problem raises ``OSError``.
        """
        out: dict[str, Entry] = {}
        try:
            with os.scandir(self.path(folder)) as entries:
                for e in entries:
                    try:
                        if e.is_file():
                            st = e.stat()
                            out[e.name] = Entry(st.st_size, f"{st.st_ino}:{st.st_mtime_ns}")
                    except OSError as err:
                        if problems is None:
                            raise
                        _note(problems, _joined(folder, e.name), err)
        except FileNotFoundError:
            pass
        except NotADirectoryError as err:
            if problems is not None and folder:
                _note(problems, folder, err)
        except OSError as err:
            if problems is None:
                raise
            _note(problems, folder or str(self.root), err)
        return out

    def folders(self, folder: str = "", *, problems: list[str] | None = None) -> list[str]:
        """The sub-folders directly in ``folder``; ``problems``: as for :meth:`list`."""
        found = []
        try:
            with os.scandir(self.path(folder)) as entries:
                for e in entries:
                    try:
                        if e.is_dir():
                            found.append(e.name)
                    except OSError as err:
                        if problems is None:
                            raise
                        _note(problems, _joined(folder, e.name), err)
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as err:
            if problems is None:
                raise
            _note(problems, folder or str(self.root), err)
        return sorted(found)

    def exists(self, name: str) -> bool:
        return self.path(name).exists()

    def delete(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


class ObjectStore:
    """A prefix of an object store reached through fsspec (s3fs for ``s3://``).

    Credentials and the endpoint come from the environment as the filesystem package reads them
    (for S3: ``AWS_*`` variables, ``AWS_ENDPOINT_URL_S3``, an instance or pod role); none is kept here.
    """

    local = False

    def __init__(self, url: str, fs: Any = None):
        import fsspec

        self.url = url.rstrip("/")
        self.root = self.url
        if fs is None:
            fs, _ = fsspec.core.url_to_fs(self.url)
        self.fs = fs
        self._base = fs._strip_protocol(self.url).rstrip("/")

    def _key(self, name: str) -> str:
        return f"{self._base}/{name}" if name else self._base

    def path(self, name: str = "") -> str:
        return f"{self.url}/{name}" if name else self.url

    def read(self, name: str) -> bytes:
        return self.fs.cat_file(self._key(name))

    def read_range(self, name: str, start: int, end: int) -> bytes:
        return self.fs.cat_file(self._key(name), start=start, end=end)

    def put(self, name: str, data: bytes) -> None:
        """One PUT: the object is replaced whole or not at all."""
        self.fs.pipe_file(self._key(name), data)

    def list(self, folder: str = "", *, problems: list[str] | None = None) -> dict[str, Entry]:
        """The objects directly under ``folder/`` (one LIST request per 1,000 entries); ``problems``: as for
        :meth:`LocalStore.list` (a listing the store refuses is named there instead of raising)."""
        key = self._key(folder)
        self.fs.invalidate_cache(key)
        try:
            entries = self.fs.ls(key, detail=True)
        except FileNotFoundError:
            return {}
        except OSError as err:
            if problems is None:
                raise
            _note(problems, folder or self.url, err)
            return {}
        out = {}
        for e in entries:
            if e.get("type") != "file":
                continue
            name = e["name"].rstrip("/").rpartition("/")[2]
            tag = e.get("ETag") or e.get("etag") or f"{e.get('size')}:{e.get('LastModified') or e.get('mtime')}"
            out[name] = Entry(int(e.get("size") or 0), str(tag))
        return out

    def list_after(self, folder: str, start_after: str) -> dict[str, Entry]:
        """The objects in ``folder/`` whose names sort after ``start_after``: on S3 one LIST request that
        returns only those (``StartAfter``); elsewhere the whole listing, filtered."""
        if hasattr(self.fs, "call_s3"):
            bucket, _, prefix = self._key(folder).partition("/")
            prefix = f"{prefix}/" if prefix else ""
            out: dict[str, Entry] = {}
            kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "StartAfter": prefix + start_after}
            while True:
                page = self.fs.call_s3("list_objects_v2", **kwargs)
                for obj in page.get("Contents", []):
                    name = obj["Key"][len(prefix):]
                    if "/" not in name:
                        out[name] = Entry(int(obj.get("Size") or 0), str(obj.get("ETag")))
                if not page.get("IsTruncated"):
                    return out
                kwargs["ContinuationToken"] = page["NextContinuationToken"]
        return {n: e for n, e in self.list(folder).items() if n > start_after}

    def folders(self, folder: str = "", *, problems: list[str] | None = None) -> list[str]:
        """The "sub-folders" (common prefixes) directly under ``folder/``; ``problems``: as for :meth:`list`."""
        key = self._key(folder)
        self.fs.invalidate_cache(key)
        try:
            entries = self.fs.ls(key, detail=True)
        except FileNotFoundError:
            return []
        except OSError as err:
            if problems is None:
                raise
            _note(problems, folder or self.url, err)
            return []
        return sorted(e["name"].rstrip("/").rpartition("/")[2] for e in entries if e.get("type") == "directory")

    def exists(self, name: str) -> bool:
        folder, _, base = name.rpartition("/")
        return base in self.list(folder)

    def delete(self, name: str) -> None:
        try:
            self.fs.rm_file(self._key(name))
        except FileNotFoundError:
            pass

    def upload_folder(self, local: str | os.PathLike[str], name: str) -> None:
        """Copy a local folder's files to ``name/`` (one PUT per file)."""
        for path in sorted(Path(local).rglob("*")):
            if path.is_file():
                self.fs.put_file(str(path), self._key(f"{name}/{path.relative_to(local).as_posix()}"))

    def download_folder(self, name: str, local: str | os.PathLike[str]) -> None:
        """Copy every object under ``name/`` into the local folder ``local`` (made if missing)."""
        base = self._key(name)
        self.fs.invalidate_cache(base)
        for key in self.fs.find(base):
            target = Path(local) / key[len(base):].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(key, str(target))

    def delete_folder(self, name: str) -> None:
        try:
            self.fs.rm(self._key(name), recursive=True)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


Store = LocalStore | ObjectStore


def open_store(location: str | os.PathLike[str]) -> Store:
    """The store at ``location``: a :class:`LocalStore` for a path, an :class:`ObjectStore` for a URL.

    >>> open_store("/tmp/runs/a")
    LocalStore('/tmp/runs/a')
    """
    if is_url(location):
        return ObjectStore(os.fspath(location))
    return LocalStore(location)
