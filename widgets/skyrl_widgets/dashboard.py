"""Dashboard views: the series layout, the header line, and a small SVG for places without widgets.

The live panels are `skyrl_widgets.charts.MetricChart` widgets (SVG drawn in the browser).

Views only: data arrives as a `series` dict (see `empty_series`), built by `skyrl_nb.dashboard`.

Panels: reward (mean with a ±std band, pass@n), eval score, tokens/s, step time as stacked bars
(generate / policy_train / sync_weights / save_checkpoints, plus wait_for_batch / wait_for_policy
when the run reports them).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

#: Step-time parts drawn as stacked bars: (metric name after `timing/`, legend label, colour).
TIMING_PARTS = (
    ("generate", "generate", "#4c78a8"),
    ("policy_train", "train", "#f58518"),
    ("sync_weights", "weight sync", "#54a24b"),
    ("save_checkpoints", "checkpoint", "#b279a2"),
    ("wait_for_batch", "wait for batch", "#9d9d9d"),
    ("wait_for_policy", "wait for policy", "#d3d3d3"),
)
REWARD_COLOUR = "#1f77b4"
PASS_COLOUR = "#2ca02c"
EVAL_COLOUR = "#d62728"
TOKENS_COLOUR = "#9467bd"

def empty_series() -> dict[str, Any]:
    """The dict the views draw: one list per curve, all aligned on `step` except eval."""
    return {
        "step": [], "reward_mean": [], "reward_std": [], "pass_at": [], "pass_n": None,
        "eval_step": [], "eval_score": [], "tokens_per_s": [],
        "timing": {name: [] for name, _, _ in TIMING_PARTS},
    }


def _band(series: dict[str, Any]) -> tuple[list[float | None], list[float | None]]:
    lo, hi = [], []
    for m, s in zip(series["reward_mean"], series["reward_std"], strict=False):
        if m is None:
            lo.append(None)
            hi.append(None)
        else:
            s = s or 0.0
            lo.append(m - s)
            hi.append(m + s)
    return lo, hi


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
                  warnings: Sequence[str] = (), model: dict[str, Any] | None = None) -> str:
    """The header line: state badge, step / total, ETA, the policy's parameters (``model``: the started event's
    counts), the last error when there is one, and one line per thing the run reader skipped (``warnings``:
    damaged files or lines)."""
    colour = {"running": "#1f77b4", "succeeded": "#2ca02c", "failed": "#d62728", "stopped": "#7f7f7f",
              "pending": "#555", "lost": "#ff7f0e", "damaged": "#8c564b"}.get(state, "#555")
    eta = "" if eta_s is None or state != "running" else f" &middot; ETA {format_seconds(eta_s)}"
    params = f" &middot; {html.escape(parameters_text(model))}" if model else ""
    parts = [f"<b style='color:{colour}'>{html.escape(state)}</b> &middot; step {step}/{total or '?'}{eta}{params}"]
    if error:
        last = str(error).strip().splitlines()[-1] if str(error).strip() else str(error)
        parts.append(f"<div style='color:#d62728;font-family:monospace;white-space:pre-wrap'>"
                     f"{html.escape(last[:400])}</div>")
    parts.extend(f"<div style='color:#8a5a00;font-size:0.9em'>skipped: {html.escape(line[:300])}</div>"
                 for line in list(warnings)[:5])
    if len(warnings) > 5:
        parts.append(f"<div style='color:#8a5a00;font-size:0.9em'>... and {len(warnings) - 5} more</div>")
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

_W, _H = 760, 430
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


def _nice(v: float) -> str:
    if abs(v) >= 1e6:
        return f"{v:.2e}"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


class _Panel:
    def __init__(self, x0: float, y0: float, title: str, xs: list[float], ys_all: list[float],
                 y_floor: float | None = None) -> None:
        self.x0, self.y0, self.title = x0, y0, title
        finite = [y for y in ys_all if y is not None and math.isfinite(y)]
        self.xmin = min(xs) if xs else 0.0
        self.xmax = max(xs) if xs else 1.0
        if self.xmax == self.xmin:
            self.xmax = self.xmin + 1
        self.ymin = min(finite) if finite else 0.0
        self.ymax = max(finite) if finite else 1.0
        if y_floor is not None:
            self.ymin = min(self.ymin, y_floor)
        if self.ymax == self.ymin:
            self.ymax = self.ymin + 1
        self.parts: list[str] = []

    def px(self, x: float) -> float:
        return self.x0 + 40 + (x - self.xmin) / (self.xmax - self.xmin) * (_PANEL_W - 50)

    def py(self, y: float) -> float:
        return self.y0 + 20 + (1 - (y - self.ymin) / (self.ymax - self.ymin)) * (_PANEL_H - 40)

    def frame(self) -> str:
        x1, y1 = self.x0 + 40, self.y0 + 20
        x2, y2 = self.x0 + _PANEL_W - 10, self.y0 + _PANEL_H - 20
        return (
            f'<text x="{self.x0 + 40}" y="{self.y0 + 12}" font-weight="bold">{html.escape(self.title)}</text>'
            f'<rect x="{x1}" y="{y1}" width="{x2 - x1}" height="{y2 - y1}" fill="none" stroke="#ccc"/>'
            f'<text x="{x1 - 3}" y="{y1 + 8}" text-anchor="end">{_nice(self.ymax)}</text>'
            f'<text x="{x1 - 3}" y="{y2}" text-anchor="end">{_nice(self.ymin)}</text>'
            f'<text x="{x1}" y="{y2 + 12}">{_nice(self.xmin)}</text>'
            f'<text x="{x2}" y="{y2 + 12}" text-anchor="end">step {_nice(self.xmax)}</text>'
        )

    def line(self, xs: list[float], ys: list[Any], colour: str, dash: str = "") -> None:
        pts = " ".join(f"{self.px(x):.1f},{self.py(y):.1f}" for x, y in zip(xs, ys, strict=False) if y is not None)
        if pts:
            extra = f' stroke-dasharray="{dash}"' if dash else ""
            self.parts.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.6"{extra}/>')

    def band(self, xs: list[float], lo: list[Any], hi: list[Any], colour: str) -> None:
        pairs = [(x, a, b) for x, a, b in zip(xs, lo, hi, strict=False) if a is not None and b is not None]
        if len(pairs) < 2:
            return
        up = " ".join(f"{self.px(x):.1f},{self.py(b):.1f}" for x, _, b in pairs)
        down = " ".join(f"{self.px(x):.1f},{self.py(a):.1f}" for x, a, _ in reversed(pairs))
        self.parts.append(f'<polygon points="{up} {down}" fill="{colour}" fill-opacity="0.18" stroke="none"/>')

    def svg(self) -> str:
        return self.frame() + "".join(self.parts)


def render_svg(series: dict[str, Any], header: str = "") -> str:
    """The whole dashboard as one small SVG document (a few tens of KB at most)."""
    steps = series["step"]
    lo, hi = _band(series)
    xs, mean, lo, hi, pas, tps = _thin(steps, series["reward_mean"], lo, hi, series["pass_at"],
                                       series["tokens_per_s"])
    timing_cols = [series["timing"][name] for name, _, _ in TIMING_PARTS]
    t_xs, *t_cols = _thin(steps, *timing_cols, limit=120)

    reward = _Panel(0, 40, "reward (mean ± std, pass@n)", xs, [*lo, *hi, *pas])
    reward.band(xs, lo, hi, REWARD_COLOUR)
    reward.line(xs, mean, REWARD_COLOUR)
    reward.line(xs, pas, PASS_COLOUR, dash="4 3")

    ev = _Panel(_W / 2, 40, "eval score", series["eval_step"] or [0], series["eval_score"])
    ev.line(series["eval_step"], series["eval_score"], EVAL_COLOUR)
    for x, y in zip(series["eval_step"], series["eval_score"], strict=False):
        if y is not None:
            ev.parts.append(f'<circle cx="{ev.px(x):.1f}" cy="{ev.py(y):.1f}" r="2.5" fill="{EVAL_COLOUR}"/>')

    tok = _Panel(0, 40 + _PANEL_H + 30, "tokens / s", xs, tps, y_floor=0)
    tok.line(xs, tps, TOKENS_COLOUR)

    totals = [sum(c[i] or 0 for c in t_cols) for i in range(len(t_xs))]
    bars = _Panel(_W / 2, 40 + _PANEL_H + 30, "step time (s)", t_xs, totals, y_floor=0)
    if t_xs:
        span = (_PANEL_W - 50) / max(1, len(t_xs))
        for i, x in enumerate(t_xs):
            base = 0.0
            for (_, _, colour), col in zip(TIMING_PARTS, t_cols, strict=False):
                v = col[i] or 0.0
                if v <= 0:
                    continue
                top, bottom = bars.py(base + v), bars.py(base)
                bars.parts.append(f'<rect x="{bars.px(x) - span * 0.45:.1f}" y="{top:.1f}" width="{span * 0.9:.1f}" '
                                  f'height="{max(0.3, bottom - top):.1f}" fill="{colour}"/>')
                base += v
    legend = []
    lx = 10
    n = series.get("pass_n")
    items = [("reward mean", REWARD_COLOUR), (f"pass@{n}" if n else "pass@n", PASS_COLOUR), ("eval", EVAL_COLOUR)]
    items += [(label, colour) for (name, label, colour), col in zip(TIMING_PARTS, timing_cols, strict=False)
              if any(v is not None for v in col)]
    for label, colour in items:
        legend.append(f'<rect x="{lx}" y="{_H - 14}" width="10" height="10" fill="{colour}"/>'
                      f'<text x="{lx + 14}" y="{_H - 5}">{html.escape(label)}</text>')
        lx += 24 + 6.5 * len(label)
    head = f'<text x="10" y="18" font-size="13">{html.escape(header)}</text>' if header else ""
    body = "".join(p.svg() for p in (reward, ev, tok, bars))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
            f'font-family="sans-serif" font-size="10"><rect width="100%" height="100%" fill="white"/>'
            f"{head}{body}{''.join(legend)}</svg>")
