"""Notebooks run headless with papermill against the session's real Ray cluster (fake engine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]


def _outputs(nb: Any) -> list[dict[str, Any]]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _run(src: Path, out: Path, params: dict[str, Any] | None = None) -> Any:
    import papermill

    from skyrl_nb.demo import ensure_kernel

    papermill.execute_notebook(str(src), str(out), parameters=params or {}, kernel_name=ensure_kernel(),
                               progress_bar=False, cwd=str(REPO))
    return nbformat.read(out, as_version=4)


@pytest.mark.slow
def test_magics_under_papermill(ray_cluster: Any, nb_env: Path, tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in [
        "%load_ext skyrl_nb",
        f"%config SkyrlMagics.run_root = {str(tmp_path / 'runs')!r}",
        "job = %skyrl launch --run-id pm-magic trainer.max_training_steps=4 --wait",
        "%skyrl status pm-magic",
        "%skyrl logs pm-magic --tail 1",
        "%skyrl list",
        "print(job.status(), len(job.run.metrics()))",
    ]]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src = tmp_path / "magics.ipynb"
    nbformat.write(nb, src)
    done = _run(src, tmp_path / "magics.out.ipynb")
    text = json.dumps([o for o in _outputs(done)])
    assert "succeeded 4" in text
    assert "step 4 reward" in text  # the logs
    assert "pm-magic" in text and "<svg" in text  # list and the static dashboard
    assert not any(o.get("output_type") == "error" for o in _outputs(done))


@pytest.mark.slow
def test_bad_magic_fails_papermill(ray_cluster: Any, nb_env: Path, tmp_path: Path) -> None:
    import papermill

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext skyrl_nb"),
                nbformat.v4.new_code_cell("%skyrl launch trainer.sed=3")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src = tmp_path / "bad.ipynb"
    nbformat.write(nb, src)
    with pytest.raises(papermill.PapermillExecutionError):
        _run(src, tmp_path / "bad.out.ipynb")
    # IPython prints a UsageError as one line on stderr (no traceback) and fails the cell.
    failed = nbformat.read(tmp_path / "bad.out.ipynb", as_version=4)
    err = "".join(o.get("text", "") for o in _outputs(failed) if o.get("name") == "stderr")
    assert "UsageError: trainer.sed: unknown key (did you mean 'trainer.seed'?)" in err
    assert len(err.strip().splitlines()) == 1
    assert not any(j.run_id.startswith("quickstart-") and j.submission_id == j.run_id and
                   Path(j.run_dir).parent == tmp_path for j in ray_cluster.jobs())


@pytest.mark.slow
def test_quickstart_under_papermill_is_small_and_clean(ray_cluster: Any, nb_env: Path, tmp_path: Path) -> None:
    out = tmp_path / "quickstart.out.ipynb"
    done = _run(REPO / "notebooks" / "quickstart.ipynb", out, {
        "max_training_steps": 8, "run_root": str(tmp_path / "runs"), "run_id": "pm-quick",
        "keep_cluster": True, "min_reward_gain": -1.0,  # 8 steps: learning is checked by make demo
        "evaluate": False})  # the fake engine has no eval job: the real one runs it in the 40-step test below
    size = out.stat().st_size
    print(f"\nexecuted quickstart: {size / 1024:.0f} KB")
    assert size < 1_000_000
    outputs = _outputs(done)
    assert not any(o.get("output_type") == "error" for o in outputs)
    mimes = {m for o in outputs for m in o.get("data", {})}
    assert "application/vnd.jupyter.widget-view+json" not in mimes
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "<svg" in html and "pm-quick: succeeded, step 8/8" in html  # the final static figure
    assert "widgets" not in done.metadata or not done.metadata.get("widgets")
    assert ray_cluster._token not in out.read_text()


@pytest.mark.slow
def test_quickstart_40_steps_with_the_real_engine_ends_clean(ray_cluster: Any, nb_env: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """What a papermill user runs first: ``-p max_training_steps 40``, the real engine (the built-in tiny model)
    and the notebook's own check. 40 steps gain about +0.06 (+0.064 measured with issue 38's warm start), so the
    rise is reported, not asserted: the run
    ends without an error (issue 18: it used to fail on a fixed +0.3). The notebook ends with an evaluation job,
    base vs trained on the held-out split: its table is the cell's output, and the trained model's pass@1 is
    the run's own eval score at step 40 (issue 36)."""
    monkeypatch.delenv("SKYRL_NB_ENGINE_MODULE")  # the kernel's jobs run `python -m skyrl_engine`
    done = _run(REPO / "notebooks" / "quickstart.ipynb", tmp_path / "q40.out.ipynb", {
        "max_training_steps": 40, "run_root": str(tmp_path / "runs"), "run_id": "pm-40"})
    outputs = _outputs(done)
    assert not any(o.get("output_type") == "error" for o in outputs), json.dumps(outputs)[-2000:]
    text = json.dumps(outputs)
    assert "pm-40: succeeded, step 40/40" in text and "40 steps are too few to expect a clear rise" in text
    assert "407.4K parameters" in text  # the real engine: the built-in model's count, from its started event
    assert "local Ray head: reusing the running head" in text  # the cluster cell says what it did
    from skyrl_core.eval_store import open_eval
    from skyrl_core.runs import RunReader

    evals = sorted((tmp_path / "runs").glob("pm-40-eval-*"))
    assert len(evals) == 1, evals
    summary = open_eval(evals[0]).summary()
    assert list(summary["models"]) == ["base", "trained"]
    run_eval = next(e for e in RunReader(tmp_path / "runs" / "pm-40").events() if e.get("kind") == "eval"
                    and e.get("step") == 40)
    assert summary["models"]["trained"]["pass@1"] == pytest.approx(run_eval["eval/all/avg_score"], abs=1e-12)
    assert "pass@1" in text and "prompts changed between base and trained" in text
