"""Overlay the curves of several runs: ``skyrl_nb.compare([run_a, run_b, ...])``.

>>> from skyrl_nb.compare import compare                                   # doctest: +SKIP
>>> cmp = compare(["~/skyrl-runs/grpo", "~/skyrl-runs/rloo"])               # paths, RunReaders or jobs
>>> cmp                                                                    # reward curves, one per run
>>> compare(runs, metrics=["reward/avg_raw_reward", "policy/policy_kl"], smooth=10)
>>> cmp.frame()                                                            # long frame: run, step, metric, value
>>> cmp.refresh()                                                          # re-read runs still training
>>> compare([job], evals=[res])     # an evaluation's bars (with intervals) and table beside the curves

Drawn with the dashboard's own chart widgets (`skyrl_widgets.charts.MetricChart`: JupyterLab's theme
colours, nice ticks, a read-out under the pointer), one panel per metric titled in words with the key
below. Runs that overlap stay apart: each has its own colour, dash pattern and line width (the first
widest), and a run whose curve equals an earlier one's says so in the legend. Without a widget front
end (papermill, nbconvert) it is a small static SVG. ``figure()`` still gives a plotly figure.
Evaluations (``skyrl_nb.evaluate``'s ``EvalResult``, in ``runs`` or ``evals=``) add a panel of bars with their
95% intervals, one per model, and their table (``eval_table()``).
pandas and plotly are imported only when asked for.
"""

from __future__ import annotations

import html
import sys
import types
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from skyrl_core.frontend import widget_frontend
from skyrl_core.metric_names import EVAL_SCORE_KEY, REWARD_KEY, REWARD_STD_KEY, pass_at_n
from skyrl_core.runs import RunReader
from skyrl_widgets.inspector_data import finite

DEFAULT_METRICS = (REWARD_KEY,)
#: What a metric key reads as, in a panel's title (the key itself stays beneath, small).
METRIC_LABELS = {
    REWARD_KEY: "reward (mean)", REWARD_STD_KEY: "reward spread (std)", EVAL_SCORE_KEY: "eval score",
    "policy/policy_kl": "KL to the reference", "policy/policy_loss": "policy loss", "policy/policy_entropy": "entropy",
    "policy/grad_norm": "gradient norm", "policy/lr": "learning rate", "trainer/tokens_per_second": "tokens / s",
    "timing/step": "step time (s)", "generate/avg_num_tokens": "completion length (tokens)",
}
#: Per run, in order: a dash pattern and a line width, so curves lying on each other all stay visible.
_STROKES = (("", 3.4), ("7 4", 2.4), ("2 3", 1.8), ("10 3 2 3", 1.4))


def metric_label(key: str) -> str:
    """``reward/avg_raw_reward`` -> ``reward (mean)``; ``reward/avg_pass_at_8`` -> ``pass@8``; else the key's
    last part in words."""
    if key in METRIC_LABELS:
        return METRIC_LABELS[key]
    if (n := pass_at_n(key)) is not None:
        return f"pass@{n}"
    return key.rsplit("/", 1)[-1].replace("_", " ")


def _on_reward_scale(key: str) -> bool:
    return key.startswith("reward/avg_") or key.startswith("eval/")


def _is_eval(item: Any) -> bool:
    from skyrl_nb.eval_results import EvalResult

    return isinstance(item, EvalResult)


def _eval_result(item: Any) -> Any:
    """An ``EvalResult`` for an ``evals=`` entry: an EvalResult, an eval job's handle, an EvalReader or a store."""
    from skyrl_nb.eval_results import EvalResult

    if isinstance(item, EvalResult):
        return item
    if callable(getattr(item, "result", None)):  # an EvalJob handle: its result, once the job is done
        return item.result()
    return EvalResult(item)


def _reader(run: Any) -> RunReader:
    if isinstance(run, RunReader):
        return run
    from skyrl_widgets.inspector import run_reader

    return run_reader(run)


def _smoothed(values: list[float | None], window: int) -> list[float | None]:
    """Trailing mean over ``window`` finite values (gaps stay gaps)."""
    if window <= 1:
        return values
    out: list[float | None] = []
    recent: list[float] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        recent.append(v)
        if len(recent) > window:
            recent.pop(0)
        out.append(sum(recent) / len(recent))
    return out


class RunComparison:
    """Several runs' metric curves on shared axes, one subplot per metric."""

    def __init__(self, runs: Sequence[Any], metrics: Iterable[str] = DEFAULT_METRICS,
                 labels: Sequence[str] | None = None, smooth: int = 1, evals: Sequence[Any] = ()):
        runs = list(runs)
        self.evals = [_eval_result(e) for e in [*(r for r in runs if _is_eval(r)), *list(evals or ())]]
        self.readers = [_reader(r) for r in runs if not _is_eval(r)]
        if not self.readers and not self.evals:
            raise ValueError("compare: runs is empty; pass at least one run directory, RunReader or job "
                             "(or an evaluation in evals=)")
        self.metrics = [metrics] if isinstance(metrics, str) else list(metrics)
        if not self.metrics:
            raise ValueError(f"compare: metrics is empty; e.g. metrics=[{REWARD_KEY!r}]")
        self.labels = list(labels) if labels is not None else _unique_labels(self.readers)
        if len(self.labels) != len(self.readers):
            raise ValueError(f"compare: {len(self.labels)} labels for {len(self.readers)} runs")
        self.smooth = max(1, int(smooth))
        self._rows: list[list[dict[str, Any]]] = []
        self.refresh()

    def refresh(self) -> RunComparison:
        """Re-read every run's metrics.jsonl (runs still training gain points)."""
        self._rows = [r.metrics() for r in self.readers]
        return self

    def curves(self) -> dict[str, dict[str, tuple[list[int], list[float | None]]]]:
        """``{metric: {label: (steps, values)}}``, smoothed as asked; missing values are None."""
        out: dict[str, dict[str, tuple[list[int], list[float | None]]]] = {}
        for metric in self.metrics:
            per_run = {}
            for label, rows in zip(self.labels, self._rows, strict=True):
                points = [(int(r["step"]), finite(r.get(metric))) for r in rows if "step" in r and metric in r]
                steps = [s for s, _ in points]
                per_run[label] = (steps, _smoothed([v for _, v in points], self.smooth))
            out[metric] = per_run
        return out

    def frame(self):
        """A long pandas DataFrame with columns run, step, metric, value (unsmoothed)."""
        import pandas as pd

        records = [{"run": label, "step": int(r["step"]), "metric": m, "value": finite(r.get(m))}
                   for label, rows in zip(self.labels, self._rows, strict=True)
                   for r in rows for m in self.metrics if m in r and "step" in r]
        return pd.DataFrame(records, columns=["run", "step", "metric", "value"])

    def figure(self, widget: bool = False):
        """The plotly figure (a ``FigureWidget`` when ``widget=True``)."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        n = len(self.metrics)
        fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=0.08 if n > 1 else 0.0,
                            subplot_titles=self.metrics)
        palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
        for row, (metric, per_run) in enumerate(self.curves().items(), start=1):
            for i, (label, (steps, values)) in enumerate(per_run.items()):
                fig.add_trace(go.Scatter(x=steps, y=values, mode="lines", name=label, legendgroup=label,
                                         showlegend=row == 1, line={"color": palette[i % len(palette)]},
                                         hovertemplate=f"{label}<br>step %{{x}}<br>{metric} %{{y:.4g}}"
                                                       "<extra></extra>"),
                              row=row, col=1)
        fig.update_xaxes(title_text="step", row=n, col=1)
        fig.update_layout(height=260 * n + 60, margin={"l": 50, "r": 20, "t": 40, "b": 40},
                          title=f"{len(self.readers)} runs" + (f" (smoothed over {self.smooth})"
                                                                if self.smooth > 1 else ""))
        return go.FigureWidget(fig) if widget else fig

    def panels(self) -> list[dict[str, Any]]:
        """Per metric: its chart's ``title``, ``subtitle`` (the key), ``series`` and axes, as the widgets and
        the static SVG draw them."""
        from skyrl_widgets.axes import reward_range, step_axis, value_axis
        from skyrl_widgets.charts import points
        from skyrl_widgets.dashboard import PALETTE

        out = []
        for metric, per_run in self.curves().items():
            series, seen = [], []
            for i, (label, (steps, values)) in enumerate(per_run.items()):
                dash, width = _STROKES[i % len(_STROKES)]
                same = next((other for other, curve in seen if curve == (steps, values) and steps), None)
                seen.append((label, (steps, values)))
                series.append({"name": label, "colour": PALETTE[i % len(PALETTE)].css(), "kind": "line", "dash": dash,
                               "width": width, "markers": len(steps) <= 60, "points": points(steps, values),
                               "note": f"(same curve as {same})" if same else "", "_colour": PALETTE[i % len(PALETTE)]})
            steps_all = [s for _, (steps, _) in per_run.items() for s in steps]
            values_all = [v for _, (_, values) in per_run.items() for v in values]
            y = (value_axis((), fixed=reward_range(values_all)) if _on_reward_scale(metric)
                 else value_axis(values_all))
            out.append({"title": metric_label(metric), "subtitle": metric, "series": series,
                        "x": step_axis(min(steps_all, default=0), max(steps_all, default=1)), "y": y})
        return out

    def widget(self) -> Any:
        """The comparison as the dashboard's chart widgets, one panel per metric (made on each call)."""
        import ipywidgets as w

        from skyrl_widgets.charts import MetricChart

        charts = [MetricChart(title=p["title"], subtitle=p["subtitle"], x_axis=p["x"], y_axis=p["y"], height=240,
                              series=[{k: v for k, v in s.items() if not k.startswith("_")} for s in p["series"]])
                  for p in (self.panels() if self.readers else [])]
        charts += [w.HTML(self._eval_html(res)) for res in self.evals]
        return w.GridBox(charts, layout=w.Layout(grid_template_columns="repeat(auto-fit, minmax(420px, 1fr))",
                                                 width="100%"))

    def eval_table(self):
        """The evaluations' tables (``EvalResult.table(numeric=True)``) in one DataFrame, an ``eval`` column first."""
        import pandas as pd

        frames = [res.table(numeric=True).assign(eval=res.eval_id) for res in self.evals]
        if not frames:
            return pd.DataFrame(columns=["eval", "model"])
        frame = pd.concat(frames, ignore_index=True)
        return frame[["eval", *(c for c in frame.columns if c != "eval")]]

    @staticmethod
    def _eval_html(res: Any) -> str:
        """One evaluation beside the curves: its bars with intervals, its table and the prompts gained / lost."""
        from skyrl_widgets.eval_view import bars_svg

        table = res.table().to_html(index=False, border=0, na_rep="")
        changes = f"<div><small>{html.escape(res.changes_text())}</small></div>" if len(res.model_names) > 1 else ""
        return (f"<div class='skyrl-compare-eval' style='overflow-x:auto'>{bars_svg(res.summary, res.model_names, title=res.eval_id)}"
                f"{table}{changes}</div>")

    def to_svg(self) -> str:
        """The comparison as a standalone SVG (what papermill and nbconvert keep); evaluations are not in it."""
        from skyrl_widgets.dashboard import Panel, legend_svg, svg_document

        if not self.readers:
            return svg_document("", 40, header="no runs (evaluations only)")
        panels, body = self.panels(), []
        for row, p in enumerate(panels):
            panel = Panel(0, 30 + row * 190, p["title"], {"x": p["x"], "y": p["y"]})
            for s in p["series"]:
                panel.line([q[0] for q in s["points"]], [q[1] for q in s["points"]], s["_colour"], dash=s["dash"])
            body.append(panel.svg())
        items = [(s["name"] + (f" {s['note']}" if s["note"] else ""), s["_colour"]) for s in panels[0]["series"]]
        height = 30 + len(panels) * 190 + 10
        return svg_document("".join(body) + legend_svg(items, height - 6), height,
                            header=f"{len(self.readers)} runs" + (f" (smoothed over {self.smooth})" if self.smooth > 1 else ""))

    def summary(self) -> list[dict[str, Any]]:
        """Per run: steps logged, last and best value of the first metric."""
        metric = self.metrics[0]
        out = []
        for label, reader, rows in zip(self.labels, self.readers, self._rows, strict=True):
            values = [v for r in rows if (v := finite(r.get(metric))) is not None]
            out.append({"run": label, "path": str(reader.run_dir), "steps": len(rows),
                        "last": values[-1] if values else None, "best": max(values) if values else None})
        return out

    def __repr__(self) -> str:
        parts = ", ".join(f"{s['run']}: {s['steps']} steps, last {_fmt(s['last'])}" for s in self.summary())
        for res in self.evals:
            scores = ", ".join(f"{m} {_fmt(res.summary['models'][m].get('pass@1'))}" for m in res.model_names)
            parts += ("; " if parts else "") + f"eval {res.eval_id}: pass@1 {scores}"
        return f"RunComparison({self.metrics[0]}; {parts})"

    def _repr_html_(self) -> str:
        evals = "".join(self._eval_html(res) for res in self.evals)
        if not self.readers:
            return evals
        rows = "".join(f"<tr><td>{html.escape(s['run'])}</td><td>{s['steps']}</td><td>{_fmt(s['last'])}</td>"
                       f"<td>{_fmt(s['best'])}</td></tr>" for s in self.summary())
        return (f"<table><tr><th>run</th><th>steps</th><th>last {html.escape(metric_label(self.metrics[0]))}</th>"
                f"<th>best</th></tr>{rows}</table>{evals}")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        # the chart widgets where a widget front end draws them; a static SVG and the table elsewhere
        if widget_frontend():
            bundle = dict(self.widget()._repr_mimebundle_(include=include, exclude=exclude) or {})
            bundle["text/html"] = self._repr_html_()
        else:
            curves = f"<div>{self.to_svg()}</div>" if self.readers else ""
            bundle = {"text/html": f"{curves}{self._repr_html_()}"}
        bundle["text/plain"] = repr(self)
        return bundle


def compare(runs: Sequence[Any], metrics: Iterable[str] | str = DEFAULT_METRICS,
            labels: Sequence[str] | None = None, smooth: int = 1, evals: Sequence[Any] = ()) -> RunComparison:
    """Overlay the curves of several runs (paths, ``RunReader``s or jobs), one subplot per metric; evaluations
    (``EvalResult``s among ``runs``, or in ``evals``: results, eval stores) add their bars and table beside them.

    >>> compare(["runs/a", "runs/b"], metrics=["reward/avg_raw_reward", "policy/policy_kl"])  # doctest: +SKIP
    >>> compare([job, res])                       # a run's curves and its evaluation  # doctest: +SKIP
    """
    return RunComparison(runs, metrics=metrics, labels=labels, smooth=smooth, evals=evals)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _unique_labels(readers: list[RunReader]) -> list[str]:
    labels = [r.run_id for r in readers]
    if len(set(labels)) == len(labels):
        return labels
    # same run id under different roots: add the parent folder
    return [f"{Path(str(r.run_dir)).parent.name}/{r.run_id}" for r in readers]  # a Path, or an s3:// URL


class _CallableModule(types.ModuleType):
    """Importing ``skyrl_nb.compare`` binds the module as ``skyrl_nb.compare``; calling it still compares."""

    def __call__(self, runs: Sequence[Any], metrics: Iterable[str] | str = DEFAULT_METRICS,
                 labels: Sequence[str] | None = None, smooth: int = 1, evals: Sequence[Any] = ()) -> RunComparison:
        return compare(runs, metrics=metrics, labels=labels, smooth=smooth, evals=evals)


sys.modules[__name__].__class__ = _CallableModule
