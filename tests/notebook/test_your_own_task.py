"""notebooks/your_own_task.ipynb headless with papermill: a DataFrame and two reward functions from cells, trained by
the real engine (the built-in tiny model, 3 steps) on the session's Ray cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "your_own_task.ipynb"


def _outputs(nb: Any) -> list[dict[str, Any]]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def test_parameters_cell_is_tagged_and_defaults_to_smollm2_with_lora() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    names: dict[str, Any] = {}
    exec(tagged[0].source, {}, names)  # noqa: S102 - the notebook's own parameters cell: plain assignments
    assert names["quick"] is False and names["lora_rank"] > 0
    assert {"max_training_steps", "run_root", "run_id", "num_problems"} <= set(names)


@pytest.mark.slow
def test_your_own_task_under_papermill(ray_cluster: Any, nb_env: Path, tiny_model_dir: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """quick=True, 3 steps, 40 problems. The model is the built-in tiny one's shape untrained (the session's
    ``tiny_model_dir``): ``builtin://tiny-qwen2`` is warm-started on the train rows, a minute of SFT on these
    word problems on 2 cores and a fresh cache, which is not what this test checks. The notebook ends with an
    evaluation job (issue 36): base vs trained on the 4 held-out problems, 4 samples each, scored by the same two
    functions from the notebook's cells."""
    import papermill

    from skyrl_core.runs import open_run
    from skyrl_nb.demo import ensure_kernel

    monkeypatch.delenv("SKYRL_NB_ENGINE_MODULE")  # the kernel's jobs run `python -m skyrl_engine`: the real rewards
    runs = tmp_path / "runs"
    out = tmp_path / "your_own_task.out.ipynb"
    papermill.execute_notebook(str(NOTEBOOK), str(out), kernel_name=ensure_kernel(), progress_bar=False,
                               cwd=str(REPO), parameters={
                                   "quick": True, "max_training_steps": 3, "num_problems": 40,
                                   "run_root": str(runs), "run_id": "pm-own-task", "keep_cluster": True,
                                   "overrides": [f"trainer.policy.model.path={tiny_model_dir}"]})
    done = nbformat.read(out, as_version=4)
    outputs = _outputs(done)
    assert not any(o.get("output_type") == "error" for o in outputs), json.dumps(outputs)[-2000:]
    assert out.stat().st_size < 1_000_000

    run = open_run(runs / "pm-own-task")
    assert run.status()["state"] == "succeeded"
    metrics = run.metrics()
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for name in ("reward/correct", "reward/format_bonus", "reward/errors"):
        assert all(name in m for m in metrics), (name, sorted(metrics[-1]))
    assert all(m["reward/errors"] == 0 for m in metrics)  # neither function raised on a sample

    manifest = json.loads(run.read_file("inputs/manifest.json"))
    assert [d["rows"] for d in manifest["data"]["train"]] == [36]  # 40 problems, a tenth held out for eval
    assert [d["rows"] for d in manifest["data"]["val"]] == [4]
    assert manifest["columns"] == {"prompt": "question", "ground_truth": "answer"}
    rewards = {f["name"]: f for f in manifest["rewards"]}
    assert set(rewards) == {"correct", "format_bonus"} and rewards["format_bonus"]["weight"] == 0.2
    assert rewards["correct"]["source"].startswith("def correct(prompts, completions, answer, **columns):")
    assert rewards["format_bonus"]["source"].startswith("def format_bonus(prompt, completion, **columns):")

    rows = run.trajectories(run.trajectory_steps()[-1])
    assert {"reward/correct", "reward/format_bonus", "reward_error"} <= set(rows.columns)
    text = json.dumps(outputs)
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "pm-own-task: succeeded, step 3/3" in html  # the dashboard's final static figure
    assert ">correct</text>" in html and ">format_bonus</text>" in html  # each function's series in its legend
    assert "36 train, 4 eval problems" in text
    assert "samples failed" in text  # the failures cell read the last step's trajectories
    assert "train data: a pandas.DataFrame, 36 rows, sha256" in text
    assert "reward correct (weight 1.0, batched)" in text and "reward format_bonus (weight 0.2, per sample)" in text
    assert ray_cluster._token not in out.read_text()

    from skyrl_core.eval_store import open_eval

    evals = sorted(runs.glob("pm-own-task-eval-*"))
    assert len(evals) == 1, evals
    ev = open_eval(evals[0])
    summary = ev.summary()
    assert list(summary["models"]) == ["base", "trained"] and summary["pass_at"] == [1, 4]
    for model in ("base", "trained"):
        stats = summary["models"][model]
        assert (stats["n_prompts"], stats["n_samples"]) == (4, 16) and "pass@4_ci" in stats
        samples = ev.samples(model)
        assert {"reward/correct", "reward/format_bonus"} <= set(samples.columns)  # the cell's functions scored it
    assert "pass@4" in text and "problems changed between base and trained" in text
