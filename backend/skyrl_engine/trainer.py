"""The training loop: one step = sample → rewards → advantages → policy update → weight sync.

``RLTrainer`` is the driver (SkyRL's ``RayPPOTrainer``): it reads prompts, asks the workers to do the
heavy parts, computes advantages, and writes the run store (metrics, trajectories, events, status,
checkpoints). The workers are :class:`skyrl_engine.workers.Workers`: role handles in this process or
on Ray actors, the same calls either way. DAPO's dynamic sampling is a step over the generator's
output (:class:`skyrl_engine.dapo.DynamicSampler`), not a wrapper around the workers.

Everything random is derived from ``trainer.seed`` and the step number (sampling generators,
data order), so a run resumed from a checkpoint repeats exactly what an uninterrupted run does.

One idea, the step and the loop around it (restore, eval, checkpoint); the parts it calls live in their modules.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Iterable
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from skyrl_core.choices import Phase, Stage
from skyrl_core.lifecycle import RunLifecycle
from skyrl_core.metric_names import REWARD_KEY, REWARD_STD_KEY, pass_at_key
from skyrl_core.run_files import trajectory_row
from skyrl_core.store import is_url
from skyrl_engine import algorithms, checkpoint
from skyrl_engine.alerts import RunAlerts
from skyrl_engine.critic import needs_critic
from skyrl_engine.dapo import DynamicSampler
from skyrl_engine.generator import ground_truth_text
from skyrl_engine.tasks import PromptLoader
from skyrl_engine.telemetry import Telemetry, in_phase
from skyrl_engine.types import GeneratorOutput, PromptRow, TrainBatch, step_seed

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig
    from skyrl_core.runs import RunWriter
    from skyrl_engine.workers import Workers

class StopRequested(Exception):
    """Raised in the driver when the job is asked to stop (SIGTERM)."""


@contextmanager
def timed(timings: dict[str, float], name: str):
    """Add the block's wall time to ``timings[name]`` (seconds)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


def build_train_batch(out: GeneratorOutput, algo_cfg: Any, critic_values: Any = None,
                      reference_logprobs: Any = None) -> tuple[TrainBatch, Any]:
    """Turn rollouts into a :class:`TrainBatch`: outcome reward on the last token, then advantages.

    ``critic_values(batch) -> values_BT`` is the critic's forward pass, given for ``gae``; the
    batch then also carries the values and returns the critic trains on (critic.py).
    ``reference_logprobs(batch) -> ref_logprobs_BT`` is the reference's, given for ``use_kl_loss``.
    Returns ``(batch, advantages_BT)``.
    """
    import numpy as np
    import torch


    s = out.samples
    mask_BT = s.response_mask_BT.float()
    lengths_B = s.response_mask_BT.sum(-1)
    rewards_BT = torch.zeros_like(mask_BT)
    has_tokens_B = lengths_B > 0
    rows_B = torch.arange(mask_BT.shape[0])[has_tokens_B]
    rewards_BT[rows_B, (lengths_B[has_tokens_B] - 1)] = torch.tensor(out.rewards_B, dtype=torch.float32)[has_tokens_B]
    batch = TrainBatch(
        sequences_BL=torch.cat([s.prompt_ids_BP, s.response_ids_BT], dim=1),
        attention_mask_BL=torch.cat([s.prompt_mask_BP, s.response_mask_BT], dim=1),
        response_mask_BT=s.response_mask_BT if out.loss_mask_BT is None else out.loss_mask_BT,  # the loss mask
        advantages_BT=torch.zeros_like(mask_BT),
        rollout_logprobs_BT=s.logprobs_BT,
        group_size=out.group_size,
    )
    if reference_logprobs is not None:
        batch.ref_logprobs_BT = reference_logprobs(batch)
    if critic_values is not None:  # gae: the recursion needs values zeroed after the response ends
        batch.values_BT = critic_values(batch) * mask_BT
    advantages_BT, returns_BT = algorithms.compute_advantages(
        algo_cfg.advantage_estimator, rewards_BT, mask_BT, np.asarray(out.group_ids_B), algo_cfg, values=batch.values_BT
    )
    batch.advantages_BT = advantages_BT.float()
    if critic_values is not None:
        batch.returns_BT = returns_BT.float()
    return batch, advantages_BT


def reward_metrics(out: GeneratorOutput) -> dict[str, float]:
    """SkyRL's reward/* and generate/* metrics for one step's rollouts."""
    import statistics

    rewards = out.rewards_B
    n = out.group_size
    groups = [rewards[g * n : (g + 1) * n] for g in range(len(rewards) // n)]
    lengths = out.samples.response_mask_BT.sum(-1).tolist()
    positives = [r for r in rewards if r > 0]
    return {
        REWARD_KEY: sum(rewards) / len(rewards),
        REWARD_STD_KEY: statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        pass_at_key(n): sum(1.0 for g in groups if max(g) > 0) / max(1, len(groups)),
        "reward/mean_positive_reward": sum(positives) / len(positives) if positives else 0.0,
        "generate/avg_num_tokens": sum(lengths) / len(lengths),
        "generate/max_num_tokens": float(max(lengths)),
        "generate/min_num_tokens": float(min(lengths)),
        "generate/stop_ratio": sum(1.0 for f in out.samples.finish_reasons if f == "stop") / len(lengths),
    } | out.metrics


def trajectory_rows(step: int, out: GeneratorOutput, advantages_BT, store_token_data: bool) -> list[dict[str, Any]]:
    """One run-store row per sample (``skyrl_core.run_files.trajectory_row``)."""
    s = out.samples
    lengths = s.response_mask_BT.sum(-1).tolist()
    n = out.group_size
    # whole tensors to lists once, then sliced per row: a tensor op per row and column cost more than the rest
    advantages = advantages_BT.float().tolist() if store_token_data else advantages_BT[:, :1].float().tolist()
    if store_token_data:
        ids, logprobs = s.response_ids_BT.tolist(), s.logprobs_BT.float().tolist()
    rows = []
    for b, length in enumerate(lengths):
        tokens = {} if not store_token_data else {
            "token_ids": ids[b][:length], "token_logprobs": logprobs[b][:length],
            "token_advantages": advantages[b][:length]}
        rows.append(trajectory_row(
            step=step, uid=f"{step}-{out.group_ids_B[b]}-{b % n}", group=out.group_ids_B[b], prompt=out.prompts[b],
            response=out.responses[b], reward=out.rewards_B[b],
            advantage=advantages[b][0] if length > 0 else 0.0, num_tokens=length,
            finish_reason=s.finish_reasons[b], env_class=out.env_classes[b], data_source=out.data_sources[b],
            **tokens, **(out.sample_columns[b] if out.sample_columns is not None else {})))
    if out.discarded is not None:  # dropped samples are stored too, with their discarded_reason
        rows.extend(trajectory_rows(step, out.discarded, out.discarded.samples.logprobs_BT * 0, store_token_data))
    return rows


def with_ground_truth(out: GeneratorOutput, rows: list[PromptRow]) -> GeneratorOutput:
    """``out`` with each sample's expected answer as a ``ground_truth`` trajectory column (text; JSON for a
    structured one), for the inspector. Sample ``b`` answers ``rows[out.group_ids_B[b]]``."""
    import dataclasses

    columns = out.sample_columns or [{} for _ in out.rewards_B]
    truths = [ground_truth_text(rows[g].ground_truth) if 0 <= g < len(rows) else None for g in out.group_ids_B]
    return dataclasses.replace(out, sample_columns=[{**c, "ground_truth": gt} for c, gt in zip(columns, truths, strict=True)])


class RLTrainer:
    """The driver, over the workers of one run; :func:`skyrl_engine.build.build` makes it: ``build(cfg).train()``."""

    def __init__(self, cfg: JobConfig, writer: RunWriter, workers: Workers, train_rows: list[PromptRow], val_rows: list[PromptRow]):

        t = cfg.trainer
        self.cfg = cfg
        self.has_critic = needs_critic(cfg)  # gae: the workers hold a critic (critic.py)
        self.writer = writer
        self.workers = workers
        self.dapo = DynamicSampler.from_config(cfg, train_rows)  # None unless DAPO's sampling is on
        self.val_rows = val_rows
        self.loader = PromptLoader(train_rows, t.train_batch_size, t.seed)
        self.total_steps = int(cfg.total_steps(len(train_rows)))
        self.sampling = cfg.generator.sampling_params
        self.eval_sampling = cfg.generator.eval_sampling_params
        #: where checkpoints go: a local folder or an object-store URL (staged locally, then uploaded)
        self.ckpt_root = checkpoint.checkpoint_root(t.ckpt_path, str(cfg.run_dir))
        self.global_step = 0
        #: status (with a heartbeat while training), the started / resumed / finished events, the end once
        self.life = RunLifecycle(writer)
        #: the phase and step gauges in Ray's metrics export (telemetry.py; in memory until train() starts them)
        self.telemetry = Telemetry(str(cfg.run.run_id), self.total_steps)
        #: trainer.alerts (alerts.py), from train() on when a webhook is set
        self.alerts: RunAlerts | None = None

    def _rank_records(self) -> dict[str, Any]:
        """A policy or critic on several ranks: each rank's ``{rank, strategy, node_id, pid}`` by role."""
        records = {"policy_ranks": self.workers.policy_ranks(), "critic_ranks": self.workers.critic_ranks()}
        return {k: v for k, v in records.items() if v}

    # -- resume ---------------------------------------------------------------------------------
    def _resume_dir(self) -> str | None:
        """The checkpoint ``resume_mode`` points at (a local directory or an object-store URL), or None."""

        mode = self.cfg.trainer.resume_mode
        if mode == "latest":
            step = checkpoint.latest_step(self.ckpt_root)
            return None if step is None else checkpoint.step_dir(self.ckpt_root, step)
        if mode == "from_path":
            path = self.cfg.trainer.resume_path
            return path if is_url(path) else os.path.expanduser(path)
        return None

    def resume_refusal(self) -> str | None:
        """Why this job must not start (one line), or None: ``resume_mode=latest`` on a run that has history
        but no checkpoint would train from step 0 again and overwrite that history
        (``skyrl_core.resume.resume_problem``; the notebook refuses such a resume before submitting it)."""
        from skyrl_core.resume import resume_problem

        if self.cfg.trainer.resume_mode != "latest":
            return None
        return resume_problem(self.writer.run_dir, self.ckpt_root, self.cfg.trainer.ckpt_interval,
                              instead="launch it under a new run id")

    def restore(self) -> int:
        """Load the checkpoint ``resume_mode`` points at (if any); return the step to continue after.

        One on an object store is downloaded to the local staging folder first (``checkpoint.fetch``). Rows
        up to that step stay byte for byte; later ones are removed, to be trained again (``truncate_after``).
        A resume (a checkpoint, or a resubmission: ``skyrl_core.resume.ATTEMPT_ENV``) writes a ``resumed``
        event with ``from_step`` and ``attempt``.
        """
        from skyrl_core.resume import attempt_from_env
        from skyrl_core.runs import RunReader

        earlier = sum(1 for event in RunReader(self.writer.run_dir).events() if event.get("kind") == "resumed")
        ckpt_dir = self._resume_dir()
        if ckpt_dir is None:
            self.writer.truncate_after(0)
            attempt = attempt_from_env(0)
            if attempt:  # a resubmission of a run that had nothing to lose: it starts over, and says so
                self.life.resumed(0, attempt, path=None)
            return 0
        step = checkpoint.step_of(ckpt_dir)
        local_dir = checkpoint.fetch(ckpt_dir)
        self.workers.load_checkpoint(local_dir)
        state = checkpoint.read_trainer_state(local_dir)
        self.writer.truncate_after(step)
        # the step's metrics line is written just after its checkpoint; restore it if the kill came between
        logged = {row.get("step") for row in RunReader(self.writer.run_dir).metrics()}
        if step not in logged and state.get("metrics"):
            self.writer.log_metrics(step, state["metrics"])
        self.life.resumed(step, attempt_from_env(earlier + 1), path=ckpt_dir, **self._rank_records())
        return step

    # -- the loop -------------------------------------------------------------------------------
    def train(self, schedule: Callable[[int], Iterable[tuple[int, dict[str, Any]]]] | None = None,
              **started: Any) -> dict[str, Any]:
        """Run from the restored step to ``total_steps``; return the last step's metrics.

        ``schedule(first_step)`` yields ``(step, metrics)`` for each step up to ``total_steps`` once it
        is written (default: :meth:`train_one_step` in turn; the async pipeline passes its own);
        ``started`` goes into the ``started`` event. A resume that would overwrite history
        (:meth:`resume_refusal`) raises ``ResumeRefused`` before anything is written.
        """
        refusal = self.resume_refusal()
        if refusal is not None:
            from skyrl_core.resume import ResumeRefused

            raise ResumeRefused(refusal)
        self.writer.write_config(self.cfg)
        self.life.running(step=0, total_steps=self.total_steps)
        self._start_watching()
        try:
            start = self.restore()
            self.global_step = start
            self._start_alerts(start)
            self.life.running(step=start, total_steps=self.total_steps)
            if start == 0:
                started = {**started, **self._rank_records(), "policy_parameters": self.workers.policy_parameters()}
                self.life.started(self.total_steps, **started)
                if self.cfg.trainer.eval_before_train and self.val_rows:
                    self.writer.log_event("stage", step=0, stage=Stage.FIRST_EVAL)
                    self.writer.log_event("eval", step=0, **self.evaluate(0))
            self.writer.log_event("stage", step=start, stage=Stage.FIRST_ROLLOUT)  # the dashboard's word until a step lands
            if schedule is None:
                steps = ((step, self.train_one_step(step)) for step in range(start + 1, self.total_steps + 1))
            else:
                steps = schedule(start + 1)
            last: dict[str, Any] = {}
            for step, metrics in steps:
                self.global_step, last = step, metrics
                self.life.running(step=step)
            self.writer.flush()  # the last step's trajectories are stored before the run is called succeeded
            self.life.succeeded()
            return last
        except BaseException:
            # the steps that ran keep their trajectories; the error to report is the run's own, not the write's
            with suppress(Exception):
                self.writer.flush()
            raise
        finally:
            self.life.close()
            self._stop_watching()

    def _start_watching(self) -> None:
        """The Ray gauges (telemetry.py): at once where Ray is up, else joined in the background in a Ray job."""
        self.telemetry = Telemetry.start(str(self.cfg.run.run_id), self.total_steps)
        self.writer.metric_listeners.append(self.telemetry.observe)

    def _start_alerts(self, start: int) -> None:
        """``trainer.alerts`` once the restored step is known (alerts.py; a resume keeps what was sent)."""
        self.alerts = RunAlerts.start(self.cfg, self.writer, start, phases=lambda: self.telemetry.phases)
        if self.alerts is not None:
            self.writer.metric_listeners.append(self.alerts.observe)

    def _stop_watching(self) -> None:
        for listener in (self.telemetry.observe, self.alerts.observe if self.alerts else None):
            if listener in self.writer.metric_listeners:
                self.writer.metric_listeners.remove(listener)
        self.telemetry.close()
        if self.alerts is not None:
            self.alerts.stop()

    @in_phase(Phase.EVAL)
    def evaluate(self, step: int) -> dict[str, float]:
        """Eval on the val rows with the eval sampling params (seeded by step)."""

        t, g = self.cfg.trainer, self.cfg.generator
        return self.workers.evaluate(
            self.val_rows, g.eval_n_samples_per_prompt, self.eval_sampling, step_seed(t.seed, step, 1), t.eval_batch_size
        )

    def train_one_step(self, step: int) -> dict[str, Any]:
        """One full step, including its run-store writes and (when due) eval and checkpoint. Its trajectory part
        is written on the run writer's thread: on disk once the next step queues its own, or after
        ``self.writer.flush()`` (which :meth:`train` and each checkpoint call).

        The synchronous schedule of the three parts the async pipeline also uses:
        :meth:`generate_step`, :meth:`train_on`, :meth:`finish_step`.
        """
        timings: dict[str, float] = {"wait_for_batch": 0.0, "wait_for_policy": 0.0}  # sync: nobody waits
        started = time.perf_counter()
        with timed(timings, "generate"):
            out = self.generate_step(step)
        metrics, advantages_BT = self.train_on(step, out, timings)
        with timed(timings, "sync_weights"), self.telemetry.phase(Phase.SYNC):
            self.workers.sync_weights()
        timings["step"] = time.perf_counter() - started
        return self.finish_step(step, out, advantages_BT, metrics, timings)

    @in_phase(Phase.GENERATE)
    def generate_step(self, step: int) -> GeneratorOutput:
        """Sample and score the batch of ``step`` with the generator's current weights."""

        t, g = self.cfg.trainer, self.cfg.generator
        rows = self.loader.batch(step)
        seed = step_seed(t.seed, step)

        def generate(batch: list[PromptRow], *args: Any) -> GeneratorOutput:
            return with_ground_truth(self.workers.generate(batch, *args), batch)

        if self.dapo is None:
            return generate(rows, g.n_samples_per_prompt, self.sampling, seed)
        return self.dapo.sample(generate, rows, g.n_samples_per_prompt, self.sampling, seed)

    @in_phase(Phase.TRAIN)
    def train_on(self, step: int, out: GeneratorOutput, timings: dict[str, float]) -> tuple[dict[str, Any], Any]:
        """Advantages and the policy update on one step's rollouts; return ``(metrics, advantages_BT)``.

        Adds ``compute_advantages_and_returns``, ``critic_train`` (gae) and ``policy_train`` to ``timings``.
        """
        with timed(timings, "compute_advantages_and_returns"):
            critic_values = self.workers.critic_values if self.has_critic else None
            batch, advantages_BT = build_train_batch(out, self.cfg.trainer.algorithm, critic_values,
                                                     self.workers.reference_logprobs)
        metrics: dict[str, Any] = {}
        if self.has_critic:  # the critic first, as in SkyRL's train_critic_and_policy
            with timed(timings, "critic_train"):
                metrics.update(self.workers.critic_train_step(batch))
        with timed(timings, "policy_train"):
            metrics.update(self.workers.train_step(batch))
        metrics.update(reward_metrics(out))
        tokens = float(batch.attention_mask_BL.sum())
        metrics["trainer/tokens_per_second"] = tokens / max(timings["policy_train"], 1e-9)
        metrics["trainer/epoch"] = self.loader.position(step)["epoch"]
        metrics["trainer/global_step"] = step
        return metrics, advantages_BT

    def finish_step(
        self, step: int, out: GeneratorOutput, advantages_BT: Any, metrics: dict[str, Any], timings: dict[str, float]
    ) -> dict[str, Any]:
        """Eval and checkpoint when due, trajectories (queued: ``RunWriter.queue_trajectories``) and the metrics
        line; return the step's metrics.

        Their time is added to ``timings["step"]``; every entry of ``timings`` becomes ``timing/<name>``.
        """
        t = self.cfg.trainer
        started = time.perf_counter()
        if self._due(t.eval_interval, step) and self.val_rows:
            with timed(timings, "eval"):
                eval_metrics = self.evaluate(step)
            metrics.update(eval_metrics)
            self.writer.log_event("eval", step=step, **eval_metrics)
        # written while the next step computes; a checkpoint waits for it (a resume keeps the parts up to its step)
        self.writer.queue_trajectories(step, trajectory_rows(step, out, advantages_BT, self.cfg.run.store_token_data))
        timings["save_checkpoints"] = 0.0
        if self._due(t.ckpt_interval, step):
            with timed(timings, "save_checkpoints"):
                self.writer.flush()
                path = self.save_checkpoint(step, {**metrics, **_timing_metrics(timings)})
            self.writer.log_event("checkpoint_saved", step=step, path=path)
        timings["step"] = timings.get("step", 0.0) + time.perf_counter() - started
        metrics.update(_timing_metrics(timings))
        if self.workers.last_sync:  # what the last weight sync moved: the whole model, or LoRA's adapters
            metrics["policy/sync_weights_bytes"] = self.workers.last_sync["bytes"]
        self.writer.log_metrics(step, metrics)
        return metrics

    def _due(self, interval: int, step: int) -> bool:
        return interval is not None and interval > 0 and (step % interval == 0 or step == self.total_steps)

    @in_phase(Phase.CHECKPOINT)
    def save_checkpoint(self, step: int, metrics: dict[str, Any]) -> str:
        """Write ``global_step_<step>`` atomically and point the latest file at it; returns where it is.

        On an object store it is assembled in the staging folder of every node, then uploaded
        (``checkpoint.upload``), the latest file last.
        """

        remote = is_url(self.ckpt_root)
        if remote:
            tmp = checkpoint.begin_staged(self.ckpt_root, step)
        else:
            os.makedirs(self.ckpt_root, exist_ok=True)
            tmp = checkpoint.begin(self.ckpt_root, step)
        position = self.loader.position(step + 1)
        self.workers.save_checkpoint(tmp, {"global_step": step})
        state = {
            "global_step": step,
            "data_position": position,
            "metrics": metrics,
            "config": self.cfg.to_dict(),
        }
        keep = self.cfg.trainer.max_ckpts_to_keep
        if remote:
            return checkpoint.upload(tmp, self.ckpt_root, step, state, keep)
        return checkpoint.commit(self.ckpt_root, tmp, step, state, keep)

    def fail(self, err: BaseException) -> None:
        """Record a failure: status failed with the error, an error event with the traceback, both saying
        whether a resume can help (``RunLifecycle.failed``). Under the restart supervisor
        (``skyrl_core.resume.SUPERVISOR_ENV``) the event only: the supervisor restarts the run or ends it, and
        sends the failure alert once, for the failure it does not restart."""
        from skyrl_core.resume import supervisor_pid

        supervised = supervisor_pid() is not None
        self.life.step = self.global_step
        self.life.failed(err, traceback.format_exc(), final=not supervised)
        if self.alerts is not None:  # after the failure is recorded: a slow webhook cannot hide it
            if supervised:
                self.alerts.stop()
            else:
                self.alerts.failed(err, self.global_step + 1)

    def stopped(self) -> None:
        """Record a requested stop."""
        self.life.step = self.global_step
        self.life.stopped()


def _timing_metrics(timings: dict[str, float]) -> dict[str, float]:
    return {f"timing/{k}": v for k, v in timings.items()}
