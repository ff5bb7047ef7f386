"""`cluster.local()` in odd environments: a long HOME, a temp dir too long for Ray's sockets, its ports.

Ray refuses AF_UNIX socket paths over 107 bytes, and its sockets live under its temp dir, so that
dir is short and per user (not under HOME), and a too-long one is refused before anything starts.
Every port of the head listens on 127.0.0.1 only unless `expose=True`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest


def test_too_long_temp_dir_is_refused_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import skyrl_nb.cluster.local as local_mod

    def no_start(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a too-long temp dir must be refused before Ray starts")

    monkeypatch.setattr(local_mod, "_start_head", no_start)
    temp = tmp_path / ("t" * 90)
    token = tmp_path / "config" / "ray_token"
    started = time.monotonic()
    with pytest.raises(ValueError) as info:
        local_mod.local(temp_dir=temp, token_path=token)
    assert time.monotonic() - started < 1.0
    message = str(info.value)
    assert "\n" not in message
    assert str(temp) in message and f"{len(str(temp))} bytes" in message
    assert str(local_mod.SOCKET_PATH_LIMIT) in message
    assert not temp.exists() and not token.exists(), "nothing may be written for a refused temp dir"


def test_no_short_writable_temp_dir_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import skyrl_nb.cluster.local as local_mod
    import skyrl_nb.cluster.local_dirs as local_dirs

    monkeypatch.setattr(local_dirs, "_private_dir", lambda path: False)
    monkeypatch.setattr(tempfile, "tempdir", "/tmp/" + "d" * 80)
    with pytest.raises(RuntimeError) as info:
        local_mod.default_temp_dir("/home/someone/.cache/skyrl-nb/ray")
    message = str(info.value)
    assert "\n" not in message
    assert "d" * 80 in message and str(local_mod.SOCKET_PATH_LIMIT) in message  # the long one, with the limit
    assert "/tmp/skyrl-" in message  # and the short one that could not be written
    assert "temp_dir=" in message


def test_default_temp_dir_fits_ray_sockets_for_any_home(monkeypatch: pytest.MonkeyPatch) -> None:
    from skyrl_nb.cluster.local import SOCKET_PATH_LIMIT, cache_dir, default_temp_dir, socket_path_bytes

    for home in ("/home/sagemaker-user", "/tmp/" + "h" * 120):
        monkeypatch.setenv("HOME", home)
        monkeypatch.delenv("SKYRL_NB_CACHE_DIR", raising=False)
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        temp = default_temp_dir(cache_dir() / "ray")
        assert not str(temp).startswith(home)
        assert socket_path_bytes(temp) <= SOCKET_PATH_LIMIT
    # one head per config/cache dir: two homes of one user never share a Ray temp dir
    assert default_temp_dir("/a/.cache/skyrl-nb/ray") != default_temp_dir("/b/.cache/skyrl-nb/ray")


_SCRIPT = """
import json, sys, time
import skyrl_nb
from skyrl_nb.cluster.local import socket_path_bytes
cluster = skyrl_nb.cluster.local(num_cpus=2, timeout=120)  # says each stage as a line (no widget front end)
print("local() returned", flush=True)
# the plug-in is on this process's path only (the head started without it): the job has it because
# launch ships it (Ray py_modules)
sys.path.insert(0, sys.argv[2])
try:
    # the form, on this cluster (no GPU, no vLLM in its Python or under this HOME): vllm keeps Launch off
    form = skyrl_nb.configure("quickstart", overrides=["generator.inference_engine.backend=vllm",
                                                       "run.run_root=" + sys.argv[1]], cluster=cluster)
    vllm = {"disabled": form.view.launch.disabled, "problems": form.problems,
            "beside": form.view.messages["generator.inference_engine.backend"].value,
            "reason": form.view.launch_reason.value}
    job = cluster.launch("quickstart", overrides=[*json.loads(sys.argv[3]), "trainer.max_training_steps=2",
                                                  "run.run_root=" + sys.argv[1], "trainer.eval_before_train=false",
                                                  "trainer.eval_interval=0", "trainer.ckpt_interval=0"],
                         run_id="home60")
    state = job.wait(timeout=150, poll_s=0.5)
    print(json.dumps({"vllm": vllm, "state": str(state), "steps": len(job.run.metrics()), "rows": job.run.metrics(),
                      "temp": str(cluster.temp_dir),
                      "socket_bytes": socket_path_bytes(cluster.temp_dir), "logs": job.logs(tail=5)}))
finally:
    cluster.shutdown(timeout=2)
"""


@pytest.mark.timeout(180)
def test_local_with_a_60_char_home_runs_a_job_with_a_plugin(private_model_cache: str) -> None:
    """A fresh HOME of 60 characters: its own head (not the session's) comes up cold, saying its stages as
    it goes, and trains a 2-step job with the real engine (the built-in model from this session's model
    cache), whose advantage estimator and policy loss come from a plug-in module that only the notebook's
    process can import (issue 11; tests/notebook/test_plugins.py has the rest of the plug-in tests). On the
    same cluster (no GPU, no vLLM) the config form with the vllm backend says why it cannot run and keeps
    Launch off (issue 18). One cluster checks all three: a job on a fresh cluster costs ~30 s here."""
    from test_plugins import PLUGIN_DIR, WITH_PLUGIN

    from skyrl_nb.cluster.local import STATE_FILE, default_temp_dir

    base = Path(tempfile.mkdtemp(prefix="h60-", dir="/tmp"))
    home = base / ("h" * (60 - len(str(base)) - 1))
    assert len(str(home)) == 60
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SKYRL_NB_", "SKYRL_VLLM", "RAY_", "XDG_CACHE", "XDG_CONFIG", "PYTHONPATH"))}
    env.update(HOME=str(home), SKYRL_NB_CACHE=private_model_cache)
    state_dir = home / ".cache" / "skyrl-nb" / "ray"
    try:
        proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(home / "runs"), str(PLUGIN_DIR),
                               json.dumps(WITH_PLUGIN)], env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = proc.stdout.strip().splitlines()
        result = json.loads(lines[-1])
        # the cold start narrated itself before local() returned: at least two stages, each with its time
        stages = [line for line in lines[:lines.index("local() returned")] if line.startswith("local Ray head: ")]
        assert len(stages) >= 2 and all(line.endswith(" s)") for line in stages), lines
        assert "raylet up" in " ".join(stages) and stages[-1].startswith("local Ray head: ready at "), stages
        vllm = result["vllm"]
        assert vllm["disabled"], vllm
        (problem,) = [p for p in vllm["problems"] if p.startswith("generator.inference_engine.backend:")]
        assert "vLLM is not available on the cluster" in problem and "has no GPU" in problem, problem
        assert "vLLM is not available on the cluster" in vllm["beside"] and "Launch is off: inference: " in vllm["reason"]
        assert result["state"] == "succeeded" and result["steps"] == 2, result
        assert not result["temp"].startswith(str(home)), result["temp"]
        assert result["socket_bytes"] <= 107
        for row in result["rows"]:  # the plug-in's loss ran, on the plug-in's advantages (all 0.5)
            assert row["policy/loss_metrics/my_loss_adv_mean"] == pytest.approx(0.5), row
            assert "policy/policy_loss" in row and "policy/loss_metrics/clip_ratio" in row
    finally:
        _stop_head(state_dir / STATE_FILE)
        shutil.rmtree(default_temp_dir(state_dir), ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


def _stop_head(state_path: Path) -> None:
    """Kill the head a failed subprocess left behind (its process group only)."""
    try:
        pid = int(json.loads(state_path.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_every_ray_port_listens_on_loopback_only(ray_cluster: Any) -> None:
    """Every listening TCP socket of the head's processes (GCS, raylet, dashboard, agents, workers) is on 127.0.0.1."""
    psutil = pytest.importorskip("psutil")
    from skyrl_core import procs

    listening: list[tuple[str, str, int]] = []
    for pid in procs.process_group(ray_cluster.pid):
        try:
            proc = psutil.Process(pid)
            name = proc.name()
            conns = proc.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        listening += [(name, c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    names = {name for name, _, _ in listening}
    assert {"gcs_server", "raylet"} <= names, listening
    assert int(ray_cluster.address.rsplit(":", 1)[1]) in {port for _, _, port in listening}
    exposed = [sock for sock in listening if sock[1] not in ("127.0.0.1", "::ffff:127.0.0.1")]
    assert not exposed, f"listening beyond 127.0.0.1: {exposed}"
