"""The combination matrix of issue 11: backend × loop × advantage estimator × placement × schedule.

Every pairing either is refused by validation (one line naming the keys) or runs 2 training steps to
``succeeded``. ``tests/engine/test_combination_matrix.py`` walks the torch backend,
``tests/vllm/test_vllm_matrix.py`` the vLLM one. One :class:`~skyrl_engine.workers.Workers` serves the
schedules of a (loop, estimator, placement) cell, as one job's workers would serve a resumed run with
another schedule: the workers are the seam under test, and starting actors is what takes the time.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyrl_core.choices import AdvantageEstimator, values
from skyrl_core.config import ConfigError, load_config
from skyrl_core.runs import RunReader, RunWriter

LOOPS = ("single", "multi")
# issue 11's four; maxrl (added with SkyRL 0.4's algorithms) takes grpo's path through the roles and schedules (group
# statistics, no critic), so it would add a quarter to this slow matrix and nothing else: it is trained end to end in
# tests/algorithms/test_more_losses_train.py and checked against SkyRL in tests/algorithms/test_parity_skyrl*.py
ESTIMATORS = tuple(e for e in values(AdvantageEstimator) if e != AdvantageEstimator.MAXRL)
PLACEMENTS = ("colocated", "disaggregated")
SCHEDULES = ("sync", "one_step", "fully_async")
STEPS = 2

_COMMON = [
    "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2", "trainer.critic_mini_batch_size=2",
    "trainer.micro_train_batch_size_per_gpu=4", "generator.n_samples_per_prompt=2",
    f"trainer.max_training_steps={STEPS}", "trainer.eval_interval=0", "trainer.eval_before_train=false",
    "trainer.ckpt_interval=0", "trainer.num_threads=1", "trainer.resume_mode=none",
]
_LOOP = {
    # arithmetic, one assistant turn
    "single": ["generator.max_turns=1", "generator.sampling_params.max_generate_length=4"],
    # text2sql on the built-in databases: an untrained model never answers, so every episode runs its turns
    "multi": ["data.train_data=[builtin://text2sql/train]", "data.val_data=[builtin://text2sql/test]",
              "environment.env_class=text2sql", "generator.max_turns=2",
              "generator.sampling_params.max_generate_length=16"],
}
_PLACEMENT = {"colocated": ["trainer.placement.colocate_all=true"],
              "disaggregated": ["trainer.placement.colocate_all=false"]}
_SCHEDULE = {"sync": [], "one_step": ["trainer.async_one_step=true"],
             "fully_async": ["trainer.fully_async.enabled=true", "trainer.fully_async.max_staleness_steps=2"]}


@dataclass
class Outcome:
    """What one pairing did: refused (with its lines) or ran (with its metric rows and trajectories)."""

    pairing: tuple[str, str, str, str, str]
    refused: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    state: str | None = None
    max_assistant_turns: int = 0
    seconds: float = 0.0
    """Wall time of its run (the cell's worker start-up counted in its first pairing)."""


def overrides(backend: str, loop: str, estimator: str, placement: str, schedule: str) -> list[str]:
    """The config overrides of one pairing (on the quickstart preset)."""
    return [*_COMMON, *_LOOP[loop], *_PLACEMENT[placement], *_SCHEDULE[schedule],
            f"generator.inference_engine.backend={backend}", f"trainer.algorithm.advantage_estimator={estimator}"]


def _max_assistant_turns(run_dir: Path) -> int:
    reader = RunReader(run_dir)
    most = 0
    for step in reader.trajectory_steps():
        frame = reader.trajectories(step, columns=["turns"])
        if "turns" in frame:
            for turns in frame["turns"].dropna():
                most = max(most, sum(1 for t in json.loads(turns) if t["role"] == "assistant"))
    return most


def walk(backend: str, model_dir: str, run_root: Path, *, engine_kwargs: dict[str, Any] | None = None,
         generator_backend: Any = None) -> list[Outcome]:
    """Every pairing of ``backend``: validate each, then run the valid ones ``STEPS`` steps each.

    Starting actors is what takes the time (10-20 s each here), so the pairings of one placement share
    one ``Workers.create``, of a gae config: its workers have every role any pairing uses (the advantage
    estimator and the schedule live in the driver; a run without gae leaves the critic idle), as a
    job's workers would serve a resumed run with another estimator or schedule. Where the loop
    changes, the generator role is replaced by ``Workers.generator_role`` of the new config.
    """
    from skyrl_engine.build import make_trainer
    from skyrl_engine.critic import needs_critic
    from skyrl_engine.tasks import load_prompts
    from skyrl_engine.workers import Workers

    outcomes: list[Outcome] = []
    cells: dict[str, list[tuple[Outcome, Any]]] = {}
    for loop in LOOPS:
        for estimator in ESTIMATORS:
            for placement in PLACEMENTS:
                for schedule in SCHEDULES:
                    outcome = Outcome((backend, loop, estimator, placement, schedule))
                    run_id = "-".join(outcome.pairing).replace("+", "p")
                    try:
                        cfg = load_config("quickstart", [
                            *overrides(*outcome.pairing), f"run.run_root={run_root}", f"run.run_id={run_id}",
                            f"trainer.policy.model.path={model_dir}"]).check()
                    except ConfigError as err:
                        outcome.refused = err.problems
                        outcomes.append(outcome)
                        continue
                    cells.setdefault(placement, []).append((outcome, cfg))
    for cell in cells.values():
        cell.sort(key=lambda pair: (LOOPS.index(pair[0].pairing[1]), not needs_critic(pair[1])))
        first = cell[0][1]
        train = load_prompts(first.data.train_data, first.environment.env_class)
        started = time.perf_counter()
        workers = Workers.create(first, model_dir, STEPS, engine_kwargs=engine_kwargs,
                                 generator_backend=generator_backend)
        try:
            turns = first.generator.max_turns
            for outcome, cfg in cell:
                if cfg.generator.max_turns != turns:  # the other loop: its generator role, its prompts
                    _replace_generator(workers, cfg, model_dir, generator_backend)
                    turns = cfg.generator.max_turns
                    train = load_prompts(cfg.data.train_data, cfg.environment.env_class)
                make_trainer(cfg, RunWriter(cfg.run_dir), workers, train, []).train()
                outcome.seconds, started = time.perf_counter() - started, time.perf_counter()
                reader = RunReader(cfg.run_dir)
                outcome.rows = reader.metrics()
                outcome.events = reader.events()
                outcome.state = reader.status()["state"]
                outcome.max_assistant_turns = _max_assistant_turns(cfg.run_dir)
                outcomes.append(outcome)
        finally:
            workers.shutdown()
    return outcomes


def _replace_generator(workers: Any, cfg: Any, model_dir: str, backend: Any) -> None:
    """Give ``workers`` the generator role of ``cfg`` (its loop) in the old one's place: an actor in the
    same engine bundle, or one in this process over the same running ``backend``."""
    from skyrl_engine.workers import Workers

    old = workers.generator
    if old.remote:
        old.close()
    else:
        old.call("shutdown")  # stops only what it started: a handed-in backend keeps running
    workers.generator = Workers.generator_role(cfg, model_dir, workers.placement, generator_backend=backend)
    workers.generator.call("ping")


def timings(outcomes: list[Outcome]) -> str:
    """One line per pairing that ran, with its seconds (printed by the tests: the matrix's cost)."""
    return "\n".join(f"{'/'.join(o.pairing)}: {o.seconds:.1f} s" for o in outcomes if not o.refused)


def check(outcomes: list[Outcome], backend: str) -> None:
    """Assert the matrix is whole: each pairing refused in one line naming the keys, or ran as it should."""
    seen = {o.pairing for o in outcomes}
    expected = {(backend, lp, e, p, s) for lp in LOOPS for e in ESTIMATORS for p in PLACEMENTS for s in SCHEDULES}
    assert seen == expected, f"pairings not walked: {sorted(expected - seen)}"
    for o in outcomes:
        _, loop, estimator, placement, schedule = o.pairing
        if o.refused:
            # the only refusal: overlapping generation and training needs separate devices
            assert (placement, schedule != "sync") == ("colocated", True), f"{o.pairing} refused: {o.refused}"
            assert len(o.refused) == 1 and o.refused[0].startswith("trainer.placement.colocate_all:"), o.refused
            assert ("trainer.async_one_step" if schedule == "one_step" else "trainer.fully_async.enabled") \
                in o.refused[0], o.refused
            continue
        assert o.state == "succeeded", f"{o.pairing}: {o.state}"
        assert [r["step"] for r in o.rows] == list(range(1, STEPS + 1)), f"{o.pairing}: {o.rows}"
        for row in o.rows:
            assert "policy/policy_loss" in row and "reward/avg_raw_reward" in row, o.pairing
            if estimator == AdvantageEstimator.GAE:
                assert row["critic/critic_loss"] > 0, f"{o.pairing}: no critic loss in {sorted(row)}"
            if schedule != "sync":
                assert all(k in row for k in ("timing/wait_for_batch", "timing/wait_for_policy",
                                              "timing/sync_weights", "async/staleness_mean")), o.pairing
        if schedule == "one_step":  # the batch of step 2 was sampled while step 1 trained
            assert [r["async/staleness_max"] for r in o.rows] == [0, 1], f"{o.pairing}: {o.rows}"
        if schedule == "fully_async":
            assert all(r["async/staleness_max"] <= 2 for r in o.rows), f"{o.pairing}: {o.rows}"
        started = [e for e in o.events if e["kind"] == "started"]
        assert len(started) == 1 and started[0].get("pipeline", "sync") == schedule, f"{o.pairing}: {o.events}"
        if loop == "multi":
            assert o.max_assistant_turns > 1, f"{o.pairing}: no episode took more than one assistant turn"
