"""The engine stands on skyrl_core alone: no widget library, no notebook package (issue 11).

An engine-only install (``pip install .[engine]``) has no ipywidgets, anywidget or plotly. The check runs
the engine's modules in a fresh interpreter where those packages, and skyrl-nb's notebook-side packages,
cannot be imported at all (a meta-path finder refuses them, as a missing install would), then looks at
``sys.modules``.
"""

from __future__ import annotations

import subprocess
import sys

ENGINE_MODULES = (
    "skyrl_engine.trainer", "skyrl_engine.workers", "skyrl_engine.generator", "skyrl_engine.multiturn",
    "skyrl_engine.policy", "skyrl_engine.critic", "skyrl_engine.algorithms", "skyrl_engine.dapo",
    "skyrl_engine.async_pipeline", "skyrl_engine.placement", "skyrl_engine.vllm_engine", "skyrl_engine.__main__",
    "skyrl_engine.tasks", "skyrl_engine.sampler", "skyrl_engine.checkpoint", "skyrl_engine.skyrl_bridge",
)
ABSENT = ("ipywidgets", "anywidget", "plotly", "skyrl_nb", "skyrl_widgets")

PROGRAM = f"""
import importlib, importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {ABSENT!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (engine-only install)")
        return None

sys.meta_path.insert(0, NotInstalled())
for name in {ENGINE_MODULES!r}:
    importlib.import_module(name)
cfg = importlib.import_module("skyrl_core.config").load_config("quickstart")   # the contracts load too
leaked = sorted(m for m in sys.modules if m.split(".")[0] in {ABSENT!r})
print("leaked:", leaked)
"""


def test_engine_modules_import_without_any_widget_or_notebook_package():
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "leaked: []"
