"""Why a run failed, sorted once: whether resuming it can help.

A config error, a plug-in that does not import, bad data or an exception in the run's own code fails again
when the same steps run again with the same seeds; a worker or node that died, out of memory, a lost
connection or a stop does not. :func:`classify_failure` sorts every failure into a :class:`FailureKind`; the
engine writes the kind and ``resumable`` into status.json and the ``error`` event beside the error line
(``RunWriter.record_failure``), and the notebook reads them back (:func:`failure_of`).

>>> classify_failure("ConfigError: trainer.lr: 3 is not allowed").resumable
False
>>> classify_failure(MemoryError()).kind
<FailureKind.OUT_OF_MEMORY: 'out_of_memory'>
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


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
                     "PlasmaStoreFull", "ObjectStoreFullError", "TrainerDied"), FailureKind.WORKER_DIED),
    **dict.fromkeys(("StopRequested", "KeyboardInterrupt", "ConnectionError", "TimeoutError", "GetTimeoutError",
                     "BrokenPipeError", "OSError"), FailureKind.INTERRUPTED),
}
# TrainerDied: the restart supervisor's line for a trainer process killed by a signal before it could say why
# (skyrl_engine.supervisor): the kernel's OOM killer, a kill -9, a lost node under the driver.
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
