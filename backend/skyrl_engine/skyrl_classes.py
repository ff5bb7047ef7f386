"""SkyRL's own classes, extended for the bridge (``skyrl_bridge.py``). Importing this module imports SkyRL.

- :class:`BridgeConfig`: ``SkyRLTrainConfig`` plus ``trainer.algorithm.overlong_buffer.{len, penalty_factor}``
  (DAPO's soft overlong penalty, which SkyRL 0.3 and 0.4 keep in their DAPO example rather than the core config) and
  ``environment.skyrl_gym.skyrl_nb_reward.*`` (the settings of the reward functions' environment,
  ``skyrl_reward_env``, which SkyRL's generator hands it as its ``env_config``) and ``environment.shipped``
  (environment classes from a notebook cell, registered before SkyRL's generator makes one), subclassed the way SkyRL's docs
  say to add config fields. Module-level, so Ray pickles it by name. Importing this module registers that
  environment with skyrl-gym.
- :func:`experiment_class`: ``BasePPOExp`` whose tracker is the run store and whose trainer (a
  ``RayPPOTrainer``) reports its start, each step's trajectories and its checkpoints there, and applies the
  overlong penalty before dynamic sampling. Built on first call: ``skyrl.train.trainer`` needs SkyRL's GPU
  packages (vLLM, torchdata) to import.
"""

# No `from __future__ import annotations`: SkyRL's build_nested_dataclass reads each field's type object to
# build nested sections, and a string annotation would leave them plain dicts.
import functools
from dataclasses import dataclass, field
from typing import Any

from skyrl.train.config import (
    AlgorithmConfig,
    BaseConfig,
    EnvironmentConfig,
    SkyRLGymConfig,
    SkyRLTrainConfig,
    TrainerConfig,
)

from skyrl_engine import skyrl_batches as batches
from skyrl_engine import skyrl_reward_env  # registers the reward functions' environment with skyrl-gym
from skyrl_engine.rewards import register_shipped_environments
from skyrl_engine.tasks import register_builtin_envs


@dataclass
class OverlongBufferConfig(BaseConfig):
    """DAPO's soft overlong penalty: the last ``len`` tokens before ``max_generate_length`` cost up to
    ``penalty_factor`` of reward (skyrl-nb's key and default)."""

    len: int = 0
    penalty_factor: float = 1.0


@dataclass
class BridgeAlgorithmConfig(AlgorithmConfig):
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)


@dataclass
class BridgeTrainerConfig(TrainerConfig):
    algorithm: BridgeAlgorithmConfig = field(default_factory=BridgeAlgorithmConfig)


@dataclass
class RewardEnvConfig(BaseConfig):
    """``environment.skyrl_gym.skyrl_nb_reward``: skyrl-nb's ``reward.*`` (``functions``: ``{name, file, weight}``
    each, ``file`` an ``inputs://`` pickle in ``run_dir`` or ``module:function``); the translation sends every key
    whenever ``reward.functions`` names a function, so these defaults are never what a job runs with."""

    run_dir: str = ""
    functions: list = field(default_factory=list)
    timeout_s: float = 30.0
    errors: str = "skip"
    max_workers: int = 128


@dataclass
class BridgeSkyRLGymConfig(SkyRLGymConfig):
    skyrl_nb_reward: RewardEnvConfig = field(default_factory=RewardEnvConfig)


@dataclass
class BridgeEnvironmentConfig(EnvironmentConfig):
    skyrl_gym: BridgeSkyRLGymConfig = field(default_factory=BridgeSkyRLGymConfig)
    shipped: dict = field(default_factory=dict)
    """skyrl-nb's ``environment.shipped``: environment classes from a notebook cell, name -> ``inputs://`` pickle."""


@dataclass
class BridgeConfig(SkyRLTrainConfig):
    """SkyRL's config with the bridge's additions (``trainer.algorithm.overlong_buffer``,
    ``environment.skyrl_gym.skyrl_nb_reward``)."""

    trainer: BridgeTrainerConfig = field(default_factory=BridgeTrainerConfig)
    environment: BridgeEnvironmentConfig = field(default_factory=BridgeEnvironmentConfig)


@functools.cache
def experiment_class() -> type:
    """``BridgeExp(cfg, tracker, store_token_data=True, resumed_from=0, resolved=None)``: SkyRL's
    ``BasePPOExp`` writing skyrl-nb's run store through ``tracker`` (a ``skyrl_engine.skyrl_bridge.RunStoreTracker``)."""
    from skyrl.train.entrypoints.main_base import BasePPOExp
    from skyrl.train.trainer import RayPPOTrainer


    class BridgeTrainer(RayPPOTrainer):
        """SkyRL's trainer, telling the run store what it does."""

        bridge_options: dict[str, Any]

        async def train(self) -> None:
            o = self.bridge_options
            self.tracker.started(self.total_training_steps, resumed_from=o["resumed_from"], resolved=o["resolved"])
            await super().train()

        async def generate(self, input_batch: Any) -> Any:
            output = await super().generate(input_batch)
            self._bridge_inputs.update(batches.sample_inputs(input_batch))
            buffer = self.cfg.trainer.algorithm.overlong_buffer
            batches.apply_overlong_penalty(output, self.cfg.generator.sampling_params.max_generate_length,
                                          buffer.len, buffer.penalty_factor)
            return output

        def convert_to_training_input(self, generator_output: Any, uids: list[str]) -> Any:
            self._bridge_step = (generator_output, list(uids))  # the samples the step trains on, after DAPO
            return super().convert_to_training_input(generator_output, uids)

        def compute_advantages_and_returns(self, data: Any) -> Any:
            data = super().compute_advantages_and_returns(data)
            try:
                output, uids = self._bridge_step
                rows = batches.trajectory_rows(
                    self.global_step, output, uids, data["advantages"],
                    lambda ids, skip: self.tokenizer.decode(ids, skip_special_tokens=skip),
                    inputs=self._bridge_inputs, default_env_class=self.cfg.environment.env_class,
                    store_token_data=self.bridge_options["store_token_data"],
                    multi_turn=self.cfg.generator.max_turns > 1)
                self.tracker.write_trajectories(self.global_step, rows)
            except Exception as err:  # the run store must not stop SkyRL's training
                self.tracker.writer.log_event("warning", step=self.global_step,
                                              message=f"trajectory part not built: {type(err).__name__}: {err}")
            self._bridge_inputs = {}
            return data

        def save_checkpoints(self) -> str:
            path = super().save_checkpoints()
            self.tracker.checkpoint_saved(self.global_step, path)
            return path

    class BridgeExp(BasePPOExp):
        """SkyRL's experiment with skyrl-nb's run store as its tracker."""

        def __init__(self, cfg: Any, tracker: Any, *, store_token_data: bool = True, resumed_from: int = 0,
                     resolved: dict[str, Any] | None = None):
            self.run_store = tracker
            self.bridge_options = {"store_token_data": store_token_data, "resumed_from": resumed_from,
                                   "resolved": dict(resolved or {})}
            super().__init__(cfg)

        def get_tracker(self) -> Any:
            self.run_store.inner = super().get_tracker()  # SkyRL's own (console) logger still prints each step
            return self.run_store

        def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:

            register_builtin_envs()  # skyrl-nb's environments (arithmetic, plug-ins') in skyrl-gym's registry
            skyrl_reward_env.register()  # the reward functions' (skyrl_nb_reward), and classes from a cell
            register_shipped_environments(dict(cfg.environment.shipped), self.run_store.run_dir)
            return super().get_generator(cfg, tokenizer, inference_engine_client)

        def get_trainer(self, cfg: Any, tracker: Any, tokenizer: Any, train_dataset: Any, eval_dataset: Any,
                        inference_engine_client: Any, generator: Any, colocate_pg: Any) -> Any:
            trainer = BridgeTrainer(cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset,
                                    eval_dataset=eval_dataset, inference_engine_client=inference_engine_client,
                                    generator=generator, colocate_pg=colocate_pg)
            trainer.bridge_options = self.bridge_options
            trainer._bridge_inputs = {}
            trainer._bridge_step = None
            return trainer

    BridgeExp.trainer_class = BridgeTrainer
    return BridgeExp
