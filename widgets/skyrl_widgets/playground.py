"""The playground's view: a prompt box, an optional ground-truth box, a Run button, one line of status and one
answer pane per model (its name, the answer, the reward as a badge and the reward function's error, if any).

A view only (anywidget, ``static/playground.js``): ``skyrl_nb.playground.Playground`` sets its traits and runs
the prompt when the view reports a press of Run (`on_run`). Colours are JupyterLab's CSS variables, so the view
reads in the light and the dark theme.

>>> view = PlaygroundView(models=["base", "trained"])
>>> view.on_run(lambda prompt, ground_truth, example: print(prompt, ground_truth, example))
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import anywidget
import traitlets

from ._static import css, esm

#: What Run reports: the prompt, the ground truth ('' for none) and the index of the example picked (-1: none).
RunCallback = Callable[[str, str, int], None]


class PlaygroundView(anywidget.AnyWidget):
    """Prompt, ground truth, Run, status and one pane per model.

    ``answers`` is a list of ``{"model", "response", "reward", "reward_error"}`` (reward a float or None);
    ``examples`` a list of ``{"label", "prompt", "ground_truth"}`` a dropdown offers (an evaluation's worst
    prompts); ``status`` one line (``error`` says whether it reports a failure); ``running`` disables Run and
    makes the browser count the seconds since it began.
    """

    _esm = esm("playground")
    _css = css("playground")

    title = traitlets.Unicode("Playground").tag(sync=True)
    models = traitlets.List(traitlets.Unicode()).tag(sync=True)
    prompt = traitlets.Unicode("").tag(sync=True)
    ground_truth = traitlets.Unicode("").tag(sync=True)
    examples = traitlets.List(traitlets.Dict()).tag(sync=True)
    example = traitlets.Int(-1).tag(sync=True)
    running = traitlets.Bool(False).tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    error = traitlets.Bool(False).tag(sync=True)
    answers = traitlets.List(traitlets.Dict()).tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._callbacks: list[RunCallback] = []
        self.on_msg(self._handle_message)

    def on_run(self, callback: RunCallback) -> None:
        """Call ``callback(prompt, ground_truth, example)`` when Run is pressed (not while ``running``)."""
        self._callbacks.append(callback)

    def _handle_message(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if not isinstance(content, dict) or content.get("action") != "run" or self.running:
            return
        # the message carries what the boxes held at the click, whatever order the trait updates arrive in
        prompt, truth = str(content.get("prompt", self.prompt)), str(content.get("ground_truth", self.ground_truth))
        example = content.get("example", self.example)
        example = example if isinstance(example, int) and not isinstance(example, bool) else -1
        for callback in list(self._callbacks):
            callback(prompt, truth, example)

    def __repr__(self) -> str:
        return f"PlaygroundView({', '.join(self.models)}; {len(self.answers)} answers)"

    def _repr_html_(self) -> str:
        return f"<div>{html.escape(repr(self))}</div>"
