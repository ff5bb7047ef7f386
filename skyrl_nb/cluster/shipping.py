"""What reaches a cluster with a job, so it needs no disk shared with the notebook: the engine's code,
and a check that a local run root is one the cluster can see.

Engine code, one of (``Cluster.launch(code=..., image=...)``, ``Cluster.plan`` says which):

- ``ship``: the installed ``skyrl_core`` and ``skyrl_engine`` folders go with the job as Ray
  ``py_modules`` (zipped and uploaded by Ray's job client, cached by content hash on the cluster); the
  cluster's Python needs only the engine's dependencies (torch, transformers, skyrl-gym, ray).
- ``installed``: the cluster's Python imports its own ``skyrl_engine`` (the local cluster: this
  machine's interpreter; a cluster image with skyrl-nb installed).
- ``image``: a container image the user names runs the job (Ray's ``image_uri``); it must have
  skyrl-nb installed.

The config itself travels in the submission (``skyrl_core.submission``).
"""

from __future__ import annotations

import html
import importlib.util
import logging
import os
import shlex
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_nb.cluster.base import Cluster

@contextmanager
def ray_info_quiet() -> Iterator[None]:
    """Ray's client loggers say nothing below WARNING while this runs.

    Ray's job client logs each package it zips and uploads (``py_modules``: the engine, plug-ins) at
    INFO, to stderr, which a notebook shows as a pink error box. Its warnings and errors still show.
    """
    raised = []
    for name in [*logging.root.manager.loggerDict, "ray"]:
        logger = logging.getLogger(name) if name == "ray" or name.startswith("ray.") else None
        if logger is not None and logger.getEffectiveLevel() < logging.WARNING:
            raised.append((logger, logger.level))
            logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in raised:
            logger.setLevel(level)


CODE_MODES = ("ship", "installed", "image")
#: The packages a job imports: the engine stands on skyrl_core alone (docs/architecture.md).
ENGINE_PACKAGES = ("skyrl_core", "skyrl_engine")
#: Left out of what is shipped.
EXCLUDES = ["__pycache__", "*.pyc", "*.pyo"]
#: Metadata on a probe job (so ``Cluster.jobs()``, which lists runs, never shows one).
META_PROBE = "skyrl_nb_probe"


def package_folder(name: str) -> str:
    """The folder of an installed top-level package, found without importing it."""
    spec = importlib.util.find_spec(name)
    folders = list(spec.submodule_search_locations or []) if spec else []
    if not folders:
        raise RuntimeError(f"engine code: the package {name} is not installed here, so it cannot be shipped; "
                           "launch with code='installed' or image=... instead")
    return str(folders[0])


def _folder_bytes(folder: str) -> int:
    total = 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files if not f.endswith((".pyc", ".pyo")))
    return total


@dataclass(frozen=True)
class EngineCode:
    """How the engine's code reaches a job: ``mode`` is ``ship``, ``installed`` or ``image``."""

    mode: str
    modules: tuple[str, ...] = ()
    image: str | None = None

    @classmethod
    def resolve(cls, code: str | None, image: str | None, default: str) -> EngineCode:
        """The choice for one launch: ``image`` wins, then ``code``, then the cluster's ``default``.

        >>> EngineCode.resolve(None, "me/skyrl:1", "ship").mode
        'image'
        """
        if image is not None:
            if not isinstance(image, str) or not image.strip():
                raise ValueError(f"image: {image!r} is not a container image name (e.g. 'my-registry/skyrl-nb:0.1')")
            if code not in (None, "image"):
                raise ValueError(f"code: {code!r} together with image={image!r}; an image brings its own code "
                                 "(leave code out)")
            return cls("image", image=image.strip())
        mode = code or default
        if mode not in ("ship", "installed"):
            raise ValueError(f"code: {mode!r} is not allowed; allowed: ship (send the installed packages as Ray "
                             "py_modules), installed (the cluster has skyrl-nb), or give image=...")
        if mode == "ship":
            return cls("ship", modules=tuple(package_folder(p) for p in ENGINE_PACKAGES))
        return cls("installed")

    def apply(self, env: dict[str, Any]) -> dict[str, Any]:
        """The runtime env ``env`` with this code added (the caller's own py_modules kept first)."""
        if self.mode == "ship":
            env["py_modules"] = list(dict.fromkeys([*(env.get("py_modules") or []), *self.modules]))
            env["excludes"] = list(dict.fromkeys([*(env.get("excludes") or []), *EXCLUDES]))
        elif self.mode == "image":
            env["image_uri"] = self.image
        return env

    def describe(self) -> str:
        """One line for plans and reprs."""
        if self.mode == "ship":
            size = sum(_folder_bytes(m) for m in self.modules) / 2**20
            where = ", ".join(f"{Path(m).name} from {Path(m).parent}" for m in self.modules)
            return f"shipped with the job as Ray py_modules ({where}; {size:.1f} MiB)"
        if self.mode == "image":
            return f"the container image {self.image} (Ray image_uri; it must have skyrl-nb installed)"
        return "the cluster's own installed skyrl_engine"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(self.describe())}</code>"


PROBE_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class ProbeResult:
    """How a probe job ended: Ray's final ``state`` and its log ``lines``."""

    state: str
    lines: tuple[str, ...]

    @property
    def last(self) -> str:
        return self.lines[-1] if self.lines else ""

    def report(self, marker: str) -> dict[str, Any] | None:
        """The last JSON object the probe printed that has ``marker`` (None: it printed none)."""
        import json

        for line in reversed(self.lines):
            try:
                found = json.loads(line)
            except ValueError:
                continue
            if isinstance(found, dict) and marker in found:
                return found
        return None


def probe_job(cluster: Cluster, code: EngineCode | None, command: str, timeout: float = PROBE_TIMEOUT_S,
              runtime_env: dict[str, Any] | None = None) -> ProbeResult:
    """Run ``command`` (a probe: ``python`` is the cluster's) as a tiny job, the engine's code delivered by
    ``code`` (None: none) into ``runtime_env``, and wait for it. Raises `TimeoutError` naming the job when it
    does not end in ``timeout`` s. The one way skyrl-nb asks a cluster something before a training job."""
    submission_id = f"skyrl-nb-probe-{uuid.uuid4().hex[:12]}"
    env = dict(runtime_env or {})
    cluster._submit_with_retry(entrypoint=f"{shlex.quote(cluster.python)} {command}", submission_id=submission_id,
                               runtime_env=(code.apply(env) if code is not None else env) or None,
                               metadata={META_PROBE: "1"})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = cluster.client.get_job_status(submission_id)
        state = str(getattr(status, "value", status)).upper()
        if state in ("SUCCEEDED", "FAILED", "STOPPED"):
            lines = (cluster.client.get_job_logs(submission_id) or "").splitlines()
            return ProbeResult(state, tuple(line for line in lines if line.strip()))
        time.sleep(0.3)
    raise TimeoutError(f"the probe job {submission_id} did not end within {timeout:.0f} s on {cluster.address}")


def run_probe(cluster: Cluster, code: EngineCode | None, command: str, marker: str,
              timeout: float = PROBE_TIMEOUT_S) -> tuple[dict[str, Any] | None, str, str]:
    """`probe_job`, read as ``(report, state, last_line)``: the last JSON object it printed that has ``marker``."""
    result = probe_job(cluster, code, command, timeout)
    return result.report(marker), result.state, result.last


def probe_path(cluster: Cluster, folder: str, timeout: float = 120.0) -> bool:
    """Whether a job on ``cluster`` sees the notebook's ``folder`` (its nearest existing parent): a marker
    file is written there and a tiny probe job looks for it. The marker is removed either way.
    """
    existing = Path(os.path.expanduser(folder))
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    marker = existing / f".skyrl-nb-probe-{uuid.uuid4().hex}"
    marker.write_text("")
    check = f"import os, sys; sys.exit(0 if os.path.exists({str(marker)!r}) else 3)"
    try:
        return probe_job(cluster, None, f"-c {shlex.quote(check)}", timeout).state == "SUCCEEDED"
    finally:
        marker.unlink(missing_ok=True)
