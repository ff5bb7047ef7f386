"""Peak memory of the quickstart's whole process tree, run the way a user runs it, and of the ``smollm2`` preset.

    .venv/bin/python -m bench memory [--arms quickstart,smollm2-lora,smollm2-full] [--smollm2-steps 2]

Each arm runs ``notebooks/quickstart.ipynb`` with papermill, as ``make demo`` does (``SKYRL_NB_STATIC=1``, a
private cache dir so the notebook starts its own local Ray head with ``skyrl_nb.cluster.local()`` and stops it
at the end, ``keep_cluster=False``): papermill (standing in for the Jupyter server), the notebook's kernel, the Ray
head (``ray start --block``, gcs_server, raylet, the dashboard and its module processes, the dashboard agent, the
runtime-env agent, the log monitor), the Jobs API's JobSupervisor actor, the job's driver
(``python -m skyrl_engine train``), its Ray workers, and the evaluation job the notebook's last cells submit.

Every ``--interval`` s (0.25; a sample itself takes 0.1-0.5 s on a loaded 2-core machine, so the effective pace,
``mean_interval_s``, is slower; the sampling thread asks for nice -5 where allowed) the bench walks the process
tree under papermill (parent links in ``/proc``) and sums each process's resident set (``VmRSS``) and proportional set (``Pss`` of ``/proc/<pid>/smaps_rollup``).
RSS counts a page shared by several processes (Ray's ``_raylet.so``, torch's libraries, the Python binary)
once in each of them, so its sum overstates what the tree holds; PSS charges each shared page in equal parts
to its sharers, so the PSS sum is the physical memory the tree needs (up to the shares of processes outside
it). The goal (``≤ 3 GiB`` for the quickstart, so it fits a 4 GiB ml.t3.medium beside the OS) is judged on
the PSS sum **without papermill** (a Studio instance runs its own Jupyter server, whose size is not ours);
the RSS sum is reported beside it, as is papermill's own share.

Reported per arm: the peak of each sum with the time it came (seconds after papermill started) and the
breakdown by process kind at that sample (count, RSS MiB, PSS MiB), each kind's own peak over the run,
a 1 s timeline (the largest PSS sum of each second), the notebook's wall time, and the load average
before and after. The ``smollm2`` arms are the preset (LoRA rank 8) and ``trainer.policy.model.lora.rank=0``
(full fine-tune, lr 1e-5), ``--smollm2-steps`` steps each (the preset's eval before training included, its
64-prompt generation being a candidate for the peak), without the notebook's closing evaluation job; the
quickstart arm runs the preset's 190 steps and the evaluation (``--quickstart-steps`` shortens it).

Writes ``bench/results/memory.json`` (``--out``) after every arm and prints one JSON line per arm.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import RESULTS, ROOT
from skyrl_core.machine_memory import machine_memory_bytes

GOAL_GIB = 3.0
MIB = 2**20

#: arm -> (preset, overrides, run the notebook's evaluation)
ARMS: dict[str, tuple[str, list[str], bool]] = {
    "quickstart": ("quickstart", [], True),
    "smollm2-lora": ("smollm2", ["trainer.ckpt_interval=0"], False),
    "smollm2-full": ("smollm2", ["trainer.ckpt_interval=0", "trainer.policy.model.lora.rank=0",
                                 "trainer.policy.optimizer_config.lr=1e-5"], False),
}

#: (kind, a piece of the command line that marks it), first match wins; see ``kind_of``.
_KINDS: tuple[tuple[str, str], ...] = (
    ("papermill", "papermill"),
    ("kernel", "ipykernel_launcher"),
    ("job_driver_shell", "/bin/sh -c"),  # the Jobs API's `sh -c <entrypoint>` and its watchdog loop
    ("gcs_server", "gcs_server"),
    ("raylet", "raylet/raylet"),
    ("dashboard_agent", "dashboard/agent.py"),
    ("runtime_env_agent", "runtime_env/agent/main.py"),
    ("dashboard", "dashboard/dashboard.py"),
    ("dashboard_module", "ray-dashboard-"),  # the dashboard's head modules, each a forked process
    ("dashboard_forkserver", "multiprocessing.forkserver"),
    ("dashboard_forkserver", "multiprocessing.resource_tracker"),
    ("ray_client_server", "ray.util.client.server"),
    ("dashboard_agent", "ray::DashboardAgent"),
    ("runtime_env_agent", "ray::RuntimeEnvAgent"),
    ("log_monitor", "log_monitor.py"),
    ("ray_start", "ray start"),
    ("ray_start", "scripts.py start"),
    ("job_supervisor", "ray::JobSupervisor"),
    ("job_driver", "skyrl_engine"),
    ("ray_idle_worker", "ray::IDLE"),
    ("ray_worker", "ray::"),
    ("ray_worker", "default_worker.py"),
)


def kind_of(args: list[str]) -> str:
    """What a process of the tree is, from its command line (``other:<program>`` when none of ``_KINDS``)."""
    line = " ".join(args)
    for kind, mark in _KINDS:
        if mark in line:
            return kind
    return f"other:{os.path.basename(args[0]) if args else '?'}"


def _children() -> dict[int, list[int]]:
    """Every process's children, from the parent field of ``/proc/<pid>/stat``."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out.setdefault(parent, []).append(int(entry))
    return out


def tree(root: int) -> list[int]:
    """``root`` and all its descendants."""
    children = _children()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _kib(text: str, field: str) -> int | None:
    for line in text.splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return None


def measure(pid: int) -> tuple[str, int, int | None, int, str] | None:
    """``(kind, rss KiB, pss KiB or None, process group, command line)`` of ``pid``; None when it is gone or a
    zombie."""
    try:
        args = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
        status = Path(f"/proc/{pid}/status").read_text()
        pgid = os.getpgid(pid)
    except (OSError, ProcessLookupError):
        return None
    rss = _kib(status, "VmRSS:")
    if rss is None or not args:  # a zombie has neither
        return None
    try:
        pss = _kib(Path(f"/proc/{pid}/smaps_rollup").read_text(), "Pss:")
    except OSError:
        if not Path(f"/proc/{pid}").exists():
            return None  # it ended between the two reads
        pss = None
    return kind_of(args), rss, pss, pgid, " ".join(args)


class Sampler(threading.Thread):
    """Samples the tree under ``root`` every ``interval`` s until ``stop()``; keeps the peaks and a 1 s timeline."""

    def __init__(self, root: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.started = time.monotonic()
        self.halt = threading.Event()
        self.samples = 0
        self.peak: dict[str, Any] = {}  # by "rss" / "pss": t, total_mib, breakdown
        self.kind_peaks: dict[str, dict[str, float]] = {}
        self.timeline: dict[int, tuple[float, float]] = {}  # second -> (pss MiB, rss MiB) at that second's PSS peak
        self.groups: set[int] = set()  # process groups seen (the Ray head's new session among them)
        self.pss_readable = True

    def run(self) -> None:
        try:  # this thread only (a thread id): samples keep their pace on a loaded machine where allowed
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -5)
        except OSError:
            pass
        while not self.halt.is_set():
            self.sample()
            self.halt.wait(self.interval)

    def stop(self) -> None:
        self.halt.set()
        self.join()

    def sample(self) -> None:
        t = round(time.monotonic() - self.started, 2)
        kinds: dict[str, dict[str, float]] = {}
        procs: list[list[Any]] = []
        for pid in tree(self.root):
            seen = measure(pid)
            if seen is None:
                continue
            kind, rss, pss, pgid, line = seen
            procs.append([pid, kind, round(rss / 1024, 1), None if pss is None else round(pss / 1024, 1), line[:120]])
            self.groups.add(pgid)
            if pss is None:
                self.pss_readable = False
            row = kinds.setdefault(kind, {"count": 0, "rss_mib": 0.0, "pss_mib": 0.0})
            row["count"] += 1
            row["rss_mib"] += rss / 1024
            row["pss_mib"] += (pss if pss is not None else rss) / 1024
        if not kinds:
            return
        self.samples += 1
        for kind, row in kinds.items():
            best = self.kind_peaks.setdefault(kind, {"count": 0, "rss_mib": 0.0, "pss_mib": 0.0})
            for key in best:
                best[key] = max(best[key], row[key])
        outside = kinds.get("papermill", {"rss_mib": 0.0, "pss_mib": 0.0})
        totals = {m: sum(r[f"{m}_mib"] for r in kinds.values()) - outside[f"{m}_mib"] for m in ("rss", "pss")}
        for m, total in totals.items():
            if total > self.peak.get(m, {}).get("total_mib", -1):
                self.peak[m] = {"t_s": t, "total_mib": round(total, 1),
                                "papermill_mib": round(outside[f"{m}_mib"], 1),
                                "breakdown": {k: {"count": int(r["count"]), "rss_mib": round(r["rss_mib"], 1),
                                                  "pss_mib": round(r["pss_mib"], 1)}
                                              for k, r in sorted(kinds.items(), key=lambda kv: -kv[1]["pss_mib"])},
                                "processes_pid_kind_rss_pss_command": sorted(procs, key=lambda p: -(p[3] or p[2]))}
        second = int(t)
        if totals["pss"] > self.timeline.get(second, (-1.0, 0.0))[0]:
            self.timeline[second] = (round(totals["pss"], 1), round(totals["rss"], 1))


def _live_groups(groups: set[int]) -> set[int]:
    """Which of ``groups`` still have a member that is not a zombie."""
    live = set()
    for entry in os.listdir("/proc"):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in ("Z", "X") and int(fields[2]) in groups:
            live.add(int(fields[2]))
    return live


def _stop_groups(groups: set[int], own: int, wait: float = 10.0) -> list[int]:
    """Process groups the tree had besides ours that outlive the notebook by ``wait`` s (a head or workers the
    notebook's ``cluster.shutdown()`` did not stop): SIGKILLed, and listed."""
    deadline = time.monotonic() + wait
    while (live := _live_groups(groups - {own})) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pgid in live:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return sorted(live)


def run_arm(arm: str, steps: int | None, interval: float, timeout: float) -> dict[str, Any]:
    """One papermill run of the quickstart notebook for ``arm``, sampled; its figures."""
    from skyrl_nb.demo import ensure_kernel

    preset, overrides, evaluate = ARMS[arm]
    base = Path(tempfile.mkdtemp(prefix=f"skyrl-mem-{arm}-", dir="/tmp"))
    env = dict(os.environ, SKYRL_NB_STATIC="1", SKYRL_NB_CACHE_DIR=str(base / "cache"))
    env.pop("RAY_ADDRESS", None)
    params = {"preset": preset, "max_training_steps": steps, "run_root": str(base / "runs"), "run_id": f"mem-{arm}",
              "overrides": overrides, "keep_cluster": False, "min_reward_gain": -1.0, "evaluate": evaluate}
    cmd = [sys.executable, "-m", "papermill", str(ROOT / "notebooks" / "quickstart.ipynb"), str(base / "out.ipynb"),
           "-k", ensure_kernel(), "--no-progress-bar", "-y", json.dumps(params)]
    load_before = os.getloadavg()
    started, start_epoch = time.monotonic(), time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sampler = Sampler(proc.pid, interval)
    sampler.start()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    finally:
        sampler.stop()
    wall = time.monotonic() - started
    left = _stop_groups(sampler.groups, os.getpgid(0))
    metrics = base / "runs" / f"mem-{arm}" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.exists() else []
    first = next((r.get("time") for r in rows), None)
    out: dict[str, Any] = {
        "arm": arm, "preset": preset, "overrides": overrides, "steps": len(rows), "evaluation_job": evaluate,
        "papermill_rc": proc.returncode, "notebook_wall_s": round(wall, 1),
        "peak_pss_gib": round(sampler.peak["pss"]["total_mib"] / 1024, 2),
        "peak_rss_gib": round(sampler.peak["rss"]["total_mib"] / 1024, 2),
        "peak_pss": sampler.peak["pss"], "peak_rss": sampler.peak["rss"],
        "kind_peaks": {k: {m: round(v, 1) for m, v in r.items()} for k, r in sorted(sampler.kind_peaks.items())},
        "pss_readable": sampler.pss_readable, "samples": sampler.samples, "interval_s": interval,
        "mean_interval_s": round(wall / max(sampler.samples, 1), 2),
        "first_step_at_s": None if first is None else round(first - start_epoch, 1),
        "timeline_s_pss_rss_mib": [[s, *v] for s, v in sorted(sampler.timeline.items())],
        "load_avg_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    if left:
        out["groups_killed_after"] = left
    if proc.returncode:
        out["papermill_error"] = err.decode(errors="replace").strip().splitlines()[-3:]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default="quickstart,smollm2-lora,smollm2-full")
    parser.add_argument("--quickstart-steps", type=int, default=None, help="None: the preset's 190")
    parser.add_argument("--smollm2-steps", type=int, default=2)
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--timeout", type=float, default=3600.0, help="per arm, seconds")
    parser.add_argument("--out", default=str(RESULTS / "memory.json"))
    parser.add_argument("--note", default="", help="recorded in the result (e.g. which commit's tree ran)")
    args = parser.parse_args(argv)
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"--arms: no arm {unknown[0]!r}; known: {', '.join(ARMS)}")
    runs: list[dict[str, Any]] = []
    failed = False
    for arm in arms:
        steps = args.quickstart_steps if arm == "quickstart" else args.smollm2_steps
        runs.append(run_arm(arm, steps, args.interval, args.timeout))
        failed |= bool(runs[-1]["papermill_rc"])
        print(json.dumps({k: v for k, v in runs[-1].items() if not k.startswith(("timeline", "peak_", "kind_"))}
                         | {"peak_pss_gib": runs[-1]["peak_pss_gib"], "peak_rss_gib": runs[-1]["peak_rss_gib"]}),
              flush=True)
        quick = next((r for r in runs if r["arm"] == "quickstart"), None)
        result = {
            "bench": "memory", "goal": f"quickstart peak PSS of the tree without papermill <= {GOAL_GIB} GiB",
            "judged_on": "pss", "goal_met": None if quick is None else quick["peak_pss_gib"] <= GOAL_GIB,
            "machine_memory_gib": round((machine_memory_bytes() or 0) / 2**30, 1),
            "cpus": os.cpu_count(), "note": args.note, "runs": runs, "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
