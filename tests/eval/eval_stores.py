"""Synthetic eval stores for the analysis tests: the eval-store layout of issue 36 written with the engine's own
writers (``skyrl_core.eval_store``: real Parquet, models.json, summary.json), no engine, no Ray."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from skyrl_core.eval_store import write_models, write_samples, write_summary
from skyrl_core.store import open_store

CHATML = "<|im_start|>user\nWhat is {q}?<|im_end|>\n<|im_start|>assistant\n"


def sample_rows(correct: list[list[int]], *, base_length: int = 20, fn: str | None = None) -> list[dict[str, Any]]:
    """Rows of one model: ``correct[p][s]`` says whether sample ``s`` of prompt ``p`` is right (reward 1 or 0)."""
    rows = []
    for p, flags in enumerate(correct):
        for s, ok in enumerate(flags):
            row = {"prompt_index": p, "sample_index": s, "prompt": CHATML.format(q=f"{p} + {p}"),
                   "response": f"The answer is {2 * p if ok else 2 * p + 1}.", "reward": float(ok),
                   "response_length": base_length + s, "ground_truth": str(2 * p),
                   "data_source": "word_problems", "reward_error": None}
            if fn:
                row[f"reward/{fn}"] = float(ok)
            rows.append(row)
    return rows


def write_eval_store(root: Path, samples: dict[str, list[dict[str, Any]]], *, eval_id: str = "demo-eval-20261204-000000-abcd",
                     summary: dict[str, Any] | None = None, config: dict[str, Any] | None = None) -> Path:
    """An eval store under ``root``: one samples file per model (models in the dict's order), a finished status,
    ``config`` as config.yaml and ``summary`` as summary.json when given."""
    path = root / eval_id
    store = open_store(path)
    store.put("status.json", json.dumps({"state": "succeeded", "step": len(samples),
                                         "total_steps": len(samples)}).encode())
    store.put("config.yaml", json.dumps(config or {}).encode())  # JSON is YAML
    write_models(store, [{"name": name, "source": f"/models/{name}", "kind": "model", "step": None,
                          "path": f"/models/{name}"} for name in samples])
    for name, rows in samples.items():
        write_samples(store, name, rows)
    if summary is not None:
        write_summary(store, summary)
    return path
