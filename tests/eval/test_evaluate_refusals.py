"""``skyrl_nb.evaluate`` before anything runs: bad input is one line naming the argument with nothing written or
submitted, and a cluster that shares no disk with the notebook gets a config naming no notebook-local path. A spy
cluster records what would be submitted (no Ray); the S3 case uses the session's moto server. ~3 s here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from spy_cluster import spy_cluster

from skyrl_core.config import ConfigError, load_config
from skyrl_core.runs import RunWriter
from skyrl_core.store import open_store


def _run(location: str, steps: list[int], *overrides: str) -> str:
    """A finished run's folder with checkpoints at ``steps`` (as the engine lays them out; no weights needed here)."""
    root, _, run_id = location.rstrip("/").rpartition("/")
    writer = RunWriter(location)
    writer.write_config(load_config("quickstart", [f"run.run_id={run_id}", f"run.run_root={root}", *overrides]))
    writer.set_status("succeeded", step=max(steps, default=0))
    store = open_store(location)
    for step in steps:
        store.put(f"checkpoints/global_step_{step}/policy/config.json", b"{}")
    if steps:
        store.put("checkpoints/latest_ckpt_global_step.txt", str(max(steps)).encode())
    return location


def exact(prompt, completion, ground_truth, **_):
    return float(completion.strip() == ground_truth)


def test_bad_input_is_one_line_naming_the_argument_and_nothing_is_submitted(tmp_path: Path) -> None:
    import pandas as pd

    import skyrl_nb

    runs = tmp_path / "runs"
    run = _run(str(runs / "my-run"), [2, 4])
    bare = _run(str(runs / "no-ckpt"), [])
    cluster = spy_cluster(shares_disk=True)
    no_answers = pd.DataFrame({"question": ["1+1", "2+2"]})
    cases = [
        (dict(models=["my-ru"]), "models: 'my-ru' is no run, export, model directory or built-in model here"),
        (dict(models=[str(tmp_path / "nowhere")]), "models: "),
        (dict(models=["builtin://tiny-qwen3"]), "models: 'builtin://tiny-qwen3' is not a built-in model; allowed: "),
        (dict(models=[(run, 3)]), "models: run 'my-run' has no checkpoint at step 3; steps with one: 2, 4"),
        (dict(models=[f"{run}@step=5"]), "models: run 'my-run' has no checkpoint at step 5; steps with one: 2, 4"),
        (dict(models=[bare]), "models: run 'no-ckpt' has no checkpoint yet"),
        (dict(models=["builtin://tiny-qwen2@step=3"]), "models: 'builtin://tiny-qwen2' is a built-in model, not a run"),
        (dict(models=[run], data=no_answers, columns={"prompt": "question"}, reward=exact),
         "data: a pandas.DataFrame row 1 has no ground truth, which reward 'exact' needs"),
        (dict(models=[run], data=no_answers, columns={"prompt": "question"}),
         "data: a pandas.DataFrame row 1 has no ground truth, which the arithmetic environment needs"),
        (dict(models=[run], n=2, pass_at=[1, 4]), "pass_at: 4 is larger than n=2 (samples per prompt"),
        (dict(models=[run], pass_at=4), "pass_at: 4 is larger than n=1"),  # the run's own eval takes 1 sample
        (dict(models=[run], pass_at="4"), "pass_at: '4' is not allowed"),
        (dict(models={"a b": run}), "models: the name 'a b' cannot name a model"),
        (dict(models=[run], sampling={"temperatur": 1.0}), "generator.eval_sampling_params.temperatur: "),
    ]
    for kwargs, start in cases:
        models = kwargs.pop("models")
        with pytest.raises(ConfigError) as err:
            skyrl_nb.evaluate(models, cluster=cluster, **kwargs)
        (line,) = err.value.problems
        assert line.startswith(start), (start, line)
        assert "\n" not in line
    # without a cluster and no Job among the models: said, not guessed
    with pytest.raises(ConfigError, match="^cluster: give the cluster"):
        skyrl_nb.evaluate([run])
    assert cluster.client.submitted == []
    assert sorted(p.name for p in runs.iterdir()) == ["my-run", "no-ckpt"]  # no eval folder was written


def test_held_out_rows_in_the_runs_own_shape_need_no_columns(tmp_path: Path) -> None:
    """A run launched with ``columns=`` evaluated on more rows of the same shape: its columns read them."""
    import pandas as pd

    import skyrl_nb

    mapped = '{"prompt": "question", "ground_truth": "answer"}'
    run = _run(str(tmp_path / "runs" / "own"), [3], f"data.columns={mapped}")
    cluster = spy_cluster(shares_disk=True)
    qa = pd.DataFrame([{"question": f"{a}+{a}", "answer": str(2 * a)} for a in range(3)])
    job = skyrl_nb.evaluate([run], qa, cluster=cluster, wait=False)
    (sent,) = cluster.client.submitted
    config = yaml.safe_load(sent["runtime_env"]["env_vars"]["SKYRL_NB_CONFIG"])
    assert config["data"]["columns"] == {"prompt": "question", "ground_truth": "answer"}
    assert config["evaluation"]["train_columns"] is None and config["evaluation"]["models"][0]["step"] == 3
    assert job.model_names == ["own"]


def test_a_cluster_sharing_no_disk_gets_a_config_naming_no_local_path(s3: Any, tmp_path: Path) -> None:
    """The run store on S3, the data a DataFrame, the reward a function from this "cell": what is submitted names
    inputs:// files in the eval's own S3 folder, the run by its URL and built-in models; nothing on this disk."""
    import pandas as pd

    import skyrl_nb

    root = f"s3://{s3.bucket}/evals-{tmp_path.name}"
    run = _run(f"{root}/my-run", [4])
    cluster = spy_cluster(shares_disk=False)
    qa = pd.DataFrame([{"question": f"{a}+{a}", "answer": str(2 * a)} for a in range(4)])
    job = skyrl_nb.evaluate({"base": "builtin://tiny-qwen2", "trained": run}, qa,
                            columns={"prompt": "question", "ground_truth": "answer"}, reward=exact, n=2, pass_at=[1, 2],
                            cluster=cluster, name="remote", wait=False)
    (sent,) = cluster.client.submitted
    assert sent["submission_id"] == job.eval_id and sent["metadata"]["skyrl_nb_eval_dir"] == f"{root}/{job.eval_id}"
    assert sent["entrypoint"].endswith("-m skyrl_engine evaluate --config env:SKYRL_NB_CONFIG")
    config = yaml.safe_load(sent["runtime_env"]["env_vars"]["SKYRL_NB_CONFIG"])
    texts = [v for v in _strings(config)]
    local = [t for t in texts if t.startswith(("/", "~", "file:")) or str(tmp_path) in t]
    assert local == [], local
    assert config["run"]["run_root"] == root and config["run"]["run_id"] == job.eval_id
    (val,) = config["data"]["val_data"]
    assert val.startswith("inputs://val-") and config["reward"]["functions"][0]["file"].startswith("inputs://reward-exact-")
    models = config["evaluation"]["models"]
    assert [(m["name"], m["kind"], m["location"], m["step"]) for m in models] == [
        ("base", "builtin", "builtin://tiny-qwen2", None), ("trained", "run", run, 4)]
    assert config["evaluation"]["seed_step"] == 4 and config["generator"]["eval_n_samples_per_prompt"] == 2
    # what only the notebook had is in the eval's own folder, where the job reads it; the config and a pending status
    store = open_store(f"{root}/{job.eval_id}")
    assert {name.split("-")[0] for name in store.list("inputs")} == {"val", "reward", "manifest.json"}
    assert json.loads(store.read("status.json"))["state"] == "pending"
    assert "evaluation" in yaml.safe_load(store.read("config.yaml"))
    assert sent["runtime_env"]["py_modules"]  # the engine's code travels with the job


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_a_model_folder_only_this_notebook_has_is_refused_for_a_cluster_sharing_no_disk(tmp_path: Path,
                                                                                       s3: Any) -> None:
    """A Hugging Face folder on this notebook's disk, given to evaluate or serve on a cluster that cannot see it, is
    one line before anything is submitted (it used to go out as the notebook's path and fail in the job). The
    cluster's answer to its probe job (`Cluster.sees`) is set to "no" here: the spy submits nothing."""
    import os

    import skyrl_nb
    from skyrl_nb.serving import ServeError

    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    cluster = spy_cluster(shares_disk=False)
    cluster._seen[os.path.realpath(folder)] = False
    with pytest.raises(ConfigError, match=r"^models: .*is on this notebook's disk .*cannot see"):
        skyrl_nb.evaluate({"mine": str(folder)}, "builtin://arithmetic/test", cluster=cluster, wait=False,
                          run_root=f"s3://{s3.bucket}/evals-{tmp_path.name}")
    with pytest.raises(ServeError, match=r"^export_or_run: .*is on this notebook's disk .*cannot see"):
        skyrl_nb.serve(str(folder), cluster, wait=False)
    assert cluster.client.submitted == []
