"""Whether a live widget front end is attached to this kernel: live widget or static figure?

The dashboard and the trajectory inspector both ask :func:`widget_frontend` when they are not told.
``SKYRL_NB_STATIC=1`` forces the static figure, ``SKYRL_NB_STATIC=0`` the widget. Otherwise the widget
is used only when a kernel runs and either a widget front end has opened ipywidgets' control comm
(``jupyter.widget.control``) or the kernel was launched by a Jupyter server (the ``JPY_PARENT_PID``
process is ``jupyter-lab`` / ``jupyter-server`` / ``jupyter-notebook``, as in JupyterLab and SageMaker
Studio) with no papermill / nbconvert / nbclient among its parents. Everything else (papermill,
nbconvert, nbclient, plain IPython, scripts, VS Code unless forced) gets the static figure, so an
executed notebook stays small.

IPython is imported only inside :func:`widget_frontend`; the launcher's command line comes from
:mod:`skyrl_core.procs`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from skyrl_core import procs

_HEADLESS_PARENTS = ("papermill", "nbconvert", "nbclient")
"""Programs that execute notebooks without a front end; any of them among the launchers means static."""
_JUPYTER_SERVERS = ("jupyter-lab", "jupyter-server", "jupyter-notebook", "jupyterlab", "jupyter_server")
"""Programs (first word of the command) that serve notebooks to a browser."""
_LAUNCHERS_LOOKED_AT = 4  # the launcher and a few of its parents (papermill run from a notebook cell)


def _program(args: list[str]) -> list[str]:
    """What a process runs, as words (the program, then its first argument).

    Only the program and its first argument count: a test file named ``test_papermill.py`` on a
    pytest command line does not make pytest papermill.

    >>> _program(["/usr/bin/python3", "-m", "papermill", "in.ipynb"])
    ['papermill', 'in.ipynb']
    """
    words = [Path(a).name.removesuffix(".py") for a in args[:4]]
    if words and words[0].startswith("python"):
        words = words[2:] if len(words) > 2 and words[1] == "-m" else words[1:]
    return words[:2]


def _widget_comm_open(shell: Any) -> bool:
    """Whether a widget front end opened its control channel to ``shell``'s kernel (ipywidgets 8 does)."""
    manager = getattr(getattr(shell, "kernel", None), "comm_manager", None)
    comms = getattr(manager, "comms", None) or {}
    return any(getattr(c, "target_name", "") == "jupyter.widget.control" for c in list(comms.values()))


def _launched_by_jupyter_server() -> bool:
    """Whether the process that started this kernel is a Jupyter server (Lab, Notebook, Studio)."""
    launcher = int(os.environ.get("JPY_PARENT_PID") or 0) or procs.parent_pid("self")
    pid, programs = launcher, []
    for _ in range(_LAUNCHERS_LOOKED_AT):
        if pid <= 1:
            break
        programs.append(_program(procs.cmdline(pid)))
        pid = procs.parent_pid(pid)
    if not programs or any(p and p[0].split("-")[-1] in _HEADLESS_PARENTS for p in programs):
        return False
    first = programs[0]
    return bool(first) and (first[0] in _JUPYTER_SERVERS
                            or (first[0] == "jupyter" and first[1:2] in (["lab"], ["server"], ["notebook"])))


def widget_frontend() -> bool:
    """Whether a live widget front end can be expected (see the module docstring for the rules)."""
    forced = os.environ.get("SKYRL_NB_STATIC", "").strip().lower()
    if forced in ("1", "true", "yes"):
        return False
    if forced in ("0", "false", "no"):
        return True
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return False
    return _widget_comm_open(shell) or _launched_by_jupyter_server()
