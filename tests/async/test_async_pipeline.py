"""The async pipeline's schedule, with sleeping stand-ins for generation and training (fast)."""

from __future__ import annotations

import threading
import time

import pytest

from skyrl_engine.async_pipeline import RolloutPipeline, pipeline_mode, staleness_bound


class FakeRL:
    """A generator and a trainer that take `gen_s` / `train_s` seconds and track weight versions."""

    def __init__(self, gen_s: float, train_s: float) -> None:
        self.gen_s, self.train_s = gen_s, train_s
        self.trainer_version = 0
        self.generator_version = 0
        self.sampled_with: dict[int, int] = {}
        self.lock = threading.Lock()

    def generate(self, step: int) -> dict:
        time.sleep(self.gen_s)
        self.sampled_with[step] = self.generator_version
        return {"step": step, "version": self.generator_version}

    def train(self, step: int, rollout: dict) -> dict:
        assert rollout["step"] == step
        time.sleep(self.train_s)
        self.trainer_version = step
        return {"policy/policy_loss": 0.0}

    def export_weights(self, version: int) -> int:
        assert version == self.trainer_version
        return version

    def load_weights(self, handle: int) -> None:
        self.generator_version = handle

    def pipeline(self, bound: int) -> RolloutPipeline:
        return RolloutPipeline(self.generate, self.train, self.export_weights, self.load_weights, bound)


def test_sync_is_on_policy() -> None:
    rl = FakeRL(0.01, 0.01)
    pipe = rl.pipeline(0)
    out = list(pipe.run(4))
    assert [s for s, _ in out] == [1, 2, 3, 4]
    assert rl.sampled_with == {1: 0, 2: 1, 3: 2, 4: 3}
    assert all(m["async/staleness_max"] == 0 for _, m in out)
    assert all(m["timing/wait_for_batch"] == 0 for _, m in out)


def test_one_step_overlaps_and_stays_within_one() -> None:
    steps, gen_s, train_s = 6, 0.15, 0.15
    sync = FakeRL(gen_s, train_s)
    t0 = time.perf_counter()
    list(sync.pipeline(0).run(steps))
    sync_s = time.perf_counter() - t0

    rl = FakeRL(gen_s, train_s)
    pipe = rl.pipeline(1)
    t0 = time.perf_counter()
    out = list(pipe.run(steps))
    async_s = time.perf_counter() - t0
    # The batch of step s is sampled with version s-2 (s >= 2): exactly one step stale.
    assert rl.sampled_with == {1: 0, 2: 0, 3: 1, 4: 2, 5: 3, 6: 4}
    assert [m["async/staleness_max"] for _, m in out] == [0, 1, 1, 1, 1, 1]
    assert sync_s / async_s > 1.4, (sync_s, async_s)
    for key in ("timing/wait_for_batch", "timing/wait_for_policy", "async/staleness_mean", "timing/sync_weights"):
        assert all(key in m for _, m in out)
    assert pipe.summary()["staleness_max"] == 1


@pytest.mark.parametrize("bound", [2, 3])
def test_fully_async_respects_the_bound(bound: int) -> None:
    rl = FakeRL(0.0, 0.2)  # instant generator: it runs ahead until the bound stops it
    out = list(rl.pipeline(bound).run(6))
    stale = [m["async/staleness_max"] for _, m in out]
    assert max(stale) == bound
    assert all((s - 1) - rl.sampled_with[s] <= bound for s in rl.sampled_with)
    # A generator that outruns the trainer waits for the policy, not the other way round.
    assert sum(m["timing/wait_for_policy"] for _, m in out) > sum(m["timing/wait_for_batch"] for _, m in out)


def test_generator_error_reaches_the_trainer() -> None:
    rl = FakeRL(0.0, 0.0)

    def broken(step: int) -> dict:
        if step == 3:
            raise ValueError("engine died")
        return rl.generate(step)

    pipe = RolloutPipeline(broken, rl.train, rl.export_weights, rl.load_weights, 1)
    with pytest.raises(ValueError, match="engine died"):
        list(pipe.run(5))


def test_resume_counts_versions_from_the_start_step() -> None:
    rl = FakeRL(0.0, 0.0)
    rl.trainer_version = rl.generator_version = 10
    out = list(rl.pipeline(1).run(3, start_step=11))
    assert [s for s, _ in out] == [11, 12, 13]
    assert rl.sampled_with == {11: 10, 12: 10, 13: 11}


def test_config_bound() -> None:
    assert staleness_bound({}) == 0
    assert staleness_bound({"trainer.async_one_step": True}) == 1
    assert staleness_bound({"trainer.fully_async.enabled": True, "trainer.fully_async.max_staleness_steps": 3}) == 3
    assert [pipeline_mode(b) for b in (0, 1, 4)] == ["sync", "one_step", "fully_async"]
    with pytest.raises(ValueError, match="max_staleness_steps"):
        RolloutPipeline(lambda s: s, lambda s, r: {}, lambda v: v, lambda h: None, -1)
    assert "one_step" in repr(FakeRL(0, 0).pipeline(1))
