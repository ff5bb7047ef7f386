"""The benchmark scripts that need no vLLM or TRL env: the GPU check's CPU smoke run, the reward pool's, the plot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_runs_on_cpu(tmp_path) -> None:
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "gpu_check", "--device", "cpu", "--tiny", "--steps", "1",
         "--threads", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    for key in ("generate_tokens_per_s", "train_tokens_per_s", "step_s", "sync_weights_s", "params_m"):
        assert report[key] > 0, key
    assert report["dtype"] == "fp32" and report["device_name"] == "cpu"


@pytest.mark.slow
def test_reward_pool_runs_one_step_per_arm(tmp_path) -> None:
    """The reward-pool study end to end at its smallest (one step per arm, a 1 ms reward): about 10 s."""
    out = tmp_path / "reward_pool.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "reward_pool", "--steps", "1", "--warmup", "0", "--sleep-ms", "1",
         "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert set(report["step_s_median"]) == {"builtin", "slow", "trivial", "slow_wide"}
    assert report["arms_see_the_same_rewards"]  # every function arm scores exactly like the built-in env
    assert report["max_workers"]["slow_wide"] == 128 and report["max_workers"]["builtin"] is None
    assert all(report["reward_stage_s_median"][arm] > 0 for arm in report["step_s_median"])
    assert 0 < report["trivial_reward_stage_share"] < 1 and report["slow_over_builtin"] > 0


def test_plot_draws_every_panel(tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import plot as plot_benchmarks

    (tmp_path / "async_vs_sync.json").write_text(json.dumps(
        {"steps": 5, "speedup_steps_per_s": 1.5, "sync": {"steps_per_s": 2.0}, "one_step": {"steps_per_s": 3.0}}))
    (tmp_path / "sampler_vs_vllm.json").write_text(json.dumps(
        {"prompts": 16, "n": 8, "tokens": 32, "threads": 1, "vllm_over_torch": 0.5,
         "torch": {"tokens_per_s": 1000.0}, "vllm": {"tokens_per_s": 500.0}}))
    (tmp_path / "vs_trl.json").write_text(json.dumps(
        {"steps": 3, "tokens_per_s_ratio": 2.0, "skyrl_nb": {"tokens_per_s": 200.0, "reward_last": 0.5},
         "trl": {"tokens_per_s": 100.0, "reward_last": 0.4}, "rewards": {"skyrl_nb": [0.1, 0.3, 0.5], "trl": [0.1, 0.2, 0.4]}}))
    svg = plot_benchmarks.draw(tmp_path)
    assert svg.startswith("<svg") and svg.count("<rect") == 7 and svg.count("<polyline") == 2
    assert "1.50x steps/s" in svg and "2.00x tokens/s" in svg
    assert plot_benchmarks.draw(tmp_path / "missing").count("<rect") == 1  # background only


def test_every_study_is_one_command_with_a_current_figure(monkeypatch) -> None:
    """bench/ is an instrument: each study is a module with ``main(argv)``, listed in ``bench.STUDIES``; its result
    file exists and is linked from docs/benchmarks.md's table (a page of at most ~300 lines); every result file in
    bench/results/ backs a figure on that page; no bench edits ``sys.path``."""
    import importlib
    import re

    monkeypatch.syspath_prepend(str(ROOT))
    import bench

    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert len(page.splitlines()) <= 300
    table = page.split("## ", 2)[1]  # the "Current results" section
    for study in bench.STUDIES:
        module = importlib.import_module(f"bench.{study.name}")
        assert callable(getattr(module, "main", None)), study.name
        if study.result:
            assert (bench.RESULTS / study.result).is_file(), study.result
            assert study.result in page, f"{study.result} is not on docs/benchmarks.md"
    for result in bench.RESULTS.glob("*.json"):
        assert result.name in page, f"{result.name} backs no figure on docs/benchmarks.md"
    assert "skyrl-nb vs TRL" in table and "| yes |" in table
    for source in (ROOT / "bench").rglob("*.py"):
        assert not re.search(r"sys\.path\.(insert|append)|sys\.path\[", source.read_text()), source
