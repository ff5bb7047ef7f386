"""The evaluation job: every model of an ``evaluation`` section sampled on the same prompts, scored, and summarised.

``python -m skyrl_engine evaluate --config env:SKYRL_NB_CONFIG`` runs :func:`run_evaluation` on the cluster, as a
training job runs its trainer. For each model, in the user's order::

    find it ──▶ a local model directory ──▶ the generator role (torch sampler or vLLM, placed as training places it)
            ──GeneratorWorker.eval_samples──▶ one record per sample ──▶ eval/samples/<model>.parquet

then ``eval/summary.json`` (``skyrl_core.eval_stats.summarize``) and, where ``trainer.logger`` names mlflow, the
summary in MLflow. The sampling is the in-training eval's own call (``GeneratorWorker.eval_samples``: the same
batches of ``trainer.eval_batch_size`` rows, the same seeds), so a run's checkpoint evaluated with the run's eval
settings and the seed of its eval at that step scores exactly what the run's eval scored there.

A model is found where the job runs (``find_model``): a run's checkpoint is exported to a local folder with the
export code (``skyrl_engine.export``; a LoRA run's merged weights, a run on ``s3://`` downloaded first), an export
on an object store is downloaded, a model directory or ``.gguf`` file and a built-in model resolve as
``trainer.policy.model.path`` does. Nothing of the notebook's disk is read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from skyrl_core.choices import RunState, Stage
from skyrl_core.eval_config import (
    EvalModel,
    EvaluationSection,
    eval_config_dict,
    ground_truth_user,
    section_problems,
)
from skyrl_core.eval_stats import flat_metrics, metric_key, summarize
from skyrl_core.eval_store import write_models, write_samples, write_summary
from skyrl_core.lifecycle import RunLifecycle
from skyrl_core.store import is_url, open_store
from skyrl_engine.export import export_model
from skyrl_engine.generator import eval_metrics
from skyrl_engine.models import resolve_model_path
from skyrl_engine.placement import Placement, plan_placement
from skyrl_engine.policy import set_torch_threads
from skyrl_engine.ray_runtime import connect
from skyrl_engine.rewards import load_function
from skyrl_engine.tasks import load_prompts
from skyrl_engine.tracking import RUN_ID_TAG, MlflowTracker
from skyrl_engine.trainer import StopRequested
from skyrl_engine.types import step_seed
from skyrl_engine.workers import Workers, runs_in_job_process, uses_vllm

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig
    from skyrl_core.runs import RunWriter
    from skyrl_engine.types import PromptRow


__all__ = ["EvalRefused", "StopRequested", "find_model", "log_to_mlflow", "run_evaluation", "sample_model",
           "vllm_python_for"]


class EvalRefused(ValueError):
    """The evaluation cannot run as configured (one line naming what to change): nothing was sampled."""


def run_evaluation(cfg: JobConfig, section: EvaluationSection, writer: RunWriter, *,
                   log: Callable[[str], None] = print, vllm_python: str | None = None) -> dict[str, Any]:
    """Evaluate every model of ``section`` on ``data.val_data`` into the eval store ``writer`` writes; the summary.

    Raises :class:`EvalRefused` (one line) for data that cannot be scored (no rows, no ground truth where a
    reward needs it) and ``skyrl_core.exports.ExportError`` for a run without the checkpoint asked for."""

    writer.write_config(eval_config_dict(cfg, section))
    life = RunLifecycle(writer)
    life.running(step=0, total_steps=len(section.models))
    life.started(len(section.models), models=section.names())
    store = open_store(str(cfg.run_dir))
    g, t = cfg.generator, cfg.trainer
    staging = tempfile.mkdtemp(prefix="skyrl-eval-")
    placement = connection = None
    samples: dict[str, list[dict[str, Any]]] = {}
    try:
        problems = section_problems(section, g.eval_n_samples_per_prompt)
        if problems:
            raise EvalRefused(problems[0])
        set_torch_threads(t.num_threads)
        rows = load_prompts(cfg.data.val_data, cfg.environment.env_class, columns=cfg.data.columns,
                            run_dir=str(cfg.run_dir))
        check_rows(cfg, rows)
        seed = section.seed if section.seed is not None else step_seed(t.seed, section.seed_step, 1)
        log(f"evaluating {len(section.models)} model(s) on {len(rows)} prompts x {g.eval_n_samples_per_prompt} "
            f"samples (seed {seed}, batches of {t.eval_batch_size})")
        found = []
        for model in section.models:
            writer.log_event("stage", step=0, stage=Stage.MODEL_LOAD, detail=f"{model.name}: {model.source}")
            found.append(find_model(model, cfg, os.path.join(staging, f"model-{len(found)}"), section.train_columns))
            log(f"model {model.name}: {found[-1]['path']}")
        write_models(store, found)
        placement, connection = _placement(cfg, log)
        writer.log_event("stage", step=0, stage=Stage.FIRST_EVAL)
        for done, (model, entry) in enumerate(zip(section.models, found, strict=True), start=1):
            started = time.perf_counter()
            records = sample_model(cfg, entry["path"], rows, seed, placement, vllm_python)
            write_samples(store, model.name, records)
            samples[model.name] = records
            metrics = eval_metrics(records)
            writer.log_event("eval", step=done, model=model.name, seconds=time.perf_counter() - started, **metrics)
            life.running(step=done)
            log(f"model {model.name}: eval/all/avg_score={metrics['eval/all/avg_score']:.4f} "
                f"({len(records)} samples, {time.perf_counter() - started:.1f}s)")
        summary = summarize(samples, pass_at=tuple(section.pass_at), threshold=section.threshold,
                            n_boot=section.n_boot, seed=0)
        write_summary(store, summary)
        log_to_mlflow(cfg, section, summary, found, log=log)
        life.succeeded()
        return summary
    except BaseException as err:
        if isinstance(err, (StopRequested, KeyboardInterrupt)):
            life.stopped()
        else:
            import traceback

            life.failed(err, traceback.format_exc())
        raise
    finally:
        life.close()
        if placement is not None:
            placement.remove()
        if connection is not None:
            connection.close()
        shutil.rmtree(staging, ignore_errors=True)


def check_rows(cfg: JobConfig, rows: list[PromptRow]) -> None:
    """:class:`EvalRefused` when there are no rows, or a row lacks the ground truth a reward needs."""
    if not rows:
        raise EvalRefused(f"data: {', '.join(cfg.data.val_data) or 'data.val_data'} has no rows to evaluate on")
    functions = [load_function(f.file, str(cfg.run_dir), name=f.name, weight=f.weight) for f in cfg.reward.functions]
    user = ground_truth_user(functions, cfg.environment.env_class, rows[0].env_class)
    missing = next((i for i, row in enumerate(rows) if row.ground_truth is None), None)
    if user and missing is not None:
        raise EvalRefused(f"data: row {missing + 1} has no ground truth, which {user} needs; give each row one "
                          "(reward_spec.ground_truth, or columns={'ground_truth': '<your column>'})")


def vllm_python_for(cfg: JobConfig) -> str | None:
    """The Python vLLM's engines run in, for a config whose generator is vLLM (RuntimeError naming SKYRL_VLLM_PYTHON
    when there is none); None for the torch sampler."""
    if not uses_vllm(cfg):
        return None
    from skyrl_engine.vllm_engine import find_vllm_python  # an optional dependency, in its own environment

    return find_vllm_python()


# -- the models ---------------------------------------------------------------------------------------------------

def find_model(model: EvalModel, cfg: JobConfig, staging: str,
               train_columns: dict[str, str] | None = None) -> dict[str, Any]:
    """``models.json``'s entry for ``model``: its ``path`` a local model directory the generator loads (a run's
    checkpoint exported into ``staging``, an object-store export downloaded there) and ``step`` the checkpoint's.
    ``train_columns``: ``data.columns`` of the train data a built-in model is warm-started on (None: the config's)."""
    entry = {"name": model.name, "source": model.source, "kind": model.kind, "step": model.step,
             "location": model.location, "path": None}
    if model.kind == "run":
        result = export_model(model.location, staging, step=model.step)
        return {**entry, "step": result.step, "path": staging}
    if model.kind == "export" and is_url(model.location):
        open_store(model.location).download_folder("", staging)
        return {**entry, "path": staging}
    if model.kind == "builtin":
        rows = _train_rows(cfg, model.location, train_columns)
        return {**entry, "path": resolve_model_path(model.location, rows, cfg.trainer.seed)}
    return {**entry, "path": resolve_model_path(os.path.expanduser(model.location), None, cfg.trainer.seed)}


def _train_rows(cfg: JobConfig, location: str, columns: dict[str, str] | None) -> list[PromptRow] | None:
    """The rows a built-in model is warm-started on: the config's train data (a run's own, for its base model)."""
    from skyrl_core.catalog import TINY_MODEL

    if location != TINY_MODEL:
        return None
    return load_prompts(cfg.data.train_data, cfg.environment.env_class,
                        columns=cfg.data.columns if columns is None else columns, run_dir=str(cfg.run_dir))


def _placement(cfg: JobConfig, log: Callable[[str], None]) -> tuple[Any, Any]:
    """``(placement, Ray connection)``: where the generator goes, as training puts it: (None, None) for a colocated
    torch run on CPU (in this process), else the run's placement groups on the job's Ray cluster."""
    if runs_in_job_process(cfg):
        log("placement: the generator in this process (colocated on CPU)")
        return None, None
    connection = connect()
    log(f"ray: {connection.mode}")
    try:
        placement = Placement.create(plan_placement(cfg))
    except BaseException:
        connection.close()
        raise
    log(f"placement: {placement.plan.describe()}")
    return placement, connection


def sample_model(cfg: JobConfig, model_path: str, rows: list[PromptRow], seed: int, placement: Any,
                 vllm_python: str | None) -> list[dict[str, Any]]:
    """Every row's ``generator.eval_n_samples_per_prompt`` samples from the model at ``model_path`` through the
    generator role training uses (``Workers.generator_role``), then the role is stopped."""
    g, t = cfg.generator, cfg.trainer
    role = Workers.generator_role(cfg, model_path, placement, vllm_python=vllm_python)
    try:
        return role.call("eval_samples", rows, g.eval_n_samples_per_prompt, g.eval_sampling_params, seed,
                         t.eval_batch_size)
    finally:
        if not role.remote:
            role.call("shutdown")
        role.close()


# -- MLflow -------------------------------------------------------------------------------------------------------

def log_to_mlflow(cfg: JobConfig, section: EvaluationSection, summary: dict[str, Any], models: list[dict[str, Any]],
                  *, log: Callable[[str], None] = print) -> list[str]:
    """Where ``trainer.logger`` names mlflow: the summary in an MLflow run of its own (named after the eval id, its
    config as params, ``<model>/<metric>`` metrics), and each evaluated run's model's metrics in that run's own MLflow
    run (found by its ``skyrl_nb.run_id`` tag, as the trainer tags it) as ``eval_job/<metric>`` at the checkpoint's
    step, tagged ``skyrl_nb.last_eval``. Returns the MLflow run ids written to; [] without mlflow."""
    loggers = cfg.trainer.logger if isinstance(cfg.trainer.logger, list) else [cfg.trainer.logger]
    if "mlflow" not in {str(name) for name in loggers}:
        return []

    tracker = MlflowTracker(cfg, len(section.models))
    client, experiment_id = tracker.client, tracker.run.info.experiment_id
    stamp = int(time.time() * 1000)
    written = [tracker.run.info.run_id]
    per_model = summary.get("models") or {}
    metrics = [tracker._Metric(f"{metric_key(name)}/{key}", value, stamp, 0)
               for name in section.names() for key, value in flat_metrics(per_model.get(name) or {}).items()]
    for i in range(0, len(metrics), 1000):
        client.log_batch(tracker.run.info.run_id, metrics=metrics[i:i + 1000])
    tracker.finish(RunState.SUCCEEDED, None)
    eval_id = str(cfg.run.run_id)
    for entry in models:
        if entry["kind"] != "run":
            continue
        run_id = str(entry["location"]).rstrip("/").rpartition("/")[2]
        found = client.search_runs([experiment_id], f"tags.`{RUN_ID_TAG}` = '{run_id}'", max_results=1)
        if not found:
            log(f"mlflow: run {run_id} has no MLflow run in this experiment; its metrics are in {eval_id}'s only")
            continue
        target = found[0].info.run_id
        step = int(entry["step"] or 0)
        client.log_batch(target, metrics=[tracker._Metric(f"eval_job/{key}", value, stamp, step)
                                          for key, value in flat_metrics(per_model.get(entry["name"]) or {}).items()])
        client.set_tag(target, "skyrl_nb.last_eval", eval_id)
        written.append(target)
    log(f"mlflow: eval metrics logged to {len(written)} MLflow run(s)")
    return written
