"""An eval job's MLflow logging (``skyrl_engine.evaluation.log_to_mlflow``) against a real MLflow tracking store (a
local file store, no server): the summary in an MLflow run named after the eval, and the evaluated run's own MLflow
run (found by the tag the trainer sets) gets its checkpoint's eval metrics at that step. ~3 s here."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_eval_metrics_land_on_the_eval_and_on_the_evaluated_run(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from skyrl_core.config import load_config
    from skyrl_core.eval_config import read_section
    from skyrl_core.eval_stats import summarize
    from skyrl_engine.evaluation import log_to_mlflow
    from skyrl_engine.tracking import RUN_ID_TAG

    uri = f"file://{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "evals")
    client = MlflowClient(tracking_uri=uri)
    trained_run = client.create_run(client.create_experiment("evals"), tags={RUN_ID_TAG: "my-run"}).info.run_id

    samples = {"base": [{"prompt_index": p, "reward": float(p % 2)} for p in range(8)],
               "my-run@step=4": [{"prompt_index": p, "reward": float(p % 4 != 0)} for p in range(8)]}
    summary = summarize(samples, pass_at=(1,), n_boot=50)
    section = read_section({"models": [
        {"name": "base", "source": "builtin://tiny-qwen2", "kind": "builtin", "location": "builtin://tiny-qwen2"},
        {"name": "my-run@step=4", "source": "my-run", "kind": "run", "location": "/runs/my-run", "step": 4}]})
    models = [{**m.model_dump(), "path": "/x"} for m in section.models]
    quiet = load_config("quickstart", ["run.run_id=my-run-eval-1", "trainer.logger=console"])
    assert log_to_mlflow(quiet, section, summary, models, log=lambda _: None) == []  # no mlflow, nothing logged

    cfg = load_config("quickstart", ["run.run_id=my-run-eval-1", "trainer.logger=[console, mlflow]"])
    written = log_to_mlflow(cfg, section, summary, models, log=lambda _: None)
    assert len(written) == 2 and written[1] == trained_run
    experiment = client.get_experiment_by_name("evals").experiment_id
    (own,) = client.search_runs([experiment], f"tags.`{RUN_ID_TAG}` = 'my-run-eval-1'")
    assert own.info.status == "FINISHED" and own.data.params["run.run_id"] == "my-run-eval-1"
    expected = summary["models"]["my-run@step=4"]
    assert own.data.metrics["my-run_at_step_4/pass_at_1"] == pytest.approx(expected["pass@1"])
    assert own.data.metrics["base/pass_at_1_ci_lo"] == pytest.approx(summary["models"]["base"]["pass@1_ci"][0])
    history = client.get_metric_history(trained_run, "eval_job/pass_at_1")
    assert [(m.step, m.value) for m in history] == [(4, pytest.approx(expected["pass@1"]))]
    assert client.get_run(trained_run).data.tags["skyrl_nb.last_eval"] == "my-run-eval-1"
