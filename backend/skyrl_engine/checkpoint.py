"""Checkpoints in SkyRL's layout, written atomically.

::

    <ckpt_path>/                       trainer.ckpt_path, default <run_dir>/checkpoints
      latest_ckpt_global_step.txt      the newest COMPLETE checkpoint (written last)
      global_step_N/
        policy/                        model.safetensors + config.json (an HF model dir, consolidated)
          optim_world_size_W_rank_R.pt         each rank's AdamW state (its fsdp2 shards)
          extra_state_world_size_W_rank_R.pt   each rank's LR schedule and RNG states
          fsdp_config.json                     the strategy and world size that wrote them
        critic/                        gae only: the same, model.safetensors = body + value_head
        trainer_state.json             global_step, data position, the step's metrics, config
        data.json                      the train loader position (epoch, batch_in_epoch)

A checkpoint is assembled in ``.tmp_global_step_N`` and renamed into place before the latest file
is updated, so a kill at any moment leaves either the previous or the new checkpoint, never half.
The roles' parts are written and read by :class:`skyrl_engine.trainable.TrainableWorker`; a checkpoint
written by W ranks resumes on any number of ranks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any

LATEST_FILE = "latest_ckpt_global_step.txt"
STEP_PREFIX = "global_step_"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")


def checkpoint_root(ckpt_path: str | None, run_dir: str) -> str:
    """``trainer.ckpt_path`` or ``<run_dir>/checkpoints``."""
    return os.path.expanduser(ckpt_path) if ckpt_path else os.path.join(run_dir, "checkpoints")


def step_dir(root: str, step: int) -> str:
    """``<root>/global_step_<step>``."""
    return os.path.join(root, f"{STEP_PREFIX}{step}")


def latest_step(root: str) -> int | None:
    """The step in ``latest_ckpt_global_step.txt`` when that checkpoint exists, else None."""
    path = os.path.join(root, LATEST_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read().strip()
    if not text.isdigit():
        return None
    step = int(text)
    if not os.path.isdir(step_dir(root, step)):
        raise FileNotFoundError(f"{path} names step {step}, but {step_dir(root, step)} is missing")
    return step


def step_of(path: str) -> int:
    """N from a ``.../global_step_N`` directory; ValueError otherwise."""
    m = _STEP_DIR.match(os.path.basename(os.path.normpath(path)))
    if not m:
        raise ValueError(f"trainer.resume_path: {path!r} is not a global_step_N checkpoint directory")
    return int(m.group(1))


def _write_text_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def begin(root: str, step: int) -> str:
    """A fresh temporary directory for checkpoint ``step`` (with ``policy/`` inside)."""
    tmp = os.path.join(root, f".tmp_{STEP_PREFIX}{step}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "policy"))
    return tmp


def commit(root: str, tmp: str, step: int, trainer_state: dict[str, Any], max_to_keep: int) -> str:
    """Write the trainer state, move ``tmp`` into place, update the latest file, prune old ones."""
    with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
        json.dump(trainer_state, f, default=str)
    with open(os.path.join(tmp, "data.json"), "w") as f:
        json.dump(trainer_state.get("data_position", {}), f)
    final = step_dir(root, step)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.rename(tmp, final)
    _write_text_atomic(os.path.join(root, LATEST_FILE), str(step))
    prune(root, max_to_keep)
    return final


def prune(root: str, max_to_keep: int) -> list[int]:
    """Delete the oldest ``global_step_N`` dirs beyond ``max_to_keep`` (-1 keeps all); return deleted steps."""
    if max_to_keep is None or max_to_keep < 0:
        return []
    steps = sorted(int(m.group(1)) for name in os.listdir(root) if (m := _STEP_DIR.match(name)))
    doomed = steps[: max(0, len(steps) - max(max_to_keep, 1))]
    for step in doomed:
        shutil.rmtree(step_dir(root, step), ignore_errors=True)
    return doomed


def read_trainer_state(ckpt_dir: str) -> dict[str, Any]:
    """The driver's state saved with a checkpoint."""
    with open(os.path.join(ckpt_dir, "trainer_state.json")) as f:
        return json.load(f)
