"""Issue 33's small things: the dashboard token, one header per `%skyrl launch`, a run named after the
user's data, the one-time model build said as such."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def test_local_cluster_gives_its_dashboard_token_only_when_asked(tmp_path: Path) -> None:
    from skyrl_nb.cluster.local import LocalCluster

    token = "f00d" * 16
    cluster = LocalCluster("http://127.0.0.1:9", token, temp_dir=tmp_path, pid=os.getpid(), num_cpus=1,
                           log_path=tmp_path / "head.log")
    assert cluster.dashboard_token() == token
    shown = repr(cluster) + cluster._repr_html_()
    assert token not in shown
    assert "token: hidden — cluster.dashboard_token()" in repr(cluster)
    assert "<code>cluster.dashboard_token()</code>" in cluster._repr_html_()


def test_launch_shows_one_header(shell: Any, spy_cluster: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("SKYRL_NB_STATIC", "1")  # the header as HTML, countable, as papermill and nbconvert get it
    shown: list[dict[str, Any]] = []
    monkeypatch.setattr(shell.display_pub, "publish", lambda data, *a, **k: shown.append(data))
    monkeypatch.setattr(shell.displayhook, "write_format_data", lambda data, *a, **k: shown.append(data))
    shell.user_ns["spy"] = spy_cluster
    shell.magics_manager.registry["SkyrlMagics"].show_dashboard = True

    result = shell.run_cell("%skyrl launch --cluster spy --run-id hdr-1 trainer.max_training_steps=2")
    assert result.success, result.error_in_exec
    html = [d.get("text/html", "") for d in shown]
    with_header = [h for h in html if "hdr-1" in h and "its dashboard is above" not in h]
    assert len(with_header) == 1, html  # the dashboard's; the Job under it is one line
    assert any("job hdr-1: its dashboard is above" in h for h in html)
    # in a later cell the job shows its own header again
    shown.clear()
    shell.run_cell("_")
    assert any("hdr-1" in d.get("text/html", "") and "above" not in d.get("text/html", "") for d in shown)


def test_run_id_comes_from_the_users_data_file(tmp_path: Path) -> None:
    from skyrl_nb.cluster.base import new_run_id, prepare_config

    data = tmp_path / "mydata.jsonl"
    data.write_text(json.dumps({"prompt": [{"role": "user", "content": "1+1"}], "env_class": "arithmetic",
                                "reward_spec": {"ground_truth": "2"}}) + "\n")
    cfg = prepare_config("quickstart", overrides=[f"data.train_data=[{data}]", f"run.run_root={tmp_path}/runs"],
                         check_files=False)
    assert cfg.run.run_id.startswith("mydata-"), cfg.run.run_id
    assert prepare_config("quickstart", overrides=[f"run.run_root={tmp_path}/runs"],
                          check_files=False).run.run_id.startswith("quickstart-")
    assert new_run_id(None, ["s3://bucket/a/My Data.v2.parquet"]).startswith("My-Data-")
    assert new_run_id("dapo", ["builtin://arithmetic/train"]).startswith("dapo-")
    assert new_run_id(None, []).startswith("run-")


def test_cold_model_cache_stage_says_one_time_build(tmp_path: Path, monkeypatch: Any) -> None:
    from skyrl_core.choices import Stage
    from skyrl_core.runs import RunWriter
    from skyrl_engine.models import TINY_MODEL, model_build_note, tiny_model_dir
    from skyrl_engine.types import PromptRow
    from skyrl_nb.dashboard import Dashboard

    monkeypatch.setenv("SKYRL_NB_CACHE", str(tmp_path / "cache"))
    rows = [PromptRow([{"role": "user", "content": f"{i}+1"}], "arithmetic", "mine", str(i + 1)) for i in range(8)]
    note = model_build_note(TINY_MODEL, rows, 42)
    assert note == f"building the tiny model (one-time, cached in {tmp_path / 'cache'})"
    # once the cache holds it, the stage is plain "model load" again
    built = Path(tiny_model_dir(rows, 42))
    built.mkdir(parents=True)
    (built / "model.safetensors").write_bytes(b"")
    assert model_build_note(TINY_MODEL, rows, 42) is None
    assert model_build_note("/some/model/dir", rows, 42) is None
    # what the dashboard's header says while the engine is in that stage
    writer = RunWriter(tmp_path / "runs" / "r1")
    writer.set_status("running", step=0, total_steps=3)
    writer.log_event("stage", step=0, stage=Stage.MODEL_LOAD, detail=note)
    dash = Dashboard(str(tmp_path / "runs" / "r1"), charts=False)
    dash.refresh()
    assert note in dash.header()


QUIET_LAUNCH = r"""
import sys
sys.path.insert(0, sys.argv[1])  # the plug-in module, on this process' path only: launch ships it
import skyrl_nb
from skyrl_core.config import load_config
c = skyrl_nb.cluster.local(temp_dir=sys.argv[2], token_path=sys.argv[3], progress=False, start=False)
c.engine_module = "no_such_engine_module"  # the job itself may fail; its submission is what is watched
cfg = load_config("quickstart", overrides=["plugins=[my_skyrl_plugin]", "trainer.algorithm.advantage_estimator=my_adv",
                                            "trainer.algorithm.policy_loss_type=my_loss", f"run.run_root={sys.argv[4]}"])
print("=== launching", file=sys.stderr, flush=True)
job = c.launch(cfg, run_id="quiet-info")
print("=== launched", file=sys.stderr, flush=True)
job.stop()
"""


def test_launch_with_plugins_prints_no_ray_info_to_stderr(ray_cluster: Any, nb_home: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    plugins = Path(__file__).resolve().parent.parent / "fixtures" / "plugins"
    out = subprocess.run([sys.executable, "-c", QUIET_LAUNCH, str(plugins), str(nb_home / "cache" / "ray"),
                          str(nb_home / "config" / "ray_token"), str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    during = out.stderr.split("=== launching", 1)[1].split("=== launched", 1)[0]
    assert during.strip() == "", during  # Ray's "INFO dashboard_sdk.py -- Uploading package ..." lines before
    assert (tmp_path / "runs" / "quiet-info" / "config.yaml").exists()  # it was submitted, plug-in and all


DEMO_EXECUTE = r"""
import sys
from pathlib import Path
import nbformat
from skyrl_nb import demo
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("6 * 7")])
nbformat.write(nb, sys.argv[1] + "/in.ipynb")
demo.execute(Path(sys.argv[1]) / "in.ipynb", Path(sys.argv[1]) / "out.ipynb", {}, cwd=Path(sys.argv[1]))
print(nbformat.read(sys.argv[1] + "/out.ipynb", 4).cells[0].outputs[0]["data"]["text/plain"])
"""


def test_demo_executor_kernel_is_not_plain_tcp(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", DEMO_EXECUTE, str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("42"), out.stderr[-3000:]
    # ipykernel's "Kernel is running over TCP without encryption ..." (every `make demo` before)
    assert "without encryption" not in out.stderr and "WARNING" not in out.stderr, out.stderr


def test_a_server_that_ends_before_answering_names_the_line_that_says_why() -> None:
    """vLLM refuses its settings with a pydantic error whose first line only counts ("1 validation error for
    ModelConfig"): the one line a failed `skyrl_nb.serve` gives carries the next line too, which says which."""
    from skyrl_nb.serving import last_error

    log = ("INFO starting\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
           "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
           "  Value error, User-specified max_model_len (512) is greater than the derived max_model_len (256)\n"
           "    For further information visit https://errors.pydantic.dev/2.14/v/value_error\n")
    assert last_error(log) == ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig "
                               "Value error, User-specified max_model_len (512) is greater than the derived "
                               "max_model_len (256)")
    assert last_error("a\nRuntimeError: boom\nshutting down") == "RuntimeError: boom"
    assert last_error("just a line\n") == "just a line" and last_error("") == "no output"
