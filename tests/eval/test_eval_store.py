"""The eval store's contract (``skyrl_core.eval_store``, ``skyrl_core.eval_config``): the engine's writer helpers and the
notebook's ``EvalReader`` on a local folder and on S3 (moto's server), the config's one-line refusals. < 1 s here
(the S3 case ~2 s with the session's moto server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skyrl_core.config import load_config
from skyrl_core.errors import ConfigError
from skyrl_core.eval_config import (
    EvaluationSection,
    eval_config_yaml,
    new_eval_id,
    read_section,
    section_problems,
    split_eval_config,
)
from skyrl_core.eval_store import (
    MODELS_FILE,
    SAMPLE_COLUMNS,
    EvalReader,
    open_eval,
    write_models,
    write_samples,
    write_summary,
)
from skyrl_core.runs import RunWriter
from skyrl_core.store import open_store


def _rows(rewards: list[list[float]], fn: str | None = None) -> list[dict[str, Any]]:
    rows = []
    for p, scores in enumerate(rewards):
        for s, reward in enumerate(scores):
            rows.append({"prompt_index": p, "sample_index": s, "prompt": f"<|user|>{p}+{p}<|im_end|><|assistant|>",
                         "response": str(2 * p if reward else p), "reward": reward, "response_length": 2,
                         "ground_truth": None if p == 0 else str(2 * p), "data_source": "arithmetic",
                         "reward_error": "boom: KeyError" if p == 1 and s == 0 else None, "finish_reason": "stop",
                         **({f"reward/{fn}": reward} if fn else {})})
    return rows


def _section() -> EvaluationSection:
    return read_section({"models": [
        {"name": "base", "source": "builtin://tiny-qwen2", "kind": "builtin", "location": "builtin://tiny-qwen2"},
        {"name": "my-run@step=4", "source": "my-run@step=4", "kind": "run", "location": "/runs/my-run", "step": 4}],
        "pass_at": [1, 2]})


def _write(location: str) -> None:
    from skyrl_core.eval_config import eval_config_dict

    cfg = load_config("quickstart", ["run.run_root=/runs", "run.run_id=x-eval-20261204-000000-abcd"])
    writer = RunWriter(location)
    writer.write_config(eval_config_dict(cfg, _section()))
    writer.set_status("running", step=0, total_steps=2)
    store = open_store(location)
    write_models(store, [{"name": "base", "source": "builtin://tiny-qwen2", "kind": "builtin", "step": None,
                          "path": "/cache/tiny"},
                         {"name": "my-run@step=4", "source": "my-run@step=4", "kind": "run", "step": 4,
                          "path": "/tmp/x"}])
    write_samples(store, "base", _rows([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]))
    write_samples(store, "my-run@step=4", _rows([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]], fn="exact"))
    write_summary(store, {"baseline": "base", "models": {"base": {"pass@1": 0.5}}})
    writer.set_status("succeeded", step=2)


def _check(reader: EvalReader) -> None:
    assert reader.status()["state"] == "succeeded"
    assert [m["name"] for m in reader.models()] == ["base", "my-run@step=4"] == reader.done()
    assert reader.models()[1]["step"] == 4 and reader.config()["evaluation"]["pass_at"] == [1, 2]
    frame = reader.samples("my-run@step=4")
    assert set(SAMPLE_COLUMNS) <= set(frame.columns) and "reward/exact" in frame.columns
    assert frame["prompt_index"].dtype == "int64" and frame["reward"].dtype == "float64"
    assert frame["ground_truth"].isna().tolist() == [True, True, False, False, False, False]
    assert frame["reward_error"].tolist()[2] == "boom: KeyError"
    assert reader.summary()["models"]["base"]["pass@1"] == 0.5
    with pytest.raises(KeyError, match="'nope' is not a model of .*; its models: base, my-run@step=4"):
        reader.samples("nope")
    assert "state=succeeded, models=[base, my-run@step=4], done=2" in repr(reader)
    assert "samples written" in reader._repr_html_()


def test_engine_writes_and_notebook_reads_a_local_eval_store(tmp_path: Path) -> None:
    location = tmp_path / "x-eval-20261204-000000-abcd"
    _write(str(location))
    _check(open_eval(location))
    # before models.json is written the config's models show, without a path; no samples: none done
    (location / MODELS_FILE).unlink()
    early = open_eval(location)
    assert [m["path"] for m in early.models()] == [None, None]
    with pytest.raises(FileNotFoundError, match="is not an eval store"):
        open_eval(tmp_path / "nothing-here")
    run = tmp_path / "a-run"
    RunWriter(run).write_config(load_config("quickstart"))
    with pytest.raises(FileNotFoundError, match="is not an eval store"):
        open_eval(run)  # a run store is not an eval store
    from skyrl_core.runs import list_runs

    assert [r.run_id for r in list_runs(tmp_path)] == ["a-run"]  # evaluations live beside runs, not as runs


def test_an_eval_store_on_s3(s3: Any) -> None:
    location = f"s3://{s3.bucket}/evals/x-eval-20261204-000000-abcd"
    _write(location)
    _check(open_eval(location))


def test_the_eval_config_travels_as_one_yaml_and_refuses_in_one_line() -> None:
    import yaml

    cfg = load_config("quickstart", ["run.run_id=x-eval-20261204-000000-abcd"])
    text = eval_config_yaml(cfg, _section())
    rest, section = split_eval_config(yaml.safe_load(text))
    assert load_config(rest) == cfg and section == _section()
    assert section_problems(section, n=1) == [
        "pass_at: 2 is larger than n=1 (samples per prompt, generator.eval_n_samples_per_prompt); give pass_at "
        "values from 1 to n, or n >= 2"]
    assert section_problems(section, n=2) == []
    with pytest.raises(ConfigError) as err:
        read_section({"models": [{"name": "a/b", "source": "x", "kind": "checkpoint", "location": "x"}]})
    (line,) = err.value.problems  # one line for the list's bad item
    assert line.startswith("evaluation.models: item 0 ('a/b') is not allowed")
    with pytest.raises(ConfigError, match="^evaluation: missing"):
        split_eval_config(json.loads(json.dumps(cfg.to_dict())))
    eid = new_eval_id("my run/with stuff")
    assert eid.startswith("my-run-with-stuff-eval-") and load_config("quickstart", [f"run.run_id={eid}"])
