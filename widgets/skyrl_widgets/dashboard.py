"""Dashboard views: the series layout, the colours, the header line, and a small SVG for places without widgets.

The live panels are `skyrl_widgets.charts.MetricChart` widgets (SVG drawn in the browser) under a
`skyrl_widgets.run_header.RunHeader`.

Views only: data arrives as a `series` dict (see `empty_series`), built by `skyrl_nb.dashboard`.

Panels: reward (mean with a band, pass@n: `reward_band`), eval score, tokens/s, step time as stacked bars
(generate / policy_train / sync_weights / save_checkpoints, plus wait_for_batch / wait_for_policy
when the run spends time in them: a synchronous run reports them as 0 and they stay out).

Colours are JupyterLab's CSS variables (`Colour.css()`), so the live widgets follow the light and dark
themes; the static SVG, which has its own white background, uses their light-theme values.
"""

from __future__ import annotations

import html
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_core.choices import ReadState, RunState
from skyrl_widgets.axes import reward_range, step_axis, value_axis


@dataclass(frozen=True)
class Colour:
    """A JupyterLab theme colour: its CSS variable and the light theme's value (for the static SVG)."""

    var: str
    light: str

    def css(self) -> str:
        """``var(--jp-brand-color1, #1976d2)``: what the live widgets paint with."""
        return f"var({self.var}, {self.light})"


REWARD_COLOUR = Colour("--jp-brand-color1", "#1976d2")
PASS_COLOUR = Colour("--jp-accent-color1", "#388e3c")
EVAL_COLOUR = Colour("--jp-warn-color1", "#f57c00")
TOKENS_COLOUR = Colour("--jp-info-color1", "#0097a7")
#: Colours for curves that are alike (one run each in a comparison), in order.
PALETTE = (REWARD_COLOUR, EVAL_COLOUR, PASS_COLOUR, Colour("--jp-error-color1", "#d32f2f"), TOKENS_COLOUR,
           Colour("--jp-mirror-editor-operator-color", "#7800c2"))
#: Step-time parts drawn as stacked bars: (metric name after `timing/`, legend label, colour).
TIMING_PARTS = (
    ("generate", "generate", REWARD_COLOUR),
    ("policy_train", "train", EVAL_COLOUR),
    ("sync_weights", "weight sync", PASS_COLOUR),
    ("save_checkpoints", "checkpoint", Colour("--jp-error-color1", "#d32f2f")),
    ("wait_for_batch", "wait for batch", Colour("--jp-layout-color3", "#bdbdbd")),
    ("wait_for_policy", "wait for policy", Colour("--jp-border-color0", "#9e9e9e")),
)
#: A run state's colour (chips, the static header).
STATE_COLOURS = {
    RunState.RUNNING: REWARD_COLOUR, RunState.SUCCEEDED: PASS_COLOUR, RunState.FAILED: Colour("--jp-error-color1", "#d32f2f"),
    RunState.STOPPED: Colour("--jp-ui-font-color2", "#757575"), RunState.PENDING: Colour("--jp-ui-font-color2", "#757575"),
    ReadState.LOST: EVAL_COLOUR, ReadState.DAMAGED: Colour("--jp-error-color1", "#d32f2f"),
}


def empty_series() -> dict[str, Any]:
    """The dict the views draw: one list per curve, all aligned on `step` except eval; ``samples`` is the
    number of rollouts per step when known (the reward band uses it, ``reward_band``)."""
    return {
        "step": [], "reward_mean": [], "reward_std": [], "pass_at": [], "pass_n": None, "samples": None,
        "eval_step": [], "eval_score": [], "tokens_per_s": [],
        "timing": {name: [] for name, _, _ in TIMING_PARTS},
        # reward functions' own scores (``reward/<name>``), each aligned on `step`, and errors per step
        "reward_parts": {}, "reward_errors": [],
    }


#: Colours of the reward functions' own series (``reward/<name>``), in the order they appear.
PART_COLOURS = (Colour("--jp-mirror-editor-operator-color", "#7800c2"), Colour("--jp-error-color1", "#d32f2f"),
                TOKENS_COLOUR, EVAL_COLOUR)


def part_colour(i: int) -> Colour:
    return PART_COLOURS[i % len(PART_COLOURS)]


#: How far a 0/1 reward's std may sit from sqrt(mean * (1 - mean)) and still be read as 0/1 rewards.
_BINARY_TOL = 1e-6


def binary_rewards(series: dict[str, Any]) -> bool:
    """Whether every step's rewards look 0/1: its (population) std is ``sqrt(mean * (1 - mean))``, the only
    std a sample of zeros and ones can have. False when no step has both a mean and a std."""
    pairs = [(m, s) for m, s in zip(series["reward_mean"], series["reward_std"], strict=False)
             if m is not None and s is not None]
    return bool(pairs) and all(0.0 <= m <= 1.0 and abs(s * s - m * (1.0 - m)) <= _BINARY_TOL for m, s in pairs)


def reward_band(series: dict[str, Any]) -> tuple[list[float | None], list[float | None], str]:
    """The reward panel's band: ``(lo, hi, label)``, one value per step (None where the step has no mean).

    For 0/1 rewards with a known number of samples per step (``series["samples"]``) it is the 95% confidence
    interval of the mean, ``mean ± 1.96 · std / sqrt(n)`` within [0, 1] (a 0/1 reward's ±std band covers
    most of [0, 1] whatever the run does); otherwise ``mean ± std``. The label says which.

    >>> lo, hi, label = reward_band({"reward_mean": [0.5], "reward_std": [0.5], "samples": 100})
    >>> label, round(lo[0], 3), round(hi[0], 3)
    ('95% CI of the mean (n=100)', 0.402, 0.598)
    """
    n = series.get("samples")
    interval = binary_rewards(series) and isinstance(n, int) and n > 0
    scale = 1.96 / math.sqrt(n) if interval else 1.0
    lo: list[float | None] = []
    hi: list[float | None] = []
    for m, s in zip(series["reward_mean"], series["reward_std"], strict=False):
        if m is None:
            lo.append(None)
            hi.append(None)
            continue
        half = (s or 0.0) * scale
        lo.append(max(0.0, m - half) if interval else m - half)
        hi.append(min(1.0, m + half) if interval else m + half)
    return lo, hi, f"95% CI of the mean (n={n})" if interval else "mean ± std"


def timing_parts(series: dict[str, Any]) -> list[tuple[str, str, Colour]]:
    """The step-time parts the run spent time in (a part that is always 0 or missing has nothing to show)."""
    return [part for part in TIMING_PARTS if any(v for v in series["timing"][part[0]] if v is not None)]


def axes_for(series: dict[str, Any], total_steps: int | None = None) -> dict[str, dict[str, Any]]:
    """Each panel's axes (``axes.value_axis``): x from step 0 (the eval before training) to the run's last
    step; the reward and eval axes on the reward's scale (``axes.reward_range``), the others from 0."""
    steps = series["step"]
    last = max([int(total_steps or 0), *(int(s) for s in steps), *(int(s) for s in series["eval_step"]), 1])
    x = step_axis(0, last)
    totals = [sum(col[i] or 0.0 for col in series["timing"].values()) for i in range(len(steps))]
    return {
        "reward": {"x": x, "y": value_axis((), fixed=reward_range(series["reward_mean"], series["pass_at"],
                                                                  *series.get("reward_parts", {}).values()))},
        "eval": {"x": x, "y": value_axis((), fixed=reward_range(series["eval_score"]))},
        "tokens": {"x": x, "y": value_axis(series["tokens_per_s"], floor=0.0)},
        "timing": {"x": x, "y": value_axis(totals, floor=0.0)},
    }


def parameters_text(counts: dict[str, Any]) -> str:
    """``134.5M parameters`` or, when only part trains, ``137.0M parameters, 2.44M trainable (LoRA rank 8)``."""
    total, trainable = int(counts.get("total") or 0), int(counts.get("trainable") or 0)
    text = f"{_count(total)} parameters"
    if trainable and trainable < total:
        rank = counts.get("lora_rank")
        text += f", {_count(trainable)} trainable" + (f" (LoRA rank {rank})" if rank else "")
    return text


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            value = n / size
            return f"{value:.3g}{unit}" if value < 100 else f"{value:.1f}{unit}"
    return str(n)


def progress_html(state: str, step: int, total: int | None, eta_s: float | None, error: str | None,
                  warnings: Sequence[str] = (), model: dict[str, Any] | None = None, *, stage: str = "",
                  elapsed: str = "") -> str:
    """The header as HTML, for front ends without widgets: state, step / total, the stage before step 1,
    elapsed time and ETA, the policy's parameters (``model``: the started event's counts), the last error
    when there is one, and one line per thing the run reader skipped (``warnings``)."""
    colour = STATE_COLOURS.get(state, STATE_COLOURS[RunState.PENDING]).css()
    eta = "" if eta_s is None or state != RunState.RUNNING else f" &middot; ETA {format_seconds(eta_s)}"
    params = f" &middot; {html.escape(parameters_text(model))}" if model else ""
    now = f" &middot; {html.escape(stage)}" if stage else ""
    took = f" &middot; {html.escape(elapsed)}" if elapsed else ""
    parts = [f"<b style='color:{colour}'>{html.escape(state)}</b> &middot; step {step}/{total or '?'}{now}{took}"
             f"{eta}{params}"]
    if error:
        last = str(error).strip().splitlines()[-1] if str(error).strip() else str(error)
        parts.append(f"<div style='color:{STATE_COLOURS[RunState.FAILED].css()};font-family:monospace;"
                     f"white-space:pre-wrap'>{html.escape(last[:400])}</div>")
    warn = EVAL_COLOUR.css()
    parts.extend(f"<div style='color:{warn};font-size:0.9em'>skipped: {html.escape(line[:300])}</div>"
                 for line in list(warnings)[:5])
    if len(warnings) > 5:
        parts.append(f"<div style='color:{warn};font-size:0.9em'>... and {len(warnings) - 5} more</div>")
    return "".join(parts)


def format_seconds(seconds: float) -> str:
    """`75` -> `1m15s`."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


# ----------------------------------------------------------------------------- SVG (static)

_W = 760
_PANEL_W, _PANEL_H = 340, 150


def _thin(xs: list[Any], *cols: list[Any], limit: int = 240) -> tuple[list[Any], ...]:
    """Keep at most `limit` points (evenly spaced, last point kept) so the SVG stays small."""
    if len(xs) <= limit:
        return (xs, *cols)
    stride = math.ceil(len(xs) / limit)
    idx = list(range(0, len(xs), stride))
    if idx[-1] != len(xs) - 1:
        idx.append(len(xs) - 1)
    return tuple([c[i] for i in idx] for c in (xs, *cols))


class Panel:
    """One static chart: a frame, nice ticks from an axes dict (``axes_for``), and shapes clipped to the frame."""

    def __init__(self, x0: float, y0: float, title: str, axes: dict[str, Any]) -> None:
        self.x0, self.y0, self.title = x0, y0, title
        self.x_axis, self.y_axis = axes["x"], axes["y"]
        self.xmin, self.xmax = self.x_axis["range"]
        self.ymin, self.ymax = self.y_axis["range"]
        self.parts: list[str] = []
        # unique per panel, not per position: several SVGs inline in one page share one id space, and a
        # `url(#id)` resolves to the first element with that id in the page (another chart's frame)
        self.clip = f"sk-clip-{uuid.uuid4().hex}"
        self.inset = 4.0  # between the frame and the first / last step: half a bar, for bars

    def px(self, x: float) -> float:
        width = _PANEL_W - 46 - 2 * self.inset
        return self.x0 + 40 + self.inset + (x - self.xmin) / ((self.xmax - self.xmin) or 1) * width

    def py(self, y: float) -> float:
        y = min(max(y, self.ymin), self.ymax)  # what lies beyond the axis is drawn at its edge
        return self.y0 + 24 + (1 - (y - self.ymin) / ((self.ymax - self.ymin) or 1)) * (_PANEL_H - 48)

    def frame(self) -> str:
        x1, y1 = self.x0 + 40, self.y0 + 20
        x2, y2 = self.x0 + _PANEL_W - 6, self.y0 + _PANEL_H - 20
        out = [f'<text x="{x1}" y="{self.y0 + 12}" font-weight="bold">{html.escape(self.title)}</text>',
               f'<clipPath id="{self.clip}"><rect x="{x1}" y="{y1}" width="{x2 - x1}" height="{y2 - y1}"/></clipPath>']
        for value, label in self.y_axis["ticks"]:
            y = self.py(value)
            out.append(f'<line x1="{x1}" x2="{x2}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                       f'<text x="{x1 - 3}" y="{y + 3:.1f}" text-anchor="end" fill="#555">{label}</text>')
        for value, label in self.x_axis["ticks"]:
            out.append(f'<text x="{self.px(value):.1f}" y="{y2 + 12}" text-anchor="middle" fill="#555">{label}</text>')
        out.append(f'<text x="{x2}" y="{y2 + 12}" text-anchor="end" fill="#555" dy="9">step</text>')
        out.append(f'<rect x="{x1}" y="{y1}" width="{x2 - x1}" height="{y2 - y1}" fill="none" stroke="#bdbdbd"/>')
        return "".join(out)

    def line(self, xs: list[float], ys: list[Any], colour: Colour, dash: str = "") -> None:
        pts = " ".join(f"{self.px(x):.1f},{self.py(y):.1f}" for x, y in zip(xs, ys, strict=False) if y is not None)
        if pts:
            extra = f' stroke-dasharray="{dash}"' if dash else ""
            self.parts.append(f'<polyline points="{pts}" fill="none" stroke="{colour.light}" stroke-width="1.6"{extra}/>')

    def band(self, xs: list[float], lo: list[Any], hi: list[Any], colour: Colour) -> None:
        pairs = [(x, a, b) for x, a, b in zip(xs, lo, hi, strict=False) if a is not None and b is not None]
        if len(pairs) < 2:
            return
        up = " ".join(f"{self.px(x):.1f},{self.py(b):.1f}" for x, _, b in pairs)
        down = " ".join(f"{self.px(x):.1f},{self.py(a):.1f}" for x, a, _ in reversed(pairs))
        self.parts.append(f'<polygon points="{up} {down}" fill="{colour.light}" fill-opacity="0.18" stroke="none"/>')

    def dots(self, xs: list[float], ys: list[Any], colour: Colour) -> None:
        self.parts.extend(f'<circle cx="{self.px(x):.1f}" cy="{self.py(y):.1f}" r="2.5" fill="{colour.light}"/>'
                          for x, y in zip(xs, ys, strict=False) if y is not None)

    def svg(self) -> str:
        return self.frame() + f'<g clip-path="url(#{self.clip})">' + "".join(self.parts) + "</g>"


def legend_svg(items: list[tuple[str, Colour]], y: float) -> str:
    """A one-row legend of coloured squares at height ``y``."""
    out, lx = [], 10.0
    for label, colour in items:
        out.append(f'<rect x="{lx}" y="{y - 10}" width="10" height="10" fill="{colour.light}"/>'
                   f'<text x="{lx + 14}" y="{y - 1}">{html.escape(label)}</text>')
        lx += 24 + 6.5 * len(label)
    return "".join(out)


def svg_document(body: str, height: float, header: str = "") -> str:
    """``body`` in a standalone white SVG of the dashboard's width, with a header line."""
    head = f'<text x="10" y="18" font-size="13">{html.escape(header)}</text>' if header else ""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height:.0f}" '
            f'viewBox="0 0 {_W} {height:.0f}" font-family="sans-serif" font-size="10">'
            f'<rect width="100%" height="100%" fill="white"/>{head}{body}</svg>')


def render_svg(series: dict[str, Any], header: str = "", total_steps: int | None = None) -> str:
    """The whole dashboard as one small SVG document (a few tens of KB at most)."""
    steps = series["step"]
    axes = axes_for(series, total_steps)
    lo, hi, band = reward_band(series)
    xs, mean, lo, hi, pas, tps = _thin(steps, series["reward_mean"], lo, hi, series["pass_at"],
                                       series["tokens_per_s"])
    parts = timing_parts(series)
    timing_cols = [series["timing"][name] for name, _, _ in parts]
    t_xs, *t_cols = _thin(steps, *timing_cols, limit=120)

    reward = Panel(0, 40, f"reward (mean, {band}, pass@n)", axes["reward"])
    reward.band(xs, lo, hi, REWARD_COLOUR)
    reward.line(xs, mean, REWARD_COLOUR)
    reward.line(xs, pas, PASS_COLOUR, dash="4 3")
    named = list(series.get("reward_parts", {}).items())
    for i, (_, values) in enumerate(named):
        p_xs, p_values = _thin(steps, values)
        reward.line(p_xs, p_values, part_colour(i), dash="2 2")

    ev = Panel(_W / 2, 40, "eval score", axes["eval"])
    ev.line(series["eval_step"], series["eval_score"], EVAL_COLOUR)
    ev.dots(series["eval_step"], series["eval_score"], EVAL_COLOUR)

    tok = Panel(0, 40 + _PANEL_H + 30, "tokens / s", axes["tokens"])
    tok.line(xs, tps, TOKENS_COLOUR)

    bars = Panel(_W / 2, 40 + _PANEL_H + 30, "step time (s)", axes["timing"])
    if t_xs:
        span = (_PANEL_W - 54) / max(1, axes["timing"]["x"]["range"][1] - axes["timing"]["x"]["range"][0] + 1)
        bars.inset = span * 0.4 + 1
        for i, x in enumerate(t_xs):
            base = 0.0
            for (_, _, colour), col in zip(parts, t_cols, strict=False):
                v = col[i] or 0.0
                if v <= 0:
                    continue
                top, bottom = bars.py(base + v), bars.py(base)
                bars.parts.append(f'<rect x="{bars.px(x) - span * 0.4:.1f}" y="{top:.1f}" width="{span * 0.8:.1f}" '
                                  f'height="{max(0.3, bottom - top):.1f}" fill="{colour.light}"/>')
                base += v
    n = series.get("pass_n")
    items = [("reward mean", REWARD_COLOUR), (f"pass@{n}" if n else "pass@n", PASS_COLOUR), ("eval", EVAL_COLOUR)]
    items += [(name, part_colour(i)) for i, (name, _) in enumerate(named)]
    items += [(label, colour) for _, label, colour in parts]
    height = 40 + 2 * (_PANEL_H + 30) + 30
    body = "".join(p.svg() for p in (reward, ev, tok, bars)) + legend_svg(items, height - 5)
    return svg_document(body, height, header)
