"""Experiment trackers beside the run store: ``trainer.logger`` with SkyRL's names (one or a list).

- ``console``: one line per step on stdout, always the same pattern (a log monitor can match it)::

      [skyrl_engine] step 3/10 reward=0.4125 tokens_per_s=5012.3 step_s=1.234 run=my-run

- ``mlflow``: the run's dotted config as params, every numeric metric of every step, the final state and
  checkpoint as tags, to ``MLFLOW_TRACKING_URI`` (a SageMaker managed MLflow ARN works when the
  ``sagemaker-mlflow`` plug-in is installed), experiment ``MLFLOW_EXPERIMENT_NAME`` (default ``skyrl-nb``).
  The MLflow run is named after the run id and tagged ``skyrl_nb.run_id``: a resume logs into the same one.
- ``tensorboard``: scalars under ``TENSORBOARD_LOGDIR`` (default ``<run_dir>/tensorboard`` for a local run
  dir, a folder in the temp dir for an object store), through ``torch.utils.tensorboard``.
- ``wandb``: where ``wandb`` is installed: project ``WANDB_PROJECT`` (default ``skyrl-nb``), run id = run id.

Each tracker listens to the run store's writer (``RunWriter.metric_listeners``), so it gets exactly the
rows the notebook's dashboard reads. A tracker whose package is missing on the cluster fails the job at
its start, in one line naming ``trainer.logger``.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

from skyrl_core.choices import RunState
from skyrl_core.store import is_url

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig
    from skyrl_core.runs import RunWriter

RUN_ID_TAG = "skyrl_nb.run_id"
#: The console tracker's step line as a regular expression: what a log monitor matches (HyperPod's
#: ``SageMakerLogMonitoring`` ``log_pattern`` rule, :func:`log_monitoring_rule`; docs/hyperpod.md).
STEP_LINE_PATTERN = r"\[skyrl_engine\] step \d+/\d+ reward="


def log_monitoring_rule(timeout_minutes: int = 30) -> dict[str, Any]:
    """A ``SageMakerLogMonitoring`` rule (toolkit-for-ray-on-sagemaker-ai's ``LogMonitorConfig.rules``) that
    flags a job whose console tracker printed no step line for ``timeout_minutes``."""
    return {"name": "skyrl_engine_step", "type": "log_pattern", "enabled": True,
            "log_pattern": STEP_LINE_PATTERN, "timeout_minutes": timeout_minutes}


def _numbers(row: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items()
            if k not in ("step", "time") and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _need(module: str, logger: str, package: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise RuntimeError(f"trainer.logger: {logger!r} needs the {package} package on the cluster "
                           f"(pip install {package}), or leave {logger} out of trainer.logger") from None


class ConsoleTracker:
    """One stable line per step on stdout."""

    def __init__(self, cfg: JobConfig, total_steps: int):
        self.run_id, self.total_steps = cfg.run.run_id, total_steps

    def log_metrics(self, step: int, row: dict[str, Any]) -> None:
        def fmt(key: str, digits: int) -> str:
            value = row.get(key)
            return "-" if not isinstance(value, (int, float)) else f"{value:.{digits}f}"

        print(f"[skyrl_engine] step {step}/{self.total_steps} reward={fmt('reward/avg_raw_reward', 4)} "
              f"tokens_per_s={fmt('trainer/tokens_per_second', 1)} step_s={fmt('timing/step', 3)} "
              f"run={self.run_id}", flush=True)

    def finish(self, state: str, checkpoint: str | None) -> None:
        pass


class MlflowTracker:
    """Params, per-step metrics and the end of the run in one MLflow run (see the module docstring)."""

    def __init__(self, cfg: JobConfig, total_steps: int):
        mlflow = _need("mlflow", "mlflow", "mlflow-skinny")
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient

        self._Metric = Metric
        self.uri = os.environ.get("MLFLOW_TRACKING_URI") or mlflow.get_tracking_uri()
        if self.uri.startswith("arn:"):
            _need("sagemaker_mlflow", "mlflow", "sagemaker-mlflow")  # SageMaker's managed MLflow
        self.client = MlflowClient(tracking_uri=self.uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "skyrl-nb")
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        run_id = str(cfg.run.run_id)
        found = self.client.search_runs([experiment_id], f"tags.`{RUN_ID_TAG}` = '{run_id}'", max_results=1)
        if found:  # a resume: the same MLflow run goes on
            self.run = found[0]
            self.client.update_run(self.run.info.run_id, status="RUNNING")
        else:
            self.run = self.client.create_run(experiment_id, run_name=run_id, tags={RUN_ID_TAG: run_id})
            params = [Param(k[:250], str(v)[:6000]) for k, v in sorted(cfg.to_dotted().items())]
            tags = [RunTag("skyrl_nb.total_steps", str(total_steps))]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                self.client.log_batch(self.run.info.run_id, params=params[i:i + 100], tags=tags if i == 0 else [])

    def log_metrics(self, step: int, row: dict[str, Any]) -> None:
        stamp = int(float(row.get("time") or 0) * 1000)
        metrics = [self._Metric(k, v, stamp, step) for k, v in _numbers(row).items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run.info.run_id, metrics=metrics[i:i + 1000])

    def finish(self, state: str, checkpoint: str | None) -> None:
        run_id = self.run.info.run_id
        self.client.set_tag(run_id, "skyrl_nb.state", state)
        if checkpoint:
            self.client.set_tag(run_id, "skyrl_nb.final_checkpoint", checkpoint)
        status = {RunState.SUCCEEDED: "FINISHED", RunState.STOPPED: "KILLED"}.get(state, "FAILED")
        self.client.set_terminated(run_id, status=status)


class TensorboardTracker:
    """Scalars for TensorBoard (see the module docstring)."""

    def __init__(self, cfg: JobConfig, total_steps: int):
        _need("tensorboard", "tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        run_dir = str(cfg.run_dir)
        default = (os.path.join(tempfile.gettempdir(), "skyrl-nb-tensorboard", str(cfg.run.run_id)) if is_url(run_dir)
                   else os.path.join(run_dir, "tensorboard"))
        self.logdir = os.environ.get("TENSORBOARD_LOGDIR") or default
        self.writer = SummaryWriter(self.logdir)

    def log_metrics(self, step: int, row: dict[str, Any]) -> None:
        for key, value in _numbers(row).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def finish(self, state: str, checkpoint: str | None) -> None:
        self.writer.close()


class WandbTracker:
    """Weights & Biases, where installed (see the module docstring)."""

    def __init__(self, cfg: JobConfig, total_steps: int):
        wandb = _need("wandb", "wandb", "wandb")
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "skyrl-nb"), name=str(cfg.run.run_id),
                              id=str(cfg.run.run_id), resume="allow", config=cfg.to_dotted())

    def log_metrics(self, step: int, row: dict[str, Any]) -> None:
        self.run.log(_numbers(row), step=step)

    def finish(self, state: str, checkpoint: str | None) -> None:
        self.run.summary["skyrl_nb.state"] = state
        self.run.finish(exit_code=0 if state == RunState.SUCCEEDED else 1)


TRACKERS = {"console": ConsoleTracker, "mlflow": MlflowTracker, "tensorboard": TensorboardTracker,
            "wandb": WandbTracker}


class Tracking:
    """The trackers ``trainer.logger`` names, fed by the run store's writer."""

    def __init__(self, cfg: JobConfig, writer: RunWriter, total_steps: int):
        names = cfg.trainer.logger if isinstance(cfg.trainer.logger, list) else [cfg.trainer.logger]
        self.trackers = [TRACKERS[str(name)](cfg, total_steps) for name in dict.fromkeys(map(str, names))]
        self._writer = writer
        writer.metric_listeners.append(self.log_metrics)

    def log_metrics(self, step: int, row: dict[str, Any]) -> None:
        for tracker in self.trackers:
            tracker.log_metrics(step, row)

    def finish(self, checkpoint: str | None = None) -> None:
        """Close every tracker with the run's final state (from status.json as the writer last wrote it)."""
        state = self._writer.state
        for tracker in self.trackers:
            try:
                tracker.finish(state, checkpoint)
            except Exception as err:  # one tracker's trouble must not hide the run's own end
                print(f"[skyrl_engine] warning: {type(tracker).__name__} did not close: {err}", flush=True)

    def __repr__(self) -> str:
        return f"Tracking({', '.join(type(t).__name__ for t in self.trackers)})"
