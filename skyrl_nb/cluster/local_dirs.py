"""The folders a local Ray head lives in, and the limits they must meet: the state and cache folders (``SKYRL_NB_CONFIG_DIR``,
``SKYRL_NB_CACHE_DIR``; a read-only HOME is one line naming them), a temp dir short enough for Ray's AF_UNIX socket
paths, a ``TMPDIR`` for Ray's processes that they can use, and the head's token file."""

from __future__ import annotations

import hashlib
import os
import secrets
import sys
import tempfile
from pathlib import Path

from skyrl_core import procs
from skyrl_nb.cluster.addresses import read_token_file

STATE_FILE = "skyrl-nb-head.json"


def config_dir() -> Path:
    """skyrl-nb's config dir: `$SKYRL_NB_CONFIG_DIR`, else `$XDG_CONFIG_HOME/skyrl-nb`, else `~/.config/skyrl-nb`."""
    if os.environ.get("SKYRL_NB_CONFIG_DIR"):
        return Path(os.environ["SKYRL_NB_CONFIG_DIR"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "skyrl-nb"


def cache_dir() -> Path:
    """skyrl-nb's cache dir: `$SKYRL_NB_CACHE_DIR`, else `$XDG_CACHE_HOME/skyrl-nb`, else `~/.cache/skyrl-nb`."""
    if os.environ.get("SKYRL_NB_CACHE_DIR"):
        return Path(os.environ["SKYRL_NB_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "skyrl-nb"


#: Ray refuses an AF_UNIX socket path longer than this many bytes (`validate_socket_filepath`).
SOCKET_PATH_LIMIT = 103 if sys.platform == "darwin" else 107


#: The longest name Ray gives a socket in `<session>/sockets/`: a dashboard module's `dash_<Module>`,
#: `dash_TaskEventsHead` (19) in Ray 2.60, with room for a longer module in a later Ray.
_SOCKET_NAME_BYTES = 24


#: `<temp>/session_<date>_<time>_<usec>_<pid>/sockets/`, less the temp dir and the pid's digits.
_SESSION_BYTES = len("/session_2026-12-01_02-11-17_099300_") + len("/sockets/")


def socket_path_bytes(temp_dir: str | os.PathLike[str]) -> int:
    """Bytes in the longest AF_UNIX path Ray makes under `temp_dir`, counting the worst case.

    That path is `<temp>/session_<date>_<time>_<usec>_<pid>/sockets/<name>`: the pid takes as many
    digits as the largest pid this machine hands out.
    """
    return len(os.fsencode(temp_dir)) + _SESSION_BYTES + len(str(procs.max_pid())) + _SOCKET_NAME_BYTES


def check_temp_dir(temp_dir: str | os.PathLike[str]) -> None:
    """Raise `ValueError` (one line: the path, its length, the limit) when Ray's sockets would not fit under it."""
    longest = socket_path_bytes(temp_dir)
    if longest > SOCKET_PATH_LIMIT:
        room = SOCKET_PATH_LIMIT - (longest - len(os.fsencode(temp_dir)))
        raise ValueError(
            f"Ray temp dir {os.fspath(temp_dir)!r} is {len(os.fsencode(temp_dir))} bytes: Ray's socket paths under it "
            f"would reach {longest} bytes, over the AF_UNIX limit of {SOCKET_PATH_LIMIT}; use a temp_dir of at "
            f"most {room} bytes, e.g. under /tmp")


def _private_dir(path: Path) -> bool:
    """Make `path` (mode 0700) or accept it when it is a real folder of ours that we may write."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
        if not os.path.isdir(path) or os.path.islink(path):
            return False
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return False  # someone else made it first in a shared /tmp: never run Ray in their folder
        if st.st_mode & 0o077:
            os.chmod(path, 0o700)
        return os.access(path, os.W_OK | os.X_OK)
    except OSError:
        return False


def default_temp_dir(key: str | os.PathLike[str]) -> Path:
    """A short per-user Ray temp dir, `<tmp>/skyrl-<uid>/<8 hex of key>` (``$TMPDIR``, else /tmp).

    `key` (the state dir) keeps heads of different config/cache dirs apart. Raises `RuntimeError`
    naming the path, its length and the limit when no candidate is both short enough and writable.
    """
    user = str(os.getuid()) if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    name = hashlib.sha256(os.fsencode(os.fspath(key))).hexdigest()[:8]
    problems = []
    for base in dict.fromkeys([tempfile.gettempdir(), "/tmp"]):
        path = Path(base) / f"skyrl-{user}" / name
        try:
            check_temp_dir(path)
        except ValueError as err:
            problems.append(str(err))
            continue
        if _private_dir(path.parent):
            return path
        problems.append(f"{path.parent} is not a folder of ours we can write")
    raise RuntimeError("no short writable folder for Ray's temp dir: " + "; ".join(problems)
                       + "; pass cluster.local(temp_dir=...)")


def writable_dir(path: Path, what: str, setting: str) -> Path:
    """Make `path` (0700) and return it, or raise `OSError` in one line naming it and the `setting` that moves it.

    A read-only or foreign HOME otherwise surfaces as a bare ``Read-only file system: '.../.config'``.
    """
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable")
    except OSError as err:
        raise OSError(f"skyrl-nb's {what} {str(path)!r} is not usable ({err.strerror or err}); "
                      f"set {setting} to a folder you can write") from None
    return path


#: Bytes multiprocessing adds under ``$TMPDIR`` for a forkserver socket: ``/pymp-XXXXXXXX/listener-XXXXXXXX``.
_MP_SOCKET_BYTES = len("/pymp-12345678/listener-12345678")


def process_tmpdir(short_dir: Path, tmpdir: str | None = None) -> str | None:
    """The ``TMPDIR`` Ray's processes should get instead of ``tmpdir`` (default ``$TMPDIR``), or None to keep it.

    Ray's dashboard starts a multiprocessing forkserver whose socket lives under ``$TMPDIR``; a
    ``$TMPDIR`` too long for an AF_UNIX path, missing or not writable makes the head hang until its
    timeout. Such a ``$TMPDIR`` is swapped for `short_dir` (the head's own short temp dir).
    """
    tmpdir = os.environ.get("TMPDIR") if tmpdir is None else tmpdir
    if not tmpdir:
        return None
    too_long = len(os.fsencode(tmpdir)) + _MP_SOCKET_BYTES > SOCKET_PATH_LIMIT
    if too_long or not os.path.isdir(tmpdir) or not os.access(tmpdir, os.W_OK | os.X_OK):
        return str(short_dir)
    return None


def ensure_token(path: Path) -> str:
    """The token in `path`, generating one (0600 file, 0700 dir) when missing."""
    token = read_token_file(path)
    if token:
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        return token
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    return token
