"""The notebook gallery (notebooks/README.md): every notebook in ``notebooks/`` is listed there with each of its
parameters, and every one runs headless in ``make test``, either in a test named in ``RUN_ELSEWHERE`` or here.

The three run here use the session's local Ray cluster (``ray_cluster``), the real engine with an untrained
built-in-shaped model (``tiny_model_dir``: no warm start, which is not what these tests check) and tiny step counts.
Measured on 2 shared cores (load average 5-9 from other work): the static checks under a second together, the text2sql
notebook 38-51 s, the sweep 47-67 s, the SkyRL dry run 3-5 s, plus ~20 s to start the session's cluster and save the
untrained model when these run first.

A new notebook: add it to notebooks/README.md's table, then a test here with its name in ``RUN_HERE``, or the
node id of the test that runs it in ``RUN_ELSEWHERE``.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
GALLERY = NOTEBOOKS / "README.md"

#: Notebooks another test runs headless: notebook -> that test's node id (checked to exist below).
RUN_ELSEWHERE = {
    "quickstart.ipynb": "tests/notebook/test_papermill.py::test_quickstart_under_papermill_is_small_and_clean",
    "your_own_task.ipynb": "tests/notebook/test_your_own_task.py::test_your_own_task_under_papermill",
    "hyperpod_quickstart.ipynb": "tests/hyperpod/test_hyperpod_notebook.py::test_papermill_dry_run",
    "evaluate_and_serve.ipynb": "tests/vllm/test_evaluate_and_serve_notebook.py::"
                                "test_evaluate_and_serve_notebook_runs_headless",
}
#: Notebooks this module runs: notebook -> the test function below that runs it.
RUN_HERE = {
    "multiturn_text2sql.ipynb": "test_multiturn_text2sql_notebook",
    "compare_runs_sweep.ipynb": "test_compare_runs_sweep_notebook",
    "skyrl_engine.ipynb": "test_skyrl_engine_notebook_dry_run",
}


def _notebooks() -> list[str]:
    """The notebooks in the folder (``*.out.ipynb``: executed copies, git-ignored)."""
    return sorted(p.name for p in NOTEBOOKS.glob("*.ipynb") if not p.name.endswith(".out.ipynb"))


def _parameters(name: str) -> list[str]:
    """The names the notebook's ``parameters`` cell assigns (exactly one such cell)."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{name}: {len(tagged)} cells tagged parameters, want 1"
    return [t.id for node in ast.parse(tagged[0].source).body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)]


def _gallery_rows() -> dict[str, str]:
    """notebooks/README.md's table rows by the notebook each names first."""
    rows = {}
    for line in GALLERY.read_text().splitlines():
        found = re.match(r"\|\s*\[?([\w-]+\.ipynb)", line)
        if found:
            rows[found.group(1)] = line
    return rows


def _outputs(nb: Any) -> list[dict[str, Any]]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _text(nb: Any) -> str:
    """Every output's text: streams, text/plain and text/html."""
    parts = []
    for o in _outputs(nb):
        parts.append(o.get("text", ""))
        parts.extend(o.get("data", {}).get(k, "") for k in ("text/plain", "text/html"))
    return "\n".join(parts)


def _execute(name: str, out: Path, params: dict[str, Any], cwd: Path = REPO) -> Any:
    """Run a notebook headless with papermill on this interpreter's kernel (as `make demo` does); the executed
    notebook, checked to have no error output."""
    from skyrl_nb.demo import execute

    execute(NOTEBOOKS / name, out, params, cwd=cwd)
    done = nbformat.read(out, as_version=4)
    errors = [o for o in _outputs(done) if o.get("output_type") == "error"]
    assert not errors, json.dumps(errors)[-3000:]
    return done


def test_every_notebook_is_run_by_a_test() -> None:
    notebooks = set(_notebooks())
    assert not set(RUN_HERE) & set(RUN_ELSEWHERE)
    unrun = notebooks - set(RUN_HERE) - set(RUN_ELSEWHERE)
    assert not unrun, f"notebooks no test runs: {sorted(unrun)}; add a test here (RUN_HERE) or name it (RUN_ELSEWHERE)"
    gone = (set(RUN_HERE) | set(RUN_ELSEWHERE)) - notebooks
    assert not gone, f"tests named for notebooks that are not in notebooks/: {sorted(gone)}"
    for name, test in RUN_HERE.items():
        assert callable(globals().get(test)) and test.startswith("test_"), (name, test)
    for name, node in RUN_ELSEWHERE.items():  # the test exists and its module names the notebook
        path, function = node.split("::")
        source = (REPO / path).read_text()
        defined = {f.name for f in ast.parse(source).body if isinstance(f, ast.FunctionDef)}
        assert function in defined, f"{name}: {node} is no test function"
        assert name in source, f"{name}: {path} does not name the notebook"


def test_gallery_lists_every_notebook_with_its_parameters() -> None:
    rows = _gallery_rows()
    for name in _notebooks():
        assert name in rows, f"notebooks/README.md does not list {name}"
        row = rows[name]
        assert f"[{name}]({name})" in row, f"{name}: its row does not link it"
        missing = [p for p in _parameters(name) if f"`{p}`" not in row]
        assert not missing, f"{name}: notebooks/README.md does not name its parameters {missing}"
        cells = row.split("|")
        assert len(cells) == 6 and all(c.strip() for c in cells[1:5]), f"{name}: an empty cell in {row[:80]}"
    for name, row in rows.items():  # a row for a notebook not in the folder says it is coming
        assert name in _notebooks() or "(coming)" in row, f"notebooks/README.md lists {name}, which is not there"
    top = "\n".join((REPO / "README.md").read_text().splitlines()[:12])
    assert "(notebooks/README.md)" in top, "the root README's first screen does not link the gallery"


def test_new_notebooks_are_committed_clean() -> None:
    for name in RUN_HERE:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(nb)
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells
                   if c.cell_type == "code"), f"{name} is committed with outputs"


@pytest.mark.slow
def test_multiturn_text2sql_notebook(ray_cluster: Any, nb_env: Path, tiny_model_dir: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """2 steps of the text2sql preset (4 questions x 4 samples, up to 3 turns of 32 tokens) by the real engine. The
    untrained model rarely writes a parsable answer, so most episodes run to the third turn, each observation telling it
    so: the multi-turn path is what is checked. 38-51 s on 2 cores."""
    from skyrl_core.runs import open_run

    monkeypatch.delenv("SKYRL_NB_ENGINE_MODULE")  # the kernel's jobs run `python -m skyrl_engine`
    runs = tmp_path / "runs"
    out = tmp_path / "t2s.out.ipynb"
    done = _execute("multiturn_text2sql.ipynb", out, {
        "max_training_steps": 2, "run_root": str(runs), "run_id": "pm-t2s",
        "overrides": [f"trainer.policy.model.path={tiny_model_dir}", "generator.sampling_params.max_generate_length=32",
                      "generator.eval_sampling_params.max_generate_length=32"]})

    run = open_run(runs / "pm-t2s")
    assert run.status()["state"] == "succeeded"
    assert run.config()["trainer"]["policy"]["optimizer_config"]["lr"] == 1e-4  # the notebook's learning_rate
    metrics = run.metrics()
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(1 <= m["generate/avg_num_turns"] <= 3 and "reward/turn_1/avg_reward" in m for m in metrics)
    rows = run.trajectories(2)
    assert len(rows) == 16 and rows["num_turns"].max() > 1 and set(rows["env_class"]) == {"text2sql"}

    text = _text(done)
    assert "96 train and 16 test questions on databases ['concert', 'pets']" in text
    assert "SELECT name FROM singer WHERE age&gt;40" in text or "SELECT name FROM singer WHERE age>40" in text
    assert "generator.max_turns = 3" in text and "environment.env_class = text2sql" in text
    assert "pm-t2s: succeeded, step 2/2" in text  # the dashboard's final static figure
    assert "eval at step 0: score" in text and "eval at step 2: score" in text
    # the conversation printed from the inspector's data: the model's turns and the environment's observations
    assert re.search(r"reward -?[\d.]+: [23] assistant turns, [12] observations", text), text[-3000:]
    assert "--- assistant (tokens 0.." in text and "--- user (tokens" in text and "<observation>" in text
    assert "TrajectoryInspector('pm-t2s', state=succeeded, step=2" in text
    assert out.stat().st_size < 1_000_000 and ray_cluster._token not in out.read_text()


@pytest.mark.slow
def test_compare_runs_sweep_notebook(ray_cluster: Any, nb_env: Path, tiny_model_dir: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep of two arms (GRPO, RLOO) of 3 steps each: the quickstart executed by papermill from inside the
    sweep notebook (nested kernels), on the session's cluster with the real engine, then compared.
    47-67 s on 2 cores."""
    import yaml

    monkeypatch.delenv("SKYRL_NB_ENGINE_MODULE")
    runs, sweeps = tmp_path / "runs", tmp_path / "sweeps"
    out = tmp_path / "sweep.out.ipynb"
    done = _execute("compare_runs_sweep.ipynb", out, {
        "arms": {"grpo": {}, "rloo": {"trainer.algorithm.advantage_estimator": "rloo"}}, "max_training_steps": 3,
        "common_overrides": [f"trainer.policy.model.path={tiny_model_dir}"], "run_root": str(runs),
        "sweep_id": "pm-sweep", "output_dir": str(sweeps)}, cwd=NOTEBOOKS)  # as JupyterLab runs it

    for label, estimator in (("grpo", "grpo"), ("rloo", "rloo")):
        run_dir = runs / f"pm-sweep-{label}"
        status = json.loads((run_dir / "status.json").read_text())
        assert status["state"] == "succeeded" and status["step"] == 3, status
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert config["trainer"]["algorithm"]["advantage_estimator"] == estimator
        assert config["trainer"]["policy"]["model"]["path"] == tiny_model_dir
        inner = nbformat.read(sweeps / "pm-sweep" / f"{label}.ipynb", as_version=4)  # papermill's own record
        assert inner.metadata["papermill"]["parameters"]["run_id"] == f"pm-sweep-{label}"
        assert f"pm-sweep-{label}: succeeded, step 3/3" in _text(inner)

    text = _text(done)
    assert re.search(r"RunComparison\(reward/avg_raw_reward; grpo: 3 steps, last [\d.]+, rloo: 3 steps", text), text
    assert "<svg" in text and ">2 runs (smoothed over 5)</text>" in text  # the static figure
    table = next(o["data"]["text/plain"] for c in done.cells if c.cell_type == "code" and "table.round(3)" in c.source
                 for o in c.outputs if "data" in o)
    assert "pm-sweep-grpo  succeeded      3" in table and "pm-sweep-rloo  succeeded      3" in table, table
    means = next(o["data"]["text/plain"] for c in done.cells if c.cell_type == "code" and "pivot_table" in c.source
                 for o in c.outputs if "data" in o)
    assert "reward/avg_raw_reward" in means and "policy/policy_entropy" in means, means
    assert re.search(r"^grpo\s+[\d.]+", means, re.M) and re.search(r"^rloo\s+[\d.]+", means, re.M), means
    assert ray_cluster._token not in out.read_text()


@pytest.mark.slow
def test_skyrl_engine_notebook_dry_run(ray_cluster: Any, nb_env: Path, tmp_path: Path) -> None:
    """The SkyRL notebook as CI runs it (``dry_run=True``) without SkyRL installed: translated, validated, the
    bridge's command printed, the refusals, and the plan on the session's cluster refused in one line (this venv
    is Python 3.11 without SkyRL, which needs 3.12); no job, no run folder. 3-5 s on 2 cores."""
    runs = tmp_path / "runs"
    out = tmp_path / "skyrl.out.ipynb"
    done = _execute("skyrl_engine.ipynb", out, {"run_root": str(runs), "run_id": "pm-skyrl", "max_training_steps": 7})

    text = _text(done)
    assert "JobConfig(model='builtin://tiny-qwen2', env='arithmetic'" in text and "steps=7, run='pm-skyrl')" in text
    from skyrl_core.skyrl_translate import SKYRL_VERSION

    version = re.escape(SKYRL_VERSION)  # the release the translation is written for
    assert re.search(rf"SkyrlTranslation\(\d+ keys for SkyRL {version}, \d+ changed, \d+ not sent, ready", text)
    assert "trainer.strategy = 'fsdp'" in text and "generator.inference_engine.backend = 'vllm'" in text
    assert f"trainer.ckpt_path = '{runs}/pm-skyrl/checkpoints'" in text
    assert f"python -m skyrl_engine.skyrl_bridge --run-dir {runs}/pm-skyrl \\\n" in text
    assert "    trainer.max_training_steps=7 \\\n" in text
    # the magic's dry run: the same bridge command on one line, with the translation's notes
    assert f"-m skyrl_engine.skyrl_bridge --run-dir {runs}/pm-skyrl 'data.train_data=" in text
    assert "# changed: trainer.strategy=fsdp" in text
    assert "trainer.async_one_step: true is not allowed with run.engine=skyrl" in text
    assert "trainer.strategy: ddp is not allowed with run.engine=skyrl" in text
    assert "does not divide one GPU's share of a policy mini-batch on run.engine=skyrl" in text
    assert "Qwen/Qwen2.5-1.5B-Instruct" in text  # the defaults table
    assert ("local cannot run this job yet:\n  run.engine: 'skyrl' needs SkyRL's trainer on the cluster, and there "
            "it does not import") in text
    assert "dry run: nothing submitted (the plan refused the cluster)" in text
    assert not runs.exists()  # nothing written
    assert not [j for j in ray_cluster.jobs() if j.run_id == "pm-skyrl"]  # nothing submitted
    assert ray_cluster._token not in out.read_text()
