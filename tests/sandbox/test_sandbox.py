"""Sandboxed code rewards: each kind of misbehaviour is contained and named."""

import os
import time
from pathlib import Path

import pytest

from skyrl_engine.sandbox import REASONS, extract_code, run_code, score_code


def _gone(pid: int, wait_s: float = 3.0) -> bool:
    """True once ``pid`` no longer runs (absent, or a zombie waiting to be reaped)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_clean_run_returns_stdout_and_unpacks_as_a_triple():
    result = run_code("import sys\nprint(sum(map(int, sys.stdin.read().split())))", stdin="1 2 3")
    ok, stdout, reason = result
    assert (ok, stdout, reason) == (True, "6\n", None)
    assert "ok" in repr(result) and "<table>" in result._repr_html_()


def test_infinite_loop_is_a_timeout():
    start = time.monotonic()
    result = run_code("while True:\n    pass", timeout_s=1.5)
    assert (result.ok, result.reason) == (False, "timeout")
    assert time.monotonic() - start < 10


def test_sleeping_past_the_wall_clock_is_a_timeout():
    result = run_code("import time\ntime.sleep(60)", timeout_s=1.0)
    assert result.reason == "timeout"


def test_a_2gb_allocation_is_refused_as_memory():
    result = run_code("block = bytearray(2 * 1024 ** 3)\nprint('allocated')", memory_mb=512)
    assert (result.ok, result.reason) == (False, "memory")
    assert "allocated" not in result.stdout


def test_network_call_is_refused():
    code = "import urllib.request\nprint(urllib.request.urlopen('http://example.com', timeout=5).status)"
    result = run_code(code, timeout_s=20)
    assert (result.ok, result.reason) == (False, "network")


def test_catching_the_network_refusal_still_reports_network():
    code = "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9))\nexcept OSError:\n    print('fine')"
    result = run_code(code)
    assert result.stdout == "fine\n" and result.reason == "network" and not result.ok


def test_local_pipes_still_work():
    code = "import socket\na, b = socket.socketpair()\na.sendall(b'hi')\nprint(b.recv(2).decode())"
    assert run_code(code).stdout == "hi\n"


def test_process_spawning_loop_hits_the_spawn_limit():
    code = (
        "import subprocess, sys\n"
        "while True:\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
    )
    result = run_code(code, timeout_s=30, max_processes=4)
    assert (result.ok, result.reason) == (False, "spawn_limit")


def test_fork_loop_hits_the_spawn_limit_across_the_tree():
    result = run_code("import os\nwhile True:\n    os.fork()", timeout_s=30, max_processes=4)
    assert result.reason == "spawn_limit"


def test_runs_in_a_fresh_temporary_directory_removed_afterwards():
    result = run_code("import os\nopen('x.txt', 'w').write('x')\nprint(os.getcwd())")
    workdir = result.stdout.strip()
    assert result.ok and "skyrl-sandbox-" in workdir and workdir != os.getcwd()
    assert not os.path.exists(workdir)


def test_output_is_capped():
    result = run_code("print('a' * 100000)", max_output_bytes=1000)
    assert result.ok and len(result.stdout) < 1100 and result.stdout.endswith("[output truncated]")


def test_errors_are_errors():
    result = run_code("raise ValueError('bad')")
    assert (result.ok, result.reason) == (False, "error") and "ValueError" in result.stderr
    assert set(REASONS) == {"timeout", "memory", "spawn_limit", "network", "error"}


def test_net_namespace_has_no_interfaces_but_loopback():
    result = run_code("print(open('/proc/self/net/dev').read())")
    if "net-namespace" not in result.isolation:
        pytest.skip("unshare(CLONE_NEWNET) is not permitted on this machine; the audit hook alone blocks sockets")
    interfaces = [line.split(":")[0].strip() for line in result.stdout.splitlines()[2:] if ":" in line]
    assert interfaces == ["lo"]


def test_pids_cgroup_caps_non_python_process_trees_and_kills_leftovers():
    probe = run_code("print(1)")
    if "pids-cgroup" not in probe.isolation:
        pytest.skip("no writable pids cgroup here; the audit hook and RLIMIT_NPROC limit spawns")
    # one os.system spawn (within budget), but the shell then starts 100 processes
    code = (
        "import os, subprocess\n"
        "print(subprocess.Popen(['setsid', 'sleep', '300']).pid, flush=True)\n"
        "os.system('for i in $(seq 100); do sleep 5 & done; wait')\n"
    )
    result = run_code(code, timeout_s=20)
    assert result.reason == "spawn_limit"
    assert _gone(int(result.stdout.split()[0])), "a process that left the session survived the run"


def test_extract_code_prefers_the_last_python_block():
    completion = "Idea:\n```text\nnot code\n```\n```python\nprint(1)\n```\nthen\n```python\nprint(2)\n```"
    assert extract_code(completion) == "print(2)\n"
    assert extract_code("```\nx = 1\n```") == "x = 1\n"
    assert extract_code("print(3)") == "print(3)"


def test_score_code_counts_passed_cases_and_reports_the_reason():
    doubling = "Sure:\n```python\nprint(int(input()) * 2)\n```"
    assert score_code(doubling, [("2", "4\n"), ("5", "10"), ("1", "3")])[:2] == (2 / 3, None)
    hanging = "```python\nimport time\ntime.sleep(60)\n```"
    reward, reason, results = score_code(hanging, [("", "")], timeout_s=1.0)
    assert (reward, reason, results[0].reason) == (0.0, "timeout", "timeout")
