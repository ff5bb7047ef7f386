"""An evaluation's results side by side: ``res = skyrl_nb.evaluate([...])`` or ``EvalResult("<eval store>")``.

>>> res                                    # doctest: +SKIP
>>> res.table()                            # one row per model: mean reward, pass@k, length, each with its 95% interval
>>> res.diff()                             # prompts the last model gained / lost vs the first, both answers
>>> res.inspect()                          # one prompt, every model's answers and rewards (the first changed prompt)
>>> res.metrics                            # {"eval/trained/pass_at_1": 0.42, ...} for MLflow / the Model Registry
>>> res.save("eval.md")                    # the table as a papermill run's output (.md, .csv or .json)

The numbers are ``skyrl_core.eval_stats.summarize``'s: the engine writes them to ``eval/summary.json`` when the
evaluation ends, and this reads them from there (computing them from the samples when the file is missing, or when
``threshold`` / ``pass_at`` / ``n_boot`` / ``seed`` are asked for). Intervals are percentile-bootstrap intervals
over prompts; a delta is paired (the same prompts drawn for both models).

In a papermill run, ending a cell with ``res`` (or ``res.table()``) writes the table into the executed notebook
as HTML and text; ``res.save("eval.md")`` writes it beside the notebook, e.g. for a CI job's summary.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import PurePosixPath
from typing import Any

from skyrl_core import eval_stats
from skyrl_core.eval_stats import CHANGES, GAINED, LOST, flat_metrics, metric_key

#: What each summary metric is called in the table.
LABELS = {"mean_reward": "mean reward", "response_length": "response length"}
SUFFIXES = (".md", ".csv", ".json")


def _label(metric: str) -> str:
    return LABELS.get(metric, metric)


def _fmt(value: float | None, metric: str, signed: bool = False) -> str:
    if value is None:
        return "-"
    digits = 1 if metric == "response_length" else 3
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


class EvalResult:
    """The results of one evaluation (an eval store), read through ``skyrl_core.eval_store.EvalReader``.

    ``reader`` is an ``EvalReader`` or the store's path / URL. ``threshold`` (a sample is correct when its reward is
    at least this), ``pass_at``, ``n_boot`` and ``seed`` recompute the summary instead of reading the stored one.
    """

    def __init__(self, reader: Any, *, threshold: float | None = None, pass_at: Any = None,
                 n_boot: int | None = None, seed: int | None = None):
        if isinstance(reader, str | os.PathLike):
            from skyrl_core.eval_store import open_eval

            reader = open_eval(reader)
        self.reader = reader
        self._samples: dict[str, Any] = {}
        self._models = list(reader.models())
        if not self._models:
            raise ValueError(f"reader: the eval store {reader.path} lists no models (eval/models.json)")
        asked = {k: v for k, v in (("threshold", threshold), ("pass_at", pass_at), ("n_boot", n_boot),
                                   ("seed", seed)) if v is not None}
        stored = reader.summary()
        if stored and not asked and set(self.model_names) <= set(stored.get("models", {})):
            self.summary: dict[str, Any] = stored
        else:
            settings = {**self._settings(stored), **asked}
            self.summary = eval_stats.summarize({m: self.samples(m) for m in self.model_names}, **settings)

    def _settings(self, stored: dict[str, Any] | None) -> dict[str, Any]:
        """What to summarize with: a stored summary's settings, else the eval's ``evaluation`` section, else pass@1
        and pass@n."""
        if stored:
            return {k: stored[k] for k in ("threshold", "pass_at", "n_boot", "seed") if k in stored}
        try:
            config = self.reader.config() or {}
        except Exception:  # a torn config.yaml: the defaults below
            config = {}
        section = config.get("evaluation") if isinstance(config.get("evaluation"), dict) else {}
        # the section's seed is the sampling's, not the bootstrap's
        out = {k: section[k] for k in ("threshold", "pass_at") if section.get(k) is not None}
        if "pass_at" not in out:
            fewest = min(int(self.samples(m).groupby("prompt_index").size().min()) for m in self.model_names)
            out["pass_at"] = [1, fewest] if fewest > 1 else [1]
        return out

    # ------------------------------------------------------------------ what the store holds
    @property
    def eval_id(self) -> str:
        return str(self.reader.eval_id)

    @property
    def path(self) -> str:
        return str(self.reader.path)

    @property
    def model_names(self) -> list[str]:
        """Model names in the order given to ``evaluate`` (the first is the baseline of every delta)."""
        return [str(m["name"]) for m in self._models]

    def models(self) -> list[dict[str, Any]]:
        """The models as ``eval/models.json`` lists them (name, source, kind, step, path), as ``EvalReader.models``."""
        return [dict(m) for m in self._models]

    @property
    def pass_at(self) -> list[int]:
        return list(self.summary.get("pass_at", [1]))

    @property
    def threshold(self) -> float:
        return float(self.summary.get("threshold", 1.0))

    def _model(self, name: Any, arg: str) -> str:
        if name not in self.model_names:
            raise ValueError(f"{arg}={name!r} is not a model of evaluation {self.eval_id}; models: "
                             + ", ".join(map(repr, self.model_names)))
        return name

    def samples(self, model: str):
        """One model's samples as a pandas DataFrame (one row per answer: prompt_index, sample_index, prompt,
        response, reward, response_length, ground_truth, data_source, reward_error, reward/<fn>)."""
        model = self._model(model, "model")
        if model not in self._samples:
            self._samples[model] = self.reader.samples(model)
        return self._samples[model]

    # ------------------------------------------------------------------ numbers
    def table(self, numeric: bool = False):
        """One row per model: prompts, samples, mean reward, pass@k, response length (and ``reward/<fn>``), the
        deltas vs the first model and the prompts gained / lost. Each value carries its 95% interval: as text
        ``0.420 [0.370, 0.470]`` by default, as separate ``<metric> lo`` / ``<metric> hi`` float columns with
        ``numeric=True`` (what ``save("x.csv")`` writes)."""
        import pandas as pd

        metrics = self._metrics()
        rows = []
        for name in self.model_names:
            s = self.summary["models"][name]
            row: dict[str, Any] = {"model": name, "prompts": s.get("n_prompts"), "samples": s.get("n_samples")}
            for metric in metrics:
                self._cell(row, _label(metric), s.get(metric), s.get(f"{metric}_ci"), metric, numeric)
            for metric in self._delta_metrics():
                self._cell(row, f"Δ {_label(metric)}", s.get(f"delta/{metric}"), s.get(f"delta/{metric}_ci"), metric,
                           numeric, signed=True)
            for key, label in (("prompts_gained", GAINED), ("prompts_lost", LOST)):
                row[label] = s.get(key) if name != self.summary.get("baseline") else (None if numeric else "")
            rows.append(row)
        frame = pd.DataFrame(rows)
        if numeric:
            frame = frame.astype({c: "Int64" for c in ("prompts", "samples", GAINED, LOST) if c in frame})
        return frame

    @staticmethod
    def _cell(row: dict[str, Any], label: str, value: float | None, ci: list[float] | None, metric: str,
              numeric: bool, signed: bool = False) -> None:
        if numeric:
            row[label], row[f"{label} lo"], row[f"{label} hi"] = value, *(ci or (None, None))
            return
        text = _fmt(value, metric, signed)
        if ci and value is not None:
            text += f" [{_fmt(ci[0], metric, signed)}, {_fmt(ci[1], metric, signed)}]"
        row[label] = "" if value is None and signed else text

    def _metrics(self) -> list[str]:
        first = self.summary["models"][self.model_names[0]]
        fns = sorted(k for k in first if k.startswith("reward/") and not k.endswith("_ci"))
        fns = fns if len(fns) > 1 else []  # one function's score is the mean reward
        return ["mean_reward", *fns, *(f"pass@{k}" for k in self.pass_at),
                *(["response_length"] if "response_length" in first else [])]

    def _delta_metrics(self) -> list[str]:
        return ["mean_reward", *(f"pass@{k}" for k in self.pass_at)] if len(self.model_names) > 1 else []

    @property
    def metrics(self) -> dict[str, float]:
        """Flat numbers for MLflow and the SageMaker Model Registry: ``eval/<model>/<metric>``
        (``eval_stats.flat_metrics`` of each model: ``pass@k`` spelled ``pass_at_k`` as MLflow refuses ``@``, an
        interval as ``..._ci_lo`` / ``..._ci_hi``, a delta vs the first model as ``eval/<model>/delta/<metric>``)."""
        return {f"eval/{metric_key(name)}/{key}": value for name in self.model_names
                for key, value in flat_metrics(self.summary["models"][name]).items()}

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready data: ids, the models (models.json), the summary and the per-prompt changes."""
        return {"eval_id": self.eval_id, "path": self.path, "models": self._models, "summary": self.summary,
                "changes": {b: self._diff_lists(self.model_names[0], b) for b in self.model_names[1:]},
                "metrics": self.metrics}

    # ------------------------------------------------------------------ per prompt
    def _diff_lists(self, a: str, b: str) -> dict[str, list[int]]:
        return eval_stats.prompt_diff(self.samples(a), self.samples(b), threshold=self.threshold)

    def _pair(self, a: str | None, b: str | None) -> tuple[str, str]:
        a = self.model_names[0] if a is None else self._model(a, "a")
        b = self.model_names[-1] if b is None else self._model(b, "b")
        return a, b

    def diff(self, a: str | None = None, b: str | None = None):
        """The prompts that changed from model ``a`` (default: the first) to ``b`` (default: the last): ``gained``
        (b solves them, a does not; solved = more than half the samples correct), then ``lost``. One row per
        prompt with the prompt, ground truth, each model's pass@1 and mean reward, and one answer of each: a
        correct one of the model that solves it, a wrong one of the other. ``res.inspect(i)`` shows all."""
        import pandas as pd

        a, b = self._pair(a, b)
        changes = self._diff_lists(a, b)
        rows = []
        for change in (GAINED, LOST):
            for index in changes[change]:
                p = self.prompt(index, [a, b])
                row = {"change": change, "prompt_index": index, "prompt": p["prompt"], "ground_truth": p["ground_truth"]}
                for m in p["models"]:
                    shown = next((s for s in m["samples"] if s["correct"] == m["solved"]), m["samples"][0])
                    row.update({f"{m['name']} pass@1": m["pass@1"], f"{m['name']} mean reward": m["mean_reward"],
                                f"{m['name']} answer": shown["response"], f"{m['name']} reward": shown["reward"]})
                rows.append(row)
        columns = ["change", "prompt_index", "prompt", "ground_truth",
                   *(f"{m} {c}" for m in (a, b) for c in ("pass@1", "mean reward", "answer", "reward"))]
        frame = pd.DataFrame(rows, columns=columns)
        frame.attrs.update(a=a, b=b, gained=len(changes[GAINED]), lost=len(changes[LOST]))
        return frame

    def prompt(self, prompt_index: int, models: list[str] | None = None) -> dict[str, Any]:
        """One prompt as the inspector shows it: its text, ground truth and, per model, every sample's answer,
        reward, correctness, reward error and length, with the model's pass@1 and mean reward on it."""
        models = [self._model(m, "models") for m in (models or self.model_names)]
        out: dict[str, Any] = {"prompt_index": prompt_index, "models": []}
        for name in models:
            frame = self.samples(name)
            rows = frame[frame["prompt_index"] == prompt_index]
            if rows.empty:
                raise ValueError(f"prompt_index={prompt_index!r} is not a prompt of model {name!r}; its prompts: "
                                 f"{int(frame['prompt_index'].min())}..{int(frame['prompt_index'].max())}")
            records = rows.sort_values("sample_index" if "sample_index" in rows else "prompt_index").to_dict("records")
            first = records[0]
            out.setdefault("prompt", first.get("prompt"))
            out.setdefault("ground_truth", _text(first.get("ground_truth")))
            out.setdefault("data_source", _text(first.get("data_source")))
            samples = [_sample(r, self.threshold) for r in records]
            correct = sum(s["correct"] for s in samples)
            out["models"].append({"name": name, "samples": samples, "pass@1": correct / len(samples),
                                  "mean_reward": sum(s["reward"] or 0.0 for s in samples) / len(samples),
                                  "solved": correct / len(samples) > 0.5})
        return out

    def changed_prompts(self, a: str | None = None, b: str | None = None) -> list[dict[str, Any]]:
        """Every prompt with how it changed from ``a`` to ``b`` (gained, lost, both, neither), changed first."""
        a, b = self._pair(a, b)
        changes = self._diff_lists(a, b)
        return [{"prompt_index": i, "change": c} for c in CHANGES for i in changes[c]]

    def worst_prompts(self, n: int = 10, model: str | None = None) -> list[dict[str, Any]]:
        """Up to ``n`` prompts to try again (the playground's list): those ``model`` (default: the last) lost vs
        the first model, then its lowest mean rewards; each ``{"prompt_index", "label", "prompt", "ground_truth"}``."""
        model = self.model_names[-1] if model is None else self._model(model, "model")
        lost = set(self._diff_lists(self.model_names[0], model)[LOST]) if model != self.model_names[0] else set()
        frame = self.samples(model)
        means = frame.groupby("prompt_index")["reward"].mean().fillna(0.0)
        order = sorted(means.index, key=lambda i: (i not in lost, means[i], i))[:max(0, int(n))]
        firsts = frame.drop_duplicates("prompt_index").set_index("prompt_index")
        return [{"prompt_index": int(i), "prompt": firsts.at[i, "prompt"],
                 "ground_truth": _text(firsts.at[i, "ground_truth"]) if "ground_truth" in firsts else None,
                 "label": f"#{int(i)} {LOST if i in lost else f'mean reward {means[i]:.2f}'}"} for i in order]

    def inspect(self, prompt_index: int | None = None, models: list[str] | None = None) -> Any:
        """A view of one prompt with every model's answers and rewards (default: the first changed prompt of the
        last model vs the first), with buttons to step through the gained, lost or all prompts."""
        from skyrl_widgets.eval_view import EvalPromptView

        names = [self._model(m, "models") for m in (models or self.model_names)]
        prompts = self.changed_prompts(names[0], names[-1])
        if prompt_index is None:
            prompt_index = prompts[0]["prompt_index"] if prompts else 0
        payload = self.prompt(prompt_index, names)  # a bad index fails here, before a view exists
        return EvalPromptView(lambda i: self.prompt(i, names), prompts=prompts, first=payload,
                              title=f"{self.eval_id}: {names[-1]} vs {names[0]}")

    # ------------------------------------------------------------------ output
    def changes_text(self) -> str:
        """``trained vs base: 31 prompts gained, 4 lost`` for each model after the first."""
        parts = []
        for name in self.model_names[1:]:
            s = self.summary["models"][name]
            parts.append(f"{name} vs {self.model_names[0]}: {s.get('prompts_gained', 0)} prompts gained, "
                         f"{s.get('prompts_lost', 0)} lost")
        return "; ".join(parts)

    def to_markdown(self) -> str:
        """The table as a Markdown document (a header line, the table, the gained / lost counts)."""
        frame = self.table()
        head = "| " + " | ".join(frame.columns) + " |\n|" + "---|" * len(frame.columns) + "\n"
        body = "".join("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |\n" for row in frame.values)
        foot = f"\n{self.changes_text()}\n" if len(self.model_names) > 1 else ""
        return f"# Evaluation {self.eval_id}\n\n{self._settings_text()}\n\n{head}{body}{foot}"

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the results by the file's suffix: ``.md`` the table as Markdown, ``.csv`` the numeric table
        (``table(numeric=True)``), ``.json`` ``to_dict()``. A local path or a store URL (``s3://...``); returns it.

        >>> res.save("eval.md")   # doctest: +SKIP  (in a papermill notebook: beside the executed notebook)
        """
        from skyrl_core.store import open_store

        text = os.fspath(path)
        suffix = PurePosixPath(text).suffix.lower()
        if suffix not in SUFFIXES:
            raise ValueError(f"path={text!r}: the suffix says the format; allowed: {', '.join(SUFFIXES)}")
        if suffix == ".md":
            data = self.to_markdown()
        elif suffix == ".csv":
            data = self.table(numeric=True).to_csv(index=False)
        else:
            data = json.dumps(self.to_dict(), indent=2, default=str) + "\n"
        folder, _, name = text.rstrip("/").rpartition("/")
        open_store(folder or ".").put(name, data.encode())
        return text

    def _settings_text(self) -> str:
        s = self.summary
        confidence = f"{100 * float(s.get('confidence', 0.95)):g}%"
        ci = (f"{confidence} bootstrap intervals over prompts ({s.get('n_boot')} draws)" if s.get("n_boot")
              else "no intervals")
        return f"correct: reward >= {self.threshold:g}; {ci}; deltas vs {self.model_names[0]}"

    def __repr__(self) -> str:
        lines = [f"EvalResult({self.eval_id!r}, models={self.model_names})"]
        lines += ["  " + line for line in self.table().to_string(index=False).splitlines()]
        if len(self.model_names) > 1:
            lines.append("  " + self.changes_text())
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from skyrl_widgets.eval_view import bars_svg

        table = self.table().to_html(index=False, border=0, na_rep="").replace("<td>", "<td style='white-space:nowrap'>")
        changes = (f"<div>{html.escape(self.changes_text())} &middot; <code>res.diff()</code> lists them, "
                   "<code>res.inspect()</code> shows both answers</div>" if len(self.model_names) > 1 else "")
        return (f"<div><b>Evaluation</b> {html.escape(self.eval_id)} &middot; {len(self.model_names)} models &middot; "
                f"<small>{html.escape(self._settings_text())}</small></div>{table}{changes}"
                f"<div>{bars_svg(self.summary, self.model_names)}</div>")


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    return str(value)


def _sample(row: dict[str, Any], threshold: float) -> dict[str, Any]:
    reward = row.get("reward")
    reward = None if reward is None or reward != reward else float(reward)
    scores = {k.removeprefix("reward/"): (None if v is None or v != v else float(v))
              for k, v in row.items() if isinstance(k, str) and k.startswith("reward/")}
    length = row.get("response_length")
    return {"sample_index": int(row.get("sample_index", 0) or 0), "response": _text(row.get("response")) or "",
            "reward": reward, "correct": eval_stats.is_correct(reward, threshold),
            "reward_error": _text(row.get("reward_error")), "scores": scores,
            "response_length": None if length is None or length != length else int(length)}
