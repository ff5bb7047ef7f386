"""The multi-turn agent loop on skyrl-gym's gsm8k_multi_turn, text2sql and search environments."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from skyrl_core.config import load_config
from skyrl_engine.generator import GeneratorWorker, SingleTurnLoop
from skyrl_engine.multiturn import MultiTurnLoop
from skyrl_engine.sampler import SamplingParams
from skyrl_engine.tasks import env_configs_from_environ, load_prompts
from skyrl_engine.types import PromptRow


def _worker(model_dir: str, max_turns: int, env_configs=None) -> GeneratorWorker:
    """The generator role with the agent loop (``generator.max_turns > 1``), in this process."""
    generator = load_config("quickstart", [f"generator.max_turns={max_turns}"]).generator
    worker = GeneratorWorker(model_dir, generator, num_threads=1, env_configs=env_configs)
    assert isinstance(worker.loop, MultiTurnLoop) and worker.loop.max_turns == max_turns
    return worker


def _gsm8k_rows(k: int) -> list[PromptRow]:
    rows = []
    for i in range(k):
        raw = {"prompt": [{"role": "user", "content": f"{i}+{i}=?"}], "env_class": "gsm8k_multi_turn",
               "reward_spec": {"method": "rule", "ground_truth": str(2 * i)}, "extra_info": {"max_turns": 3}}
        rows.append(PromptRow(raw["prompt"], raw["env_class"], "gsm8k", str(2 * i), {k: v for k, v in raw.items() if k != "prompt"}))
    return rows


def _check_spans(worker, out):
    """Turn spans tile the response; only assistant tokens carry loss; rewards are the turns' sum."""
    s = out.samples
    assert torch.all(out.loss_mask_BT <= s.response_mask_BT)
    for b, columns in enumerate(out.sample_columns):
        turns = json.loads(columns["turns"])
        ids = s.response_ids_BT[b].tolist()
        assert turns[0]["role"] == "assistant" and columns["num_turns"] == sum(t["role"] == "assistant" for t in turns)
        for t in turns:
            span = out.loss_mask_BT[b, t["token_start"]:t["token_end"]]
            if t["role"] == "assistant":
                assert bool(span.all())
                assert worker.tokenizer.decode(ids[t["token_start"]:t["token_end"]], skip_special_tokens=True) == t["content"]
            else:
                assert not bool(span.any()) and t["content"] in worker.tokenizer.decode(ids[t["token_start"]:t["token_end"]])
        assert out.rewards_B[b] == pytest.approx(sum(t["reward"] for t in turns if t["role"] == "assistant"))


def test_gsm8k_multi_turn_episodes_mask_observations(tiny_model_dir):
    worker = _worker(tiny_model_dir, 3)
    out = worker.generate(_gsm8k_rows(2), 3, SamplingParams(max_generate_length=6), seed=0)
    assert len(out.rewards_B) == 6
    assert out.metrics["generate/avg_num_turns"] > 1 and out.metrics["generate/max_num_turns"] <= 3
    assert "reward/turn_1/avg_reward" in out.metrics and out.metrics["generate/avg_env_tokens"] > 0
    _check_spans(worker, out)
    # the observation is rendered as the chat template continues a conversation
    obs = worker.loop.observation_ids([{"role": "user", "content": "hi"}])
    assert worker.tokenizer.decode(obs, skip_special_tokens=False) == "<|user|>hi<|im_end|><|assistant|>"


def test_text2sql_episodes_run_sql_against_the_spider_layout(tiny_model_dir, text2sql_data):
    rows = load_prompts([text2sql_data["train"]], "text2sql")[:3]
    assert rows[0].extras["db_id"] in ("concert", "pets") and rows[0].extras["data"] == "spider"
    worker = _worker(tiny_model_dir, 2, env_configs={"text2sql": {"db_path": text2sql_data["db_path"]}})
    out = worker.generate(rows, 2, SamplingParams(max_generate_length=8), seed=1)
    _check_spans(worker, out)
    turns = [json.loads(c["turns"]) for c in out.sample_columns]
    # a random policy never writes <solution>: the env answers with its format reminder and the episode goes on
    assert any("<observation>" in t["content"] for ts in turns for t in ts if t["role"] == "user")
    assert set(out.rewards_B) <= {-1.0, 0.0, 1.0}
    # the env counts down the loop's budget (skyrl-gym's text2sql would say 5 turns), unless the row says
    assert worker.loop._start(rows[0]).env.max_turns == 2
    own = dataclasses.replace(rows[0], extras={**rows[0].extras, "max_turns": 4})
    assert worker.loop._start(own).env.max_turns == 4


def test_rollout_loop_follows_max_turns(tiny_model_dir, monkeypatch):
    single = GeneratorWorker(tiny_model_dir, load_config("quickstart").generator, num_threads=1)
    assert type(single.loop) is SingleTurnLoop
    multi = GeneratorWorker(tiny_model_dir, load_config("quickstart", ["generator.max_turns=3"]).generator, num_threads=1)
    assert isinstance(multi.loop, MultiTurnLoop) and multi.loop.max_turns == 3
    assert multi.loop.backend is multi.backend and multi.loop.tokenizer is multi.tokenizer
    monkeypatch.setenv("SKYRL_NB_SEARCH_URL", "http://127.0.0.1:9/retrieve")
    assert env_configs_from_environ() == {"search": {"search_url": "http://127.0.0.1:9/retrieve"}}


def test_builtin_text2sql_task_is_skyrl_format_and_scores_with_the_env():
    from skyrl_engine.models import warm_start_answer
    from skyrl_engine.tasks import env_config_for, make_env
    from skyrl_engine.text2sql_data import builtin_db_root

    rows = load_prompts(["builtin://text2sql/test"])
    assert len(rows) == 16 and {r.env_class for r in rows} == {"text2sql"}
    row = rows[0]
    assert warm_start_answer(row).startswith("<think>") and row.ground_truth.startswith("SELECT")
    assert env_config_for("text2sql", {}).db_path == builtin_db_root()  # the built-in databases in the cache
    env = make_env("text2sql", row.extras, {})
    env.init(row.prompt)
    out = env.step(f"<think>ok</think><solution>{row.ground_truth}</solution>")
    assert out["done"] and out["reward"] == 1.0
    env = make_env("text2sql", row.extras, {})
    env.init(row.prompt)
    out = env.step(f"<think>look</think><sql>{row.ground_truth}</sql>")
    assert not out["done"] and "<observation>" in out["observations"][0]["content"]


def test_search_episode_queries_the_retriever_and_stores_its_answer(tiny_model_dir, retriever, monkeypatch):
    """A scripted policy (search, then answer) through the real loop, env, tool and HTTP retriever."""
    import skyrl_engine.sampler as sampler_module

    worker = _worker(tiny_model_dir, 3, env_configs={"search": {"search_url": retriever.url, "timeout": 5}})
    real_sample = sampler_module.sample
    script = ["<search>capital of France</search>", "<answer>Paris</answer>"]

    def scripted(model, prompts, params, eos_id, pad_id, generator=None, **kwargs):
        out = real_sample(model, prompts, params, eos_id, pad_id, generator, **kwargs)
        turn = sum(1 for t in prompts[0] if t == worker.tokenizer.convert_tokens_to_ids("<|assistant|>")) - 1
        ids = worker.tokenizer.encode(script[turn], add_special_tokens=False) + [eos_id]
        B = len(prompts)
        out.response_ids_BT = torch.tensor([ids] * B)
        out.response_mask_BT = torch.ones((B, len(ids)), dtype=torch.long)
        out.logprobs_BT = torch.full((B, len(ids)), -0.1)
        out.finish_reasons = ["stop"] * B
        return out

    monkeypatch.setattr(sampler_module, "sample", scripted)
    row = PromptRow([{"role": "user", "content": "Q: capital of France?"}], "search", "nq", {"target": ["Paris"]},
                    {"data_source": "nq", "reward_spec": {"method": "rule", "ground_truth": {"target": ["Paris"]}},
                     "max_turns": 3})
    out = worker.generate([row], 2, SamplingParams(max_generate_length=8), seed=0)
    assert retriever.requests == 2 and out.rewards_B == [1.0, 1.0]
    turns = json.loads(out.sample_columns[0]["turns"])
    assert [t["role"] for t in turns] == ["assistant", "user", "assistant"]
    assert "<information>" in turns[1]["content"] and "Paris is the capital of France." in turns[1]["content"]
    assert out.metrics["generate/avg_num_turns"] == 2
    _check_spans(worker, out)
