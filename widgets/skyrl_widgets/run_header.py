"""The header of a run: state, progress, the stage before step 1, times, reward, buttons and links.

A view only (anywidget, ``static/run_header.js``): ``skyrl_nb.dashboard.Dashboard`` sets its traits from the
run store and the job, and acts on the buttons it reports (`on_action`). The same widget, ``compact``, is a
`Job`'s live display, so the two never disagree. Colours are JupyterLab's CSS variables.

>>> header = RunHeader(run_id="quickstart-1", state="running", step=3, total_steps=40, actions=["stop"])
>>> header.on_action(lambda name: print(name))         # "stop", "resume", "new_run" or "logs"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anywidget
import traitlets

from skyrl_core.choices import RunState

from ._static import STATIC, esm

#: What the buttons may ask for.
ACTIONS = ("stop", "resume", "new_run", "logs")


class RunHeader(anywidget.AnyWidget):
    """State chip, progress bar, `step / total`, stage, elapsed / ETA / total time, reward first -> last, the
    policy's parameters, the last error, what the reader skipped, buttons (`actions`) and links.

    ``links`` is a list of ``{"label", "href"}``; ``details`` a list of ``[name, value]`` rows (the compact
    form shows them); ``logs`` the text shown while ``logs_open``.
    """

    _esm = esm("run_header")
    _css = STATIC / "run_header.css"

    run_id = traitlets.Unicode("").tag(sync=True)
    state = traitlets.Unicode(RunState.PENDING.value).tag(sync=True)
    note = traitlets.Unicode("").tag(sync=True)
    """Beside the state: ``resumed from step 30 (attempt 1)``, or why the run cannot be resumed."""
    step = traitlets.Int(0).tag(sync=True)
    total_steps = traitlets.Int(None, allow_none=True).tag(sync=True)
    stage = traitlets.Unicode("").tag(sync=True)
    times = traitlets.Unicode("").tag(sync=True)
    reward = traitlets.Unicode("").tag(sync=True)
    parameters = traitlets.Unicode("").tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    warnings = traitlets.List(traitlets.Unicode()).tag(sync=True)
    links = traitlets.List(traitlets.Dict()).tag(sync=True)
    actions = traitlets.List(traitlets.Unicode()).tag(sync=True)
    busy = traitlets.Unicode("").tag(sync=True)
    logs = traitlets.Unicode("").tag(sync=True)
    logs_open = traitlets.Bool(False).tag(sync=True)
    details = traitlets.List(traitlets.List()).tag(sync=True)
    compact = traitlets.Bool(False).tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._callbacks: list[Callable[[str], None]] = []
        self.on_msg(self._handle_message)

    def on_action(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(name)`` when a button is pressed (``stop``, ``resume``, ``new_run``, ``logs``)."""
        self._callbacks.append(callback)

    def _handle_message(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        name = content.get("action") if isinstance(content, dict) else None
        if name not in ACTIONS:
            return
        for callback in list(self._callbacks):
            callback(name)

    def __repr__(self) -> str:
        return f"RunHeader({self.run_id!r}, {self.state}, step {self.step}/{self.total_steps or '?'})"

    def _repr_html_(self) -> str:
        import html

        return f"<div>{html.escape(repr(self))}</div>"
