"""The numbers of an evaluation: pass@k, per-model summaries with bootstrap intervals, the per-prompt difference.

One definition shared by the eval engine (which writes ``eval/summary.json`` with :func:`summarize`), the notebook's
``EvalResult``, MLflow and the model-registry metrics, so every place shows the same figures.

A *sample* is a mapping with at least ``prompt_index`` and ``reward`` (``response_length``, ``reward_error`` and
``reward/<fn>`` are used when present), one per generated answer, as the eval store's Parquet rows. A sample is
*correct* when ``reward >= threshold``. A missing reward (None / NaN) counts as 0, as the engine scores a failed
reward call. numpy is imported inside :func:`summarize` only, so ``import skyrl_nb`` stays light.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CONFIDENCE = 0.95
#: How a prompt changed from one model to another (:func:`prompt_diff`'s keys, in this order)
GAINED, LOST, BOTH, NEITHER = CHANGES = ("gained", "lost", "both", "neither")  # a prompt's change, not a run state
DRAWS_PER_BLOCK = 256  # bootstrap draws made at once: bounds memory at DRAWS_PER_BLOCK x prompts counts


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one prompt with ``n`` samples of which ``c`` are correct: ``1 - C(n-c, k) / C(n, k)``,
    the chance that ``k`` of the ``n`` samples drawn without replacement hold at least one correct one.

    >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 2), pass_at_k(4, 0, 4), pass_at_k(4, 3, 2)
    (0.25, 0.5, 0.0, 1.0)
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"pass_at_k: {name}={value!r} is not an integer")
    if n < 1:
        raise ValueError(f"pass_at_k: n={n} samples; allowed: n >= 1")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: c={c} correct of n={n} samples; allowed: 0 <= c <= n")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: k={k} with n={n} samples; allowed: 1 <= k <= n")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _reward(value: Any) -> float:
    if value is None:
        return 0.0
    value = float(value)
    return value if math.isfinite(value) else 0.0


def is_correct(reward: Any, threshold: float = 1.0) -> bool:
    """Whether a sample with this reward counts as correct: ``reward >= threshold``, a missing reward never.

    >>> is_correct(1.0), is_correct(0.5, threshold=0.5), is_correct(None), is_correct(float("nan"), 0.0)
    (True, True, False, False)
    """
    if reward is None:
        return False
    reward = float(reward)
    return math.isfinite(reward) and reward >= threshold


@dataclass
class _Prompt:
    """The samples of one prompt, reduced to what the metrics need."""

    n: int = 0
    correct: int = 0
    reward_sum: float = 0.0
    length_sum: float = 0.0
    lengths: int = 0
    fn_sums: dict[str, float] = field(default_factory=dict)
    errors: int = 0

    @property
    def solved(self) -> bool:
        return self.correct / self.n > 0.5


def _rows(samples: Any, name: str) -> list[Mapping[str, Any]]:
    if hasattr(samples, "to_dict") and hasattr(samples, "columns"):  # a DataFrame, as EvalReader.samples gives
        return samples.to_dict("records")
    if isinstance(samples, Mapping) or isinstance(samples, str | bytes) or not isinstance(samples, Iterable):
        raise ValueError(f"{name}: {type(samples).__name__} is not a list of samples (mappings with prompt_index "
                         "and reward) or a DataFrame")
    return list(samples)


def _by_prompt(samples: Any, threshold: float, name: str) -> dict[int, _Prompt]:
    """Samples grouped by ``prompt_index`` (sorted), checked once."""
    prompts: dict[int, _Prompt] = {}
    rows = _rows(samples, name)
    if not rows:
        raise ValueError(f"{name}: no samples")
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or "prompt_index" not in row or "reward" not in row:
            raise ValueError(f"{name}[{i}]: {row!r:.80} is not a sample; it needs prompt_index and reward")
        try:
            index, reward = int(row["prompt_index"]), _reward(row["reward"])
        except (TypeError, ValueError):
            raise ValueError(f"{name}[{i}]: prompt_index={row['prompt_index']!r}, reward={row['reward']!r}; "
                             "allowed: an integer index and a number") from None
        p = prompts.setdefault(index, _Prompt())
        p.n += 1
        p.correct += is_correct(row["reward"], threshold)
        p.reward_sum += reward
        if row.get("response_length") is not None:
            p.length_sum += float(row["response_length"])
            p.lengths += 1
        if row.get("reward_error") not in (None, "") and not (isinstance(row["reward_error"], float)
                                                            and math.isnan(row["reward_error"])):
            p.errors += 1
        for key, value in row.items():
            if isinstance(key, str) and key.startswith("reward/"):
                p.fn_sums[key] = p.fn_sums.get(key, 0.0) + _reward(value)
    return dict(sorted(prompts.items()))


def _columns(prompts: Sequence[_Prompt], pass_at: Sequence[int]) -> dict[str, tuple[list[float], list[float]]]:
    """Each metric as per-prompt (numerator, denominator): the metric is sum(num) / sum(den) over the prompts
    drawn, so a bootstrap draw of prompts recomputes it exactly the way the point value is computed.

    mean reward and ``reward/<fn>`` are means over samples (the run's own ``eval/all/avg_score``); pass@k is the
    mean over prompts of each prompt's unbiased pass@k; response length is the mean over samples that have one."""
    ones = [1.0] * len(prompts)
    cols: dict[str, tuple[list[float], list[float]]] = {
        "mean_reward": ([p.reward_sum for p in prompts], [float(p.n) for p in prompts])}
    for k in pass_at:
        cols[f"pass@{k}"] = ([pass_at_k(p.n, p.correct, k) for p in prompts], ones)
    if all(p.lengths for p in prompts):
        cols["response_length"] = ([p.length_sum for p in prompts], [float(p.lengths) for p in prompts])
    fns = sorted({fn for p in prompts for fn in p.fn_sums})
    for fn in fns:
        cols[fn] = ([p.fn_sums.get(fn, 0.0) for p in prompts], [float(p.n) for p in prompts])
    return cols


def _draws(cols: Mapping[str, tuple[list[float], list[float]]], n_boot: int, seed: int) -> Any:
    """Each metric recomputed on ``n_boot`` draws of the prompts with replacement: an array draws x metrics (in the
    order of ``cols``). The draws depend only on ``seed``, ``n_boot`` and the number of prompts, so two models' columns
    over the same prompts get the same draws: their difference per draw is a paired bootstrap."""
    import numpy as np

    num = np.array([c[0] for c in cols.values()], dtype=np.float64).T  # prompts x metrics
    den = np.array([c[1] for c in cols.values()], dtype=np.float64).T
    n_prompts = num.shape[0]
    rng = np.random.default_rng(seed)
    blocks = []
    for start in range(0, n_boot, DRAWS_PER_BLOCK):
        size = min(DRAWS_PER_BLOCK, n_boot - start)
        counts = rng.multinomial(n_prompts, np.full(n_prompts, 1.0 / n_prompts), size=size).astype(np.float64)
        blocks.append((counts @ num) / (counts @ den))
    return np.concatenate(blocks)


def _intervals(stats: Any, names: Sequence[str], confidence: float) -> dict[str, list[float]]:
    """Percentile interval of each column of ``stats`` (draws x metrics)."""
    import numpy as np

    tail = (1.0 - confidence) / 2 * 100
    lo, hi = np.percentile(stats, [tail, 100 - tail], axis=0)
    return {m: [float(lo[j]), float(hi[j])] for j, m in enumerate(names)}


def _point(num: Sequence[float], den: Sequence[float]) -> float:
    return float(math.fsum(num) / math.fsum(den))


def _pass_at(pass_at: Any) -> list[int]:
    ks = [pass_at] if isinstance(pass_at, int) else list(pass_at) if isinstance(pass_at, Iterable) else None
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise ValueError(f"pass_at={pass_at!r}; allowed: positive integers such as (1, 4)")
    return list(dict.fromkeys(ks))


def _threshold(threshold: Any) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not math.isfinite(threshold):
        raise ValueError(f"threshold={threshold!r}; allowed: a number (a sample is correct when reward >= threshold)")
    return float(threshold)


def _check_k(prompts: Mapping[int, _Prompt], ks: Sequence[int], model: str) -> None:
    fewest = min(prompts.items(), key=lambda item: item[1].n)
    if max(ks) > fewest[1].n:
        raise ValueError(f"pass_at={max(ks)} is more than the {fewest[1].n} sample(s) model {model!r} has for "
                         f"prompt {fewest[0]}; allowed: k <= n (samples per prompt)")


def summarize(samples_by_model: Mapping[str, Any], pass_at: Sequence[int] | int = (1,), threshold: float = 1.0,
              n_boot: int = 1000, seed: int = 0, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Per-model metrics with percentile-bootstrap intervals over prompts, and paired differences vs the first model.

    ``samples_by_model``: model name -> its samples (a list of mappings or a DataFrame), models in the order the
    user gave them. Returns a JSON-ready dict::

        {"baseline": "base", "threshold": 1.0, "pass_at": [1, 4], "n_boot": 1000, "seed": 0, "confidence": 0.95,
         "models": {"base": {"n_prompts": 200, "n_samples": 800, "mean_reward": 0.31, "mean_reward_ci": [lo, hi],
                             "pass@1": ..., "pass@1_ci": [...], "pass@4": ..., "pass@4_ci": [...],
                             "response_length": ..., "response_length_ci": [...], "n_reward_errors": 0},
                    "trained": {..., "delta/mean_reward": 0.12, "delta/mean_reward_ci": [lo, hi],
                                "delta/pass@1": ..., "prompts_gained": 31, "prompts_lost": 4}}}

    Intervals resample prompts (all samples of a prompt together); a delta resamples the prompts both models
    answered, the same draw for both, so it is the interval of the difference, not two intervals side by side.
    ``n_boot=0`` gives no intervals (``None``). ``reward/<fn>`` columns get their mean and interval too.

    >>> s = summarize({"a": [{"prompt_index": 0, "reward": 1.0}, {"prompt_index": 1, "reward": 0.0}]}, n_boot=0)
    >>> s["models"]["a"]["pass@1"], s["models"]["a"]["pass@1_ci"]
    (0.5, None)
    """
    if not isinstance(samples_by_model, Mapping) or not samples_by_model:
        raise ValueError(f"samples_by_model: {type(samples_by_model).__name__} {samples_by_model!r:.60}; "
                         "allowed: a non-empty dict of model name -> samples")
    ks = _pass_at(pass_at)
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 0:
        raise ValueError(f"n_boot={n_boot!r}; allowed: an integer >= 0 (0: no intervals)")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence!r}; allowed: between 0 and 1, such as 0.95")
    threshold = _threshold(threshold)
    grouped = {}
    for model, samples in samples_by_model.items():
        grouped[model] = _by_prompt(samples, threshold, f"samples_by_model[{model!r}]")
        _check_k(grouped[model], ks, model)

    baseline = next(iter(grouped))
    out: dict[str, Any] = {"baseline": baseline, "threshold": threshold, "pass_at": ks, "n_boot": n_boot,
                           "seed": seed, "confidence": confidence, "models": {}}
    for model, prompts in grouped.items():
        cols = _columns(list(prompts.values()), ks)
        cis = _intervals(_draws(cols, n_boot, seed), list(cols), confidence) if n_boot else {}
        entry: dict[str, Any] = {"n_prompts": len(prompts), "n_samples": sum(p.n for p in prompts.values())}
        for metric, (num, den) in cols.items():
            entry[metric] = _point(num, den)
            entry[f"{metric}_ci"] = cis.get(metric)
        entry["n_reward_errors"] = sum(p.errors for p in prompts.values())
        if model != baseline:
            entry.update(_deltas(grouped[baseline], prompts, ks, n_boot, seed, confidence))
        out["models"][model] = entry
    return out


def _deltas(base: Mapping[int, _Prompt], other: Mapping[int, _Prompt], ks: Sequence[int], n_boot: int, seed: int,
            confidence: float) -> dict[str, Any]:
    """``delta/<metric>`` (other minus base) over the prompts both answered, with its paired interval."""
    common = [i for i in other if i in base]
    out: dict[str, Any] = {"paired_prompts": len(common)}
    if not common:
        return out
    cols_b = _columns([base[i] for i in common], ks)
    cols_o = _columns([other[i] for i in common], ks)
    metrics = [m for m in cols_o if m in cols_b]
    cis = {}
    if n_boot:
        cols_o, cols_b = {m: cols_o[m] for m in metrics}, {m: cols_b[m] for m in metrics}
        cis = _intervals(_draws(cols_o, n_boot, seed) - _draws(cols_b, n_boot, seed), metrics, confidence)
    for m in metrics:
        out[f"delta/{m}"] = _point(*cols_o[m]) - _point(*cols_b[m])
        out[f"delta/{m}_ci"] = cis.get(m)
    diff = _diff(base, other)
    out["prompts_gained"], out["prompts_lost"] = len(diff[GAINED]), len(diff[LOST])
    return out


def _diff(a: Mapping[int, _Prompt], b: Mapping[int, _Prompt]) -> dict[str, list[int]]:
    """:func:`prompt_diff` of samples grouped by prompt."""
    common = [i for i in b if i in a]
    return {GAINED: [i for i in common if b[i].solved and not a[i].solved],
            LOST: [i for i in common if a[i].solved and not b[i].solved],
            BOTH: [i for i in common if a[i].solved and b[i].solved],
            NEITHER: [i for i in common if not a[i].solved and not b[i].solved]}


_UNSAFE_METRIC_CHARS = re.compile(r"[^\w\-. :/]")  # what MLflow accepts in a metric name (POSIX)


def metric_key(text: str) -> str:
    """``text`` as a metric name MLflow accepts: ``pass@4`` -> ``pass_at_4``, other characters it refuses -> ``_``.

    >>> metric_key("delta/pass@4"), metric_key("run@step=3")
    ('delta/pass_at_4', 'run_at_step_3')
    """
    return _UNSAFE_METRIC_CHARS.sub("_", text.replace("@", "_at_"))


def flat_metrics(model_summary: Mapping[str, Any]) -> dict[str, float]:
    """One model's entry of :func:`summarize` as flat numbers for MLflow and the model registry: each number under
    :func:`metric_key` of its key, an interval ``[lo, hi]`` as ``<key>_lo`` / ``<key>_hi``; text and None left out.

    >>> flat_metrics({"pass@1": 0.5, "pass@1_ci": [0.25, 0.75], "delta/pass@1": 0.1, "delta/pass@1_ci": None})
    {'pass_at_1': 0.5, 'pass_at_1_ci_lo': 0.25, 'pass_at_1_ci_hi': 0.75, 'delta/pass_at_1': 0.1}
    """
    out: dict[str, float] = {}
    for key, value in model_summary.items():
        name = metric_key(str(key))
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float) and math.isfinite(value):
            out[name] = float(value)
        elif isinstance(value, list | tuple) and len(value) == 2 and all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value):
            out[f"{name}_lo"], out[f"{name}_hi"] = float(value[0]), float(value[1])
    return out


def prompt_diff(samples_a: Any, samples_b: Any, threshold: float = 1.0) -> dict[str, list[int]]:
    """Which prompts model b solves that a does not (``gained``) and the reverse (``lost``); a prompt is solved when
    more than half its samples are correct (per-prompt pass@1 > 0.5). ``both`` and ``neither`` complete the
    picture; prompts only one model answered are left out. Prompt indexes are sorted.

    >>> a = [{"prompt_index": 0, "reward": 1.0}, {"prompt_index": 1, "reward": 0.0}]
    >>> b = [{"prompt_index": 0, "reward": 0.0}, {"prompt_index": 1, "reward": 1.0}]
    >>> prompt_diff(a, b)["gained"], prompt_diff(a, b)["lost"]
    ([1], [0])
    """
    threshold = _threshold(threshold)
    return _diff(_by_prompt(samples_a, threshold, "samples_a"),
                               _by_prompt(samples_b, threshold, "samples_b"))
