"""Whether a run can be resumed, said once for the notebook (`Job.resume`, the dashboard, ``%skyrl resume``)
and the engine (``RLTrainer``): a resume continues from a checkpoint and never rewrites history.

Two things make a resume pointless or harmful:

- **no checkpoint** while the run has history (metric rows or trajectory parts): resuming would train from
  step 0 again and overwrite steps 1..N. :func:`no_checkpoint_problem` says so; launch a new run instead.
- **a failure resuming cannot fix**: a config error, a plug-in that does not import, bad data, an exception
  in the run's own code. The same steps run again with the same seeds, so they fail again.
  :func:`classify_failure` sorts every failure into a :class:`FailureKind`; only faults of the machinery
  (a worker or node that died, out of memory, a lost connection, a stop) are ``resumable``. The engine
  writes the kind and ``resumable`` into status.json and the ``error`` event beside the error line.

>>> classify_failure("ConfigError: trainer.lr: 3 is not allowed").resumable
False
>>> classify_failure(MemoryError()).kind
<FailureKind.OUT_OF_MEMORY: 'out_of_memory'>
"""

from __future__ import annotations

import builtins
import os
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from skyrl_core.store import is_url, open_store

LATEST_FILE = "latest_ckpt_global_step.txt"
"""The file in a checkpoint root naming the newest complete checkpoint (SkyRL's layout)."""
STEP_PREFIX = "global_step_"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_PART = re.compile(r"^step_(\d{6,})\.parquet$")
ATTEMPT_ENV = "SKYRL_NB_ATTEMPT"
"""The environment variable a resubmission sets to its attempt number (1 for ``<run>-r1``); the engine
writes it into the ``resumed`` event."""


class ResumeRefused(RuntimeError):
    """A resume that would lose history or repeat a failure; the message is one line saying why and what
    to do instead."""


class FailureKind(StrEnum):
    """Why a run failed, as far as resuming it goes."""

    CONFIG = "config"                  # the config, a plug-in, a path, a placement: fix it, launch anew
    CODE_OR_DATA = "code_or_data"      # an exception in the run's code or on its data: it would repeat
    NO_CHECKPOINT = "no_checkpoint"    # a resume refused: nothing to continue from
    WORKER_DIED = "worker_died"        # a Ray actor, worker, rank or node died
    OUT_OF_MEMORY = "out_of_memory"
    INTERRUPTED = "interrupted"        # a stop, a lost connection, a timeout, a full or failing disk


RESUMABLE = frozenset({FailureKind.WORKER_DIED, FailureKind.OUT_OF_MEMORY, FailureKind.INTERRUPTED})

# Exception class names (any class in the exception's MRO, or the name an error line starts with) by kind;
# the first name found in the MRO decides. Names, not classes: the notebook never imports torch or Ray,
# and a status.json written by an older engine carries only the text.
_KIND_BY_NAME: dict[str, FailureKind] = {
    **dict.fromkeys(("ConfigError", "PluginError", "PlacementError", "ValidationError", "ImportError",
                     "ModuleNotFoundError", "FileNotFoundError", "NotADirectoryError", "IsADirectoryError",
                     "PermissionError", "ExportError"), FailureKind.CONFIG),
    **dict.fromkeys(("ResumeRefused",), FailureKind.NO_CHECKPOINT),
    **dict.fromkeys(("MemoryError", "OutOfMemoryError", "OutOfMemoryException"), FailureKind.OUT_OF_MEMORY),
    **dict.fromkeys(("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError",
                     "NodeDiedError", "ObjectLostError", "OwnerDiedError", "RaySystemError", "LocalRayletDiedError",
                     "PlasmaStoreFull", "ObjectStoreFullError"), FailureKind.WORKER_DIED),
    **dict.fromkeys(("StopRequested", "KeyboardInterrupt", "ConnectionError", "TimeoutError", "GetTimeoutError",
                     "BrokenPipeError", "OSError"), FailureKind.INTERRUPTED),
}
# The engine's own line for a rank whose process died (skyrl_engine.workers: "PolicyWorker × 2: rank 1 died ..."),
# and Ray's for a driver killed by a signal ("Job entrypoint command failed with exit code -9")
_DIED = re.compile(r"\brank \d+ died\b|\bdied unexpectedly\b|\bout of memory\b|\bOOM\b|exit code -\d+|"
                   r"\bSIG(?:KILL|TERM|SEGV|BUS)\b", re.IGNORECASE)
_OOM = re.compile(r"\bout of memory\b|\bOOM\b", re.IGNORECASE)
_NAME = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*)\s*:")

_WHY = {
    FailureKind.CONFIG: "a config, plug-in or path error: a resume runs the same config again",
    FailureKind.CODE_OR_DATA: "an error in the run's code or data: a resume repeats the same steps with the "
                              "same seeds and meets it again",
    FailureKind.NO_CHECKPOINT: "there was no checkpoint to resume from",
    FailureKind.WORKER_DIED: "a worker, rank or node died: a resume starts new ones",
    FailureKind.OUT_OF_MEMORY: "out of memory: a resume may fit once memory is freed (or with smaller batches)",
    FailureKind.INTERRUPTED: "the job was interrupted (a stop, a lost connection, a timeout or a disk error)",
}


@dataclass(frozen=True)
class Failure:
    """What a failure means for a resume: its ``kind``, whether resuming can help, and why, in words."""

    kind: FailureKind
    resumable: bool
    why: str

    def fields(self) -> dict[str, Any]:
        """What status.json and the ``error`` event carry beside the error line."""
        return {"error_kind": self.kind.value, "resumable": self.resumable}


def classify_failure(error: BaseException | str) -> Failure:
    """The :class:`Failure` an exception (or its ``"TypeName: message"`` line) is.

    An exception is sorted by the first class of its MRO that has a kind (a ``PlacementError`` is a config
    error though it is a ``RuntimeError``); an error line by the type name it starts with. A line saying a
    rank died, or out of memory, is that fault whatever its type; anything else is an error in the run's
    code or data (not resumable).
    """
    if isinstance(error, BaseException):
        names = [cls.__name__ for cls in type(error).__mro__]
        text = f"{type(error).__name__}: {error}"
    else:
        text = str(error or "")
        m = _NAME.match(text)
        builtin = getattr(builtins, m.group(1), None) if m else None
        if isinstance(builtin, type) and issubclass(builtin, BaseException):  # ConnectionResetError: its MRO
            names = [cls.__name__ for cls in builtin.__mro__]
        else:
            names = [m.group(1)] if m else []
    kind = next((_KIND_BY_NAME[n] for n in names if n in _KIND_BY_NAME), FailureKind.CODE_OR_DATA)
    if kind == FailureKind.CODE_OR_DATA and _DIED.search(text):  # a RuntimeError naming a dead rank, an OOM
        kind = FailureKind.OUT_OF_MEMORY if _OOM.search(text) else FailureKind.WORKER_DIED
    return Failure(kind, kind in RESUMABLE, _WHY[kind])


def failure_of(status: dict[str, Any]) -> Failure | None:
    """The failure a run's status.json records (its ``error_kind``, else its error line classified), or None
    when it records no error."""
    error = status.get("error")
    if not error:
        return None
    kind = status.get("error_kind")
    try:
        known = FailureKind(kind) if isinstance(kind, str) else None
    except ValueError:
        known = None
    if known is None:
        return classify_failure(str(error).strip().splitlines()[-1] if str(error).strip() else "")
    return Failure(known, known in RESUMABLE, _WHY[known])


# ----------------------------------------------------------------------------------- checkpoints


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
    from skyrl_core.runs import RunReader

    reader = RunReader(run_dir)
    steps = [row["step"] for row in reader.metrics() if isinstance(row.get("step"), int)]
    parts = [int(m.group(1)) for name in reader.store.list("trajectories") if (m := _PART.match(name))]
    return max([0, *steps, *parts])


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
