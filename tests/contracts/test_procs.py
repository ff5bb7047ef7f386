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
