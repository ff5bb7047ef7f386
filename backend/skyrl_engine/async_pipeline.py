"""Overlap generation and training: synchronous, one-step off-policy, and fully async with a staleness bound.

One step of RL is "generate a batch with the current policy, then train on it". When the generator and
the trainer live in separate processes (disaggregated placement), the generator can already produce
the batch of step t+1 while step t trains, at the price of sampling from a policy that is one update
old. This module runs that schedule around four callables the trainer supplies, so the trainer keeps
one code path for a step and the pipeline only decides *when* each piece runs:

    generate(step)            -> rollout   # sample + score the batch for `step` with the generator's weights
    train(step, rollout)      -> metrics   # advantages, loss, optimizer step(s); returns SkyRL metric names
    export_weights(version)   -> handle    # trainer side: weights after `version` optimizer steps
    load_weights(handle)      -> None      # generator side: install them (between two generate calls)

Policy versions count optimizer steps: version 0 is the initial model, version v the weights after
training step v. The batch for step s is ideally generated with version s-1; its *staleness* is
``(s - 1) - version_used``.

- ``max_staleness_steps=0``: synchronous (generate, train, sync, repeat); staleness is always 0.
- ``max_staleness_steps=1`` (``trainer.async_one_step=true``): SkyRL's one-step off-policy pipeline;
  the batch for s+1 is generated while step s trains; staleness is at most 1.
- ``max_staleness_steps=S`` (``trainer.fully_async.enabled=true``): the generator runs ahead as far as
  the bound allows, loading the newest published weights before every batch (batch-level, not
  SkyRL's in-flight per-group updates); staleness is at most S.

Each step's metrics gain ``timing/wait_for_batch`` (trainer idle, waiting for a batch),
``timing/wait_for_policy`` (generator idle, waiting for weights recent enough for the bound — for the
batch this step trains on), ``timing/generate``, ``timing/sync_weights`` (export + load),
``timing/step``, ``async/staleness_mean``, ``async/staleness_max`` and ``async/policy_version``.
"""

from __future__ import annotations

import html
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig

__all__ = [
    "GeneratedBatch",
    "PipelinedTrainer",
    "RolloutPipeline",
    "pipeline_mode",
    "staleness_bound",
]


def staleness_bound(cfg: JobConfig) -> int:
    """The staleness bound a config asks for: 0 sync, 1 one-step async, S fully async.

    Reads ``trainer.fully_async.enabled``, ``trainer.fully_async.max_staleness_steps`` and
    ``trainer.async_one_step`` of a JobConfig, a dotted dict or a nested dict (missing keys take the
    schema's defaults: off).
    """
    from skyrl_core.config import as_config

    t = as_config(cfg).trainer
    if t.fully_async.enabled:
        return int(t.fully_async.max_staleness_steps)
    return 1 if t.async_one_step else 0


def pipeline_mode(max_staleness_steps: int) -> str:
    """The name of the schedule a bound gives: sync, one_step or fully_async."""
    return {0: "sync", 1: "one_step"}.get(max_staleness_steps, "fully_async")


@dataclass
class GeneratedBatch:
    """One step's rollout as the pipeline hands it to the trainer, with when and with what it was made."""

    step: int
    rollout: Any
    policy_version: int
    generate_s: float
    wait_for_policy_s: float
    sync_weights_s: float

    @property
    def staleness(self) -> int:
        """How many optimizer steps behind the ideal (version step-1) the sampling policy was."""
        return (self.step - 1) - self.policy_version


@dataclass
class _Published:
    version: int
    handle: Any
    export_s: float


@dataclass
class RolloutPipeline:
    """Runs ``num_steps`` RL steps with generation overlapped up to ``max_staleness_steps``.

    >>> pipe = RolloutPipeline(generate, train, export_weights, load_weights, max_staleness_steps=1)
    >>> for step, metrics in pipe.run(num_steps=10):
    ...     writer.log_metrics(step, metrics)
    """

    generate: Callable[[int], Any]
    train: Callable[[int, Any], dict[str, float]]
    export_weights: Callable[[int], Any]
    load_weights: Callable[[Any], None]
    max_staleness_steps: int = 0
    history: list[dict[str, float]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.max_staleness_steps < 0:
            raise ValueError(f"max_staleness_steps: {self.max_staleness_steps} must be at least 0")

    @property
    def mode(self) -> str:
        """sync, one_step or fully_async."""
        return pipeline_mode(self.max_staleness_steps)

    def run(self, num_steps: int, start_step: int = 1):
        """Yield ``(step, metrics)`` for steps ``start_step`` … ``start_step + num_steps - 1``.

        Generation runs on a background thread (the heavy work happens in the generator's own
        process); training, weight export and metric bookkeeping on the caller's thread. An error on
        either side stops both and is raised here.
        """
        if self.max_staleness_steps == 0:
            yield from self._run_sync(num_steps, start_step)
            return
        yield from self._run_overlapped(num_steps, start_step)

    # -- synchronous: the reference schedule -------------------------------------------------------
    def _run_sync(self, num_steps: int, start_step: int):
        version = start_step - 1  # resuming after step k means the weights are version k
        for step in range(start_step, start_step + num_steps):
            t0 = time.perf_counter()
            rollout = self.generate(step)
            t1 = time.perf_counter()
            metrics = dict(self.train(step, rollout))
            t2 = time.perf_counter()
            self.load_weights(self.export_weights(step))
            t3 = time.perf_counter()
            batch = GeneratedBatch(step, rollout, version, t1 - t0, 0.0, t3 - t2)
            version = step
            metrics.update(self._metrics(batch, wait_for_batch=0.0, step_s=t3 - t0, sync_s=t3 - t2))
            self.history.append(metrics)
            yield step, metrics

    # -- one-step and fully async -------------------------------------------------------------------
    def _run_overlapped(self, num_steps: int, start_step: int):
        bound = self.max_staleness_steps
        last_step = start_step + num_steps - 1
        ready: queue.Queue[GeneratedBatch | BaseException] = queue.Queue()
        cond = threading.Condition()
        state: dict[str, Any] = {
            "trained": start_step - 1,  # newest version the trainer has published
            "published": _Published(start_step - 1, None, 0.0),
            "stop": False,
        }

        def generator_loop() -> None:
            loaded = start_step - 1  # the generator starts with the trainer's current weights
            try:
                for step in range(start_step, last_step + 1):
                    # The batch for `step` may use version v only if (step-1) - v <= bound.
                    need = step - 1 - bound
                    t_wait = time.perf_counter()
                    with cond:
                        while state["published"].version < need and not state["stop"]:
                            cond.wait()
                        if state["stop"]:
                            return
                        published: _Published = state["published"]
                    wait_for_policy = time.perf_counter() - t_wait
                    sync_s = 0.0
                    if published.version > loaded:
                        t_load = time.perf_counter()
                        self.load_weights(published.handle)
                        sync_s = published.export_s + (time.perf_counter() - t_load)
                        loaded = published.version
                    t_gen = time.perf_counter()
                    rollout = self.generate(step)
                    ready.put(
                        GeneratedBatch(step, rollout, loaded, time.perf_counter() - t_gen, wait_for_policy, sync_s)
                    )
            except BaseException as exc:  # handed to the trainer thread, raised there
                ready.put(exc)

        thread = threading.Thread(target=generator_loop, name="skyrl-generator", daemon=True)
        thread.start()
        try:
            for step in range(start_step, last_step + 1):
                t0 = time.perf_counter()
                item = ready.get()
                wait_for_batch = time.perf_counter() - t0
                if isinstance(item, BaseException):
                    raise item
                if item.step != step:
                    raise RuntimeError(f"pipeline out of order: expected the batch of step {step}, got {item.step}")
                if item.staleness > bound:
                    raise RuntimeError(
                        f"staleness {item.staleness} exceeds the bound {bound} at step {step} (pipeline bug)"
                    )
                metrics = dict(self.train(step, item.rollout))
                t_export = time.perf_counter()
                handle = self.export_weights(step)
                export_s = time.perf_counter() - t_export
                with cond:
                    state["published"] = _Published(step, handle, export_s)
                    cond.notify_all()
                metrics.update(self._metrics(item, wait_for_batch, time.perf_counter() - t0, item.sync_weights_s))
                self.history.append(metrics)
                yield step, metrics
        finally:
            with cond:
                state["stop"] = True
                cond.notify_all()
            thread.join(timeout=60)

    @staticmethod
    def _metrics(batch: GeneratedBatch, wait_for_batch: float, step_s: float, sync_s: float) -> dict[str, float]:
        return {
            "timing/wait_for_batch": wait_for_batch,
            "timing/wait_for_policy": batch.wait_for_policy_s,
            "timing/generate": batch.generate_s,
            "timing/sync_weights": sync_s,
            "timing/step": step_s,
            "async/staleness_mean": float(batch.staleness),
            "async/staleness_max": float(batch.staleness),
            "async/policy_version": float(batch.policy_version),
        }

    def summary(self) -> dict[str, float]:
        """Totals over the steps run so far: steps, wall seconds of step time, mean waits, max staleness."""
        n = len(self.history)
        if not n:
            return {"steps": 0}
        return {
            "steps": n,
            "step_s_total": sum(m["timing/step"] for m in self.history),
            "wait_for_batch_mean": sum(m["timing/wait_for_batch"] for m in self.history) / n,
            "wait_for_policy_mean": sum(m["timing/wait_for_policy"] for m in self.history) / n,
            "staleness_max": max(m["async/staleness_max"] for m in self.history),
        }

    def __repr__(self) -> str:
        return (
            f"RolloutPipeline(mode={self.mode}, max_staleness_steps={self.max_staleness_steps}, "
            f"steps_run={len(self.history)})"
        )

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


# --------------------------------------------------------------------------------------------------
# The trainer's loop, pipelined
# --------------------------------------------------------------------------------------------------


class PipelinedTrainer:
    """An :class:`~skyrl_engine.trainer.RLTrainer` whose steps overlap generation with training.

    Same run-store writes as the synchronous loop (metrics, trajectories, events, status,
    checkpoints), plus the pipeline's wait and staleness metrics. Eval runs on the generator, so in
    async modes it sees the generator's weights (at most the staleness bound behind). On resume, the
    first batch is generated with the checkpoint's weights (staleness 0).

    >>> engine = build(cfg.with_overrides(["trainer.async_one_step=true"]))   # skyrl_engine.build: this wrapper
    >>> engine.train()
    """

    def __init__(self, trainer: Any, max_staleness_steps: int) -> None:
        self.trainer = trainer
        self.max_staleness_steps = max_staleness_steps
        self._pending: dict[int, tuple[Any, Any, dict[str, float]]] = {}
        self.pipeline: RolloutPipeline | None = None

    # the trainer's own record keeping, unchanged
    def fail(self, err: BaseException) -> None:
        """Record a failure (as the trainer does)."""
        self.trainer.fail(err)

    def stopped(self) -> None:
        """Record a requested stop (as the trainer does)."""
        self.trainer.stopped()

    @property
    def global_step(self) -> int:
        """The last finished step."""
        return self.trainer.global_step

    @property
    def ckpt_root(self) -> str:
        """Where the trainer's checkpoints go (``trainer.ckpt_path`` or ``<run_dir>/checkpoints``)."""
        return self.trainer.ckpt_root

    def _train(self, step: int, out: Any) -> dict[str, float]:
        timings: dict[str, float] = {}
        metrics, advantages_BT = self.trainer.train_on(step, out, timings)
        self._pending[step] = (out, advantages_BT, timings)
        return metrics

    def _schedule(self, first_step: int):
        """The trainer's steps from ``first_step`` on, through the pipeline; yields ``(step, metrics)``."""
        t = self.trainer
        workers = t.workers
        self.pipeline = RolloutPipeline(t.generate_step, self._train, lambda version: workers.export_weights(),
                                        workers.load_weights, self.max_staleness_steps)
        for step, metrics in self.pipeline.run(t.total_steps - first_step + 1, start_step=first_step):
            out, advantages_BT, timings = self._pending.pop(step)
            timings["step"] = metrics.pop("timing/step", 0.0)  # finish_step adds eval, checkpoint, writes
            yield step, t.finish_step(step, out, advantages_BT, metrics, timings)

    def train(self) -> dict[str, Any]:
        """Run from the restored step to ``total_steps``; return the last step's metrics."""
        return self.trainer.train(self._schedule, pipeline=pipeline_mode(self.max_staleness_steps))

    def __repr__(self) -> str:
        return f"PipelinedTrainer(mode={pipeline_mode(self.max_staleness_steps)}, step={self.global_step})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"
