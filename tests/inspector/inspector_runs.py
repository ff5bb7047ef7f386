"""Small synthetic run stores written through the real RunWriter, as the engine would (test helpers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from skyrl_core.runs import RunWriter

PROMPTS = ["What is 2 + 3?", "Spell 'cat' backwards.", "Name a prime above 10.", "Solve x + 1 = 4."]
ANSWERS = ["5", "tac", "11", "3"]


def chatml(question: str) -> str:
    """``question`` as a ChatML chat template renders it for the model (system, user, then the assistant's turn)."""
    return (f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
            "<|im_start|>assistant\n")


def step_rows(step: int, groups: int = 3, group_size: int = 4, tokens: bool = True,
              multi_turn: bool = False, chat: bool = False) -> list[dict[str, Any]]:
    """One step's rows: ``groups`` prompts x ``group_size`` samples, rewards varying by step; ``chat``: the
    prompts as a chat template renders them."""
    rows = []
    for g in range(groups):
        question = PROMPTS[(step + g) % len(PROMPTS)]
        prompt = chatml(question) if chat else question
        for i in range(group_size):
            # group 0 is zero-variance (all reward 1); the others mix 0 and 1
            reward = 1.0 if g == 0 else float((i + step) % 2)
            response = f"answer {step}.{g}.{i}"
            row: dict[str, Any] = {
                "step": step, "uid": f"{step}-{g}-{i}", "group": g, "prompt": prompt,
                "response": response, "reward": reward, "advantage": reward - 0.5,
                "num_tokens": len(response), "finish_reason": "length" if i == group_size - 1 else "stop",
                "env_class": "gsm8k" if g < 2 else "search", "data_source": f"src{g % 2}",
                "discarded_reason": "zero-variance group filtered" if g == 0 and step % 2 == 0 else None,
                "ground_truth": ANSWERS[(step + g) % len(PROMPTS)],
            }
            if tokens:
                n = len(response)
                row["token_ids"] = [ord(c) for c in response]
                row["token_logprobs"] = [-0.1 * (k % 7) for k in range(n)]
                row["token_advantages"] = [reward - 0.5] * n
            if multi_turn:
                row["turns"] = json.dumps([
                    {"role": "user", "content": prompt, "token_start": None, "token_end": None},
                    {"role": "assistant", "content": response[:6], "token_start": 0, "token_end": 6},
                    {"role": "tool_call", "content": "search('x')", "token_start": None, "token_end": None},
                    {"role": "observation", "content": "x = 3", "token_start": None, "token_end": None},
                    {"role": "assistant", "content": response[6:], "token_start": 6, "token_end": len(response)},
                ])
            rows.append(row)
    return rows


def write_run(run_dir: Path, steps: int = 5, state: str = "succeeded", **kwargs: Any) -> RunWriter:
    writer = RunWriter(run_dir)
    writer.write_config({"run": {"run_id": run_dir.name}})
    writer.set_status("running", step=0, total_steps=steps)
    for step in range(1, steps + 1):
        write_step(writer, step, **kwargs)
    writer.set_status(state, step=steps)
    return writer


def write_step(writer: RunWriter, step: int, **kwargs: Any) -> None:
    rows = step_rows(step, **kwargs)
    writer.write_trajectories(step, rows)
    mean = sum(r["reward"] for r in rows) / len(rows)
    writer.log_metrics(step, {"reward/avg_raw_reward": mean, "policy/policy_kl": 0.01 * step})
