"""Processes on this machine: the one place that reads ``/proc`` and changes priorities.

Two users start Ray and need its daemons to come up on a busy small machine: the notebook's local
head (``skyrl_nb.cluster.local``) and the engine's private cluster (``skyrl_engine.placement``). Both
raise the priority of what they start while it starts, then put it back. Front-end detection
(``skyrl_core.frontend``) reads who launched the kernel.

Every function is best effort: a process that vanished, a ``/proc`` that is not there (macOS) or a
priority we may not set is answered with an empty result or nothing done, never an exception.
``pid`` may be ``"self"`` (this process) wherever a process id is taken.

>>> parent_pid("self") == os.getppid()
True
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

Pid = int | Literal["self"]
"""A process id, or ``"self"`` for this process."""


def _proc(pid: Pid) -> Path:
    return Path("/proc") / str(pid)


def pids() -> list[int]:
    """Every process id ``/proc`` lists (empty where there is no ``/proc``)."""
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []


def cmdline(pid: Pid) -> list[str]:
    """The command line of ``pid`` as its arguments (``[]`` when it is gone or unreadable, or a zombie)."""
    try:
        raw = (_proc(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def parent_pid(pid: Pid) -> int:
    """The parent's process id of ``pid``; 0 when it is unknown."""
    try:
        # the command name in parentheses may itself hold spaces and ')': split after the last one
        return int((_proc(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def children_of(pid: Pid) -> set[int]:
    """The process ids whose parent is ``pid`` (direct children only)."""
    parent = os.getpid() if pid == "self" else pid
    return {child for child in pids() if parent_pid(child) == parent}


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs. A zombie (exited, not yet reaped by its parent) does not; one that is this
    process's own child is reaped here. Without ``/proc`` (macOS) a process we may not signal counts as running.

    Who asks: the notebook's local Ray head (``skyrl_nb.cluster.local``) and the engine's model server
    (``skyrl_engine.serve``), each waiting for what it stopped to be gone.
    """
    if pid <= 0:  # 0 and -1 would mean "any child" to waitpid and "the group" to kill
        return False
    try:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return False
    except ChildProcessError:  # not our child: its parent reaps it
        pass
    try:
        return (_proc(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_group(pgid: int) -> list[int]:
    """The process ids in process group ``pgid`` (a session leader started with ``start_new_session``)."""
    members = []
    for pid in pids():
        try:
            if os.getpgid(pid) == pgid:
                members.append(pid)
        except OSError:
            continue
    return members


def may_raise_priority() -> bool:
    """Whether this process may lower a niceness below 0 (root; others may only raise it)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def permitted_nice(value: int) -> int:
    """``value`` when this process may set it, else 0: a negative niceness needs root."""
    return value if value >= 0 or may_raise_priority() else 0


def nice(pid: Pid, value: int) -> None:
    """Set the niceness of one process (``"self"``: this one); a failure is ignored."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0 if pid == "self" else pid, value)
    except OSError:
        pass


def autogroup_nice(pid: Pid, value: int) -> None:
    """Set the niceness of ``pid``'s scheduler autogroup (its session); a failure is ignored.

    With sched autogroup (most desktop and cloud kernels) the CPU is shared between sessions first,
    so a new session's processes compete as one group and the group's niceness is what counts.
    """
    try:
        with (_proc(pid) / "autogroup").open("w") as f:
            f.write(str(value))
    except OSError:
        pass


def nice_with_autogroup(pid: Pid, value: int) -> None:
    """:func:`nice` and :func:`autogroup_nice` together: what a session leader needs to take effect."""
    nice(pid, value)
    autogroup_nice(pid, value)


def renice_tree(pid: int, value: int) -> None:
    """Set the niceness of ``pid`` and every process descended from it."""
    for child in children_of(pid):
        renice_tree(child, value)
    nice(pid, value)


def renice_group(pgid: int, value: int) -> None:
    """Set the niceness of every process in process group ``pgid`` (and only those)."""
    for pid in process_group(pgid):
        nice(pid, value)


def max_pid() -> int:
    """The largest process id this machine hands out (``/proc/sys/kernel/pid_max``; 4194304 when unknown)."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 4194304  # Linux's ceiling on 64-bit machines: the worst case


def can_see_processes() -> bool:
    """Whether this machine has a ``/proc`` to answer :func:`started_at` (Linux: yes; macOS: no)."""
    return _proc("self").is_dir()


def started_at(pid: Pid) -> float | None:
    """When ``pid`` started (unix seconds, to about a second), or None when it is gone or a zombie.

    Compare it with a time the process itself wrote (a heartbeat) to tell it from a later process that
    was given the same pid.
    """
    try:
        fields = (_proc(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    if fields[0] in ("Z", "X"):  # exited, not yet reaped by its parent
        return None
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
