"""Private local Ray clusters for tests that put roles on Ray actors (own temp dir, token auth off).

- :func:`private_ray_cluster`: a cluster started in this process (one Ray node).
- :func:`second_ray_node`: one more Ray node on this machine, joined to the cluster this process is
  connected to, so ranks land on two Ray nodes and talk over TCP as two hosts would.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

#: The custom resource every node from :func:`second_ray_node` carries, so a test can aim at it.
SECOND_NODE_RESOURCE = "second_node"


@contextmanager
def private_ray_cluster(num_cpus: int) -> Iterator[Any]:
    """Start a private ``num_cpus``-CPU Ray cluster in this process; yield the ``ray`` module; stop it after.

    Skips the test when another Ray session is already connected in this process.
    """
    ray = pytest.importorskip("ray")
    from skyrl_engine.ray_runtime import start_private_ray

    if ray.is_initialized():
        pytest.skip("another Ray session is connected in this process")
    temp_dir = start_private_ray(num_cpus=num_cpus)
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


@contextmanager
def second_ray_node(
    num_cpus: int, resources: dict[str, float] | None = None, timeout_s: float = 60.0
) -> Iterator[str]:
    """Join a second Ray node on this machine to the connected cluster; yield its node id; stop it after.

    The node is ``ray start --address=<the head's GCS> --block`` in its own session (process group), with
    ``num_cpus`` CPUs and ``resources`` (default ``{"second_node": 1}``; ``second_node`` is always there).
    Ray 2.x puts a non-head node in the head's temp and session dir (it reads both from the GCS); every
    per-node file gets a counter (``sockets/raylet.1``, ``logs/raylet.1.out``), as with
    ``ray.cluster_utils.Cluster``. Its ports are picked free here, so nothing clashes with the head or
    with other clusters on the machine (Ray's fixed default for the dashboard agent, 52365, would).

    On exit only this node's processes are stopped (``ray start``, its raylet and agents, and the
    workers the raylet spawned, which Ray puts in sessions of their own), SIGTERM first so the raylet
    tells the GCS it is leaving, then SIGKILL; it returns once ``ray.nodes()`` shows the node dead.

        with second_ray_node(2) as node_id:
            ray.get(f.options(resources={"second_node": 0.01}).remote())
    """
    import ray

    if not ray.is_initialized():
        raise RuntimeError("second_ray_node joins the cluster this process is connected to: call ray.init first")
    head = ray._private.worker.global_worker.node
    gcs_address = ray.get_runtime_context().gcs_address
    node_ip = head.node_ip_address
    node_manager_port, object_manager_port, metrics_port, agent_port, agent_grpc_port, env_agent_port = (
        _free_ports(6)
    )
    node_resources = {SECOND_NODE_RESOURCE: 1.0, **(resources or {})}
    log_path = Path(head.get_session_dir_path()) / f"second_node_{node_manager_port}.log"
    cmd = [
        str(Path(sys.executable).with_name("ray")), "start", "--block",
        f"--address={gcs_address}",
        f"--node-ip-address={node_ip}",
        f"--num-cpus={num_cpus}", "--num-gpus=0",
        f"--resources={_json(node_resources)}",
        f"--node-manager-port={node_manager_port}",
        f"--object-manager-port={object_manager_port}",
        f"--metrics-export-port={metrics_port}",
        f"--dashboard-agent-listen-port={agent_port}",
        f"--dashboard-agent-grpc-port={agent_grpc_port}",
        f"--runtime-env-agent-port={env_agent_port}",
        "--min-worker-port=0", "--max-worker-port=0",  # workers bind ports the OS picks
        "--disable-usage-stats",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env.update(
        RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"),  # as start_private_ray's head
        RAY_USAGE_STATS_ENABLED="0",
        # a busy 2-core machine can miss Ray's start-up deadlines for agents and workers
        RAY_agent_register_timeout_ms=env.get("RAY_agent_register_timeout_ms", "120000"),
        RAY_raylet_start_wait_time_s=env.get("RAY_raylet_start_wait_time_s", "120"),
        RAY_worker_register_timeout_seconds=env.get("RAY_worker_register_timeout_seconds", "300"),
    )
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    node_id: str | None = None
    try:
        node_id = _wait_for_node(ray, proc, node_manager_port, timeout_s, log_path)
        yield node_id
    finally:
        _stop_node(proc)
        if node_id is not None:
            _wait_until_dead(ray, node_id, timeout_s)


def _json(value: dict[str, float]) -> str:
    import json

    return json.dumps(value, separators=(",", ":"))


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _node_by_port(ray: Any, node_manager_port: int) -> dict[str, Any] | None:
    return next((n for n in ray.nodes() if n.get("NodeManagerPort") == node_manager_port), None)


def _wait_for_node(ray: Any, proc: subprocess.Popen[bytes], node_manager_port: int, timeout_s: float,
                   log_path: Path) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        node = _node_by_port(ray, node_manager_port)
        if node is not None and node.get("Alive"):
            return str(node["NodeID"])
        if proc.poll() is not None:
            raise RuntimeError(f"`ray start` for the second node exited with code {proc.returncode}; "
                               f"its log ({log_path}) ends: {_tail(log_path)}")
        time.sleep(0.5)
    raise TimeoutError(f"the second Ray node was not alive in ray.nodes() within {timeout_s:g} s; "
                       f"`ray start`'s log ({log_path}) ends: {_tail(log_path)}; its raylet's logs are "
                       f"{log_path.parent / 'logs'}/raylet.<n>.out/.err")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text.splitlines()[-lines:] if line.strip()) or "(empty)"


def _tree(pid: int) -> set[int]:
    """``pid`` and every process descended from it (Ray's workers leave its process group, not its tree)."""
    from skyrl_core import procs

    found, todo = {pid}, [pid]
    while todo:
        for child in procs.children_of(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _stop_node(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM ``ray start``'s process group and every descendant, then SIGKILL what is left after ``grace_s``."""
    from skyrl_core import procs

    pids = _tree(proc.pid) | set(procs.process_group(proc.pid))
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()  # reap ``ray start`` itself; the rest are reaped by init
            pids = {pid for pid in pids if procs.started_at(pid) is not None}
            if not pids:
                return
            time.sleep(0.2)
    raise RuntimeError(f"the second Ray node's processes {sorted(pids)} outlived SIGKILL")


def _wait_until_dead(ray: Any, node_id: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes()):
            return
        time.sleep(0.5)
    raise TimeoutError(f"Ray node {node_id} still shows alive in ray.nodes() {timeout_s:g} s after its processes ended")
