"""Whether a run can be resumed, said once for the notebook (`Job.resume`, the dashboard, ``%skyrl resume``)
and the engine (``RLTrainer``): a resume continues from a checkpoint and never rewrites history.

Two things make a resume pointless or harmful:

- **no checkpoint** while the run has history (metric rows or trajectory parts): resuming would train from
  step 0 again and overwrite steps 1..N. :func:`no_checkpoint_problem` says so; launch a new run instead.
- **a failure resuming cannot fix**: a config error, a plug-in that does not import, bad data, an exception
  in the run's own code. The same steps run again with the same seeds, so they fail again.
  :func:`skyrl_core.failures.classify_failure` sorts every failure; only faults of the machinery (a worker
  or node that died, out of memory, a lost connection, a stop) are ``resumable``.

``trainer.max_restarts`` applies the same rules without a person: :func:`decide_restart` is what the engine's
restart supervisor (``skyrl_engine.supervisor``) asks after its trainer process ended.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from skyrl_core.failures import Failure
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
SUPERVISOR_ENV = "SKYRL_NB_SUPERVISOR_PID"
"""Set by the restart supervisor (``skyrl_engine.supervisor``) for the trainer process it runs: the supervisor's
pid. That trainer records this pid in status.json (the job's process, alive across restarts, so a restart is not
taken for a lost run) and leaves the final ``failed`` status and the failure alert to the supervisor."""
NODE_WAIT_ENV = "SKYRL_NB_WAIT_FOR_NODES_S"
"""Set by the restart supervisor for a restarted trainer: how many seconds its placement waits for the cluster to
have the nodes it needs again (a lost node's replacement joining) before it is refused."""
#: Exit codes and signals of a trainer that was stopped (SIGTERM: 143, SIGINT: 130), never restarted.
STOP_EXITS = frozenset({143, 130, -15, -2})
EXIT_BAD_CONFIG = 2


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


def supervisor_pid() -> int | None:
    """The restart supervisor's pid when this process is the trainer it runs (``SUPERVISOR_ENV``), else None."""
    text = os.environ.get(SUPERVISOR_ENV, "")
    return int(text) if text.isdigit() and int(text) > 0 else None


@dataclass(frozen=True)
class RestartDecision:
    """Whether the supervisor starts the trainer again: ``restart``, ``why`` in one line, and when it restarts,
    ``from_step`` (the checkpoint it resumes from; 0: it starts over, the run having no history) and
    ``resume_latest`` (``trainer.resume_mode=latest``; False when there is no checkpoint to resume from)."""

    restart: bool
    why: str
    from_step: int | None = None
    resume_latest: bool = False


def decide_restart(exit_code: int, failure: Failure | None, *, stopped: bool, restarts_done: int, max_restarts: int,
                   run_dir: str | os.PathLike[str], ckpt_root: str, ckpt_interval: Any) -> RestartDecision:
    """Whether a trainer process that ended with ``exit_code`` (negative: killed by that signal) is restarted.

    Never after a success, a stop (``stopped``: the job was asked to stop; or the trainer's exit says so), a
    refused config (exit 2), a failure that is not ``resumable`` (``failure``: what the trainer recorded, or
    what its exit means; None: unknown) or once ``max_restarts`` restarts are used. Otherwise from the latest
    checkpoint in ``ckpt_root``; with none, from step 0 only when the run has no history (else a restart would
    overwrite it: :func:`no_checkpoint_problem`).

    >>> decide_restart(0, None, stopped=False, restarts_done=0, max_restarts=2, run_dir="/x", ckpt_root="/x/c",
    ...                ckpt_interval=5).why
    'the trainer succeeded'
    """
    if exit_code == 0:
        return RestartDecision(False, "the trainer succeeded")
    if stopped or exit_code in STOP_EXITS:
        return RestartDecision(False, "the job was stopped; a stop is never restarted")
    if exit_code == EXIT_BAD_CONFIG:
        return RestartDecision(False, "the config was refused where the job runs (exit 2); a restart would be too")
    if failure is None:
        return RestartDecision(False, f"the trainer exited with code {exit_code} and it is not known why")
    if not failure.resumable:
        return RestartDecision(False, f"not restarted: {failure.why}")
    if restarts_done >= max_restarts:
        return RestartDecision(False, f"not restarted: trainer.max_restarts={max_restarts} restart(s) used")
    run_id = str(run_dir).rstrip("/").replace("\\", "/").rpartition("/")[2]
    try:
        step = latest_checkpoint(ckpt_root)
    except FileNotFoundError as err:
        return RestartDecision(False, f"not restarted: run {run_id}'s checkpoint cannot be read ({err})")
    if step is not None:
        return RestartDecision(True, f"restart {restarts_done + 1} of {max_restarts} from the checkpoint of step "
                                     f"{step}", from_step=step, resume_latest=True)
    done = history_step(run_dir)
    if done:
        return RestartDecision(False, "not restarted: " + no_checkpoint_problem(
            run_id, ckpt_interval, done, instead="launch it under a new run id"))
    return RestartDecision(True, f"restart {restarts_done + 1} of {max_restarts} from step 0 (no checkpoint yet, "
                                 "nothing written to lose)", from_step=0)
