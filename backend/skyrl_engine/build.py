"""The composition root: one function that builds a run's engine from its config.

    config ──load_prompts──▶ train / val rows ──resolve_model_path──▶ model dir
           ──Workers.create──▶ generator, policy (+ critic, + reference), in this process or Ray actors
           ──make_trainer──▶ RLTrainer, pipelined when async

``python -m skyrl_engine train``, the benches and the tests build through :func:`build`; only the tests of
the pieces themselves (``Workers``, ``RLTrainer``, ``PipelinedTrainer``) put them together by hand.

>>> engine = build(load_config("quickstart", ["run.run_root=/tmp/runs", "run.run_id=demo"]))  # doctest: +SKIP
>>> engine.train()                                                                           # doctest: +SKIP
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skyrl_core.choices import Stage
from skyrl_core.config import JobConfig
from skyrl_core.runs import RunWriter
from skyrl_engine.async_pipeline import PipelinedTrainer, staleness_bound
from skyrl_engine.models import keep_tokenizer, model_build_note, resolve_model_path
from skyrl_engine.policy import set_torch_threads
from skyrl_engine.tasks import load_prompts
from skyrl_engine.trainer import RLTrainer
from skyrl_engine.types import PromptRow
from skyrl_engine.workers import Workers, runs_in_job_process


@dataclass
class Engine:
    """One run's engine: the trainer the config asks for and what it stands on. ``train()`` runs it;
    ``shutdown()`` stops the workers (Ray actors, vLLM engines)."""

    cfg: JobConfig
    writer: RunWriter
    trainer: Any  # skyrl_engine.trainer.RLTrainer, or async_pipeline.PipelinedTrainer around one
    workers: Workers
    train_rows: list[PromptRow]
    val_rows: list[PromptRow]
    model_path: str
    total_steps: int

    def train(self) -> Any:
        """Run every step (see the trainer's own ``train``)."""
        return self.trainer.train()

    def shutdown(self) -> None:
        """Stop the workers."""
        self.workers.shutdown()

    def __repr__(self) -> str:
        return (f"Engine(run={self.cfg.run.run_id!r}, {self.total_steps} steps, {len(self.train_rows)} train / "
                f"{len(self.val_rows)} val rows, model={self.model_path!r}, trainer={self.trainer!r})")

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


def build(cfg: JobConfig, writer: RunWriter | None = None, *, model_path: str | None = None,
          train_rows: list[PromptRow] | None = None, val_rows: list[PromptRow] | None = None,
          total_steps: int | None = None, in_process: bool | None = None,
          connect: Callable[[], bool] | None = None, log: Callable[[str], None] | None = None,
          **worker_options: Any) -> Engine:
    """Build the engine for ``cfg``: data, model, workers and trainer, in that order.

    Each part can be handed in instead (``train_rows``/``val_rows``, ``model_path``: a local model directory,
    ``total_steps``); the rest comes from the config as ``python -m skyrl_engine train`` does it. ``writer``
    is the run store's writer (a new one on ``cfg.run_dir`` by default); while the model resolves it records the
    ``model load`` stage, saying when that first builds the model, and the model's tokenizer goes into the run store. ``in_process`` puts every role in this
    process (default: where the config's placement puts them); for roles on Ray actors ``connect()`` is called
    first and returns False when Ray could not be reached and the roles must stay here. ``worker_options`` go
    to :meth:`Workers.create` (``vllm_python``, ``env_configs``, ``engine_kwargs``, ``generator_backend``).
    If the trainer cannot be built, the workers already started are stopped before the error propagates.
    """
    say = log or (lambda _text: None)
    writer = writer if writer is not None else RunWriter(cfg.run_dir)
    set_torch_threads(cfg.trainer.num_threads)
    env_class = cfg.environment.env_class
    reading = {"columns": cfg.data.columns, "run_dir": str(cfg.run_dir)}
    if train_rows is None:
        train_rows = load_prompts(cfg.data.train_data, env_class, **reading)
    if val_rows is None:
        val_rows = load_prompts(cfg.data.val_data, env_class, **reading) if cfg.data.val_data else []
    if model_path is None:
        started = time.perf_counter()
        note = model_build_note(cfg.trainer.policy.model.path, train_rows, cfg.trainer.seed)
        writer.log_event("stage", step=0, stage=Stage.MODEL_LOAD, **({"detail": note} if note else {}))
        model_path = resolve_model_path(cfg.trainer.policy.model.path, train_rows, cfg.trainer.seed)
        say(f"model ready at {model_path} ({time.perf_counter() - started:.1f}s)")
    if total_steps is None:
        total_steps = int(cfg.total_steps(len(train_rows)))
    keep_tokenizer(model_path, writer)
    if in_process is None:
        in_process = runs_in_job_process(cfg)
        if not in_process and connect is not None:
            in_process = not connect()
    workers = Workers.create(cfg, model_path, total_steps, in_process=in_process, **worker_options)
    try:
        trainer = make_trainer(cfg, writer, workers, train_rows, val_rows)
    except BaseException:
        workers.shutdown()
        raise
    return Engine(cfg, writer, trainer, workers, train_rows, val_rows, model_path, total_steps)


def make_trainer(cfg: JobConfig, writer: RunWriter, workers: Workers, train_rows: list[PromptRow],
                 val_rows: list[PromptRow]) -> RLTrainer | PipelinedTrainer:
    """The trainer ``cfg`` asks for over ``workers``: :class:`~skyrl_engine.trainer.RLTrainer`, wrapped in a
    :class:`~skyrl_engine.async_pipeline.PipelinedTrainer` when ``trainer.async_one_step`` or
    ``trainer.fully_async`` bound the staleness (:func:`build` calls it; tests of ``Workers`` use it alone)."""
    trainer = RLTrainer(cfg, writer, workers, train_rows, val_rows)
    bound = staleness_bound(cfg)
    return PipelinedTrainer(trainer, bound) if bound else trainer

