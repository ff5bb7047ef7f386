"""notebooks/hyperpod_quickstart.ipynb runs under papermill with dry_run=True (how CI runs it) and
writes a RayCluster manifest that the KubeRay CRD accepts, without any AWS call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from hyperpod_common import OUTPUTS, REPO

NOTEBOOK = REPO / "notebooks" / "hyperpod_quickstart.ipynb"
#: Where the executed notebook is kept for the secret scan (test_hyperpod_zz_secrets).
SAVED = Path(os.environ.get("SKYRL_NB_HYPERPOD_NOTEBOOK_OUT", "/tmp/skyrl-nb-hyperpod_quickstart.out.ipynb"))


def test_parameters_cell_declares_what_papermill_sets() -> None:
    nb = json.loads(NOTEBOOK.read_text())
    params = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1
    src = "".join(params[0]["source"])
    for name in ("hyperpod_cluster", "namespace", "instance_type", "workers", "gpus_per_worker", "preset",
                 "dry_run", "manifest_dir"):
        assert f"{name} = " in src, name
    assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")  # committed clean


def test_papermill_dry_run(tmp_path: Path, crd_schema: dict[str, Any]) -> None:
    manifests = tmp_path / "manifests"
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "widgets"), os.environ.get("PYTHONPATH", "")]),
           "IPYTHONDIR": str(tmp_path / "ipython"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_DATA_DIR": str(tmp_path / "data"),
           # No AWS is reachable: a dry run must not need it, so point boto3 at nothing.
           "AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    cmd = [sys.executable, "-m", "papermill", str(NOTEBOOK), str(SAVED), "-k", "python3", "--cwd", str(tmp_path),
           "-p", "dry_run", "True", "-p", "manifest_dir", str(manifests), "-p", "hyperpod_cluster", "hp-ci",
           "-p", "instance_type", "ml.p4d.24xlarge", "-p", "workers", "3", "-p", "gpus_per_worker", "8",
           "--log-output", "--no-progress-bar"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    OUTPUTS.append(("papermill stdout+stderr", proc.stdout + proc.stderr))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    files = sorted(manifests.glob("*.yaml"))
    assert [f.name for f in files] == ["skyrl-hp-ci.yaml"]
    manifest = yaml.safe_load(files[0].read_text())
    jsonschema.Draft202012Validator(crd_schema).validate(manifest)
    group = manifest["spec"]["workerGroupSpecs"][0]
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert group["replicas"] == 3 and limits["nvidia.com/gpu"] == 8 and limits["vpc.amazonaws.com/efa"] == 4

    out = json.loads(SAVED.read_text())
    text = "\n".join("".join(o.get("text", "")) for c in out["cells"] for o in c.get("outputs", []))
    assert "RayCluster default/skyrl-hp-ci" in text and "p4d-24xlarge" in text
    assert "dry run: no cluster created" in text
    assert not any(o.get("output_type") == "error" for c in out["cells"] for o in c.get("outputs", []))
