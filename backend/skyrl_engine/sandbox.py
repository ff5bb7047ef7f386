"""Run untrusted code from a completion (a code reward) in a contained subprocess.

    result = run_code("print(sum(range(10)))", timeout_s=5)
    result.ok, result.stdout, result.reason          # True, "45\\n", None
    ok, stdout, reason = result                        # unpacks as a 3-tuple too

``reason`` is None when the code ran cleanly, else one of ``timeout``, ``memory``, ``spawn_limit``,
``network``, ``error`` (non-zero exit or any other failure).

Containment, in layers, each used when the machine allows it:

- **Limits** (``resource.setrlimit`` in the child): CPU seconds, address space (``memory_mb``),
  file size, open files, no core dumps; a wall-clock timeout in the parent kills the whole
  process group.
- **Processes**: a Python audit hook (installed by a ``sitecustomize`` on the child's path, so
  Python children inherit it) counts every fork / exec / spawn / ``subprocess`` across the whole
  process tree (a shared append-only counter) and refuses those beyond ``max_processes``. When
  a pids cgroup is writable, the kernel enforces ``pids.max`` on the tree as well and leftovers
  are killed through it; when not running as root, ``RLIMIT_NPROC`` adds a per-user cap.
- **Network**: the child is moved into a fresh network namespace (no interfaces but a down
  loopback) when ``unshare(CLONE_NEWNET)`` is permitted (root, or an unprivileged user
  namespace); independently the audit hook refuses internet sockets and name lookups, which is
  also what reports ``network`` as the reason.
- **Files**: a fresh temporary working directory (also ``HOME`` and ``TMPDIR``), removed after.

Not a security boundary against a determined attacker (e.g. ctypes can bypass the audit hook;
the namespace still stops its packets): it contains the mistakes and reward hacks that RL
policies produce.

One idea, a contained run of untrusted code; its length is the containment (limits, process group, cleanup).
"""

from __future__ import annotations

import ctypes
import functools
import html
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SandboxResult", "run_code", "extract_code", "score_code", "REASONS"]

REASONS = ("timeout", "memory", "spawn_limit", "network", "error")

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_PIDS_CGROUP_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")  # cgroup v1, then v2 (unified)
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")

# Runs inside the sandboxed interpreter before the user's code (as sitecustomize). Audit hooks
# cannot be removed once added; they fire in C for _socket and _posixsubprocess too.
_SITECUSTOMIZE = r'''
import os as _os
import sys as _sys

def _install():
    report_path = _os.environ["SKYRL_SANDBOX_REPORT"]
    counter_fd = _os.open(_os.environ["SKYRL_SANDBOX_COUNTER"], _os.O_WRONLY | _os.O_APPEND)
    max_spawns = int(_os.environ["SKYRL_SANDBOX_MAX_PROCESSES"])
    report_fd = _os.open(report_path, _os.O_WRONLY | _os.O_APPEND)
    spawn_events = {"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
                    "subprocess.Popen", "pty.spawn"}
    lookup_events = {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
                     "socket.getnameinfo", "socket.sethostname"}
    local_families = {1}  # AF_UNIX: pipes between local processes stay allowed
    busy = [False]

    def report(reason):
        _os.write(report_fd, (reason + "\n").encode())

    def hook(event, args):
        if busy[0]:
            return
        if event in spawn_events:
            busy[0] = True
            try:
                _os.write(counter_fd, b"x")
                spawned = _os.fstat(counter_fd).st_size
            finally:
                busy[0] = False
            if spawned > max_spawns:
                report("spawn_limit")
                raise PermissionError(f"sandbox: process limit reached ({max_spawns} spawns)")
        elif (event == "socket.__new__" and args[1] not in local_families) or event in lookup_events \
                or (event in ("socket.connect", "socket.bind", "socket.sendto") and not isinstance(args[1], (str, bytes))):
            report("network")
            raise PermissionError("sandbox: network access is disabled")

    previous = _sys.excepthook

    def excepthook(kind, value, tb):
        if issubclass(kind, MemoryError):
            report("memory")
        previous(kind, value, tb)

    _sys.excepthook = excepthook
    _sys.addaudithook(hook)

_install()
del _install
'''


@dataclass
class SandboxResult:
    """What a sandboxed run did. Unpacks as ``ok, stdout, reason``."""

    ok: bool
    stdout: str
    reason: str | None
    stderr: str = ""
    returncode: int | None = None
    elapsed_s: float = 0.0
    isolation: list[str] = field(default_factory=list)

    def __iter__(self):
        return iter((self.ok, self.stdout, self.reason))

    def __repr__(self) -> str:
        state = "ok" if self.ok else f"failed: {self.reason}"
        return (f"SandboxResult({state}, returncode={self.returncode}, {self.elapsed_s:.2f}s, "
                f"stdout={_clip(self.stdout, 80)!r}, isolation={'+'.join(self.isolation) or 'limits only'})")

    def _repr_html_(self) -> str:
        state = "ok" if self.ok else f"<b>{html.escape(str(self.reason))}</b>"
        rows = [("result", state), ("returncode", html.escape(str(self.returncode))),
                ("time", f"{self.elapsed_s:.2f} s"), ("isolation", html.escape(", ".join(self.isolation))),
                ("stdout", f"<pre>{html.escape(_clip(self.stdout, 2000))}</pre>"),
                ("stderr", f"<pre>{html.escape(_clip(self.stderr, 2000))}</pre>")]
        body = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{v}</td></tr>" for k, v in rows)
        return f"<table><caption>SandboxResult</caption>{body}</table>"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def extract_code(completion: str, language: str = "python") -> str:
    """The last fenced ```python block of a completion (or its last plain ``` block, or the text itself)."""
    blocks: list[tuple[str, str]] = []
    parts = completion.split("```")
    for i in range(1, len(parts) - 1, 2):
        header, _, body = parts[i].partition("\n")
        blocks.append((header.strip().lower(), body))
    tagged = [body for tag, body in blocks if tag == language]
    if tagged:
        return tagged[-1]
    return blocks[-1][1] if blocks else completion


def score_code(
    completion: str, cases: list[tuple[str, str]], **limits: object
) -> tuple[float, str | None, list[SandboxResult]]:
    """A code reward: the share of ``(stdin, expected_stdout)`` cases the completion's code passes.

    The code is :func:`extract_code` of the completion, run once per case with :func:`run_code`
    (``limits`` are its keyword arguments). Outputs compare after stripping trailing whitespace.
    Returns ``(reward in [0, 1], the first containment reason or None, the per-case results)``;
    a case whose run is not ``ok`` scores 0.

    >>> score_code("print(int(input()) * 2)", [("2", "4"), ("5", "10")])[:2]
    (1.0, None)
    """
    if not cases:
        raise ValueError("score_code needs at least one (stdin, expected_stdout) case")
    code = extract_code(completion)
    results = [run_code(code, stdin=stdin, **limits) for stdin, _ in cases]  # type: ignore[arg-type]
    passed = sum(r.ok and r.stdout.rstrip() == expected.rstrip() for r, (_, expected) in zip(results, cases, strict=True))
    reason = next((r.reason for r in results if r.reason is not None), None)
    return passed / len(cases), reason, results


class _PidsCgroup:
    """A private pids cgroup (v1 or v2) when one can be created; otherwise inactive."""

    def __init__(self, max_pids: int) -> None:
        self.path: Path | None = None
        for root in _PIDS_CGROUP_ROOTS:
            base = Path(root)
            if not (base / "cgroup.procs").exists():
                continue
            if root == "/sys/fs/cgroup" and "pids" not in (base / "cgroup.controllers").read_text(errors="ignore").split():
                continue
            candidate = base / f"skyrl-sandbox-{uuid.uuid4().hex[:12]}"
            try:
                candidate.mkdir()
                (candidate / "pids.max").write_text(str(max_pids))
            except OSError:
                try:
                    candidate.rmdir()
                except OSError:
                    pass
                continue
            self.path = candidate
            self._procs = str(candidate / "cgroup.procs")
            break

    def join(self) -> None:
        """Called in the child before exec: move this process into the cgroup."""
        if self.path is not None:
            try:
                fd = os.open(self._procs, os.O_WRONLY)
                try:
                    os.write(fd, str(os.getpid()).encode())
                finally:
                    os.close(fd)
            except OSError:
                pass  # the audit hook (and RLIMIT_NPROC off root) still limit spawns

    def hit_limit(self) -> bool:
        if self.path is None:
            return False
        try:
            events = (self.path / "pids.events").read_text().split()
        except OSError:
            return False
        return len(events) >= 2 and events[0] == "max" and int(events[1]) > 0

    def kill_all_and_remove(self) -> None:
        if self.path is None:
            return
        for _ in range(50):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.02)


def _tasks_of(uid: int) -> int:
    """Processes plus threads that ``uid`` runs now: what RLIMIT_NPROC counts."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                pass
    return count


def run_code(
    code: str,
    *,
    stdin: str = "",
    timeout_s: float = 10.0,
    cpu_time_s: float | None = None,
    memory_mb: int = 1024,
    max_processes: int = 8,
    max_output_bytes: int = 1 << 20,
    python: str | None = None,
    env: dict[str, str] | None = None,
) -> SandboxResult:
    """Run Python ``code`` in a contained subprocess and say how it went.

    ``timeout_s`` wall clock (``cpu_time_s`` defaults to it); ``memory_mb`` address-space cap;
    ``max_processes`` how many processes the code may start in all (its own tree included);
    ``max_output_bytes`` caps what is kept of stdout/stderr (and the size of files it writes).
    ``python`` defaults to this interpreter, so the code sees the same installed packages.

    >>> run_code("print(6 * 7)").stdout
    '42\\n'
    """
    start = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="skyrl-sandbox-"))
    control = workdir / ".sandbox"
    control.mkdir()
    (control / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    (workdir / "main.py").write_text(code)
    report_path, counter_path = control / "report", control / "spawns"
    report_path.touch()
    counter_path.touch()
    stdout_path, stderr_path, stdin_path = control / "stdout", control / "stderr", control / "stdin"
    stdin_path.write_text(stdin)

    child_env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(control),
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "SKYRL_SANDBOX_REPORT": str(report_path),
        "SKYRL_SANDBOX_COUNTER": str(counter_path),
        "SKYRL_SANDBOX_MAX_PROCESSES": str(max_processes),
        **(env or {}),
    }

    # the cgroup counts threads too: leave room for a few beyond the process budget
    cgroup = _PidsCgroup(max_pids=max_processes + 16)
    isolation = ["rlimits", "audit-hook"] + (["pids-cgroup"] if cgroup.path else [])
    uid = os.getuid()
    nproc_limit = None if uid == 0 else _tasks_of(uid) + max_processes + 16  # root is exempt from NPROC
    if nproc_limit is not None:
        isolation.append("rlimit-nproc")
    libc = _libc()
    cpu = max(1, int(cpu_time_s if cpu_time_s is not None else timeout_s + 0.999))
    memory = memory_mb * 1024 * 1024
    file_size = max(max_output_bytes, 1 << 20) * 4
    netns_ok = _netns_available(libc)
    if netns_ok:
        isolation.append("net-namespace")

    def preexec() -> None:  # in the child, between fork and exec: no allocation-heavy work
        cgroup.join()
        if netns_ok and libc.unshare(_CLONE_NEWNET) != 0 and libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
            os._exit(126)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc_limit is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc_limit, nproc_limit))

    timed_out = False
    try:
        with open(stdin_path, "rb") as fin, open(stdout_path, "wb") as fout, open(stderr_path, "wb") as ferr:
            proc = subprocess.Popen(
                [python or sys.executable, "-s", "main.py"],
                cwd=workdir, env=child_env, stdin=fin, stdout=fout, stderr=ferr,
                preexec_fn=preexec, start_new_session=True, close_fds=True,
            )
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            _kill_group(proc.pid)
            proc.wait()
        stdout = _read_clipped(stdout_path, max_output_bytes)
        stderr = _read_clipped(stderr_path, max_output_bytes)
        reported = report_path.read_text().split()
        spawn_capped = cgroup.hit_limit()
    finally:
        cgroup.kill_all_and_remove()
        shutil.rmtree(workdir, ignore_errors=True)

    returncode = proc.returncode
    reason = _classify(returncode, timed_out, reported, spawn_capped, stderr)
    return SandboxResult(
        ok=reason is None, stdout=stdout, reason=reason, stderr=stderr, returncode=returncode,
        elapsed_s=time.monotonic() - start, isolation=isolation,
    )


def _classify(returncode: int, timed_out: bool, reported: list[str], spawn_capped: bool, stderr: str) -> str | None:
    """The one reason a run failed, most specific first; None for a clean run."""
    for reason in ("network", "spawn_limit", "memory"):
        if reason in reported:
            return reason
    if spawn_capped:
        return "spawn_limit"
    if timed_out or returncode == -signal.SIGXCPU:  # SIGXCPU only comes from RLIMIT_CPU
        return "timeout"
    if returncode == 0:
        return None
    if any(marker in stderr for marker in _MEMORY_MARKERS):
        return "memory"
    if "Resource temporarily unavailable" in stderr and ("fork" in stderr or "spawn" in stderr):
        return "spawn_limit"
    return "error"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_clipped(path: Path, limit: int) -> str:
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    text = data[:limit].decode("utf-8", errors="replace")
    return text + "\n[output truncated]" if len(data) > limit else text


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library already loaded into this process (for ``unshare``)."""
    return ctypes.CDLL(None, use_errno=True)


_NETNS_CACHE: dict[str, bool] = {}


def _netns_available(libc: ctypes.CDLL) -> bool:
    """Whether a child may enter a new network namespace here (probed once, with a throwaway child)."""
    if "ok" not in _NETNS_CACHE:

        def enter() -> None:
            if libc.unshare(_CLONE_NEWNET) != 0 and libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) refused")

        try:
            probe = [shutil.which("true") or sys.executable, *([] if shutil.which("true") else ["-c", ""])]
            _NETNS_CACHE["ok"] = subprocess.run(probe, preexec_fn=enter, timeout=30).returncode == 0
        except (OSError, subprocess.SubprocessError):
            _NETNS_CACHE["ok"] = False
    return _NETNS_CACHE["ok"]
