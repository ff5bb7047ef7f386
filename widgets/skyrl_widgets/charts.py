"""Small SVG chart widgets (anywidget, no build step) for the live dashboard and run comparisons.

Why not plotly's `FigureWidget`: plotly 7.1 sends every data change as a transient message
(`_py2js_restyle` set, then reset to None), while the state a new view draws from (`_widget_data`) is
only refreshed when the figure itself is displayed. A figure shown inside a VBox and filled from a
thread loses every update that arrives before its 5 MB ES module has loaded, and the bundle keeps one
module-level model, so two figures on a page draw each other's data. Here the whole chart is a few
synced traits (`series`, `x_axis`, `y_axis`): a view that renders late, or a second view, draws everything.

Python owns everything drawn: the points, the axes' ranges and their ticks (`skyrl_widgets.axes`), the
colours (JupyterLab CSS variables, `skyrl_widgets.dashboard.Colour`). ``charts.js`` draws them at the
panel's real width (text stays at its CSS size at any width), clips every shape to the plot frame, and
shows a read-out of the step under the pointer.

>>> chart = MetricChart(title="reward", clickable=True)
>>> chart.series = [{"name": "reward mean", "colour": "var(--jp-brand-color1, #1976d2)", "kind": "line",
...                  "markers": True, "clickable": True, "points": [[1, 0.2], [2, 0.4]]}]
>>> chart.on_click(lambda step: print("clicked", step))
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import anywidget
import traitlets

from skyrl_widgets._static import STATIC
from skyrl_widgets.dashboard import (
    EVAL_COLOUR,
    PASS_COLOUR,
    REWARD_COLOUR,
    TOKENS_COLOUR,
    axes_for,
    part_colour,
    reward_band,
    timing_parts,
)

#: Most points one series sends to the browser (evenly thinned beyond that, last point kept).
MAX_POINTS = 600


class MetricChart(anywidget.AnyWidget):
    """One SVG panel: lines (optionally with markers), bands, stacked bars.

    `series` is a list of dicts: `name`, `colour` (any CSS colour, e.g. a JupyterLab variable), `kind`
    (`line` | `band` | `bar`), `points` (`[[x, y], ...]`; for `band` `[[x, lo, hi], ...]`), optional
    `dash`, `width`, `markers`, `clickable`, `note` (legend text after the name). `x_axis` / `y_axis`
    are ``{"range": [lo, hi], "ticks": [[value, label], ...], "label": ...}`` (``skyrl_widgets.axes``);
    empty means "from the data". With `clickable`, a click in the plot sends the nearest clickable
    point's step to `on_click` callbacks.
    """

    _esm = STATIC / "charts.js"  # uses nothing of dom.js or base.css
    _css = STATIC / "charts.css"

    title = traitlets.Unicode("").tag(sync=True)
    subtitle = traitlets.Unicode("").tag(sync=True)
    series = traitlets.List(traitlets.Dict()).tag(sync=True)
    x_axis = traitlets.Dict().tag(sync=True)
    y_axis = traitlets.Dict().tag(sync=True)
    height = traitlets.Int(200).tag(sync=True)
    clickable = traitlets.Bool(False).tag(sync=True)
    selected_step = traitlets.Int(None, allow_none=True).tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._click_callbacks: list[Callable[[int], None]] = []
        self.on_msg(self._handle_message)

    @property
    def points(self) -> int:
        """How many points the panel holds (all series)."""
        return sum(len(s.get("points", [])) for s in self.series)

    def on_click(self, callback: Callable[[int], None]) -> None:
        """Call `callback(step)` when a point is clicked in the browser."""
        self._click_callbacks.append(callback)

    def _handle_message(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if not isinstance(content, dict) or content.get("event") != "click":
            return
        try:
            step = int(content["step"])
        except (KeyError, TypeError, ValueError):
            return
        self.selected_step = step
        for callback in list(self._click_callbacks):
            callback(step)

    def __repr__(self) -> str:
        counts = ", ".join(f"{s.get('name')}: {len(s.get('points', []))}" for s in self.series)
        return f"MetricChart({self.title!r}, {counts or 'empty'})"

    def _repr_html_(self) -> str:
        """Plain HTML for renderers without widgets: the title and the point counts."""
        import html

        return f"<div>{html.escape(repr(self))}</div>"


def _finite(v: Any) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def _thin(rows: list[list[Any]], limit: int = MAX_POINTS) -> list[list[Any]]:
    if len(rows) <= limit:
        return rows
    stride = math.ceil(len(rows) / limit)
    kept = rows[::stride]
    if kept[-1] is not rows[-1]:
        kept.append(rows[-1])
    return kept


def points(xs: list[Any], *cols: list[Any]) -> list[list[Any]]:
    """``[[x, y...], ...]`` for the rows where every value is a finite number, thinned to ``MAX_POINTS``."""
    rows = [[x, *vals] for x, *vals in zip(xs, *cols, strict=False) if all(_finite(v) for v in vals)]
    return _thin(rows)


def reward_series(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Reward panel: a band named for what it is (`reward_band`: the 95% CI of the mean for 0/1 rewards,
    else mean ± std), mean (markers, clickable), pass@n (dotted, clickable), and each reward function's own
    mean score (``reward/<name>``, finely dotted)."""
    steps = data["step"]
    lo, hi, band = reward_band(data)
    n = data.get("pass_n")
    return [
        {"name": band, "colour": REWARD_COLOUR.css(), "kind": "band", "points": points(steps, lo, hi)},
        {"name": "reward mean", "colour": REWARD_COLOUR.css(), "kind": "line", "markers": True, "clickable": True,
         "points": points(steps, data["reward_mean"])},
        {"name": f"pass@{n}" if n else "pass@n", "colour": PASS_COLOUR.css(), "kind": "line", "dash": "4 3",
         "clickable": True, "points": points(steps, data["pass_at"])},
        *({"name": name, "colour": part_colour(i).css(), "kind": "line", "dash": "2 2", "points": points(steps, values)}
          for i, (name, values) in enumerate(data.get("reward_parts", {}).items())),
    ]


def eval_series(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Eval panel: eval score per eval step, with markers."""
    return [{"name": "eval", "colour": EVAL_COLOUR.css(), "kind": "line", "markers": True,
             "points": points(data["eval_step"], data["eval_score"])}]


def tokens_series(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Throughput panel: tokens per second."""
    return [{"name": "tokens/s", "colour": TOKENS_COLOUR.css(), "kind": "line",
             "points": points(data["step"], data["tokens_per_s"])}]


def timing_series(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Step-time panel: one stacked bar series per timing part the run spent time in."""
    return [{"name": label, "colour": colour.css(), "kind": "bar",
             "points": points(data["step"], [v or 0.0 for v in data["timing"][name]])}
            for name, label, colour in timing_parts(data)]


#: The dashboard's panels: (key, title, series builder).
PANELS: tuple[tuple[str, str, Callable[[dict[str, Any]], list[dict[str, Any]]]], ...] = (
    ("reward", "reward · click a point to inspect its rollouts", reward_series),
    ("eval", "eval score", eval_series),
    ("tokens", "tokens / s", tokens_series),
    ("timing", "step time (s)", timing_series),
)


def make_charts(data: dict[str, Any] | None = None, total_steps: int | None = None) -> dict[str, MetricChart]:
    """The four dashboard panels as `MetricChart`s keyed reward / eval / tokens / timing."""
    charts = {key: MetricChart(title=title, clickable=key == "reward") for key, title, _ in PANELS}
    if data is not None:
        update_charts(charts, data, total_steps)
    return charts


def update_charts(charts: dict[str, MetricChart], data: dict[str, Any], total_steps: int | None = None) -> None:
    """Push `data` (the `empty_series` layout) to the charts; unchanged panels send nothing. A panel with no
    point to show is hidden (eval on a run without eval, before step 1 all of them)."""
    axes = axes_for(data, total_steps)
    for key, _, build in PANELS:
        chart, series = charts[key], build(data)
        with chart.hold_sync():
            if series != chart.series:
                chart.series = series
            if axes[key]["x"] != chart.x_axis:
                chart.x_axis = axes[key]["x"]
            if axes[key]["y"] != chart.y_axis:
                chart.y_axis = axes[key]["y"]
        display = "" if any(s["points"] for s in series) else "none"
        if chart.layout.display != display:
            chart.layout.display = display
