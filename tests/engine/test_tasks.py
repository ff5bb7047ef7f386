"""Datasets in SkyRL's format and environment rewards through skyrl-gym's registry."""

from __future__ import annotations

import pytest

from skyrl_engine.tasks import (
    PromptLoader,
    arithmetic_rows,
    load_prompts,
    make_env,
    score_response,
    write_rows,
)


def test_builtin_arithmetic_is_deterministic_and_correct():
    a, b = arithmetic_rows("train"), arithmetic_rows("train")
    assert a == b and len(a) > 1000
    for row in a[:50]:
        x, y = row["extra_info"]["a"], row["extra_info"]["b"]
        assert row["prompt"] == [{"role": "user", "content": f"{x}+{y}"}]
        assert row["reward_spec"]["ground_truth"] == str(x + y) and x + y <= 9
    assert arithmetic_rows("test") != arithmetic_rows("train")[: len(arithmetic_rows("test"))]
    with pytest.raises(ValueError, match="unknown split"):
        arithmetic_rows("dev")


@pytest.mark.parametrize("suffix", ["parquet", "jsonl"])
def test_dataset_files_load(tmp_path, suffix):
    rows = arithmetic_rows("test")[:5]
    path = write_rows(str(tmp_path / f"d.{suffix}"), rows)
    loaded = load_prompts([path])
    assert [r.prompt for r in loaded] == [r["prompt"] for r in rows]
    assert loaded[0].env_class == "arithmetic" and loaded[0].data_source == "arithmetic"
    assert loaded[0].ground_truth == rows[0]["reward_spec"]["ground_truth"]
    assert loaded[0].extras["extra_info"]["index"] == 0


def test_missing_file_and_unknown_builtin(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_prompts([str(tmp_path / "nope.parquet")])
    with pytest.raises(ValueError, match="unknown built-in"):
        load_prompts(["builtin://gsm9k/train"])


def test_arithmetic_env_rewards_through_skyrl_gym():
    import skyrl_gym

    row = load_prompts(["builtin://arithmetic/test"])[0]
    env = make_env("arithmetic", row.extras)
    assert isinstance(env, skyrl_gym.Env)
    assert score_response(row, str(row.ground_truth))[0] == 1.0
    assert score_response(row, f" {row.ground_truth}\n")[0] == 1.0
    assert score_response(row, "x")[0] == 0.0
    wrong = str((int(row.ground_truth) + 1) % 10)
    assert score_response(row, wrong)[0] == 0.0


def test_skyrl_gym_gsm8k_env_works_unchanged_on_our_format(tmp_path):
    rows = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": "Tom has 3 apples and buys 4 more. How many? End with #### N"}],
            "env_class": "gsm8k",
            "reward_spec": {"method": "rule", "ground_truth": "7"},
            "extra_info": {"split": "test", "index": 0},
        }
    ]
    path = write_rows(str(tmp_path / "gsm8k.parquet"), rows)
    (row,) = load_prompts([path], default_env_class="arithmetic")
    assert row.env_class == "gsm8k"
    assert score_response(row, "3 + 4 = 7\n#### 7")[0] == 1.0
    assert score_response(row, "#### 8")[0] == 0.0
    assert score_response(row, "seven")[0] == 0.0


def test_loader_is_a_pure_function_of_the_step():
    rows = load_prompts(["builtin://arithmetic/test"])
    loader = PromptLoader(rows, batch_size=16, seed=3)
    again = PromptLoader(rows, batch_size=16, seed=3)
    assert [r.prompt for r in loader.batch(5)] == [r.prompt for r in again.batch(5)]
    assert loader.position(loader.steps_per_epoch + 1) == {"epoch": 1, "batch_in_epoch": 0}
    first_epoch = [r.prompt for s in range(1, loader.steps_per_epoch + 1) for r in loader.batch(s)]
    assert len(first_epoch) == loader.steps_per_epoch * 16
