"""The views' browser files (``static/``) and the module text each view sends.

anywidget loads a view's ``_esm`` as one standalone ES module and its ``_css`` as one style sheet, so what the
views share is composed here rather than imported in the browser: ``esm(name)`` is ``static/dom.js`` (the DOM
helper ``h`` and ``rewardColour``) followed by ``static/<name>.js``; ``css(name)`` is ``static/base.css`` (the
theme variables and the frame) followed by ``static/<name>.css``. Files are read once per process.

>>> "function h(" in esm("playground") and ".skyrl-playground" in css("playground")
True
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

STATIC = Path(__file__).parent / "static"


@cache
def _read(file: str) -> str:
    return (STATIC / file).read_text(encoding="utf-8")


def esm(name: str) -> str:
    """The ES module of view ``name``: the shared helpers (``dom.js``), then ``<name>.js``."""
    return f"{_read('dom.js')}\n{_read(f'{name}.js')}"


def css(name: str) -> str:
    """The style sheet of view ``name``: the shared theme and frame (``base.css``), then ``<name>.css``."""
    return f"{_read('base.css')}\n{_read(f'{name}.css')}"
