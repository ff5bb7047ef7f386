"""One scripted training run on a local Ray head, shared by the Ray-metrics and the alert tests.

``scripted_run`` starts a Ray head (``ray start --head``, its own temp dir and ports, metrics exported every
second) and an HTTP server standing for the webhook, then runs ``python -m skyrl_engine train`` as a driver on
that head (``RAY_ADDRESS``, as a submitted job has it) with ``trainer.alerts`` pointing at the server through
``env:SKYRL_ALERTS_WEBHOOK``. The reward function (``scripted_rewards``) scores 1.0 for steps 1-4, holds step 5
until the test lets it go (a stall), scores 0.0 from step 5 (a reward collapse) and raises at step 7 (a failure).
While step 5 is held, Ray's metrics export is scraped until the phase and step gauges say where the run is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from ray_metrics_head import RAY_ENV, RayHead, gauges, start_head  # noqa: F401 - RayHead: re-exported

HERE = Path(__file__).resolve().parent
RUN_ID = "scripted-alerts"
STEPS, HOLD_AT, ZERO_FROM, RAISE_AT, PROMPTS, SAMPLES = 8, 5, 5, 7, 4, 4
#: The run's config: a small quickstart, no eval, checkpoints at 3 and 6, the scripted reward, alerts.
OVERRIDES = (
    f"trainer.max_training_steps={STEPS}", f"trainer.train_batch_size={PROMPTS}",
    f"trainer.policy_mini_batch_size={PROMPTS}", f"trainer.critic_mini_batch_size={PROMPTS}",
    f"trainer.micro_train_batch_size_per_gpu={PROMPTS * SAMPLES}", f"generator.n_samples_per_prompt={SAMPLES}",
    "trainer.eval_interval=0", "trainer.eval_before_train=false",
    "trainer.ckpt_interval=3", "trainer.max_ckpts_to_keep=1",
    "reward.functions=[{name: scripted, file: 'scripted_rewards:scripted'}]", "reward.errors=fail",
    "reward.timeout_s=300",
    "trainer.alerts.webhook=env:SKYRL_ALERTS_WEBHOOK", "trainer.alerts.stall_factor=2",
    "trainer.alerts.stall_min_s=2", "trainer.alerts.reward_below=0.5", "trainer.alerts.reward_window=2",
)


class Inbox:
    """A local HTTP server standing for the webhook (POST ``/hook``: one message) and for the scripted reward's
    control (GET ``/hold``: whether step 5 must still wait)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.hold = True
        inbox = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                inbox.messages.append({"path": self.path, "type": self.headers.get("Content-Type"),
                                       "json": json.loads(body), "time": time.time()})
                self._answer(b"ok")

            def do_GET(self) -> None:  # noqa: N802
                self._answer(json.dumps({"hold": inbox.hold}).encode())

            def _answer(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def texts(self) -> list[str]:
        return [m["json"]["text"] for m in self.messages]

    def wait_for(self, words: str, timeout: float, proc: subprocess.Popen | None = None) -> str:
        """The first message containing ``words``; fails the test after ``timeout`` or when ``proc`` ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [t for t in self.texts() if words in t]
            if found:
                return found[0]
            if proc is not None and proc.poll() is not None:
                pytest.fail(f"the run ended (exit code {proc.returncode}) with no message with {words!r}; got "
                            f"{self.texts()}; its output ends:\n{proc.communicate()[0][-3000:]}")
            time.sleep(0.1)
        pytest.fail(f"no message with {words!r} within {timeout:g} s; got {self.texts()}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def inbox() -> Any:
    server = Inbox()
    yield server
    server.close()


def scripted_env(inbox: Inbox, **extra: str) -> dict[str, str]:
    """The engine's environment for the scripted reward and the alerts (no Ray address: its own process only)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(":"),
               SKYRL_ALERTS_WEBHOOK=f"{inbox.url}/hook", SCRIPTED_CONTROL=f"{inbox.url}/hold",
               SCRIPTED_SAMPLES=str(PROMPTS * SAMPLES), SCRIPTED_HOLD_AT=str(HOLD_AT),
               SCRIPTED_ZERO_FROM=str(ZERO_FROM), SCRIPTED_RAISE_AT=str(RAISE_AT))
    env.update(extra)
    return env


def train_command(run_root: Path, model: str, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "skyrl_engine", "train", "--config", "quickstart", f"run.run_root={run_root}",
            f"run.run_id={RUN_ID}", f"trainer.policy.model.path={model}", *OVERRIDES, *overrides]


@dataclass
class ScriptedRun:
    """What the shared run left: its folder, what the webhook received, the gauges scraped while step 5 was
    held, the engine's exit code and output, and how long the parts took."""

    run_root: Path
    run_dir: Path
    inbox: Inbox
    held_gauges: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    returncode: int
    output: str
    seconds: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="session")
def scripted_run(tiny_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The run described in the module docstring, once per session (~25-35 s here: the head ~5-10 s, the run ~15 s)."""
    pytest.importorskip("ray")
    started = time.monotonic()
    run_root = tmp_path_factory.mktemp("scripted-runs")
    inbox = Inbox()
    head = start_head()
    seconds = {"ray head": time.monotonic() - started}
    proc: subprocess.Popen | None = None
    try:
        env = scripted_env(inbox, RAY_ADDRESS=head.address, **RAY_ENV)
        proc = subprocess.Popen(train_command(run_root, tiny_model_dir), env=env, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        inbox.wait_for("stalled at step 5", 300, proc)
        seconds["to the stall"] = time.monotonic() - started - seconds["ray head"]
        held: dict[Any, float] = {}
        deadline = time.monotonic() + 60  # Ray exports every second here; its agent may lag a few
        while time.monotonic() < deadline:
            held = gauges(head.scrape(), RUN_ID)
            if held.get(("ray_skyrl_step", ())) == HOLD_AT - 1 and held.get(
                    ("ray_skyrl_phase", (("phase", "generate"),))) == 1:
                break
            time.sleep(0.5)
        seconds["gauges seen"] = time.monotonic() - started - sum(seconds.values())
        inbox.hold = False
        output, _ = proc.communicate(timeout=300)
        seconds["to the end"] = time.monotonic() - started - sum(seconds.values())
        yield ScriptedRun(run_root, run_root / RUN_ID, inbox, held, proc.returncode, output, seconds)
    finally:
        inbox.hold = False
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        head.stop()
        inbox.close()
