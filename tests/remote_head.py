"""A "remote" Ray head on this machine: it cannot see the notebook's checkout, run root or HOME.

``remote_ray_head(hidden=[...])`` starts ``ray start --head --block`` inside its own mount namespace
(``unshare -m --propagation private``, root only): there the Python environment is bind-mounted at
another path (so the notebook's interpreter path does not exist for the job, and the editable install's
``.pth`` entries point into hidden folders: ``skyrl_engine`` is not importable unless the job ships it),
then an empty tmpfs is mounted over every folder in ``hidden`` (the checkout, the test's temp root), and
the head gets its own HOME, PATH, temp dir and token. The network is shared: it listens on 127.0.0.1 and
reaches the local S3 server there, as a remote cluster reaches S3.

Measured here (root in a container): ``unshare -m`` with tmpfs and bind mounts works; the namespace and
its mounts go away with its last process. Without the privilege the tests that need it skip.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ray_clusters import _free_ports


@dataclass
class RemoteHead:
    """A running remote head: its dashboard address, token, and where its Python lives in its namespace."""

    address: str
    token: str
    python: str
    base: Path
    pid: int


def can_unshare() -> str | None:
    """None when a private mount namespace with a tmpfs works here, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs tmpfs /mnt && echo ok"], capture_output=True, text=True)
    return None if probe.stdout.strip() == "ok" else f"unshare -m failed: {probe.stderr.strip()[:200]}"


def _kill_left_over(python_prefix: str) -> None:
    """SIGKILL what is left of the head: Ray starts its workers in sessions of their own, all running the
    head's Python (found by its path, which only this head uses)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        if python_prefix in cmdline:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@contextmanager
def remote_ray_head(hidden: list[Path], env: dict[str, str], num_cpus: int = 2,
                    timeout_s: float = 180.0) -> Iterator[RemoteHead]:
    """Start the head (see the module docstring); yield it; stop its process group and remove its files."""
    base = Path(tempfile.mkdtemp(prefix="skyrl-remote-", dir="/tmp"))
    venv, home, temp = base / "venv", base / "home", base / "ray"
    for folder in (venv, home, temp):
        folder.mkdir()
    token = secrets.token_hex(32)
    token_file = base / "ray_token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    gcs, dash, agent, agent_grpc, rt_agent, client, metrics, dash_metrics = _free_ports(8)
    python = str(venv / "bin" / "python")
    ray_start = [python, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())",
                 "start", "--head", "--block", "--port", str(gcs), "--dashboard-host", "127.0.0.1",
                 "--dashboard-port", str(dash), "--dashboard-agent-listen-port", str(agent),
                 "--dashboard-agent-grpc-port", str(agent_grpc), "--runtime-env-agent-port", str(rt_agent),
                 "--ray-client-server-port", str(client), "--metrics-export-port", str(metrics),
                 "--node-ip-address", "127.0.0.1", "--num-cpus", str(num_cpus), "--temp-dir", str(temp),
                 "--include-dashboard", "true", "--disable-usage-stats", "--no-monitor"]
    script = "\n".join([
        "set -e",
        f"mount --bind {shlex.quote(sys.prefix)} {shlex.quote(str(venv))}",
        *(f"mount -t tmpfs tmpfs {shlex.quote(str(folder))}" for folder in hidden),
        "exec " + " ".join(shlex.quote(a) for a in ray_start),
    ])
    head_env = {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
        "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file), "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "DASHBOARD_METRIC_PORT": str(dash_metrics),
        "RAY_DASHBOARD_STARTUP_TIMEOUT_S": "300", "RAY_agent_register_timeout_ms": "120000",
        "RAY_raylet_start_wait_time_s": "120", "RAY_worker_register_timeout_seconds": "300",
        **env,
    }
    log = open(base / "head.log", "wb")
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script], env=head_env,
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                request = urllib.request.Request(address + "/api/version",
                                                 headers={"Authorization": f"Bearer {token}"})
                urllib.request.urlopen(request, timeout=5).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = (base / "head.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"the remote Ray head did not come up (exit {proc.poll()}): {tail}") from None
                time.sleep(0.5)
        yield RemoteHead(address, token, python, base, proc.pid)
    finally:
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        try:  # the head's daemons may outlive `ray start` by a moment
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _kill_left_over(str(venv))
        log.close()
        shutil.rmtree(base, ignore_errors=True)
