"""Whether a run can be resumed, said once for the notebook (`Job.resume`, the dashboard, ``%skyrl resume``)
and the engine (``RLTrainer``): a resume continues from a checkpoint and never rewrites history.

Two things make a resume pointless or harmful:

- **no checkpoint** while the run has history (metric rows or trajectory parts): resuming would train from
  step 0 again and overwrite steps 1..N. :func:`no_checkpoint_problem` says so; launch a new run instead.
- **a failure resuming cannot fix**: a config error, a plug-in that does not import, bad data, an exception
  in the run's own code. The same steps run again with the same seeds, so they fail again.
  :func:`skyrl_core.failures.classify_failure` sorts every failure; only faults of the machinery (a worker
  or node that died, out of memory, a lost connection, a stop) are ``resumable``.
"""

from __future__ import annotations

import os
import re
from typing import Any

from skyrl_core.runs import RunReader
from skyrl_core.store import is_url, open_store

LATEST_FILE = "latest_ckpt_global_step.txt"
"""The file in a checkpoint root naming the newest complete checkpoint (SkyRL's layout)."""
STEP_PREFIX = "global_step_"
STEP_DIR_RE = re.compile(r"^global_step_(\d+)$")
"""A checkpoint folder's name; its group is the step."""
ATTEMPT_ENV = "SKYRL_NB_ATTEMPT"
"""The environment variable a resubmission sets to its attempt number (1 for ``<run>-r1``); the engine
writes it into the ``resumed`` event."""


class ResumeRefused(RuntimeError):
    """A resume that would lose history or repeat a failure; the message is one line saying why and what
    to do instead."""


def checkpoint_root(ckpt_path: str | None, run_dir: str | os.PathLike[str]) -> str:
    """``trainer.ckpt_path`` or ``<run_dir>/checkpoints`` (a local path or an object-store URL)."""
    if ckpt_path:
        return ckpt_path.rstrip("/") if is_url(ckpt_path) else os.path.expanduser(ckpt_path)
    run_dir = str(run_dir)
    return f"{run_dir.rstrip('/')}/checkpoints" if is_url(run_dir) else os.path.join(run_dir, "checkpoints")


def latest_checkpoint(root: str) -> int | None:
    """The step in ``<root>/latest_ckpt_global_step.txt`` when that checkpoint exists, else None.

    FileNotFoundError (one line) when the latest file names a checkpoint folder that is missing.
    """
    store = open_store(root)
    try:
        text = store.read(LATEST_FILE).decode(errors="replace").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not text.isdigit():
        return None
    step = int(text)
    if f"{STEP_PREFIX}{step}" not in store.folders():
        raise FileNotFoundError(f"{store.path(LATEST_FILE)} names step {step}, but its folder "
                                f"{STEP_PREFIX}{step} is missing")
    return step


def history_step(run_dir: str | os.PathLike[str]) -> int:
    """The last step a run has written (a metrics line or a trajectory part); 0 when it has none."""
    reader = RunReader(run_dir)
    steps = [row["step"] for row in reader.metrics() if isinstance(row.get("step"), int)]
    return max([0, *steps, *reader.trajectory_steps()])


def no_checkpoint_problem(run_id: str, ckpt_interval: Any, stopped_at: int, *,
                          instead: str = "job.restart_as_new()") -> str:
    """The one line a resume of a run with history but no checkpoint is refused with."""
    return (f"run {run_id} has no checkpoint (trainer.ckpt_interval={ckpt_interval}, stopped at step {stopped_at}): "
            f"resuming would start over and overwrite steps 1-{stopped_at}; launch a new run with the same config "
            f"instead: {instead}")


def resume_problem(run_dir: str | os.PathLike[str], ckpt_root: str, ckpt_interval: Any, *,
                   instead: str = "job.restart_as_new()") -> str | None:
    """Why resuming the run in ``run_dir`` from its latest checkpoint in ``ckpt_root`` would lose history
    (one line), or None when it can resume: it has a checkpoint, or nothing written yet to lose."""
    run_id = str(run_dir).rstrip("/").replace("\\", "/").rpartition("/")[2]
    try:
        if latest_checkpoint(ckpt_root) is not None:
            return None
    except FileNotFoundError as err:
        return f"run {run_id}: its checkpoint cannot be read ({err}); launch a new run instead: {instead}"
    done = history_step(run_dir)
    return no_checkpoint_problem(run_id, ckpt_interval, done, instead=instead) if done else None


def attempt_from_env(default: int) -> int:
    """The attempt number a resubmission set (``SKYRL_NB_ATTEMPT``), else ``default``."""
    text = os.environ.get(ATTEMPT_ENV, "")
    return int(text) if text.isdigit() else default
