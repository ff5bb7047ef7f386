"""Runs in SkyRL's own environment (the oracle env's python, not ours): the SkyRL side of test_skyrl_engine.py.

    <oracle python> skyrl_bridge_driver.py spec.json result.json      (PYTHONPATH: the repo and backend/)

1. Config: each case's translated ``key=value`` words go through SkyRL's own loading
   (``SkyRLTrainConfig.from_cli_overrides``, and the bridge's ``BridgeConfig`` subclass of it) and
   ``validate_cfg``; every key is read back from SkyRL's config object. SkyRL's defaults at every skyrl-nb key
   are recorded too.
2. Run store: the bridge's trainer (``skyrl_classes.experiment_class().trainer_class``, a real subclass of
   SkyRL's ``RayPPOTrainer``) plays two steps of ``RayPPOTrainer.train``'s loop in the order SkyRL runs them,
   calling SkyRL's own phase methods on it: ``generate`` (SkyRL's, around a generator that returns a
   ``GeneratorOutput`` built with SkyRL's ``TrajectoryID`` / ``prepare_generator_input`` /
   ``get_rollout_metrics``), ``postprocess_generator_output``, ``convert_to_training_input``,
   ``compute_advantages_and_returns`` (GRPO, SkyRL's estimator) and ``train_critic_and_policy`` (SkyRL's
   advantage normalisation and metric reduction over a stand-in dispatch whose "worker" status uses
   worker.py's names with SkyRL's own policy loss). What the GPU parts would do (models, vLLM, checkpoints'
   contents) is not run; ``save_checkpoints`` is replaced by a stand-in that writes SkyRL's latest-step file.
   Everything it logged and every generator output goes into the result for the test to compare.
3. A job's own data and reward functions (``inputs``): the bridge's command line for a DataFrame shipped with the
   job and reward functions pickled from the test, through the bridge's config path and ``validate_cfg``; the rows
   it wrote read by SkyRL's ``PromptDataset``, and the reward functions' environment made and stepped on each row
   as SkyRL's generator makes and steps it (:func:`check_inputs`).

SkyRL 0.3.0 on Python 3.11 needs three stand-ins before its trainer imports (none changes what is tested):
``skyrl.backends`` as a bare package (its ``__init__`` pulls ``skyrl.tinker.types``, which pydantic refuses
on 3.11; MACHINE-NOTES.md), and ``torchdata.stateful_dataloader`` / ``skyrl.train.generators.skyrl_vlm_generator``
(a GPU-env package and the vision generator, which imports those tinker types too). SkyRL 0.4.0 on 3.12 needs only
the torchdata one.

Every case is loaded twice: as translated for the installed release, and (``bridge_cases``) as ``launch`` sends it,
for the newest release, through the bridge's own adaptation to the installed one
(``skyrl_translate.adapt_to_release``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import sys
import time
import types
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

ABSENT = "<absent>"
VOCAB = ["<pad>", "<eos>", "<user>"] + list("0123456789+= abcdefghij?")
SPECIAL = {0, 1, 2}


def stand_ins() -> None:
    import skyrl

    def module(name: str, **attrs: object) -> None:
        m = types.ModuleType(name)
        m.__path__ = []
        m.__dict__.update(attrs)
        sys.modules[name] = m

    module("torchdata")
    module("torchdata.stateful_dataloader", StatefulDataLoader=object)
    if sys.version_info < (3, 12):
        backends = types.ModuleType("skyrl.backends")
        backends.__path__ = [str(Path(skyrl.__path__[0]) / "backends")]
        sys.modules["skyrl.backends"] = backends
        module("skyrl.train.generators.skyrl_vlm_generator", SkyRLVLMGymGenerator=object)


def plain(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "item"):
        try:
            return value.item()
        except (ValueError, RuntimeError):
            return value.tolist()
    return value


def read(obj: object, key: str) -> object:
    for part in key.split("."):
        if isinstance(obj, dict):
            if part not in obj:
                return ABSENT
            obj = obj[part]
        elif dataclasses.is_dataclass(obj) and part in {f.name for f in dataclasses.fields(obj)}:
            obj = getattr(obj, part)
        else:
            return ABSENT
    return plain(obj)


def load(cls: type, words: list[str]) -> tuple[object | None, str | None]:
    from skyrl.train.utils import validate_cfg

    try:
        cfg = cls.from_cli_overrides(list(words))
        validate_cfg(cfg)
        return cfg, None
    except Exception as err:  # the test shows SkyRL's own message
        return None, f"{type(err).__name__}: {err}"


def check_configs(spec: dict) -> dict:
    from skyrl.train.config import SkyRLTrainConfig

    from skyrl_engine.skyrl_classes import BridgeConfig

    out = {}
    for name, words in spec["cases"].items():
        cfg, error = load(BridgeConfig, words)
        keys = [w.partition("=")[0] for w in words]
        _, base_error = load(SkyRLTrainConfig, words)
        out[name] = {"error": error, "base_error": base_error,
                     "readback": {k: read(cfg, k) for k in keys} if cfg is not None else {}}
    from skyrl_core.skyrl_translate import adapt_to_release

    bridge = {}
    for name, words in spec["bridge_cases"].items():
        words, problems = adapt_to_release(words, metadata.version("skyrl"))
        bridge[name] = {"error": problems[0] if problems else load(BridgeConfig, words)[1]}
    defaults = SkyRLTrainConfig()
    return {"cases": out, "bridge_cases": bridge, "defaults": {k: read(defaults, k) for k in spec["nb_keys"]}}


# ------------------------------------------------------------------------------ the run store, two steps


def encode(text: str) -> list[int]:
    return [VOCAB.index(c) for c in text]


def decode(ids: list[int], skip_special_tokens: bool = False) -> str:
    return "".join(VOCAB[i] for i in ids if not (skip_special_tokens and i in SPECIAL))


class Generator:
    """Answers each ``GeneratorInput`` with a ``GeneratorOutput`` as SkyRL's gym generator shapes it."""

    def __init__(self, cfg: object, rng: object):
        self.cfg, self.rng, self.outputs = cfg, rng, []

    async def generate(self, input_batch: dict) -> dict:
        from skyrl.train.generators.utils import get_rollout_metrics

        n = len(input_batch["prompts"])
        max_len = self.cfg.generator.sampling_params.max_generate_length
        prompt_ids, responses, rewards, masks, logprobs, stops = [], [], [], [], [], []
        for i in range(n):
            prompt_ids.append([2] + encode(input_batch["prompts"][i][0]["content"]) + [2])
            length = int(self.rng.integers(3, max_len + 1)) if i % 3 else max_len  # some hit the limit
            ids = [int(x) for x in self.rng.integers(3, len(VOCAB), size=length)]
            if length < max_len:
                ids[-1] = 1  # eos
            mask = [1] * length
            if i % 2 and length >= 5:  # a two-turn episode: the environment's observation tokens carry no loss
                mask[2:4] = [0, 0]
            responses.append(ids)
            masks.append(mask)
            rewards.append(float(self.rng.integers(0, 2)))
            logprobs.append([float(-x) for x in self.rng.uniform(0.01, 3.0, size=length)])
            stops.append("length" if length == max_len else "stop")
        out = {"prompt_token_ids": prompt_ids, "response_ids": responses, "rewards": rewards, "loss_masks": masks,
               "stop_reasons": stops, "rollout_logprobs": logprobs, "trajectory_ids": input_batch["trajectory_ids"],
               "rollout_metrics": get_rollout_metrics(responses, rewards, None, input_batch["env_classes"], masks)}
        self.outputs.append(json.loads(json.dumps({k: v for k, v in out.items() if k not in ("trajectory_ids",
                                                                                           "rollout_metrics")})))
        self.outputs[-1]["trajectory_ids"] = [[t.instance_id, t.repetition_id] for t in out["trajectory_ids"]]
        return out


class Dispatch:
    """Stands in for SkyRL's worker dispatch: each mini-batch's "worker status" has worker.py's names, with
    the loss and its metrics from SkyRL's own registered policy loss on that mini-batch."""

    def __init__(self, cfg: object):
        self.cfg = cfg

    def get_lcm_dp_size(self) -> int:
        return 1

    def stage_data(self, model: str, data: object, boundaries: list) -> list:
        return [(data, start, end) for start, end in boundaries]

    def forward_backward_from_staged(self, model: str, chunk: tuple) -> object:
        import torch
        from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

        data, start, end = chunk
        old = data["rollout_logprobs"][start:end]
        new = old + 0.05 * torch.sin(torch.arange(old.numel(), dtype=old.dtype)).reshape(old.shape)
        loss, loss_metrics = PolicyLossRegistry.get(self.cfg.trainer.algorithm.policy_loss_type)(
            new, old, data["advantages"][start:end], self.cfg.trainer.algorithm, loss_mask=data["loss_mask"][start:end])
        status = {"final_loss": loss.item(), "policy_loss": loss.item(), "policy_entropy": 0.7,
                  "response_length": int(old.shape[1]), "policy_lr": self.cfg.trainer.policy.optimizer_config.lr}
        status.update({f"loss_metrics/{k}": v for k, v in loss_metrics.items()})
        return SimpleNamespace(metrics=status)

    def optim_step(self, model: str) -> float:
        return 0.25

    def empty_cache(self) -> None:
        pass


async def play_steps(trainer: object, generator: Generator, record: dict, steps: int, eval_metrics: dict) -> None:
    """The body of ``RayPPOTrainer.train`` for ``steps`` steps, in SkyRL's order, on SkyRL's phase methods."""
    from skyrl.train.generators.utils import prepare_generator_input
    from skyrl.train.utils.utils import Timer

    cfg = trainer.cfg
    trainer.tracker.log(eval_metrics[0], step=0, commit=True)  # eval before training
    for step in range(1, steps + 1):
        trainer.global_step = step
        rows = [{"prompt": [{"role": "user", "content": f"{a}+{b}="}], "env_class": None,
                 "env_extras": {"data_source": f"source{a % 2}", "reward_spec": {"ground_truth": str(a + b)}},
                 "uid": str(4 * (step - 1) + a)} for a, b in ((0, 1), (1, 2))]
        with Timer("step", trainer.all_timings):
            generator_input, uids = prepare_generator_input(rows, cfg.generator.n_samples_per_prompt, {},
                                                            cfg.environment.env_class, "train", step)
            with Timer("generate", trainer.all_timings):
                output = await trainer.generate(generator_input)
            generator.outputs[-1]["rewards_after_generate"] = list(output["rewards"])
            with Timer("postprocess_generator_output", trainer.all_timings):
                output, uids = trainer.postprocess_generator_output(output, uids)
            with Timer("convert_to_training_input", trainer.all_timings):
                batch = trainer.convert_to_training_input(output, uids)
            with Timer("fwd_logprobs_values_reward", trainer.all_timings):  # the models' forward: GPU work
                batch["base_action_log_probs"], batch["values"] = None, None
                batch["action_log_probs"] = batch["rollout_logprobs"]
            with Timer("compute_advantages_and_returns", trainer.all_timings):
                batch = trainer.compute_advantages_and_returns(batch)
                record["advantages"].append(batch["advantages"].tolist())
                record["response_mask"].append(batch["response_mask"].tolist())
                for key in ["rewards"]:
                    batch.pop(key)
            with Timer("train_critic_and_policy", trainer.all_timings):
                trainer.train_critic_and_policy(batch)
            if step % cfg.trainer.ckpt_interval == 0:
                with Timer("save_checkpoints", trainer.all_timings):
                    trainer.save_checkpoints()
            with Timer("sync_weights", trainer.all_timings):
                time.sleep(0.01)
        train_time = trainer.all_timings["train_critic_and_policy"]
        trainer.all_metrics["trainer/tokens_per_second_per_gpu"] = int(batch["attention_mask"].sum().item()) / (
            train_time * trainer._num_training_gpus)
        trainer.all_metrics.update({"trainer/epoch": 0, "trainer/global_step": step})
        if step in eval_metrics:
            trainer.all_metrics.update(eval_metrics[step])
        payload = {**trainer.all_metrics, **{f"timing/{k}": v for k, v in trainer.all_timings.items()}}
        trainer.tracker.log(payload, step=step, commit=True)
        record["payloads"].append(plain(payload))
        trainer.all_metrics, trainer.all_timings = {}, {}
        if step == 1:  # no log call for a while: the heartbeat alone refreshes the status
            status = Path(trainer.tracker.run_dir) / "status.json"
            # a step alone reaches status.json within a heartbeat (lifecycle.STEP_STATUS_S): read it after one
            time.sleep(2 * trainer.tracker.life.heartbeat_s)
            first = json.loads(status.read_text())
            time.sleep(4 * trainer.tracker.life.heartbeat_s)
            record["heartbeats"] = [first, json.loads(status.read_text())]
    trainer.tracker.finish()


def run_store(spec: dict) -> dict:
    import numpy as np
    from skyrl.train.generators.utils import get_metrics_from_generator_output
    from skyrl.train.trainer import RayPPOTrainer

    from skyrl_engine.skyrl_bridge import RunStoreTracker
    from skyrl_engine.skyrl_classes import BridgeConfig, experiment_class

    store = spec["store"]
    from skyrl_core.skyrl_translate import adapt_to_release

    cfg, error = load(BridgeConfig, adapt_to_release(store["args"], metadata.version("skyrl"))[0])
    if error:
        raise SystemExit(f"the run-store case's config was refused: {error}")
    rng = np.random.default_rng(0)
    generator = Generator(cfg, rng)
    record: dict = {"payloads": [], "advantages": [], "response_mask": [], "checkpoints": []}

    def save_checkpoints(self: object) -> str:  # what SkyRL's would leave for a resume: the latest-step file
        folder = Path(self.cfg.trainer.ckpt_path) / f"global_step_{self.global_step}"
        folder.mkdir(parents=True, exist_ok=True)
        (Path(self.cfg.trainer.ckpt_path) / "latest_ckpt_global_step.txt").write_text(str(self.global_step))
        record["checkpoints"].append(str(folder))
        return str(folder)

    eval_outputs = {s: {"rewards": [1.0, 0.0, 1.0, 1.0], "response_ids": [[3], [4], [5], [6]]} for s in (0, 2)}
    eval_metrics = {}
    for s, out in eval_outputs.items():  # evaluate.py's names over SkyRL's reward statistics
        m = get_metrics_from_generator_output(out, ["e0", "e1", "e2", "e3"])
        eval_metrics[s] = {"eval/all/avg_score": m["avg_score"], "eval/all/pass_at_1": m["pass_at_n"],
                           "eval/all/mean_positive_reward": m["mean_positive_reward"]}

    async def train(self: object) -> None:  # RayPPOTrainer.train's loop, played on SkyRL's phase methods
        await play_steps(self, generator, record, store["steps"], eval_metrics)

    RayPPOTrainer.train = train
    RayPPOTrainer.save_checkpoints = save_checkpoints
    exp_class = experiment_class()
    tracker = RunStoreTracker(store["run_dir"], heartbeat_s=0.1)
    exp = object.__new__(exp_class)  # BasePPOExp.__init__ would load a tokenizer and datasets
    exp.cfg, exp.run_store = cfg, tracker
    record["get_tracker_is_run_store"] = exp.get_tracker() is tracker
    record["inner_tracker"] = f"{type(tracker.inner).__module__}.{type(tracker.inner).__name__}:{tracker.inner.backend}"
    tracker.pending()
    from skyrl_engine.skyrl_bridge import _describe_run

    _describe_run(tracker, cfg)  # no config.yaml yet (no launch wrote one): SkyRL's own goes there
    trainer = object.__new__(exp_class.trainer_class)  # RayPPOTrainer.__init__ would build Ray actors
    trainer.__dict__.update(cfg=cfg, tracker=tracker, tokenizer=SimpleNamespace(pad_token_id=0, decode=decode),
                            generator=generator, dispatch=Dispatch(cfg), all_metrics={}, all_timings={},
                            global_step=0, total_training_steps=store["steps"], _num_training_gpus=1,
                            colocate_all=cfg.trainer.placement.colocate_all,
                            bridge_options={"store_token_data": True, "resumed_from": 0, "resolved": {"x": "y"}},
                            _bridge_inputs={}, _bridge_step=None)
    asyncio.run(trainer.train())
    record["generator_outputs"] = generator.outputs
    record["eval_metrics"] = {str(k): v for k, v in eval_metrics.items()}
    record["vocab"], record["special"] = VOCAB, sorted(SPECIAL)
    record["max_generate_length"] = cfg.generator.sampling_params.max_generate_length
    record["overlong_buffer"] = plain(cfg.trainer.algorithm.overlong_buffer)
    return record


# ------------------------------------------------------------------------------ a job's own data and rewards


def check_inputs(spec: dict) -> dict:
    """The bridge's command line for a job with shipped data and reward functions, through the bridge's own config
    path (``skyrl_bridge.skyrl_config``: inputs resolved, ``from_cli_overrides``, ``validate_cfg``); then the Parquet
    it wrote read by SkyRL's ``PromptDataset`` and each row's environment made and stepped as SkyRL's generator
    does (``skyrl_gym.make(env_class, env_config=cfg.environment.skyrl_gym.<env_class>, extras=...)``), its
    metrics aggregated by SkyRL's ``get_rollout_metrics``."""
    import copy
    import os

    import skyrl_gym
    from skyrl.train.dataset import PromptDataset
    from skyrl.train.generators.utils import get_rollout_metrics
    from skyrl_gym.envs import registration
    from transformers import AutoTokenizer

    from skyrl_engine.skyrl_bridge import _parser, dashboard_aliases, skyrl_config

    s = spec["inputs"]
    os.environ["SKYRL_NB_CACHE"] = s["cache"]
    started = time.perf_counter()
    args = _parser().parse_args(s["argv"])
    try:
        cfg, resolved = skyrl_config(args.overrides, run_dir=args.run_dir, columns=args.columns)
    except ValueError as err:
        return {"error": str(err)}
    out = {"error": None, "resolved": resolved, "env_class": cfg.environment.env_class,
           "registered": cfg.environment.env_class in registration.registry,
           "env_config": plain(cfg.environment.skyrl_gym.skyrl_nb_reward), "config_s": time.perf_counter() - started}
    tokenizer = AutoTokenizer.from_pretrained(cfg.trainer.policy.model.path)
    data = PromptDataset(cfg.data.train_data, tokenizer, cfg.trainer.max_prompt_length, num_workers=1)
    samples = []
    for i in range(len(data)):
        messages, env_class, extras, _ = data[i]
        for response in s["responses"]:
            env_extras = {**copy.deepcopy(extras), "max_turns": cfg.generator.max_turns}  # as SkyRL's agent_loop
            env_class = env_class or cfg.environment.env_class
            env = skyrl_gym.make(env_class, env_config=getattr(cfg.environment.skyrl_gym, env_class, dict()),
                                 extras=env_extras)
            env.init(copy.deepcopy(messages))
            step = env.step(response)
            samples.append({"row": i, "messages": messages, "env_class": env_class, "response": response,
                            "reward": step["reward"], "done": step["done"], "metadata": step["metadata"],
                            "metrics": env.get_metrics()})
            env.close()
    metrics = get_rollout_metrics([[1, 2] for _ in samples],
                                  [x["reward"] for x in samples], [x["metrics"] for x in samples],
                                  [x["env_class"] for x in samples])
    metrics = {k: plain(v) for k, v in metrics.items() if k.startswith("environment/")}
    return {**out, "rows": len(data), "samples": samples, "metrics": metrics, "aliases": dashboard_aliases(metrics),
            "total_s": time.perf_counter() - started}


def main(spec_path: str, result_path: str) -> None:
    started = time.perf_counter()
    stand_ins()
    spec = json.loads(Path(spec_path).read_text())
    result = {"skyrl_version": metadata.version("skyrl"), **check_configs(spec)}
    result["config_s"] = time.perf_counter() - started
    result["store"] = run_store(spec)
    if "inputs" in spec:
        result["inputs"] = check_inputs(spec)
    result["total_s"] = time.perf_counter() - started
    Path(result_path).write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
