"""EvalResult on synthetic eval stores (real Parquet, the eval store's own writers and reader): the table with
intervals, the per-prompt diff with both answers, the flat metrics MLflow accepts, save() for a papermill run, the
one-prompt view, compare() with evaluations beside the curves, and one-line refusals. No Ray; ~3 s here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_stores import sample_rows, write_eval_store

from skyrl_core import eval_stats
from skyrl_core.eval_store import open_eval
from skyrl_core.runs import RunWriter
from skyrl_nb.eval_results import EvalResult

# base solves prompts 2 and 4; trained solves 0, 1, 3 and 4: gained 0, 1, 3; lost 2; both 4; neither 5
BASE = [[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]]
TRAINED = [[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return write_eval_store(tmp_path, {"base": sample_rows(BASE), "trained": sample_rows(TRAINED, base_length=30)},
                            config={"evaluation": {"pass_at": [1, 4], "threshold": 1.0, "seed": 99}})


def test_table_diff_metrics_save_and_reprs(store: Path, tmp_path: Path) -> None:
    res = EvalResult(open_eval(store))  # no summary.json: computed with the config's pass_at
    expected = eval_stats.summarize({"base": sample_rows(BASE), "trained": sample_rows(TRAINED, base_length=30)},
                                    pass_at=[1, 4])
    assert res.summary == expected and res.model_names == ["base", "trained"] and res.pass_at == [1, 4]
    assert [m["kind"] for m in res.models()] == ["model", "model"]

    text = res.table()
    assert list(text["model"]) == ["base", "trained"]
    assert {"mean reward", "pass@1", "pass@4", "response length", "Δ pass@1", "Δ pass@4", "gained", "lost"} <= set(text)
    t = expected["models"]["trained"]
    lo, hi = t["pass@1_ci"]
    assert text.loc[1, "pass@1"] == f"{t['pass@1']:.3f} [{lo:.3f}, {hi:.3f}]"
    assert text.loc[1, "Δ pass@1"].startswith(f"{t['delta/pass@1']:+.3f} [")
    assert (text.loc[0, "gained"], text.loc[1, "gained"], text.loc[1, "lost"]) == ("", 3, 1)
    numeric = res.table(numeric=True)
    assert numeric.loc[1, "pass@1 lo"] == lo and numeric.loc[1, "pass@1 hi"] == hi
    assert numeric.loc[1, "response length"] == pytest.approx(31.5) and numeric["gained"].isna().tolist() == [True, False]

    diff = res.diff()
    assert list(zip(diff["change"], diff["prompt_index"], strict=True)) == [("gained", 0), ("gained", 1),
                                                                           ("gained", 3), ("lost", 2)]
    gained0 = diff.iloc[0]
    # the model that solves a prompt shows a correct answer, the other a wrong one
    assert gained0["trained answer"] == "The answer is 0." and gained0["trained reward"] == 1.0
    assert gained0["base answer"] == "The answer is 1." and gained0["base reward"] == 0.0
    assert gained0["base pass@1"] == 0.25 and gained0["trained pass@1"] == 0.75 and gained0["ground_truth"] == "0"
    assert diff.attrs == {"a": "base", "b": "trained", "gained": 3, "lost": 1}
    assert list(res.diff(a="trained", b="base")["change"]) == ["gained", "lost", "lost", "lost"]

    metrics = res.metrics
    assert metrics["eval/trained/pass_at_1"] == t["pass@1"] and metrics["eval/trained/pass_at_1_ci_lo"] == lo
    assert metrics["eval/trained/delta/pass_at_4"] == t["delta/pass@4"]
    assert metrics["eval/trained/prompts_gained"] == 3 and metrics["eval/base/n_prompts"] == 6
    from mlflow.utils.validation import _validate_metric_name

    for name in metrics:
        _validate_metric_name(name)  # raises for a name MLflow refuses ('@', '//', ...)
    assert json.loads(json.dumps(res.to_dict()))["changes"]["trained"]["lost"] == [2]

    assert [w["prompt_index"] for w in res.worst_prompts(3)] == [2, 5, 0]  # lost first, then lowest reward
    assert res.worst_prompts(1)[0]["label"] == "#2 lost" and res.worst_prompts(1)[0]["ground_truth"] == "4"

    md = Path(res.save(tmp_path / "eval.md")).read_text()
    assert "| model | prompts |" in md and "trained vs base: 3 prompts gained, 1 lost" in md and "Δ pass@1" in md
    csv = (tmp_path / "eval.csv")
    res.save(str(csv))
    assert csv.read_text().splitlines()[0].startswith("model,prompts,samples,mean reward,mean reward lo")
    res.save(tmp_path / "out" / "eval.json")
    assert json.loads((tmp_path / "out" / "eval.json").read_text())["summary"] == expected
    res.save("memory://evals/eval.md")  # a store URL as for s3://
    from skyrl_core.store import open_store

    assert open_store("memory://evals").read("eval.md").decode() == md

    text_repr, html_repr = repr(res), res._repr_html_()
    assert text_repr.startswith("EvalResult('demo-eval-") and "pass@4" in text_repr and "3 prompts gained" in text_repr
    assert "<table" in html_repr and "3 prompts gained, 1 lost" in html_repr and "<svg" in html_repr
    assert f"{lo:.3f}, {hi:.3f}]" in html_repr


def test_the_stored_summary_is_read_and_asked_settings_recompute(tmp_path: Path) -> None:
    samples = {"base": sample_rows(BASE), "trained": sample_rows(TRAINED)}
    stored = eval_stats.summarize(samples, pass_at=[1, 2], n_boot=50, seed=1)
    stored["models"]["trained"]["pass@1"] = 0.123  # only the file can say this
    res = EvalResult(open_eval(write_eval_store(tmp_path, samples, summary=stored)))
    assert res.summary["models"]["trained"]["pass@1"] == 0.123 and res.pass_at == [1, 2]
    again = EvalResult(res.reader, threshold=0.5)  # other settings than the file's: computed, the rest kept
    assert again.summary["models"]["trained"]["pass@1"] == pytest.approx(14 / 24) and again.pass_at == [1, 2]
    assert again.summary["n_boot"] == 50 and again.threshold == 0.5
    # no summary and no config: pass@1 and pass@n
    bare = EvalResult(open_eval(write_eval_store(tmp_path / "bare", samples)))
    assert bare.pass_at == [1, 4]
    # a path opens the store with skyrl_core.eval_store.open_eval
    assert EvalResult(str(tmp_path / "bare" / bare.eval_id)).summary == bare.summary


def test_bad_input_is_one_line_naming_the_argument(store: Path) -> None:
    res = EvalResult(open_eval(store))
    cases = [(lambda: res.diff(a="nope"), "a='nope' is not a model of evaluation demo-eval-"),
             (lambda: res.diff(b="x"), "b='x'"), (lambda: res.samples("x"), "model='x'"),
             (lambda: res.inspect(prompt_index=99), "prompt_index=99 is not a prompt of model 'base'"),
             (lambda: res.inspect(models=["base", "zz"]), "models='zz'"),
             (lambda: res.save("eval.txt"), "path='eval.txt'"),
             (lambda: EvalResult(res.reader, pass_at=[1, 8]), "pass_at=8 is more than the 4 sample"),
             (lambda: res.worst_prompts(model="zz"), "model='zz'")]
    for call, named in cases:
        with pytest.raises(ValueError) as err:
            call()
        assert named in str(err.value) and "\n" not in str(err.value), str(err.value)
    with pytest.raises(ValueError, match="models: 'base', 'trained'"):
        res.diff(a="nope")


def test_the_prompt_view_shows_both_models_answers_and_steps_through_changes(store: Path) -> None:
    from skyrl_widgets.eval_view import EvalPromptView

    res = EvalResult(open_eval(store))
    view = res.inspect()
    assert isinstance(view, EvalPromptView) and view.filter == "changed" and view.title.endswith("trained vs base")
    assert [(p["prompt_index"], p["change"]) for p in view.prompts] == [(0, "gained"), (1, "gained"), (3, "gained"),
                                                                       (2, "lost"), (4, "both"), (5, "neither")]
    cur = view.current
    assert cur["prompt_index"] == 0 and cur["change"] == "gained" and cur["ground_truth"] == "0"
    assert cur["turns"][0] == {"role": "user", "content": "What is 0 + 0?"}
    base, trained = cur["models"]
    assert (base["name"], base["pass@1"], base["solved"], trained["solved"]) == ("base", 0.25, False, True)
    assert [s["reward"] for s in trained["samples"]] == [1.0, 1.0, 1.0, 0.0]
    assert trained["samples"][0] == {"sample_index": 0, "response": "The answer is 0.", "reward": 1.0, "correct": True,
                                     "reward_error": None, "scores": {}, "response_length": 30}
    view._on_message(view, {"type": "show", "prompt_index": 2}, None)  # what Next sends
    assert view.prompt_index == 2 and view.current["change"] == "lost" and view.error == ""
    view._on_message(view, {"type": "show", "prompt_index": 77}, None)
    assert view.prompt_index == 2 and view.error.startswith("prompt 77: prompt_index=77 is not a prompt")
    static = view._repr_html_()  # what papermill keeps
    assert "prompt 2" in static and "lost" in static and static.count("reward ") >= 8 and "ground truth" in static
    assert "pass@1" in repr(view)
    assert res.inspect(4).current["change"] == "both"
    one = EvalResult(open_eval(write_eval_store(store.parent / "one", {"m": sample_rows([[1], [0]])})))
    assert one.inspect().filter == "all" and one.table().columns.tolist()[:4] == ["model", "prompts", "samples",
                                                                                   "mean reward"]


def test_compare_shows_evaluations_beside_training_curves(store: Path, tmp_path: Path) -> None:
    from skyrl_nb.compare import compare

    writer = RunWriter(tmp_path / "run")
    writer.write_config({"run": {"run_id": "run"}})
    for step in (1, 2, 3):
        writer.log_metrics(step, {"reward/avg_raw_reward": 0.2 * step})
    writer.set_status("succeeded", step=3, total_steps=3)

    res = EvalResult(open_eval(store))
    cmp = compare([writer.run_dir, res])
    assert cmp.labels == ["run"] and cmp.evals == [res]
    assert "run: 3 steps" in repr(cmp) and f"eval {res.eval_id}: pass@1 base 0.375, trained 0.583" in repr(cmp)
    page = cmp._repr_mimebundle_()["text/html"]  # no widget front end here: static SVGs and tables
    assert page.count("<svg") == 2 and "skyrl-eval-bars" in page and "trained vs base: 3 prompts gained" in page
    children = cmp.widget().children
    assert len(children) == 2 and "skyrl-eval-bars" in children[1].value
    table = cmp.eval_table()
    assert list(table["eval"]) == [res.eval_id] * 2 and list(table["model"]) == ["base", "trained"]
    assert "pass@1 lo" in table
    # evaluations alone, an eval store by path, and the curves as before
    only = compare([], evals=[str(store)])
    assert only.readers == [] and "<svg" in only._repr_html_() and only.summary() == []
    assert len(compare([writer.run_dir]).widget().children) == 1
    with pytest.raises(ValueError, match="runs is empty"):
        compare([])


def test_bars_draw_every_model_with_its_interval() -> None:
    from skyrl_widgets.eval_view import bars_svg

    summary = eval_stats.summarize({"base": sample_rows(BASE), "trained": sample_rows(TRAINED)}, pass_at=[1, 4])
    svg = bars_svg(summary, title="demo")
    assert svg.startswith("<svg") and svg.count("<rect") == 3 * 2 + 2  # 3 metrics x 2 models, 2 legend squares
    assert svg.count("<path") == 6 and ">demo<" in svg and "var(--jp-brand-color1" in svg
    lo, hi = summary["models"]["trained"]["pass@1_ci"]
    assert f"trained pass@1 {summary['models']['trained']['pass@1']:.3f} ({lo:.3f}–{hi:.3f})" in svg
