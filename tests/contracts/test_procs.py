"""``skyrl_core.procs``: reading /proc and changing priorities, on real child processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from skyrl_core import procs

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")

# a child that starts a grandchild, then waits: a two-level tree in its own process group
TREE = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        " time.sleep(60)")


@pytest.fixture()
def tree() -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    deadline = time.time() + 30
    while not procs.children_of(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    yield proc
    os.killpg(proc.pid, 9)
    proc.wait()


def _niceness(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


def test_parents_children_and_command_lines(tree: subprocess.Popen) -> None:
    (grandchild,) = procs.children_of(tree.pid)
    assert procs.parent_pid(grandchild) == tree.pid and procs.parent_pid(tree.pid) == os.getpid()
    assert procs.parent_pid("self") == os.getppid()
    assert tree.pid in procs.children_of("self") and tree.pid in procs.pids()
    assert procs.cmdline(tree.pid)[1:3] == ["-c", TREE]
    assert sorted(procs.process_group(tree.pid)) == sorted([tree.pid, grandchild])


def test_gone_processes_give_empty_answers() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert procs.cmdline(gone.pid) == [] and procs.parent_pid(gone.pid) == 0 and procs.children_of(gone.pid) == set()
    procs.nice(gone.pid, 5)  # nothing to do, and no exception
    procs.autogroup_nice(gone.pid, 5)


def test_renice_tree_and_group(tree: subprocess.Popen) -> None:
    (grandchild,) = procs.children_of(tree.pid)
    base = _niceness(tree.pid)
    procs.renice_tree(tree.pid, base + 3)  # raising a niceness needs no privilege
    assert _niceness(tree.pid) == _niceness(grandchild) == base + 3
    procs.renice_group(tree.pid, base + 5)
    assert _niceness(tree.pid) == _niceness(grandchild) == base + 5


def test_permitted_nice_needs_root_to_go_below_zero() -> None:
    assert procs.permitted_nice(5) == 5
    assert procs.permitted_nice(-10) == (-10 if procs.may_raise_priority() else 0)


def test_alive_counts_zombies_as_gone() -> None:
    """A running child; our own exited child (reaped by the call); a grandchild zombie its parent has not reaped
    (the model server's case); pids that name no single process. Under 1 s here."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # the parent forks a grandchild that exits at once, and never reaps it
    parent = subprocess.Popen([sys.executable, "-c", "import os, time\npid = os.fork()\nif pid == 0: os._exit(0)\n"
                               "print(pid, flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert procs.alive(child.pid) and procs.alive(parent.pid) and procs.alive(os.getpid())
        zombie = int(parent.stdout.readline())
        deadline = time.time() + 10
        while (procs.cmdline(zombie) or procs.started_at(zombie) is not None) and time.time() < deadline:
            time.sleep(0.02)
        assert os.path.exists(f"/proc/{zombie}") and not procs.alive(zombie)  # still listed, but gone
        child.kill()
        deadline = time.time() + 10
        while procs.alive(child.pid) and time.time() < deadline:
            time.sleep(0.02)
        assert not procs.alive(child.pid) and not os.path.exists(f"/proc/{child.pid}")  # reaped by alive()
        assert not procs.alive(0) and not procs.alive(-1)
    finally:
        for proc in (child, parent):
            proc.kill()
            proc.wait()
        parent.stdout.close()
