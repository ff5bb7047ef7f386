"""Views of an evaluation: one prompt with every model's answers (``EvalPromptView``) and bars with intervals
(``bars_svg``).

``EvalPromptView`` is an anywidget (``static/eval_view.js``): the prompt as chat turns, its ground truth, then one
column per model with its pass@1 and mean reward on the prompt and each answer with its reward badge, reward
error and length; Previous / Next step through the gained, lost or all prompts. The kernel side holds a loader
(``prompt_index -> payload``, ``skyrl_nb.eval_results.EvalResult.prompt``'s shape) and sends one prompt at a time.
Without a widget front end (papermill, nbconvert) it shows the same prompt as static HTML.

``bars_svg`` draws a summary (``skyrl_core.eval_stats.summarize``) as grouped bars, one group per metric, one bar
per model, each with its interval as a whisker; its colours are JupyterLab's theme variables (with the light
theme's values as fallbacks), so it reads in both themes and in a static page.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

import anywidget
import traitlets

from skyrl_core.eval_stats import GAINED, LOST
from skyrl_core.frontend import widget_frontend

from ._static import css, esm
from .dashboard import PALETTE
from .inspector_data import chat_turns

Loader = Callable[[int], dict[str, Any]]


class EvalPromptView(anywidget.AnyWidget):
    """One prompt of an evaluation with each model's answers and rewards.

    ``loader(prompt_index)`` gives a prompt's payload (``{"prompt_index", "prompt", "ground_truth", "models":
    [{"name", "pass@1", "mean_reward", "solved", "samples": [{"response", "reward", "correct", ...}]}]}``);
    ``prompts`` lists ``{"prompt_index", "change"}`` (gained / lost / both / neither) to step through.
    """

    _esm = esm("eval_view")
    _css = css("eval_view")

    title = traitlets.Unicode("").tag(sync=True)
    prompts = traitlets.List(traitlets.Dict()).tag(sync=True)
    filter = traitlets.Unicode("changed").tag(sync=True)
    current = traitlets.Dict().tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)

    def __init__(self, loader: Loader, *, prompts: Sequence[dict[str, Any]] = (), first: dict[str, Any] | None = None,
                 title: str = "", static: bool | None = None, **kwargs: Any):
        self._loader = loader
        self.static = (not widget_frontend()) if static is None else static
        self._changes = {p["prompt_index"]: p.get("change") for p in prompts}
        start = first if first is not None else (loader(prompts[0]["prompt_index"]) if prompts else {})
        changed = any(p.get("change") in (GAINED, LOST) for p in prompts)
        super().__init__(title=title, prompts=list(prompts), current=self._payload(start),
                         filter="changed" if changed else "all", **kwargs)
        self.on_msg(self._on_message)

    @property
    def prompt_index(self) -> int | None:
        return self.current.get("prompt_index")

    def show(self, prompt_index: int) -> None:
        """Show prompt ``prompt_index`` (what the browser's Previous / Next call)."""
        self.current = self._payload(self._loader(prompt_index))
        self.error = ""

    def _payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The payload with the prompt read back as chat turns (None for plain text, as the inspector shows it) and
        how it changed."""
        if not payload:
            return {}
        return {**payload, "turns": chat_turns(payload.get("prompt") or ""),
                "change": self._changes.get(payload.get("prompt_index"))}

    def _on_message(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "show":
            try:
                self.show(int(content["prompt_index"]))
            except Exception as exc:  # shown in the view, never raised into the comm thread
                self.error = f"prompt {content.get('prompt_index')}: {exc}"

    def __repr__(self) -> str:
        c = self.current
        parts = [f"{m['name']} pass@1 {m['pass@1']:.2f}" for m in c.get("models", [])]
        return f"EvalPromptView(prompt {c.get('prompt_index')}: {', '.join(parts)}; {len(self.prompts)} prompts)"

    def _repr_html_(self) -> str:
        return prompt_html(self.current, self.title)

    def _repr_mimebundle_(self, **kwargs: Any):
        if self.static:
            return {"text/html": self._repr_html_(), "text/plain": repr(self)}, {}
        bundle = super()._repr_mimebundle_(**kwargs)
        data, meta = bundle if isinstance(bundle, tuple) else (bundle or {}, {})
        return {**data, "text/html": self._repr_html_()}, meta


def _reward_tint(reward: float | None) -> str:
    if reward is None:
        return "var(--jp-layout-color2, #eee)"
    t = round(100 * max(0.0, min(1.0, reward)))
    return (f"color-mix(in srgb, color-mix(in srgb, var(--jp-success-color1, #388e3c) {t}%, "
            "var(--jp-error-color1, #d32f2f)) 30%, transparent)")


def prompt_html(payload: dict[str, Any], title: str = "") -> str:
    """One prompt and every model's answers as static HTML (what papermill and nbconvert keep)."""
    if not payload:
        return "<div><i>no prompt</i></div>"
    esc = html.escape
    turns = payload.get("turns") or [{"role": "prompt", "content": payload.get("prompt") or ""}]
    prompt = "".join(f"<div><b>{esc(t['role'])}</b>: <span style='white-space:pre-wrap'>{esc(t['content'])}</span>"
                     "</div>" for t in turns if t.get("content") or not t.get("open"))
    truth = payload.get("ground_truth")
    cols = []
    for m in payload.get("models", []):
        answers = "".join(_answer_html(s) for s in m["samples"])
        cols.append(f"<td style='vertical-align:top;text-align:left'><b>{esc(m['name'])}</b> pass@1 "
                    f"{m['pass@1']:.2f} &middot; mean reward {m['mean_reward']:.3f}{answers}</td>")
    head = f"<b>{esc(title)}</b> &middot; " if title else ""
    change = f" &middot; {esc(payload['change'])}" if payload.get("change") else ""
    return (f"<div>{head}prompt {payload.get('prompt_index')}{change}{prompt}"
            + (f"<div><b>ground truth</b>: {esc(str(truth))}</div>" if truth is not None else "")
            + f"<table><tr>{''.join(cols)}</tr></table></div>")


def _answer_html(sample: dict[str, Any]) -> str:
    reward = sample["reward"]
    length = sample.get("response_length")
    error = sample.get("reward_error")
    return ("<div style='margin:4px 0;padding:4px;border:1px solid var(--jp-border-color2,#ddd);border-radius:4px'>"
            f"<span style='background:{_reward_tint(reward)};padding:0 6px;border-radius:6px'>reward "
            f"{'-' if reward is None else format(reward, '.3g')}</span> {'✓' if sample['correct'] else '✗'}"
            + (f" <small>{length} tokens</small>" if length is not None else "")
            + (f"<div><small>reward error: {html.escape(error)}</small></div>" if error else "")
            + f"<div style='white-space:pre-wrap;font-family:monospace'>{html.escape(sample['response'])}</div></div>")


def _summary_metrics(summary: dict[str, Any], models: Sequence[str]) -> list[str]:
    first = summary["models"][models[0]]
    return [m for m in ("mean_reward", *(f"pass@{k}" for k in summary.get("pass_at", [1]))) if m in first]


def bars_svg(summary: dict[str, Any], models: Sequence[str] | None = None, metrics: Sequence[str] | None = None,
             title: str = "") -> str:
    """Grouped bars with interval whiskers: one group per metric (default: mean reward and each pass@k), one bar
    per model, on a 0..1 axis (wider when a value or interval goes past it)."""
    models = list(models or summary["models"])
    metrics = list(metrics or _summary_metrics(summary, models))
    bar, gap, left, top, plot_h = 22, 26, 34, 28 if title else 12, 120
    group_w = bar * len(models) + gap
    width = left + group_w * len(metrics) + 10
    values = [v for m in models for k in metrics
              for v in [summary["models"][m].get(k), *(summary["models"][m].get(f"{k}_ci") or [])] if v is not None]
    top_value = max([1.0, *values])
    bottom_value = min([0.0, *values])

    def y(v: float) -> float:
        return top + (top_value - v) / ((top_value - bottom_value) or 1) * plot_h

    ink = "fill: var(--jp-ui-font-color1, #222)"
    muted = "stroke: var(--jp-border-color2, #ccc)"
    out = [f'<text x="4" y="16" style="{ink}" font-weight="bold">{html.escape(title)}</text>' if title else ""]
    for tick in (bottom_value, (bottom_value + top_value) / 2, top_value):
        out.append(f'<line x1="{left}" x2="{width - 6}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" style="{muted}"/>'
                   f'<text x="{left - 3}" y="{y(tick) + 3:.1f}" text-anchor="end" style="{ink}">{tick:.2g}</text>')
    for g, metric in enumerate(metrics):
        x0 = left + gap / 2 + g * group_w
        for i, name in enumerate(models):
            s = summary["models"][name]
            value, ci = s.get(metric), s.get(f"{metric}_ci")
            if value is None:
                continue
            colour = PALETTE[i % len(PALETTE)]
            x = x0 + i * bar
            y_top, y_zero = min(y(value), y(0.0)), max(y(value), y(0.0))
            out.append(f'<rect x="{x + 2}" y="{y_top:.1f}" width="{bar - 4}" height="{y_zero - y_top:.1f}" '
                       f'style="fill: {colour.css()}"><title>{html.escape(name)} {html.escape(metric)} '
                       f'{value:.3f}' + (f" ({ci[0]:.3f}–{ci[1]:.3f})" if ci else "") + "</title></rect>")
            if ci:
                cx = x + bar / 2
                out.append(f'<path d="M{cx},{y(ci[0]):.1f}V{y(ci[1]):.1f}M{cx - 4},{y(ci[0]):.1f}h8M{cx - 4},'
                           f'{y(ci[1]):.1f}h8" style="stroke: var(--jp-ui-font-color1, #222)" stroke-width="1.3"/>')
        out.append(f'<text x="{x0 + bar * len(models) / 2:.1f}" y="{top + plot_h + 14}" text-anchor="middle" '
                   f'style="{ink}">{html.escape(metric.replace("_", " "))}</text>')
    lx = left
    for i, name in enumerate(models):
        colour = PALETTE[i % len(PALETTE)]
        out.append(f'<rect x="{lx}" y="{top + plot_h + 22}" width="10" height="10" style="fill: {colour.css()}"/>'
                   f'<text x="{lx + 14}" y="{top + plot_h + 31}" style="{ink}">{html.escape(name)}</text>')
        lx += 24 + 6.5 * len(name)
    height = top + plot_h + 40
    width = max(width, lx)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" viewBox="0 0 {width:.0f} '
            f'{height}" font-family="sans-serif" font-size="10" class="skyrl-eval-bars">{"".join(out)}</svg>')
