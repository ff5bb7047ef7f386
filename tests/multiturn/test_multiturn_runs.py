"""Multi-turn training runs on CPU: text2sql and search, turns read back from the run store's Parquet parts."""

from __future__ import annotations

import json

import pytest

from skyrl_core.config import load_config
from skyrl_core.runs import RunReader
from skyrl_engine.build import build
from skyrl_engine.multiturn import MultiTurnLoop
from skyrl_engine.tasks import load_prompts, write_rows


def _run(cfg, model_dir, env_configs):
    engine = build(cfg, model_path=model_dir, in_process=True, env_configs=env_configs)
    loop = engine.workers.generator.worker.loop
    assert isinstance(loop, MultiTurnLoop) and loop.env_configs == env_configs
    engine.train()
    return RunReader(cfg.run_dir)


def _check_store(reader, steps: int, n_rows: int):
    assert reader.status()["state"] == "succeeded"
    metrics = reader.metrics()
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    assert all("generate/avg_num_turns" in m and "reward/turn_1/avg_reward" in m for m in metrics)
    frames = [reader.trajectories(s) for s in reader.trajectory_steps()]
    assert len(frames) == steps and all(len(f) == n_rows for f in frames)
    multi = 0
    for frame in frames:
        for _, row in frame.iterrows():
            turns = json.loads(row["turns"])
            assert turns[0]["role"] == "assistant" and row["num_turns"] >= 1
            assert all(t["token_end"] <= row["num_tokens"] for t in turns)
            multi += row["num_turns"] > 1
    assert multi > 0, "no episode took a second turn"
    return frames


@pytest.mark.slow
def test_text2sql_run_stores_turns(tmp_path, tiny_model_dir, text2sql_data):
    cfg = load_config("quickstart", [
        f"trainer.policy.model.path={tiny_model_dir}", f"run.run_root={tmp_path}", "run.run_id=t2s",
        f"data.train_data=[{text2sql_data['train']}]", f"data.val_data=[{text2sql_data['test']}]",
        "environment.env_class=text2sql", "generator.max_turns=2", "generator.n_samples_per_prompt=2",
        "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2", "trainer.micro_train_batch_size_per_gpu=4",
        "trainer.max_training_steps=2", "trainer.eval_interval=2", "trainer.eval_batch_size=4", "trainer.ckpt_interval=0",
        "trainer.eval_before_train=false", "trainer.num_threads=1", "generator.sampling_params.max_generate_length=8",
    ])
    reader = _run(cfg, tiny_model_dir, {"text2sql": {"db_path": text2sql_data["db_path"]}})
    frames = _check_store(reader, 2, 4)
    assert set(frames[0]["env_class"]) == {"text2sql"}
    assert "eval/all/avg_score" in reader.metrics()[-1]


@pytest.mark.slow
def test_search_run_queries_the_local_retriever(tmp_path, retriever):
    from skyrl_engine.models import TinyModelSpec, build_tiny_model

    facts = [("capital of France", "Paris"), ("capital of Japan", "Tokyo"), ("capital of Italy", "Rome"),
             ("highest mountain", "Everest")]
    rows = [{"data_source": "searchR1_nq", "prompt": [{"role": "user", "content": f"Q: {q}?"}], "env_class": "search",
             "reward_spec": {"method": "rule", "ground_truth": {"target": [a]}}, "max_turns": 2,
             "extra_info": {"index": i, "warm_start_answer": f"<search>{q}</search>"}}
            for i, (q, a) in enumerate(facts)]
    data = write_rows(str(tmp_path / "search.parquet"), rows)
    # warm-started to call the search tool, so the episodes really go through the retriever
    model_dir = build_tiny_model(load_prompts([data], "search"), seed=0,
                                 spec=TinyModelSpec(hidden_size=64, intermediate_size=128, sft_steps=80, sft_batch_size=16))
    cfg = load_config("quickstart", [
        f"trainer.policy.model.path={model_dir}", f"run.run_root={tmp_path}", "run.run_id=search",
        f"data.train_data=[{data}]", "data.val_data=[]", "environment.env_class=search", "generator.max_turns=2",
        "generator.n_samples_per_prompt=2", "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2",
        "trainer.micro_train_batch_size_per_gpu=4", "trainer.max_training_steps=2", "trainer.ckpt_interval=0",
        "trainer.eval_interval=0", "trainer.eval_before_train=false", "trainer.num_threads=1",
        "generator.sampling_params.max_generate_length=32", "generator.sampling_params.temperature=0.5",
    ])
    reader = _run(cfg, model_dir, {"search": {"search_url": retriever.url, "timeout": 5}})
    frames = _check_store(reader, 2, 4)
    assert set(frames[0]["env_class"]) == {"search"}
    # whether the tiny model queries the retriever in 2 steps depends on its warm start; the scripted
    # test in test_agent_loop.py checks that a query reaches the retriever and comes back as a turn
