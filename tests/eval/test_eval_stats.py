"""skyrl_core.eval_stats: pass@k against counting, bootstrap intervals that cover the truth, paired deltas, the
per-prompt difference, degenerate inputs and one-line refusals. Pure Python + numpy; the file takes ~3 s here (the coverage simulation ~2 s)."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys

import pandas as pd
import pytest

from skyrl_core.eval_stats import pass_at_k, prompt_diff, summarize


def _samples(correct_by_prompt: list[list[float]], lengths: int = 10) -> list[dict]:
    return [{"prompt_index": p, "sample_index": s, "reward": r, "response_length": lengths + p}
            for p, rewards in enumerate(correct_by_prompt) for s, r in enumerate(rewards)]


def test_pass_at_k_is_the_share_of_k_subsets_holding_a_correct_sample() -> None:
    for n in range(1, 7):
        for c in range(n + 1):
            flags = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(flags, k))
                counted = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(counted, abs=1e-12), (n, c, k)
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(200, 1, 100) == pytest.approx(0.5)


@pytest.mark.parametrize(("args", "named"), [((4, 1, 5), "k=5"), ((4, 5, 1), "c=5"), ((0, 0, 1), "n=0"),
                                             ((4, 1, 0), "k=0"), ((4.0, 1, 1), "n=4.0")])
def test_pass_at_k_refuses_in_one_line_naming_the_argument(args: tuple, named: str) -> None:
    with pytest.raises(ValueError, match=named) as err:
        pass_at_k(*args)
    assert "\n" not in str(err.value)


def test_summary_values_deltas_and_gained_lost_on_a_hand_checked_case() -> None:
    base = _samples([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0], [0.5, 0, 0, 0]])
    trained = _samples([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [0.5, 0.5, 0, 0]])
    s = summarize({"base": base, "trained": trained}, pass_at=(1, 2), n_boot=500, seed=3)
    json.dumps(s)  # the engine writes it as summary.json
    assert s["baseline"] == "base" and list(s["models"]) == ["base", "trained"] and s["pass_at"] == [1, 2]
    b, t = s["models"]["base"], s["models"]["trained"]
    assert (b["n_prompts"], b["n_samples"]) == (4, 16)
    assert b["mean_reward"] == pytest.approx(4.5 / 16)   # the plain sample mean: the run's eval/all/avg_score
    assert b["pass@1"] == pytest.approx((0.25 + 0 + 0.75 + 0) / 4)  # 0.5 is below the threshold 1.0
    assert b["pass@2"] == pytest.approx((0.5 + 0 + 1.0 + 0) / 4)
    assert b["response_length"] == pytest.approx(11.5)
    assert t["pass@1"] == pytest.approx((0.75 + 1 + 0 + 0) / 4)
    assert t["delta/pass@1"] == pytest.approx(t["pass@1"] - b["pass@1"]) and t["delta/pass@1"] > 0
    assert t["delta/response_length"] == 0.0 and t["delta/response_length_ci"] == [0.0, 0.0]
    for entry, metric in itertools.product((b, t), ("mean_reward", "pass@1", "pass@2", "response_length")):
        lo, hi = entry[f"{metric}_ci"]
        assert lo <= entry[metric] <= hi, (metric, entry)
    lo, hi = t["delta/pass@1_ci"]
    assert lo <= t["delta/pass@1"] <= hi
    # base solves prompt 2 (3 of 4 correct), trained solves 0 and 1 (3/4 and 4/4); 3 neither
    assert (t["prompts_gained"], t["prompts_lost"]) == (2, 1) and "delta/pass@1" not in b
    assert prompt_diff(base, trained) == {"gained": [0, 1], "lost": [2], "both": [], "neither": [3]}
    assert prompt_diff(base, trained, threshold=0.5)["gained"] == [0, 1]
    # the same seed gives the same intervals; another seed other ones
    assert summarize({"base": base, "trained": trained}, pass_at=(1, 2), n_boot=500, seed=3) == s
    assert summarize({"base": base, "trained": trained}, pass_at=(1, 2), n_boot=500, seed=4) != s


def test_intervals_cover_the_truth_and_a_real_gain_excludes_zero() -> None:
    """95% percentile intervals over 50 simulated evals (200 prompts, 4 samples each, prompt difficulty varies)
    cover the true pass@1 in about 95% of them; the paired delta of a +0.1 model excludes 0 nearly always."""
    rng = random.Random(7)
    covered = gains_seen = 0
    trials = 50
    for trial in range(trials):
        easiness = [rng.betavariate(2, 3) for _ in range(200)]  # true pass@1 = mean 0.4
        base = _samples([[float(rng.random() < e) for _ in range(4)] for e in easiness])
        better = _samples([[float(rng.random() < min(1.0, e + 0.1)) for _ in range(4)] for e in easiness])
        s = summarize({"base": base, "better": better}, n_boot=300, seed=trial)
        lo, hi = s["models"]["base"]["pass@1_ci"]
        covered += lo <= 0.4 <= hi
        dlo, _ = s["models"]["better"]["delta/pass@1_ci"]
        gains_seen += dlo > 0
    assert 0.88 * trials <= covered <= trials, covered
    assert gains_seen >= 0.9 * trials, gains_seen


def test_degenerate_inputs() -> None:
    one = summarize({"m": _samples([[1.0, 0.0]])}, pass_at=(1, 2))["models"]["m"]
    assert one["n_prompts"] == 1 and one["pass@1"] == 0.5 and one["pass@1_ci"] == [0.5, 0.5]
    assert one["pass@2"] == 1.0
    perfect = summarize({"m": _samples([[1.0]] * 30)})["models"]["m"]
    assert perfect["pass@1"] == 1.0 and perfect["pass@1_ci"] == [1.0, 1.0]
    assert perfect["mean_reward_ci"] == [1.0, 1.0]
    single = summarize({"a": _samples([[0.0]] * 5), "b": _samples([[1.0]] * 5)}, n_boot=0)
    assert single["models"]["b"]["delta/pass@1"] == 1.0 and single["models"]["b"]["delta/pass@1_ci"] is None
    assert single["models"]["a"]["pass@1_ci"] is None and single["n_boot"] == 0
    # no response_length column: no such metric; a reward error counts 0 and is counted; reward/<fn> averaged
    rows = [{"prompt_index": 0, "reward": None, "reward_error": "boom", "reward/exact": None},
            {"prompt_index": 0, "reward": 1.0, "reward_error": None, "reward/exact": 1.0},
            {"prompt_index": 1, "reward": float("nan"), "reward_error": float("nan"), "reward/exact": 0.0}]
    m = summarize({"m": rows})["models"]["m"]
    assert "response_length" not in m and m["n_reward_errors"] == 1
    assert m["mean_reward"] == pytest.approx(1 / 3) and m["reward/exact"] == pytest.approx(1 / 3)
    assert m["reward/exact_ci"][0] <= m["reward/exact"] <= m["reward/exact_ci"][1]
    # a DataFrame as EvalReader.samples gives, the same numbers as its rows
    frame = pd.DataFrame(_samples([[1, 0], [0, 0], [1, 1]]))
    assert summarize({"m": frame}) == summarize({"m": frame.to_dict("records")})
    # prompts only one model answered are left out of the paired delta and the diff
    a, b = _samples([[1], [0], [1]]), _samples([[1], [1]])
    s = summarize({"a": a, "b": b})["models"]["b"]
    assert s["paired_prompts"] == 2 and s["delta/pass@1"] == 0.5 and s["prompts_gained"] == 1
    assert prompt_diff(a, b)["gained"] == [1] and prompt_diff(a, b)["lost"] == []


@pytest.mark.parametrize(("call", "named"), [
    (lambda: summarize({"m": _samples([[1, 0]] * 3)}, pass_at=(1, 4)), "pass_at=4 is more than the 2 sample"),
    (lambda: summarize({"m": _samples([[1, 0]])}, pass_at=0), "pass_at=0"),
    (lambda: summarize({"m": _samples([[1, 0]])}, pass_at="4"), "pass_at='4'"),
    (lambda: summarize({}), "samples_by_model"),
    (lambda: summarize({"m": []}), r"samples_by_model\['m'\]: no samples"),
    (lambda: summarize({"m": [{"reward": 1.0}]}), r"samples_by_model\['m'\]\[0\]"),
    (lambda: summarize({"m": [{"prompt_index": 0, "reward": "yes"}]}), "reward='yes'"),
    (lambda: summarize({"m": _samples([[1]])}, n_boot=-1), "n_boot=-1"),
    (lambda: summarize({"m": _samples([[1]])}, threshold="high"), "threshold='high'"),
    (lambda: summarize({"m": _samples([[1]])}, confidence=95), "confidence=95"),
    (lambda: prompt_diff({"prompt_index": 0}, []), "samples_a"),
])
def test_bad_input_is_one_line_naming_the_argument(call, named: str) -> None:
    with pytest.raises(ValueError, match=named) as err:
        call()
    assert "\n" not in str(err.value)


def test_importing_eval_stats_leaves_numpy_unimported() -> None:
    code = "import sys, skyrl_core.eval_stats; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_flat_metrics_are_names_mlflow_accepts() -> None:
    from mlflow.utils.validation import _validate_metric_name

    from skyrl_core.eval_stats import flat_metrics, metric_key

    s = summarize({"base": _samples([[1, 0], [0, 0]]), "run@step=3": _samples([[1, 1], [0, 1]])}, pass_at=(1, 2))
    flat = flat_metrics(s["models"]["run@step=3"])
    assert flat["pass_at_2"] == 1.0 and flat["delta/pass_at_1"] == 0.5 and "pass_at_1_ci_lo" in flat
    assert flat["prompts_gained"] == 1.0 and "n_reward_errors" in flat
    for key in flat:
        _validate_metric_name(f"eval/{metric_key('run@step=3')}/{key}")  # raises for '@', '=', '//'
    assert flat_metrics({"x": None, "y": "text", "z": True, "w": float("nan"), "v": [0, float("inf")]}) == {}
