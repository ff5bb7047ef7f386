"""``trainer.max_restarts`` (issue 37, item 6): the restart supervisor (``skyrl_engine.supervisor``) starts the
trainer again by itself after a failure outside the user's code, from its latest checkpoint, and the run store
keeps every step exactly once; a user's error and a stop are never restarted.

Each run is ``python -m skyrl_engine train`` as a process of its own, as a Ray job's entrypoint is (Ray's Jobs API
only starts that command and signals it on a stop; ``RAY_ADDRESS`` makes it join the cluster, as a submitted job's
does). The chaos run uses the session's in-process Ray cluster (``engine_ray``) plus a second raylet on this
machine (``second_ray_node``); the other two need no Ray (every role in the trainer's process).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from skyrl_core.runs import RunReader

REPO = Path(__file__).resolve().parents[2]
STEPS = 8
#: The chaos run's steps: enough that the actors, which train on for a few steps after their raylet is killed,
#: cannot finish the run before they notice (~0.4 s a step here)
CHAOS_STEPS = 20
SMALL = ["trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.critic_mini_batch_size=4",
         "trainer.micro_train_batch_size_per_gpu=16", "generator.n_samples_per_prompt=4",
         "trainer.eval_interval=0", "trainer.eval_before_train=false", "trainer.num_threads=1"]


def _start(run_root: Path, run_id: str, *overrides: str, env: dict[str, str] | None = None,
           log: Path) -> subprocess.Popen[bytes]:
    """The job's entrypoint: ``python -m skyrl_engine train`` with the quickstart preset (its output in ``log``)."""
    cmd = [sys.executable, "-m", "skyrl_engine", "train", "--config", "quickstart", *SMALL,
           f"run.run_root={run_root}", f"run.run_id={run_id}", *overrides]
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _wait_event(run_dir: Path, proc: subprocess.Popen[bytes], log: Path, kind: str, min_step: int = 0,
                timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run_dir / "events.jsonl").exists():
            for event in RunReader(run_dir).events():
                if event.get("kind") == kind and int(event.get("step") or 0) >= min_step:
                    return event
        assert proc.poll() is None, f"the job exited ({proc.returncode}) before a {kind} event: {_tail(log)}"
        time.sleep(0.2)
    raise AssertionError(f"no {kind} event (step >= {min_step}) within {timeout} s: {_tail(log)}")


def _finish(proc: subprocess.Popen[bytes], log: Path, timeout: float = 300) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"the job did not end within {timeout} s: {_tail(log)}") from None


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"


def _each_step_once(run_dir: Path, steps: int, stopped: bool = False) -> None:
    """Every step 1..steps exactly once in metrics.jsonl and in the trajectory parts, as RunReader reads them
    (``stopped``: the step a stop interrupted may have its part already)."""
    reader = RunReader(run_dir)
    assert [row["step"] for row in reader.metrics()] == list(range(1, steps + 1))
    parts = reader.trajectory_steps()
    assert parts == list(range(1, steps + 1)) or (stopped and parts == list(range(1, steps + 2))), parts
    for step in reader.trajectory_steps():
        assert set(reader.trajectories(step, ["step"])["step"]) == {step}
    assert not reader.warnings, reader.warnings


class _Webhook:
    """A local HTTP server standing for ``trainer.alerts``' webhook: the texts POSTed to it."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        texts = self.texts = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                texts.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))["text"])
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.env = {"SKYRL_ALERTS_WEBHOOK": f"http://127.0.0.1:{self.server.server_port}/hook"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


ALERTS = "trainer.alerts.webhook=env:SKYRL_ALERTS_WEBHOOK"


def _kinds(run_dir: Path) -> list[str]:
    return [event["kind"] for event in RunReader(run_dir).events()]


def test_a_users_error_is_not_restarted(tmp_path: Path) -> None:
    """A reward function that always raises, with ``reward.errors=fail`` and ``trainer.max_restarts=2``: the run
    fails once, with the reward's error, and is not restarted (one trainer attempt, no ``restarted`` event); the
    failure alert goes out once. ~25 s here (the first run of a session builds the tiny model: +20 s)."""
    (tmp_path / "always_raises.py").write_text("def boom(prompt, completion, **columns):\n"
                                               "    raise ValueError('this reward always raises')\n")
    log = tmp_path / "job.log"
    hook = _Webhook()
    try:
        proc = _start(tmp_path / "runs", "user-error", "trainer.max_restarts=2", "trainer.ckpt_interval=1",
                      "reward.functions=[{name: boom, file: 'always_raises:boom'}]", "reward.errors=fail",
                      f"trainer.max_training_steps={STEPS}", ALERTS, env={"PYTHONPATH": str(tmp_path), **hook.env},
                      log=log)
        assert _finish(proc, log) == 1, _tail(log)
    finally:
        hook.close()
    (text,) = hook.texts  # the failure alert, once (sent by the supervisor: the trainer leaves it to it)
    assert text.startswith("skyrl-nb: run user-error failed at step 1: RewardFunctionError") and "always raises" in text
    run_dir = tmp_path / "runs" / "user-error"
    status = RunReader(run_dir).status()
    assert status["state"] == "failed" and "this reward always raises" in status["error"], status
    assert status["error_kind"] == "code_or_data" and status["resumable"] is False and status["restarts"] == 0
    kinds = _kinds(run_dir)
    assert "restarted" not in kinds and kinds.count("error") == 1 and kinds.count("started") == 1, kinds
    output = log.read_text()
    assert output.count("supervisor: trainer attempt") == 1 and "not restarted: an error in the run's code" in output


def test_a_killed_trainer_restarts_from_its_checkpoint_and_a_stop_is_not_restarted(tmp_path: Path) -> None:
    """The trainer process (the Ray job's driver) killed with SIGKILL after its step-2 checkpoint: the supervisor
    records a ``restarted`` event (worker_died, from step 2 or later) and the new trainer resumes; then SIGTERM to
    the job (Ray's stop) stops it for good: exit 143, status stopped, no second restart. Every step written is there
    once, no alert went out, and the dashboard's header says ``restarted 1×``. ~45 s here."""
    log = tmp_path / "job.log"
    run_dir = tmp_path / "runs" / "killed"
    hook = _Webhook()
    proc = _start(tmp_path / "runs", "killed", "trainer.max_restarts=2", "trainer.ckpt_interval=2",
                  "trainer.max_training_steps=400", ALERTS, env=hook.env, log=log)
    _wait_event(run_dir, proc, log, "checkpoint_saved", min_step=2)
    from skyrl_core import procs

    (trainer,) = procs.children_of(proc.pid)
    os.kill(trainer, signal.SIGKILL)
    resumed = _wait_event(run_dir, proc, log, "resumed", timeout=180)
    (restarted,) = [e for e in RunReader(run_dir).events() if e["kind"] == "restarted"]
    assert restarted["error_kind"] == "worker_died" and "SIGKILL" in restarted["error"], restarted
    assert restarted["attempt"] == resumed["attempt"] == 1 and restarted["from_step"] == resumed["from_step"] >= 2
    assert RunReader(run_dir).status()["pid"] == proc.pid  # the job's process, alive across the restart
    _wait_event(run_dir, proc, log, "checkpoint_saved", min_step=restarted["from_step"] + 2)

    os.kill(proc.pid, signal.SIGTERM)  # what Ray's stop sends (to the trainer too: it acts on one)
    assert _finish(proc, log, timeout=60) == 143, _tail(log)
    hook.close()
    assert hook.texts == []  # neither a restarted failure nor a stop is an alert
    status = RunReader(run_dir).status()
    assert status["state"] == "stopped" and status["restarts"] == 1 and status["attempt"] == 1, status
    assert _kinds(run_dir).count("restarted") == 1
    _each_step_once(run_dir, status["step"], stopped=True)

    from skyrl_nb.dashboard import Dashboard

    board = Dashboard(run_dir, static=True, charts=False)
    board.refresh()
    assert board.note().startswith("restarted 1× (TrainerDied: the trainer process"), board.note()


def _raylet_of(node_manager_port: int) -> int:
    """The pid of the raylet listening on ``node_manager_port`` (this machine's /proc)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            words = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if words and words[0].endswith(b"raylet") and f"--node_manager_port={node_manager_port}".encode() in words:
            return int(entry)
    raise AssertionError(f"no raylet with --node_manager_port={node_manager_port} in /proc")


def _policy_workers(state: str | None = None) -> dict[str, dict[str, Any]]:
    """The cluster's PolicyWorker actors (``state``: only those in it) by actor id."""
    from ray._private import state as ray_state

    return {actor_id: a for actor_id, a in ray_state.actors(actor_state_name=state).items()
            if a["ActorClassName"] == "PolicyWorker"}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_raylet_under_the_policy_killed_mid_run_restarts_the_job_on_the_surviving_node(
        engine_ray: Any, tmp_path: Path) -> None:
    """Chaos: a 2-node cluster (the session's head and a second raylet on this machine), the quickstart with the
    policy and the generator as Ray actors on the second node (the head's CPUs are held by a placeholder actor until
    they are placed), checkpoints every 2 steps, ``trainer.max_restarts=2``. The second node's raylet is killed with
    SIGKILL after the step-2 checkpoint: the job restarts by itself (one ``restarted`` event, worker_died), the new
    policy runs on the head, the run succeeds with every step 1..20 exactly once (metrics and trajectory parts), and
    no actor or placement group of either attempt is left. 70-80 s here with the tiny model built (this module's
    other tests build it), 100 s alone, 160 s on a busy machine: the trainer starts twice (~31 s to its first step,
    ~20 s the second time), the failure is seen ~3 s after the kill and the restart itself takes ~6 s."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    from ray_clusters import second_ray_node

    ray = engine_ray
    head = ray.get_runtime_context().get_node_id()
    head_cpus = {n["NodeID"]: n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]}[head]

    @ray.remote
    class Placeholder:
        def ready(self) -> bool:
            return True

    log = tmp_path / "job.log"
    run_dir = tmp_path / "runs" / "chaos"
    env = {"RAY_ADDRESS": ray.get_runtime_context().gcs_address, "RAY_AUTH_MODE": "disabled"}
    with second_ray_node(2) as second:
        port = next(n["NodeManagerPort"] for n in ray.nodes() if n["NodeID"] == second)
        holder = Placeholder.options(num_cpus=head_cpus, scheduling_strategy=NodeAffinitySchedulingStrategy(
            head, soft=False)).remote()
        ray.get(holder.ready.remote(), timeout=120)
        before = set(_policy_workers())  # earlier tests' actors on the session's cluster
        proc = _start(tmp_path / "runs", "chaos", "trainer.max_restarts=2", "trainer.ckpt_interval=2",
                      f"trainer.max_training_steps={CHAOS_STEPS}", "trainer.placement.colocate_all=false", env=env,
                      log=log)
        try:
            _wait_event(run_dir, proc, log, "started")
            assert [a["Address"]["NodeID"] for a in _policy_workers("ALIVE").values()] == [second]
            ray.kill(holder)  # the head's CPUs are free for the restart
            _wait_event(run_dir, proc, log, "checkpoint_saved", min_step=2)
            os.kill(_raylet_of(port), signal.SIGKILL)
            # the actors' workers notice their raylet's death within seconds, training on meanwhile
            print(f"raylet killed at {time.time() - RunReader(run_dir).events()[0]['time']:.1f} s")
            assert _finish(proc, log) == 0, _tail(log)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    first = RunReader(run_dir).events()[0]["time"]
    print("events (s after the first):", [(round(e["time"] - first, 1), e["kind"], e.get("step"))
                                           for e in RunReader(run_dir).events() if e["kind"] != "checkpoint_saved"])

    status = RunReader(run_dir).status()
    assert status["state"] == "succeeded" and status["step"] == CHAOS_STEPS and status["restarts"] == 1, status
    _each_step_once(run_dir, CHAOS_STEPS)
    events = RunReader(run_dir).events()
    (restarted,) = [e for e in events if e["kind"] == "restarted"]
    assert restarted["error_kind"] == "worker_died" and restarted["attempt"] == 1, restarted
    assert 2 <= restarted["from_step"] < CHAOS_STEPS
    assert [e["from_step"] for e in events if e["kind"] == "resumed"] == [restarted["from_step"]]
    print(f"restarted from step {restarted['from_step']}: {restarted['error'][:300]}")
    # the second attempt's policy ran on the head; nothing of either attempt is left on the cluster
    ours = {k: a for k, a in _policy_workers().items() if k not in before}
    assert sorted(a["Address"]["NodeID"] == head for a in ours.values()) == [False, True], ours
    assert not set(_policy_workers("ALIVE")) - before
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
        if not left:
            break
        time.sleep(0.5)
    assert not left, json.dumps(left, default=str)[:2000]
