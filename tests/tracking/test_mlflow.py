"""``trainer.logger=[mlflow, console]`` on a real 3-step run against a real ``mlflow server`` started here
(from its own environment, scripts/mlflow_server_env.sh), read back through the MLflow client."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from engine_runs import run_train
from ray_clusters import _free_ports

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("mlflow")  # the client (mlflow-skinny) in this environment
    built = subprocess.run(["bash", str(REPO / "scripts" / "mlflow_server_env.sh")], capture_output=True, text=True,
                           timeout=900, env={**os.environ, "PYTHON": os.environ.get("PYTHON", "python3.11")})
    assert built.returncode == 0, built.stderr[-2000:]
    python = built.stdout.strip().splitlines()[-1]
    home = tmp_path_factory.mktemp("mlflow")
    port = _free_ports(1)[0]
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen([python, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1", "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}",
                             "--default-artifact-root", str(home / "artifacts")],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                            cwd=home)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(uri + "/health", timeout=2).read()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (home / "server.log").read_text()[-2000:]
                time.sleep(0.5)
        yield uri
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_a_run_logs_params_metrics_and_its_end_to_mlflow(mlflow_server: str, tmp_path: Path,
                                                         private_model_cache: str) -> None:
    from mlflow.tracking import MlflowClient

    from skyrl_core.runs import RunReader

    done = run_train(tmp_path, "tracked", "builtin://tiny-qwen2", "trainer.max_training_steps=3",
                     "trainer.logger=[mlflow, console]", "trainer.eval_interval=0", "trainer.eval_before_train=false",
                     "trainer.ckpt_interval=3",
                     env={"MLFLOW_TRACKING_URI": mlflow_server, "MLFLOW_EXPERIMENT_NAME": "issue-14"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[skyrl_engine] step 3/3 reward=" in done.stdout and "run=tracked" in done.stdout  # console

    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("issue-14")
    (run,) = client.search_runs([experiment.experiment_id], "tags.`skyrl_nb.run_id` = 'tracked'")
    assert run.info.run_name == "tracked" and run.info.status == "FINISHED"
    assert run.data.params["trainer.max_training_steps"] == "3" and run.data.params["trainer.seed"] == "42"
    assert run.data.tags["skyrl_nb.state"] == "succeeded"
    assert run.data.tags["skyrl_nb.final_checkpoint"].endswith("checkpoints/global_step_3")
    history = client.get_metric_history(run.info.run_id, "reward/avg_raw_reward")
    stored = {row["step"]: row["reward/avg_raw_reward"] for row in RunReader(tmp_path / "tracked").metrics()}
    assert {m.step: m.value for m in history} == pytest.approx(stored)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "timing/step")] == [1, 2, 3]
