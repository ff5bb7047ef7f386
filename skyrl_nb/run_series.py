"""A run's series as the dashboard draws them, built from metric rows and events as they arrive: reward mean, spread
and pass@n, eval scores, tokens/s, step-time parts, stages, resumes; a resumed run's repeated steps replace the old."""

from __future__ import annotations

import time
from typing import Any

from skyrl_core.metric_names import EVAL_SCORE_KEY, REWARD_KEY, REWARD_STD_KEY, pass_at_n
from skyrl_core.reward_functions import RESERVED_NAMES


class RunSeries:
    """Metric rows -> the curves the views draw (`skyrl_widgets.dashboard.empty_series` layout)."""

    def __init__(self) -> None:
        from skyrl_widgets.dashboard import empty_series

        self.data = empty_series()
        self.times: list[float] = []
        self.model: dict[str, Any] = {}
        """The policy's ``{"total", "trainable", "lora_rank"}`` parameter counts, once the run has started."""
        self.stage: tuple[str, float] | None = None
        """The newest ``stage`` event: ``(name, time)`` (``skyrl_core.choices.Stage``)."""
        self.stage_detail: str | None = None
        """That event's ``detail``, when the engine said more than the stage's name."""
        self.resumed: tuple[int, int | None] | None = None
        """The newest ``resumed`` event: ``(from_step, attempt)`` (attempt None from an older engine)."""
        self.restarts: dict[Any, str] = {}
        """The ``restarted`` events (``trainer.max_restarts``): the failure's line by attempt, oldest first."""

    def add_rows(self, rows: list[dict[str, Any]]) -> int:
        """Append metric rows (a resumed run may repeat steps: later rows replace earlier ones)."""
        d = self.data
        for row in rows:
            step = row.get("step")
            if step is None:
                continue
            if d["step"] and step <= d["step"][-1]:
                self._truncate(step)
            d["step"].append(step)
            self.times.append(row.get("time") or time.time())
            d["reward_mean"].append(row.get(REWARD_KEY))
            d["reward_std"].append(row.get(REWARD_STD_KEY))
            pass_value = None
            for key, value in row.items():
                n = pass_at_n(key)
                if n is not None:
                    d["pass_n"] = n
                    pass_value = value
            d["pass_at"].append(pass_value)
            d["tokens_per_s"].append(row.get("trainer/tokens_per_second"))
            self._add_parts(row)
            for name in d["timing"]:
                d["timing"][name].append(row.get(f"timing/{name}"))
            score = row.get(EVAL_SCORE_KEY)
            if score is not None:
                self._add_eval(step, score)
        return len(rows)

    def _add_parts(self, row: dict[str, Any]) -> None:
        """The row's reward-function series (``reward/<name>``, skyrl_engine.rewards) and ``reward/errors``, each
        aligned on ``step`` (a function first seen at a later step has no point before it)."""
        parts = self.data["reward_parts"]
        for key in row:
            name = function_series(key)
            if name is not None and name not in parts:
                parts[name] = [None] * (len(self.data["step"]) - 1)
        for name, values in parts.items():
            values.append(row.get(f"reward/{name}"))
        self.data["reward_errors"].append(row.get("reward/errors"))

    def add_events(self, events: list[dict[str, Any]]) -> None:
        """Eval scores reported as events (step 0 for `eval_before_train`), the policy's parameter counts
        from the `started` event (`model`), the newest `stage` event (`stage`) and `resumed` event (`resumed`), the
        `restarted` events (`restarts`)."""
        for ev in events:
            if ev.get("kind") == "started" and isinstance(ev.get("policy_parameters"), dict):
                self.model = dict(ev["policy_parameters"])
            if ev.get("kind") == "stage" and isinstance(ev.get("stage"), str):
                self.stage = (ev["stage"], float(ev.get("time") or time.time()))
                # the engine's words for what this stage does this time ("building the tiny model (one-time ...)")
                self.stage_detail = ev["detail"] if isinstance(ev.get("detail"), str) else None
            if ev.get("kind") == "restarted":  # keyed by attempt: a reader may hand an event over twice
                self.restarts[ev.get("attempt", ev.get("time"))] = str(ev.get("error") or ev.get("error_kind") or "")
            if ev.get("kind") == "resumed":
                step, attempt = ev.get("from_step", ev.get("step")), ev.get("attempt")
                self.resumed = (step if isinstance(step, int) else 0, attempt if isinstance(attempt, int) else None)
            if ev.get("kind") != "eval":
                continue
            score = ev.get("eval/all/avg_score", ev.get("avg_score", ev.get("score")))
            if score is not None:
                self._add_eval(int(ev.get("step") or 0), score)

    def _add_eval(self, step: int, score: float) -> None:
        d = self.data
        if step in d["eval_step"]:
            d["eval_score"][d["eval_step"].index(step)] = score
            return
        d["eval_step"].append(step)
        d["eval_score"].append(score)
        pairs = sorted(zip(d["eval_step"], d["eval_score"], strict=True))
        d["eval_step"], d["eval_score"] = [p[0] for p in pairs], [p[1] for p in pairs]

    def _truncate(self, step: int) -> None:
        d = self.data
        keep = sum(1 for s in d["step"] if s < step)
        for key in ("step", "reward_mean", "reward_std", "pass_at", "tokens_per_s"):
            del d[key][keep:]
        for col in [*d["timing"].values(), *d["reward_parts"].values(), d["reward_errors"]]:
            del col[keep:]
        del self.times[keep:]

    @property
    def points(self) -> int:
        """How many reward points there are."""
        return sum(1 for v in self.data["reward_mean"] if v is not None)

    def seconds_per_step(self) -> float | None:
        """Mean wall time of the last (up to) 10 steps."""
        t = self.times[-11:]
        if len(t) < 2:
            return None
        return (t[-1] - t[0]) / (len(t) - 1)


def function_series(key: str) -> str | None:
    """The reward function a metric is the series of (``reward/exact`` -> ``exact``); None for skyrl-nb's own
    ``reward/*`` metrics (``avg_raw_reward``, ``avg_pass_at_8``, ``errors``, a turn's ``turn_1/avg_reward``).

    >>> function_series("reward/exact"), function_series("reward/avg_pass_at_4"), function_series("reward/errors")
    ('exact', None, None)
    """
    name = key[len("reward/"):] if key.startswith("reward/") else ""
    if not name or "/" in name or name in RESERVED_NAMES or pass_at_n(key) is not None:
        return None
    return name


def samples_per_step(config: dict[str, Any]) -> int:
    """Rollouts per training step from a run's resolved config (``train_batch_size x n_samples_per_prompt``);
    0 when the config does not say."""
    trainer, generator = config.get("trainer"), config.get("generator")
    batch = trainer.get("train_batch_size") if isinstance(trainer, dict) else None
    group = generator.get("n_samples_per_prompt") if isinstance(generator, dict) else None
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (batch, group))
    return batch * group if ok else 0
