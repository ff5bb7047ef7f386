"""Evaluation as its own job (issue 36, item 1) on a real local Ray cluster with the real engine: the built-in tiny
model before and after a short quickstart run, on the run's held-out split, through ``job.evaluate()`` (and
``skyrl_nb.evaluate`` with a DataFrame and a reward function from a cell, ``wait=False``).

Measured here (2 busy cores, the tiny model already in the machine's cache): the quickstart run ~25 s, each eval
job ~15-20 s, the cluster ~10 s; ~80 s in all. A fresh cache adds the tiny model's warm start (~60 s) once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

STEPS = 4
RUN = [f"trainer.max_training_steps={STEPS}", f"trainer.eval_interval={STEPS}", f"trainer.ckpt_interval={STEPS}",
       "trainer.eval_before_train=false",
       # the run's own eval samples 4 answers a prompt at temperature 1, so pass@4 means something
       "generator.eval_n_samples_per_prompt=4", "generator.eval_sampling_params.temperature=1.0"]


def exact(prompt, completion, ground_truth, **_):
    """A reward function written in a cell: the answer exactly."""
    return float(completion.strip() == str(ground_truth))


@pytest.mark.timeout(600)
def test_base_against_trained_on_the_held_out_split(eval_cluster: Any, job_model_cache: dict[str, Any],
                                                     tmp_path: Path) -> None:
    import pandas as pd

    import skyrl_nb
    from skyrl_core.eval_stats import prompt_diff
    from skyrl_nb.eval_jobs import EvalJob

    started = time.monotonic()
    runs = tmp_path / "runs"
    job = eval_cluster.launch("quickstart", overrides=[f"run.run_root={runs}", *RUN], run_id="qs",
                              runtime_env=job_model_cache)
    assert job.wait(timeout=420, poll_s=0.5) == "succeeded", job.logs(tail=40)
    trained_s = time.monotonic() - started
    (final,) = [row["eval/all/avg_score"] for row in job.run.metrics() if row["step"] == STEPS]

    started = time.monotonic()
    res = job.evaluate(pass_at=[1, 4], runtime_env=job_model_cache)
    eval_s = time.monotonic() - started
    assert res.model_names == ["base", "trained"]
    models = {m["name"]: m for m in res.models()}
    assert models["base"]["kind"] == "builtin" and models["base"]["source"] == "builtin://tiny-qwen2"
    assert models["trained"]["kind"] == "run" and models["trained"]["step"] == STEPS
    summary = res.summary["models"]
    # the same code path and seed as the run's own eval at that step: the same number, not a close one
    assert summary["trained"]["pass@1"] == pytest.approx(final, rel=0, abs=1e-12), (summary["trained"], final)
    assert summary["trained"]["mean_reward"] == pytest.approx(final, rel=0, abs=1e-12)
    for name in ("base", "trained"):
        s = summary[name]
        assert s["n_prompts"] == 256 and s["n_samples"] == 256 * 4  # builtin://arithmetic/test, 4 samples each
        for metric in ("pass@1", "pass@4", "mean_reward"):
            lo, hi = s[f"{metric}_ci"]
            assert lo <= s[metric] <= hi and lo < hi, (name, metric, s)
        assert s["pass@1"] <= s["pass@4"]
    table = res.table(numeric=True)
    assert list(table["model"]) == ["base", "trained"]
    assert {"pass@1", "pass@1 lo", "pass@1 hi", "pass@4", "pass@4 lo", "pass@4 hi"} <= set(table.columns)
    # the per-prompt difference, in both directions or said to be none
    changes = prompt_diff(res.samples("base"), res.samples("trained"))
    diff = res.diff()
    assert sorted(diff.loc[diff["change"] == "gained", "prompt_index"]) == changes["gained"]
    assert sorted(diff.loc[diff["change"] == "lost", "prompt_index"]) == changes["lost"]
    # each direction lists its prompts, or says there are none (0)
    assert f"trained vs base: {len(changes['gained'])} prompts gained, {len(changes['lost'])} lost" in repr(res)
    # the samples: the same prompts for both models, with what the inspector shows
    base, trained = res.samples("base"), res.samples("trained")
    assert (base[["prompt_index", "sample_index"]].values == trained[["prompt_index", "sample_index"]].values).all()
    assert base["prompt"].iloc[0].startswith("<|user|>") and base["ground_truth"].notna().all()

    # skyrl_nb.evaluate: a DataFrame and a reward function from a cell travel with the job; wait=False is a handle
    qa = pd.DataFrame([{"question": f"{a}+{b}", "answer": str(a + b)} for a in range(3) for b in range(3)])
    handle = skyrl_nb.evaluate({"start": "builtin://tiny-qwen2", "end": (job, STEPS)}, qa,
                               columns={"prompt": "question", "ground_truth": "answer"}, reward=exact, n=2,
                               pass_at=2, sampling={"temperature": 1.0}, batch_size=4, name="own-data",
                               wait=False, runtime_env=job_model_cache)
    assert isinstance(handle, EvalJob) and handle.eval_id.startswith("own-data-eval-")
    assert "models=[start, end]" in repr(handle)
    own = handle.result(timeout=300)
    assert own.model_names == ["start", "end"] and handle.status() == "succeeded"
    assert "done=2/2" in repr(handle)
    frame = own.samples("end")
    assert len(frame) == 9 * 2 and (frame["reward/exact"] == frame["reward"]).all()
    assert set(frame["ground_truth"]) == set(qa["answer"]) and (frame["reward"].isin([0.0, 1.0])).all()
    assert own.reader.config()["evaluation"]["pass_at"] == [2]
    assert own.reader.config()["reward"]["functions"][0]["name"] == "exact"
    print(f"\nquickstart {STEPS} steps: {trained_s:.1f}s, job.evaluate(): {eval_s:.1f}s")
