"""Try one prompt on two models side by side, each answer with its reward: ``skyrl_nb.playground(job)``.

>>> pg = skyrl_nb.playground(job)                    # doctest: +SKIP
>>> pg                                               # a prompt box, Run, the base's and the trained model's answers
>>> pg.run("What is 17 + 25?", ground_truth="42")    # the same from a cell: an `Answers` table  # doctest: +SKIP
>>> skyrl_nb.playground(job, eval_result=res)        # a dropdown of the evaluation's worst prompts  # doctest: +SKIP

The answers come from the cluster, never from a copy of a model in the kernel: a run is an evaluation job with one
prompt and one sample per model (`skyrl_nb.evaluate`, or `job.evaluate` for a job: its starting model against its
latest checkpoint), on the same generation backend training used, scored by the same reward functions. A
``generate(prompt, ground_truth) -> [{"model", "response", "reward", "reward_error"}, ...]`` callable given instead
replaces that job (tests, or another backend). Run in the view generates in a kernel thread, so the notebook stays
usable; the status line counts the seconds and ends with the time it took or the error, in one line.

One idea, one prompt on several models from the notebook: the controller, the answers it returns, where they come
from (an evaluation job) and the evaluation's prompts worth trying again.
"""

from __future__ import annotations

import html
import math
import numbers
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyrl_core.frontend import widget_frontend

#: ``generate(prompt, ground_truth)``: one answer per model. The prompt is text or a list of chat messages.
Generate = Callable[[Any, str | None], list[dict[str, Any]]]
#: How many of an evaluation's prompts the dropdown offers.
WORST_PROMPTS = 20
_STATUS_CHARS = 300


@dataclass
class Answers:
    """One prompt's answers, one per model, in the models' order: ``answers["trained"]["reward"]``."""

    prompt: Any
    ground_truth: str | None
    answers: list[dict[str, Any]]
    seconds: float

    def __getitem__(self, key: int | str) -> dict[str, Any]:
        if isinstance(key, int):
            return self.answers[key]
        for answer in self.answers:
            if answer["model"] == key:
                return answer
        raise KeyError(f"model {key!r}: no answer; models: {', '.join(a['model'] for a in self.answers)}")

    def __iter__(self):
        return iter(self.answers)

    def __len__(self) -> int:
        return len(self.answers)

    def frame(self):
        """The answers as a pandas DataFrame: model, response, reward, reward_error."""
        import pandas as pd  # heavy: only when a frame is asked for

        return pd.DataFrame(self.answers, columns=["model", "response", "reward", "reward_error"])

    def __repr__(self) -> str:
        rows = "\n".join(f"  {a['model']}: reward {_fmt(a['reward'])}"
                         + (f" (reward error: {a['reward_error']})" if a["reward_error"] else "")
                         + f"\n    {_short(a['response'], 200)}" for a in self.answers)
        truth = f", ground truth {self.ground_truth!r}" if self.ground_truth is not None else ""
        return f"Answers to {_short(_prompt_text(self.prompt), 80)!r}{truth} in {self.seconds:.1f} s:\n{rows}"

    def _repr_html_(self) -> str:
        truth = ("" if self.ground_truth is None
                 else f" &middot; ground truth <code>{html.escape(self.ground_truth)}</code>")
        rows = "".join(
            f"<tr><td style='text-align:left'><b>{html.escape(a['model'])}</b></td>"
            f"<td style='text-align:left;white-space:pre-wrap'>{html.escape(a['response'])}</td>"
            f"<td>{_fmt(a['reward'])}</td><td style='text-align:left'>{html.escape(a['reward_error'] or '')}</td></tr>"
            for a in self.answers)
        return (f"<div><b>Prompt</b> <code>{html.escape(_short(_prompt_text(self.prompt), 400))}</code>{truth} "
                f"&middot; {self.seconds:.1f} s<table><tr><th>model</th><th>answer</th><th>reward</th>"
                f"<th>reward error</th></tr>{rows}</table></div>")


@dataclass(eq=False)
class Playground:
    """The controller behind `playground`: holds the models and the way answers are made, runs prompts and
    keeps the view (`skyrl_widgets.playground.PlaygroundView`) in step.

    ``models`` are the names of the panes before the first answer; ``examples`` what the dropdown offers
    (`worst_prompts`); ``last`` the latest `Answers`.
    """

    generate: Generate
    models: list[str] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)
    title: str = "Playground"
    last: Answers | None = field(default=None, init=False)
    error: str = field(default="", init=False)
    _view: Any = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _started: float | None = field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    # -- running a prompt -------------------------------------------------------------------------

    def run(self, prompt: Any, ground_truth: Any = None) -> Answers:
        """Generate one answer per model to ``prompt`` (text, or a list of ``{role, content}`` messages) and score
        each against ``ground_truth``; the view shows them too. Waits; raises what went wrong (also on the
        status line)."""
        prompt, truth = _checked_prompt(prompt), _checked_truth(ground_truth)
        self._begin(prompt, truth)
        return self._generate(prompt, truth)

    def start(self, prompt: Any, ground_truth: Any = None) -> threading.Thread:
        """`run` in a kernel thread (what Run in the view does); the outcome is on the status line and in `last`."""
        prompt, truth = _checked_prompt(prompt), _checked_truth(ground_truth)
        self._begin(prompt, truth)

        def work() -> None:
            try:
                self._generate(prompt, truth)
            except Exception:  # noqa: BLE001 - already said on the status line, in one line
                pass

        self._thread = threading.Thread(target=work, daemon=True, name="skyrl-playground")
        self._thread.start()
        return self._thread

    def wait(self, timeout: float | None = None) -> Answers | None:
        """Wait for a prompt `start` (or Run) began; the latest `Answers` (None when it failed)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return None if self.error else self.last

    @property
    def running(self) -> bool:
        """Whether a prompt is being answered now."""
        return self._started is not None

    def _begin(self, prompt: Any, truth: str | None) -> None:
        with self._lock:
            if self._started is not None:
                raise RuntimeError(f"playground: a prompt is still running ({time.monotonic() - self._started:.0f} s "
                                   "so far); wait for it (`.wait()`)")
            self._started = time.monotonic()
        self.error = ""
        self._show(running=True, status=f"generating with {_names(self.models) or 'the models'} on the cluster…",
                   error=False, answers=[], prompt=_prompt_text(prompt), ground_truth=truth or "")

    def _generate(self, prompt: Any, truth: str | None) -> Answers:
        started = self._started if self._started is not None else time.monotonic()
        try:
            answers = _checked_answers(self.generate(prompt, truth))
        except Exception as exc:
            self.error = _one_line(exc)
            self._show(running=False, error=True,
                       status=f"failed after {time.monotonic() - started:.1f} s: {self.error}"[:_STATUS_CHARS])
            raise
        finally:
            with self._lock:
                self._started = None
        self.last = Answers(prompt, truth, answers, time.monotonic() - started)
        for answer in answers:
            if answer["model"] not in self.models:
                self.models.append(answer["model"])
        status = f"{len(answers)} answers in {self.last.seconds:.1f} s"
        if any(a["reward"] is not None for a in answers):
            status += " (rewards: " + " · ".join(f"{a['model']} {_fmt(a['reward'])}" for a in answers) + ")"
        self._show(running=False, error=False, answers=answers, models=list(self.models), status=status)
        return self.last

    # -- the view ---------------------------------------------------------------------------------

    def widget(self) -> Any:
        """The view (made once; every display of the playground shows the same one)."""
        if self._view is None:
            from skyrl_widgets.playground import PlaygroundView  # heavy (anywidget): only where it is shown

            self._view = PlaygroundView(
                title=self.title, models=list(self.models), running=self.running,
                examples=[{k: e[k] for k in ("label", "prompt", "ground_truth")} for e in self.examples])
            if self.last is not None:
                self._view.answers = self.last.answers
            self._view.on_run(self._clicked)
        return self._view

    def _clicked(self, prompt: str, truth: str, example: int) -> None:
        chosen = self.examples[example] if 0 <= example < len(self.examples) else None
        # an example left as picked runs as the evaluation asked it (its chat turns, system prompt included)
        asked: Any = chosen["messages"] if chosen and chosen.get("messages") and chosen["prompt"] == prompt else prompt
        try:
            self.start(asked, truth or None)
        except (ValueError, RuntimeError) as exc:
            self.error = _one_line(exc)
            self._show(status=self.error, error=True)

    def _show(self, **traits: Any) -> None:
        if self._view is not None:
            with self._view.hold_sync():
                for name, value in traits.items():
                    setattr(self._view, name, value)

    # -- display ----------------------------------------------------------------------------------

    def __repr__(self) -> str:
        if self.running:
            state = "generating"
        elif self.error:
            state = f"failed: {self.error}"
        elif self.last:
            state = "last: " + " · ".join(f"{a['model']} {_fmt(a['reward'])}" for a in self.last)
        else:
            state = "no prompt run yet"
        worst = f", {len(self.examples)} worst prompts" if self.examples else ""
        return f"Playground({_names(self.models) or 'models named by the first answers'}{worst}; {state})"

    def _repr_html_(self) -> str:
        head = f"<div><b>{html.escape(self.title)}</b> &middot; {html.escape(_names(self.models) or '?')}"
        if self.error:
            head += f" &middot; failed: {html.escape(self.error)}"
        head += "</div>"
        return head + (self.last._repr_html_() if self.last else "<div><i>no prompt run yet: "
                       "<code>.run(prompt, ground_truth)</code></i></div>")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        # the view where a widget front end draws it; the answers as a table elsewhere (papermill, nbconvert)
        bundle: dict[str, Any] = {}
        if widget_frontend():
            got = self.widget()._repr_mimebundle_(include=include, exclude=exclude) or {}
            bundle = dict(got[0] if isinstance(got, tuple) else got)
        bundle["text/html"] = self._repr_html_()
        bundle["text/plain"] = repr(self)
        return bundle


def playground(job_or_models: Any = None, cluster: Any = None, reward: Any = None, eval_result: Any = None, *,
               sampling: Mapping[str, Any] | None = None, generate: Generate | None = None,
               **evaluate_kwargs: Any) -> Playground:
    """A playground for ``job_or_models``: a `Job` (or a `RunReader`) gives its starting model ("base") and its
    latest checkpoint ("trained", or ``step=N``), as `job.evaluate` does; a list or a ``{name: model}`` dict gives those models (any
    model `skyrl_nb.evaluate` takes). Each Run is one evaluation job on ``cluster`` (a job's own by default)
    scored with ``reward`` and ``sampling`` (a job's own by default). ``eval_result`` (an ``EvalResult``) fills a
    dropdown with its worst prompts and their ground truth; given alone, its own models are used. Other keywords
    go to each evaluation (``backend="vllm"``, ``run_root``, ``seed``, ``runtime_env``, ... as `skyrl_nb.evaluate`
    takes them). ``generate`` replaces the evaluation job (see the module docstring).

    >>> pg = playground({"base": "builtin://tiny-qwen2", "trained": job}, cluster=cluster)  # doctest: +SKIP
    """
    if job_or_models is None and eval_result is not None:
        job_or_models = eval_models(eval_result)
    names, evaluate, of_a_run = _models(job_or_models)
    if generate is None:
        _check_evaluate_kwargs(evaluate_kwargs, of_a_run)
        generate = _evaluation(evaluate, cluster=cluster, reward=reward, sampling=sampling, **evaluate_kwargs)
    elif not callable(generate):
        raise TypeError(f"generate: expected a callable generate(prompt, ground_truth), got {type(generate).__name__}")
    elif evaluate_kwargs:
        raise ValueError(f"{sorted(evaluate_kwargs)[0]}: an evaluation's argument, but generate= replaces the "
                         "evaluation; give one or the other")
    examples = worst_prompts(eval_result) if eval_result is not None else []
    return Playground(generate=generate, models=names, examples=examples)


# -- models and the evaluation job --------------------------------------------------------------------


def _models(job_or_models: Any) -> tuple[list[str], Callable[..., Any], bool]:
    """The pane names, the function that evaluates those models on some data, and whether they are a run's."""
    from skyrl_core.runs import RunReader  # light; here so the module's imports stay the frontend check alone

    if isinstance(job_or_models, RunReader):
        reader = job_or_models

        def evaluate_reader(**kwargs: Any) -> Any:
            from skyrl_nb.eval_jobs import evaluate_run  # the eval job machinery, on first use

            return evaluate_run(reader, **kwargs)

        return ["base", "trained"], evaluate_reader, True
    if hasattr(job_or_models, "evaluate") and not isinstance(job_or_models, (str, Mapping, Sequence)):
        return ["base", "trained"], job_or_models.evaluate, True
    if isinstance(job_or_models, Mapping) and job_or_models and all(isinstance(k, str) and k for k in job_or_models):
        models: Any = dict(job_or_models)
        names = list(models)
    elif isinstance(job_or_models, (list, tuple)) and job_or_models:
        models, names = list(job_or_models), []  # named by `evaluate`; the first answers name the panes
    else:
        raise ValueError(f"job_or_models: {_short(repr(job_or_models), 80)} is not a job, a run, or a non-empty list "
                         "or {name: model} dict of models")

    def evaluate(**kwargs: Any) -> Any:
        import skyrl_nb  # the package's lazy `evaluate` (its eval job machinery loads on first use)

        return skyrl_nb.evaluate(models, **kwargs)

    return names, evaluate, False


def _check_evaluate_kwargs(given: Mapping[str, Any], of_a_run: bool) -> None:
    """One line for a keyword the playground sets itself or `skyrl_nb.evaluate` does not take."""
    import inspect

    from skyrl_nb.eval_jobs import evaluate  # its signature says what an evaluation takes

    fixed = sorted({"data", "n", "pass_at", "wait"} & set(given))
    if fixed:
        raise ValueError(f"{fixed[0]}: the playground sets it (one prompt, one answer per model); leave it out")
    allowed = set(inspect.signature(evaluate).parameters) - {"models", "data", "n", "pass_at", "wait"}
    allowed |= {"step", "against"} if of_a_run else set()
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise ValueError(f"{unknown[0]}: not an argument of an evaluation{' of a run' if of_a_run else ''}; "
                         f"allowed: {', '.join(sorted(allowed))}")


def _evaluation(evaluate: Callable[..., Any], *, cluster: Any, reward: Any, sampling: Any, **more: Any) -> Generate:
    """A `Generate` that runs one evaluation job: one prompt, one sample per model."""
    given = {k: v for k, v in (("cluster", cluster), ("reward", reward), ("sampling", sampling)) if v is not None}
    given = {"name": "playground", **given, **more}

    def generate(prompt: Any, ground_truth: str | None) -> list[dict[str, Any]]:
        row: dict[str, Any] = {"prompt": prompt}
        if ground_truth is not None:
            row["ground_truth"] = ground_truth
        result = evaluate(data=[row], n=1, pass_at=(1,), **given)
        return eval_answers(result)

    return generate


def eval_models(eval_result: Any) -> dict[str, str]:
    """``{name: source}`` of the models an ``EvalResult`` compared (a run's step as ``"<run>@step=N"``)."""
    out = {}
    for m in _eval_model_records(eval_result):
        source = str(m.get("source") or m.get("path"))
        if m.get("kind") == "run" and m.get("step") is not None and "@step=" not in source:
            source = f"{source}@step={m['step']}"
        out[str(m["name"])] = source
    return out


def eval_answers(result: Any) -> list[dict[str, Any]]:
    """The first sample of the first prompt of each model of an ``EvalResult``, as answers, in the models' order."""
    answers = []
    for name in _eval_model_names(result):
        frame = result.samples(name)
        if len(frame) == 0:
            raise RuntimeError(f"evaluation {getattr(result, 'eval_id', '?')}: no sample of model {name!r}")
        row = frame.sort_values(["prompt_index", "sample_index"]).iloc[0]
        answers.append({"model": name, "response": row["response"], "reward": row.get("reward"),
                        "reward_error": row.get("reward_error")})
    return _checked_answers(answers)


def worst_prompts(eval_result: Any, limit: int = WORST_PROMPTS) -> list[dict[str, Any]]:
    """An ``EvalResult``'s worst prompts (``EvalResult.worst_prompts``: those the last model lost against the first,
    then its lowest mean rewards) as the dropdown offers them: ``{"label", "prompt", "ground_truth", "messages",
    "prompt_index"}``, ``prompt`` the last user turn (what the prompt box shows), ``messages`` the chat turns the
    evaluation asked (None for a prompt with no chat markup)."""
    from skyrl_widgets.inspector_data import chat_turns  # the inspector's reading of chat markup, on use

    if not callable(getattr(eval_result, "worst_prompts", None)):
        raise ValueError(f"eval_result: {type(eval_result).__name__} is not an EvalResult (skyrl_nb.evaluate's "
                         "result, or skyrl_nb.eval_results.EvalResult(path))")
    out = []
    for worst in eval_result.worst_prompts(limit):
        text = str(worst["prompt"])
        turns = [t for t in chat_turns(text) or [] if not t.get("open")]
        users = [t["content"] for t in turns if t["role"] == "user"]
        shown = users[-1].strip() if users else text
        out.append({"label": f"{worst['label']} · {_short(shown, 60)}", "prompt": shown,
                    "ground_truth": worst.get("ground_truth") or "", "prompt_index": int(worst["prompt_index"]),
                    "messages": [{"role": t["role"], "content": t["content"]} for t in turns] or None})
    return out


def _eval_model_records(eval_result: Any) -> list[dict[str, Any]]:
    reader = getattr(eval_result, "reader", None)
    for source in (reader, eval_result):
        models = getattr(source, "models", None)
        got = models() if callable(models) else models
        if got:
            return [m if isinstance(m, Mapping) else {"name": str(m)} for m in got]
    raise ValueError(f"eval_result: {type(eval_result).__name__} names no models (expected an EvalResult)")


def _eval_model_names(eval_result: Any) -> list[str]:
    return [str(m["name"]) for m in _eval_model_records(eval_result)]


# -- checks and words ---------------------------------------------------------------------------------


def _checked_prompt(prompt: Any) -> Any:
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("prompt: empty; type a question for the models")
        return prompt
    if (isinstance(prompt, list) and prompt
            and all(isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                    for m in prompt)):
        return [dict(m) for m in prompt]
    raise ValueError(f"prompt: {_short(repr(prompt), 60)}; expected text or a non-empty list of "
                     "{role, content} messages")


def _checked_truth(truth: Any) -> str | None:
    if truth is None or (isinstance(truth, str) and not truth.strip()):
        return None
    if isinstance(truth, (str, int, float)) and not isinstance(truth, bool):
        return str(truth)
    raise ValueError(f"ground_truth: {_short(repr(truth), 60)}; expected text, a number or None")


def _checked_answers(answers: Any) -> list[dict[str, Any]]:
    """``generate``'s answers as ``{model, response, reward: float|None, reward_error: str|None}``."""
    if not isinstance(answers, (list, tuple)) or not answers:
        raise TypeError(f"generate returned {_short(repr(answers), 60)}; expected a non-empty list of "
                        "{model, response, reward, reward_error} dicts")
    out = []
    for i, a in enumerate(answers):
        if not isinstance(a, Mapping) or "model" not in a or "response" not in a:
            raise TypeError(f"generate's answer {i}: {_short(repr(a), 60)}; expected a dict with model and response")
        reward = a.get("reward")
        reward = float(reward) if isinstance(reward, numbers.Real) and math.isfinite(reward) else None
        error = a.get("reward_error")
        error = None if error is None or error != error or error == "" else str(error)
        out.append({"model": str(a["model"]), "response": "" if a["response"] is None else str(a["response"]),
                    "reward": reward, "reward_error": error})
    return out


def _one_line(exc: BaseException) -> str:
    """An error in one line: a ValueError's own words (they name the argument), else with its type."""
    text = " ".join(str(exc).split())
    return text if isinstance(exc, ValueError) and text else f"{type(exc).__name__}: {text}".rstrip(": ")


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list):
        users = [m["content"] for m in prompt if m.get("role") == "user"]
        return users[-1] if users else str(prompt)
    return str(prompt)


def _names(models: list[str]) -> str:
    return " and ".join([", ".join(models[:-1]), models[-1]] if len(models) > 1 else models)


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{float(value):.3g}"


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"
