"""Which optional packages a config needs where its job runs, and the one line for each one missing there.

A config may need packages the engine does not always bring: vLLM (``generator.inference_engine.backend:
vllm``), SkyRL's trainer (``run.engine: skyrl``) and the trackers' packages (``trainer.logger``: wandb,
mlflow, tensorboard). :data:`ANSWER` is the code that answers every question at once where a job runs (it
calls the engine's own ``find_vllm_python`` and ``skyrl_bridge.probe``, so it runs where ``skyrl_engine``
imports): ``skyrl_nb.cluster.packages`` sends it as one probe job per cluster (or, for a
local cluster on this interpreter, as a process of it), ``python -m skyrl_engine validate`` runs it in its own process. Both
turn the answer into lines with :func:`package_lines`, so a refusal reads the same everywhere.

>>> from skyrl_core.config import load_config
>>> package_lines(load_config("quickstart", ["trainer.logger=[console, wandb]"]), {"modules": {"wandb": False}})
["trainer.logger: 'wandb' needs the wandb package on the cluster (pip install wandb), or leave wandb out of trainer.logger"]
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig

__all__ = ["ANSWER", "LOGGER_PACKAGES", "MARKER", "answer_here", "clean_line", "package_lines", "packages_needed"]

#: The key of the answer's JSON line (how a probe job's log says which line is the answer).
MARKER = "skyrl_nb_packages_probe"
SKYRL_INSTALL = "pip install 'skyrl[fsdp]=={version}' in the cluster's Python 3.12 (docs/skyrl.md)"
#: ``trainer.logger`` name -> (module the engine imports, package to install); the engine's ``tracking._need``.
LOGGER_PACKAGES: dict[str, tuple[str, str]] = {
    "mlflow": ("mlflow", "mlflow-skinny"), "tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb"),
}
#: The answer, computed where the job runs: a probe job runs this text, and so do a local cluster's check process
#: and ``validate`` (it leaves ``report``; it imports ``skyrl_engine``, which this package never does itself).
ANSWER = f"""
import importlib.util, sys
report = {{"{MARKER}": 1, "python": sys.version.split()[0]}}
try:
    from skyrl_engine.vllm_engine import find_vllm_python
    find_vllm_python()
    report["vllm"] = None
except Exception as err:
    report["vllm"] = "bad_variable" if str(err).startswith("SKYRL_VLLM_PYTHON:") else (
        "no_engine" if isinstance(err, ImportError) else "missing")
try:
    from skyrl_engine.skyrl_bridge import probe
    report["skyrl"] = probe()
except Exception as err:
    report["skyrl"] = {{"python": report["python"], "skyrl": None, "error": f"{{type(err).__name__}}: {{err}}"}}
report["modules"] = {{name: importlib.util.find_spec(name) is not None for name in {sorted(m for m, _ in LOGGER_PACKAGES.values())!r}}}
"""


def answer_here() -> dict[str, Any]:
    """:data:`ANSWER` run in this process: the report a job running this interpreter would give."""
    scope: dict[str, Any] = {}
    exec(ANSWER, scope)  # noqa: S102 - our own fixed text, the same a probe job runs
    return scope["report"]


def packages_needed(cfg: JobConfig) -> list[str]:
    """What ``cfg`` needs beyond the engine: ``vllm``, ``skyrl`` and ``logger:<name>`` for each tracker with a
    package of its own, in that order ([] for the torch backend with the console tracker)."""
    from skyrl_core.choices import Backend, Engine

    needs = []
    if cfg.generator.inference_engine.backend == Backend.VLLM:
        needs.append("vllm")
    if cfg.run.engine == Engine.SKYRL:
        needs.append("skyrl")
    loggers = cfg.trainer.logger if isinstance(cfg.trainer.logger, list) else [cfg.trainer.logger]
    needs += [f"logger:{name}" for name in dict.fromkeys(map(str, loggers)) if name in LOGGER_PACKAGES]
    return needs


def vllm_reason(report: dict[str, Any]) -> str | None:
    """Why a job on the cluster finds no vLLM, in words without internal paths; None when it finds one."""
    if "error" in report:
        return f"whether vLLM is on the cluster could not be checked: {report['error']}"
    why = report.get("vllm")
    if why is None:
        return None
    said = {"bad_variable": "SKYRL_VLLM_PYTHON there names a Python that does not exist",
            "no_engine": "skyrl-nb's engine does not import there"}.get(
        why, "not in the jobs' Python, no SKYRL_VLLM_PYTHON and no env from scripts/make_vllm_env.sh")
    return f"vLLM is not available on the cluster ({said})"


def skyrl_problem(report: dict[str, Any] | None, job_state: str = "SUCCEEDED", last_line: str = "") -> str | None:
    """The one line that keeps a SkyRL job off the cluster, or None when ``report`` (``skyrl_bridge.probe()``'s
    answer) says SkyRL's trainer imports there in a release the translation takes (``skyrl_translate.SUPPORTED``).

    >>> skyrl_problem({"python": "3.12.3", "skyrl": "0.4.0", "error": None}, "SUCCEEDED") is None
    True
    >>> skyrl_problem({"python": "3.12.3", "skyrl": "0.2.0", "error": None})[:69]
    "run.engine: 'skyrl' is translated for SkyRL 0.3.x, 0.4.x; the cluster"
    """
    from skyrl_core.skyrl_translate import SKYRL_VERSION, release_problem

    install = SKYRL_INSTALL.format(version=SKYRL_VERSION)
    if report is None:
        said = f" (its last line: {last_line[:200]})" if last_line else ""
        return (f"run.engine: 'skyrl' could not be checked: the probe ended {job_state.lower()} without an "
                f"answer{said}; the cluster needs skyrl-nb's engine and SkyRL: {install}")
    if report.get("error"):
        return (f"run.engine: 'skyrl' needs SkyRL's trainer on the cluster, and there it does not import "
                f"(Python {report.get('python')}: {report['error']}); {install}")
    return release_problem(str(report.get("skyrl")))


def skyrl_line(report: dict[str, Any], cfg: JobConfig | None = None) -> str | None:
    """The one line that keeps a ``run.engine: skyrl`` job off the cluster whose answer is ``report``, or None: no
    usable SkyRL there, or (given ``cfg``) a setting the release found there lacks (``skyrl_translate.LACKING``)."""
    if "error" in report:
        return f"run.engine: 'skyrl' could not be checked: {report['error']}"
    problem = skyrl_problem(report.get("skyrl"))
    if problem or cfg is None:
        return problem
    from skyrl_core.skyrl_translate import translate

    version = str(report["skyrl"]["skyrl"])
    for_release = [p for p in translate(cfg, version).problems if p not in translate(cfg).problems]
    return for_release[0] if for_release else None


def logger_line(name: str, report: dict[str, Any]) -> str | None:
    """The engine's own line (``skyrl_engine.tracking``) for a tracker whose package the cluster lacks, or None."""
    module, package = LOGGER_PACKAGES[name]
    if "error" in report:
        return f"trainer.logger: whether {package} is on the cluster could not be checked: {report['error']}"
    if (report.get("modules") or {}).get(module, False):
        return None
    return (f"trainer.logger: {name!r} needs the {package} package on the cluster (pip install {package}), "
            f"or leave {name} out of trainer.logger")


def package_lines(cfg: JobConfig, report: dict[str, Any], has_gpu: bool | None = None) -> list[str]:
    """Every package ``cfg`` needs (:func:`packages_needed`) that the answer ``report`` says is missing, one line
    each, on one line and without internal paths (:func:`clean_line`). ``has_gpu`` False adds to vLLM's line
    that the cluster has no GPU either."""
    lines: list[str | None] = []
    for need in packages_needed(cfg):
        if need == "vllm":
            reason = vllm_reason(report)
            gpu = ("; the cluster has no GPU either (there its engines would run on CPU, with vLLM's CPU build)"
                   if has_gpu is False else "")
            lines.append(f"generator.inference_engine.backend: {reason}{gpu}; pick torch, or install vLLM there"
                         if reason else None)
        elif need == "skyrl":
            lines.append(skyrl_line(report, cfg))
        else:
            lines.append(logger_line(need.partition(":")[2], report))
    return list(dict.fromkeys(clean_line(line) for line in lines if line))


_INTERNAL_PATH = re.compile(r"(?:/[^\s'\"():;,]+)*/(?:site-packages|dist-packages|\.venv[^/\s]*|venv|\.cache|lib/python[\d.]+)"
                            r"(?:/[^\s'\"():;,]+)*")


def clean_line(text: str) -> str:
    r"""``text`` as one line for people: whitespace runs (newlines too) become one space, and paths inside an
    environment or a cache (``.../site-packages/...``, ``.../.venv/...``, ``~/.cache/...``) become ``…``.

    >>> clean_line("No module named 'x'\n  at /opt/env/.venv-vllm/lib/python3.12/site-packages/x.py")
    "No module named 'x' at …"
    """
    return _INTERNAL_PATH.sub("…", " ".join(str(text).split()))
