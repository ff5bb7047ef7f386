"""The playground's controller (skyrl_nb.playground) and its view's traits.

These check what the controller does with answers, clicks, errors and an evaluation's worst prompts, with no
cluster (~2 s here), and the default `generate` for real: one evaluation job on the session's local Ray head with
the real engine (test_playground_on_the_local_cluster, ~15-25 s here). The view in a real browser is
tests/browser/test_playground_browser.py's.
"""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from skyrl_nb.playground import Answers, eval_models, playground, worst_prompts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eval"))  # eval_stores: the eval-store writer of the tests


def fake_generate(calls: list[tuple[Any, Any]] | None = None, gate: threading.Event | None = None):
    """Base answers "4", trained answers the sum; reward 1.0 when the answer equals the ground truth."""

    def generate(prompt: Any, ground_truth: str | None) -> list[dict[str, Any]]:
        if calls is not None:
            calls.append((prompt, ground_truth))
        if gate is not None:
            assert gate.wait(10), "the test never let the generation finish"
        text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        right = str(sum(int(x) for x in text.split("+")))
        out = []
        for model, answer in (("base", "4"), ("trained", right)):
            reward = None if ground_truth is None else float(answer == ground_truth)
            out.append({"model": model, "response": answer, "reward": reward,
                        "reward_error": None if ground_truth is not None else "no ground truth"})
        return out

    return generate


def test_run_gives_both_answers_with_rewards_and_the_view_shows_them() -> None:
    pg = playground({"base": "builtin://tiny-qwen2", "trained": "runs/x"}, generate=fake_generate())
    view = pg.widget()
    assert view.models == ["base", "trained"] and view.answers == [] and not view.running

    got = pg.run("17+25", ground_truth=42)
    assert isinstance(got, Answers) and len(got) == 2
    assert got["base"] == {"model": "base", "response": "4", "reward": 0.0, "reward_error": None}
    assert got["trained"]["reward"] == 1.0 and got[1]["response"] == "42"
    assert view.answers == got.answers and not view.running and not view.error
    assert view.prompt == "17+25" and view.ground_truth == "42"
    assert view.status.startswith("2 answers in ") and "rewards: base 0 · trained 1" in view.status
    assert list(got.frame().columns) == ["model", "response", "reward", "reward_error"]
    # no ground truth: the reward function's error is shown with the answer, the reward as missing
    got = pg.run("2+2")
    assert got["trained"]["reward"] is None and got["trained"]["reward_error"] == "no ground truth"
    assert re.fullmatch(r"2 answers in \d+\.\d s", view.status), view.status


def test_run_button_generates_in_a_thread_once_at_a_time() -> None:
    gate, calls = threading.Event(), []
    pg = playground({"base": "a", "trained": "b"}, generate=fake_generate(calls, gate))
    view = pg.widget()
    view._handle_message(view, {"action": "run", "prompt": "1+2", "ground_truth": "3", "example": -1}, None)
    assert pg.running and view.running and view.answers == [] and "on the cluster" in view.status
    # a second press while it runs does nothing; a run from a cell says why it cannot start
    view._handle_message(view, {"action": "run", "prompt": "5+5", "ground_truth": "10"}, None)
    with pytest.raises(RuntimeError, match="a prompt is still running"):
        pg.run("5+5")
    gate.set()
    got = pg.wait(10)
    assert got is not None and got["trained"]["response"] == "3" and calls == [("1+2", "3")]
    assert not view.running and [a["reward"] for a in view.answers] == [0.0, 1.0]
    # an empty prompt from the view: one line on the status line, nothing started
    view._handle_message(view, {"action": "run", "prompt": "  ", "ground_truth": ""}, None)
    assert view.error and view.status == "prompt: empty; type a question for the models" and not pg.running
    assert len(calls) == 1


def test_a_failed_generation_is_one_line_and_the_button_works_again() -> None:
    def broken(prompt: Any, ground_truth: Any) -> list[dict[str, Any]]:
        raise ValueError("data: row 1 has no ground_truth;\n  the reward 'exact' needs one")

    pg = playground({"base": "a", "trained": "b"}, generate=broken)
    view = pg.widget()
    with pytest.raises(ValueError, match="no ground_truth"):
        pg.run("1+1")
    assert view.error and not view.running and "\n" not in view.status
    assert view.status.startswith("failed after ") and view.status.endswith(
        "s: data: row 1 has no ground_truth; the reward 'exact' needs one")
    assert "failed: data: row 1" in repr(pg)
    # a generate that answers in the wrong shape names itself
    pg.generate = lambda p, t: [{"answer": "x"}]
    with pytest.raises(TypeError, match="generate's answer 0"):
        pg.run("1+1")
    assert view.status.startswith("failed after ") and "TypeError: generate's answer 0" in view.status
    pg.generate = fake_generate()
    assert pg.run("1+1", "2")["trained"]["reward"] == 1.0 and not view.error


@pytest.mark.parametrize(("given", "error"), [
    (None, "job_or_models: None is not a job"),
    ([], "job_or_models: [] is not a job"),
    ("builtin://tiny-qwen2", "job_or_models: 'builtin://tiny-qwen2' is not a job"),
    ({"": "x"}, "job_or_models: {'': 'x'} is not a job"),
])
def test_bad_models_are_one_line(given: Any, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        playground(given)


def test_bad_prompts_and_ground_truths_are_one_line() -> None:
    pg = playground(["a", "b"], generate=fake_generate())
    assert pg.models == []  # a list's models are named by the evaluation: the first answers name the panes
    for prompt, error in (("", "prompt: empty"), (3, "prompt: 3; expected text"),
                          ([{"role": "user"}], "prompt: .* expected text or a non-empty list")):
        with pytest.raises(ValueError, match=error):
            pg.run(prompt)
    with pytest.raises(ValueError, match=r"ground_truth: \['4'\]; expected text, a number or None"):
        pg.run("2+2", ["4"])
    with pytest.raises(TypeError, match="generate: expected a callable"):
        playground(["a", "b"], generate="not a function")
    pg.run("2+2", "4")
    assert pg.models == ["base", "trained"]


def test_reprs_show_the_answers_as_a_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKYRL_NB_STATIC", "1")  # as papermill and nbconvert get it
    pg = playground({"base": "a", "trained": "b"}, generate=fake_generate())
    assert "no prompt run yet" in repr(pg) and "no prompt run yet" in pg._repr_html_()
    pg.run("3+4", "7")
    bundle = pg._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}  # no widget where none would draw
    html = bundle["text/html"]
    assert "<th>answer</th>" in html and "<td>0</td>" in html and "<td>1</td>" in html and "3+4" in html
    assert bundle["text/plain"] == "Playground(base and trained; last: base 0 · trained 1)"
    assert "base: reward 0\n    4\n  trained: reward 1\n    7" in repr(pg.last)
    monkeypatch.setenv("SKYRL_NB_STATIC", "0")
    assert "application/vnd.jupyter.widget-view+json" in pg._repr_mimebundle_()


def _chat(question: str) -> str:
    return f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def _rows(rewards: list[list[float]], answer: str = "r") -> list[dict[str, Any]]:
    return [{"prompt_index": p, "sample_index": s, "prompt": _chat(f"{p}+{p}"), "response": f"{answer}{p}.{s}",
             "reward": float(r), "response_length": 3, "ground_truth": str(2 * p), "data_source": "arithmetic",
             "reward_error": None}
            for p, samples in enumerate(rewards) for s, r in enumerate(samples)]


def _eval_result(root: Path, samples: dict[str, list[dict[str, Any]]], sources: dict[str, str] | None = None):
    """A real EvalResult over an eval store written with the engine's own writers (tests/eval/eval_stores.py)."""
    from eval_stores import write_eval_store

    from skyrl_core.eval_store import write_models
    from skyrl_core.store import open_store
    from skyrl_nb.eval_results import EvalResult

    path = write_eval_store(root, samples, eval_id=f"pg-eval-20261204-000000-{len(list(root.iterdir())):04d}")
    if sources:
        write_models(open_store(path), [{"name": n, "source": src, "kind": "model", "step": None, "path": src}
                                        for n, src in sources.items()])
    return EvalResult(str(path))


def test_worst_prompts_lost_first_then_lowest_reward_and_a_picked_one_runs_as_asked(tmp_path: Path) -> None:
    # prompt 0 lost (base solves it, trained not), 1 low for both, 2 solved, 3 lost, 4 trained 0.5
    res = _eval_result(tmp_path, {"base": _rows([[1, 1], [0, 0], [1, 1], [1, 1], [0, 0]]),
                                  "trained": _rows([[0, 0], [0, 0], [1, 1], [0, 1], [1, 0]])})
    worst = worst_prompts(res, limit=4)
    assert [w["prompt_index"] for w in worst] == [0, 3, 1, 4]
    assert [w["label"] for w in worst] == ["#0 lost · 0+0", "#3 lost · 3+3", "#1 mean reward 0.00 · 1+1",
                                           "#4 mean reward 0.50 · 4+4"]
    assert worst[1]["prompt"] == "3+3" and worst[1]["ground_truth"] == "6"
    assert worst[1]["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "3+3"}]
    with pytest.raises(ValueError, match="eval_result: dict is not an EvalResult"):
        playground(["a", "b"], eval_result={}, generate=fake_generate())

    calls: list[tuple[Any, Any]] = []
    pg = playground({"base": "a", "trained": "b"}, eval_result=res, generate=fake_generate(calls))
    view = pg.widget()
    assert [e["label"] for e in view.examples][:2] == [worst[0]["label"], worst[1]["label"]]
    assert "messages" not in view.examples[0]  # the chat turns stay in the kernel
    # picked and run as it is: the evaluation's chat turns (its system prompt too); edited: the text typed
    view._handle_message(view, {"action": "run", "prompt": "3+3", "ground_truth": "6", "example": 1}, None)
    pg.wait(10)
    view._handle_message(view, {"action": "run", "prompt": "3+4", "ground_truth": "7", "example": 1}, None)
    pg.wait(10)
    assert calls == [(worst[1]["messages"], "6"), ("3+4", "7")]
    assert pg.last["trained"]["reward"] == 1.0


def test_default_generate_is_one_evaluation_job_of_one_prompt(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    """What the default `generate` asks `skyrl_nb.evaluate` for, and how it reads the EvalResult back (a real one
    over an eval store); the job itself runs in test_playground_on_the_local_cluster."""
    import skyrl_nb

    asked: list[tuple[Any, dict[str, Any]]] = []

    def evaluate(models: Any, **kwargs: Any) -> Any:
        asked.append((models, kwargs))
        row = kwargs["data"][0]
        samples = {name: [{**_rows([[0]])[0], "prompt": str(row["prompt"]), "response": answer,
                           "reward": float(answer == row.get("ground_truth")),
                           "reward_error": None if "ground_truth" in row else "no ground truth"}]
                   for name, answer in (("base", "4"), ("trained", "42"))}
        return _eval_result(tmp_path, samples)

    monkeypatch.setattr(skyrl_nb, "evaluate", evaluate, raising=False)
    cluster, reward = object(), object()
    models = {"base": "builtin://tiny-qwen2", "trained": "runs/q"}
    pg = playground(models, cluster=cluster, reward=reward)
    got = pg.run("17+25", "42")
    assert asked == [(models, {"data": [{"prompt": "17+25", "ground_truth": "42"}], "n": 1, "pass_at": (1,),
                               "name": "playground", "cluster": cluster, "reward": reward})]
    assert [(a["model"], a["response"], a["reward"]) for a in got] == [("base", "4", 0.0), ("trained", "42", 1.0)]
    # no ground truth: the row has none (the evaluation says whether its reward needs one)
    got = pg.run("1+1")
    assert asked[-1][1]["data"] == [{"prompt": "1+1"}] and "sampling" not in asked[-1][1]
    assert got["trained"]["reward_error"] == "no ground truth"

    # a job (anything with `evaluate`) evaluates its own base and trained model, with its own defaults
    class JobLike:
        def evaluate(self, **kwargs: Any) -> Any:
            return evaluate(None, **kwargs)

    pg = playground(JobLike(), sampling={"temperature": 0.0}, backend="vllm", name="try-it")
    assert pg.models == ["base", "trained"]
    pg.run("2+3", "5")
    assert asked[-1] == (None, {"data": [{"prompt": "2+3", "ground_truth": "5"}], "n": 1, "pass_at": (1,),
                                "name": "try-it", "sampling": {"temperature": 0.0}, "backend": "vllm"})
    pg = playground(JobLike(), step=2)  # a run's own keywords: its checkpoint
    pg.run("1+2", "3")
    assert asked[-1][1]["step"] == 2
    for given, error in (({"n": 4}, "n: the playground sets it"),
                         ({"generate": fake_generate(), "seed": 1}, "seed: an evaluation's argument, but generate="),
                         ({"temprature": 1}, "temprature: not an argument of an evaluation of a run; allowed: against, "
                                             "backend, batch_size, ")):
        with pytest.raises(ValueError, match=error):
            playground(JobLike(), **given)
    with pytest.raises(ValueError, match="step: not an argument of an evaluation; allowed: backend, batch_size"):
        playground(["a", "b"], step=3)
    # a run read from its folder: the same evaluation of its base and trained model (eval_jobs.evaluate_run)
    import skyrl_nb.eval_jobs
    from skyrl_core.runs import RunReader

    reader = RunReader(tmp_path / "a-run")
    monkeypatch.setattr(skyrl_nb.eval_jobs, "evaluate_run", lambda run, **kwargs: evaluate(run, **kwargs))
    pg = playground(reader, cluster=cluster)
    assert pg.models == ["base", "trained"] and pg.run("4+4", "8")["trained"]["reward"] == 0.0
    assert asked[-1][0] is reader and asked[-1][1]["cluster"] is cluster
    # an evaluation given alone: its own models, a run's checkpoint as "<run>@step=N"
    res = _eval_result(tmp_path, {"base": _rows([[1]]), "trained": _rows([[0]])},
                       sources={"base": "builtin://tiny-qwen2", "trained": "/runs/q"})
    assert eval_models(res) == {"base": "builtin://tiny-qwen2", "trained": "/runs/q"}
    pg = playground(eval_result=res)
    pg.run("9+9", "18")
    assert asked[-1][0] == {"base": "builtin://tiny-qwen2", "trained": "/runs/q"}
    assert [e["label"] for e in pg.examples] == ["#0 lost · 0+0"]


def exact(prompt, completion, ground_truth, **_):
    """A reward function from a cell: the answer exactly."""
    return float(completion.strip() == str(ground_truth))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_playground_on_the_local_cluster(ray_cluster: Any, tiny_model_dir: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The default `generate` for real: Run is one evaluation job (skyrl_nb.evaluate) on the session's local Ray
    head with the real engine, an untrained tiny model as both models, a reward function from a cell. ~20 s here
    (one eval job; the no-ground-truth refusal submits nothing)."""
    import skyrl_nb
    from skyrl_core.config import ConfigError
    from skyrl_core.eval_store import open_eval

    monkeypatch.setattr(ray_cluster, "engine_module", "skyrl_engine")  # the real engine, not fake_engine
    runs = tmp_path / "runs"
    pg = skyrl_nb.playground({"base": tiny_model_dir, "trained": tiny_model_dir}, cluster=ray_cluster, reward=exact,
                             sampling={"max_generate_length": 6}, run_root=str(runs))
    view = pg.widget()
    got = pg.run("17+25", ground_truth="42")
    assert [a["model"] for a in got] == ["base", "trained"] and view.answers == got.answers
    for answer in got:  # what the cluster generated, scored there by the cell's function
        assert isinstance(answer["response"], str) and answer["reward_error"] is None
        assert answer["reward"] == exact("17+25", answer["response"], "42")
    (store,) = [p for p in runs.iterdir() if p.name.startswith("playground-eval-")]
    reader = open_eval(str(store))
    assert reader.status()["state"] == "succeeded" and [m["name"] for m in reader.models()] == ["base", "trained"]
    samples = reader.samples("trained")
    assert len(samples) == 1 and samples["response"].iloc[0] == got["trained"]["response"]
    assert samples["ground_truth"].iloc[0] == "42" and "17+25" in samples["prompt"].iloc[0]
    assert view.status.startswith("2 answers in ") and not view.error
    # a reward that needs a ground truth, and none given: refused in one line before anything is submitted
    with pytest.raises(ConfigError) as refused:
        pg.run("2+2")
    assert view.error and view.status.startswith("failed after ") and "ground truth" in view.status
    assert view.status.endswith(" ".join(str(refused.value).split())[:200]), (view.status, str(refused.value))
    print(f"\nrefused: {view.status}")
    assert len(list(runs.iterdir())) == 1
    print(f"\none playground run on the local cluster: {got.seconds:.1f} s")
