"""End to end with a cluster that shares no disk with the notebook (issue 14's done-when).

The "remote" Ray head runs in its own mount namespace (tests/remote_head.py): the checkout, this test's
temp folders and the notebook's interpreter path do not exist there. The run store is on a real S3 API
(moto's server on 127.0.0.1, tests/s3_server.py). From this process, as a notebook would:
``connect`` + ``launch(run_root="s3://...")``; the job finds its config (in the submission) and its code
(Ray py_modules), writes the run store to S3, the dashboard gains points while it runs, the inspector
opens a step, ``stop()`` and ``resume()`` go through the S3 checkpoint, and every step is there once.
A local run root is refused before any training job is submitted, in one line. The same run serves its
step metrics for Prometheus (``run.prometheus_port``): scraped while it trains, and the Grafana dashboard's
queries (docs/grafana/skyrl-nb.json) name only series it served.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from ray_clusters import _free_ports
from remote_head import can_unshare, remote_ray_head

pytestmark = pytest.mark.slow

STEPS = 8
SMALL = [f"trainer.max_training_steps={STEPS}", "trainer.ckpt_interval=2", "trainer.eval_interval=0",
         "trainer.eval_before_train=false"]


@pytest.fixture(scope="module")
def remote(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    why = can_unshare()
    if why:
        pytest.skip(f"a remote head needs its own mount namespace: {why}")
    repo = Path(__file__).resolve().parents[2]
    with remote_ray_head([repo, tmp_path_factory.getbasetemp()], env=s3_server.env) as head:
        yield head


GRAFANA = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "skyrl-nb.json"


def _scrape(port: int) -> dict[str, list[Any]]:
    """The engine's Prometheus endpoint: {metric name: [samples]}; {} while nothing listens."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return {}
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def _follow(dash: Any, job: Any, until: Any, timeout: float = 300.0, port: int | None = None,
            scraped: dict[str, list[Any]] | None = None) -> list[tuple[str, int]]:
    """Refresh the dashboard every 0.5 s until ``until(dash)``; the (state, points) it saw. With ``port``,
    also scrape the job's Prometheus endpoint into ``scraped`` (the newest answer that had samples)."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dash.refresh()
        seen.append((dash.state, dash.points))
        if port is not None and (found := _scrape(port)) and any(found.values()):
            scraped.clear()
            scraped.update(found)
        if until(dash):
            return seen
        time.sleep(0.5)
    pytest.fail(f"{job.submission_id}: still {dash.state} at {dash.points} points after {timeout} s; "
                f"logs: {job.logs(tail=30)}")


def test_notebook_and_cluster_share_no_disk(remote: Any, s3: Any, tmp_path: Path) -> None:
    from skyrl_core.config import ConfigError
    from skyrl_core.runs import RunReader
    from skyrl_nb.cluster import connect
    from skyrl_nb.dashboard import Dashboard
    from skyrl_widgets.inspector import TrajectoryInspector

    cluster = connect(remote.address, token=remote.token)
    assert cluster.code == "ship" and not cluster.runs_here

    # a local run root: probed, refused in one line; no training job, nothing written
    local_root = tmp_path / "runs"
    with pytest.raises(ConfigError) as refused:
        cluster.launch("quickstart", overrides=[f"run.run_root={local_root}", *SMALL], run_id="on-my-disk")
    (line,) = refused.value.problems
    assert line.startswith(f"run.run_root: {str(local_root)!r} is on this notebook's disk, which the cluster at "
                           f"{cluster.address} cannot see")
    assert cluster.jobs() == [] and not local_root.exists()

    # the checkout is not there: without shipping the engine, the job cannot even import it
    root = f"s3://{s3.bucket}/remote-{uuid.uuid4().hex[:8]}"
    unshipped = cluster.launch("quickstart", overrides=[f"run.run_root={root}", *SMALL], run_id="no-code",
                               code="installed")
    assert unshipped.wait(timeout=120) in ("failed", "lost")
    assert "No module named skyrl_engine" in unshipped.logs() or "No module named 'skyrl_engine'" in unshipped.logs()

    plan = repr(cluster.plan("quickstart", overrides=[f"run.run_root={root}", *SMALL]))
    assert "engine code: shipped with the job as Ray py_modules (skyrl_core from" in plan
    assert f"run store: {root} (an object store" in plan

    port = _free_ports(1)[0]
    job = cluster.launch("quickstart", overrides=[f"run.run_root={root}", *SMALL, f"run.prometheus_port={port}"],
                         run_id="e2e")
    assert job.run_dir == f"{root}/e2e"
    dash = Dashboard(job, static=True)
    scraped: dict[str, list[Any]] = {}
    seen = _follow(dash, job, lambda d: d.points >= 3 or d.finished, port=port, scraped=scraped)
    running = sorted({points for state, points in seen if state == "running"})
    assert len(running) >= 2, seen  # points arrived while the job ran
    # Prometheus, scraped while it trained: reward and step-time series labelled with the run id
    (reward,) = [s for s in scraped["skyrl_reward_mean"] if s.labels == {"run_id": "e2e"}]
    assert 0.0 <= reward.value <= 1.0
    parts = {s.labels["part"] for s in scraped["skyrl_step_time_seconds"] if s.labels["run_id"] == "e2e"}
    assert {"step", "generate", "policy_train"} <= parts
    assert [s.value for s in scraped["skyrl_total_steps"]] == [STEPS]
    dashboard = json.loads(GRAFANA.read_text())
    assert dashboard["uid"] == "skyrl-nb" and dashboard["schemaVersion"] >= 30 and dashboard["panels"]
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"\b(skyrl_[a-z_]+)\b", target["expr"])}
    assert queried and queried <= set(scraped), queried - set(scraped)  # only series the endpoint serves
    assert job.stop() is True
    assert job.wait(timeout=120) == "stopped"
    dash.refresh()
    stopped_at = dash.step
    assert 3 <= stopped_at < STEPS, (stopped_at, job.logs(tail=20))

    inspector = TrajectoryInspector(job.run, static=True, auto_refresh=0)
    inspector.show_step(2)
    assert inspector.view["step"] == 2 and inspector.view["samples"] > 0 and inspector.view["groups"]

    resumed = job.resume()
    assert resumed.submission_id == "e2e-r1" and resumed.run_dir == job.run_dir
    dash2 = Dashboard(resumed, static=True)
    _follow(dash2, resumed, lambda d: d.finished)
    assert dash2.state == "succeeded", resumed.logs(tail=30)

    run = RunReader(job.run_dir)
    assert [row["step"] for row in run.metrics()] == list(range(1, STEPS + 1))  # every step exactly once
    assert run.trajectory_steps() == list(range(1, STEPS + 1))
    assert dash2.series.data["step"] == list(range(1, STEPS + 1))
    resumes = [e for e in run.events() if e["kind"] == "resumed"]
    assert len(resumes) == 1 and resumes[0]["path"].startswith(f"{root}/e2e/checkpoints/global_step_")
    # from the newest checkpoint at the stop (one may land between the last metrics line and SIGTERM)
    assert resumes[0]["step"] % 2 == 0 and 2 <= resumes[0]["step"] <= min(stopped_at + 1, STEPS - 1)
    assert run.store.folders("checkpoints")[-1] == f"global_step_{STEPS}"
    assert not (Path(remote.base) / "home" / "skyrl-runs").exists()  # nothing went to the cluster's disk either


def test_sagemaker_ray_address_through_awss_toolkit(remote: Any, s3: Any, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``connect("sagemaker_ray://<cluster>/<ns>")`` through the real toolkit-for-ray-on-sagemaker-ai hook:
    its Kubernetes API is the project's fake (serving ``RayDashboardConnection``), its cookie exchange a local
    HTTPS endpoint in front of the remote head; a 2-step job is submitted through it and succeeds."""
    pytest.importorskip("sagemaker_ray")  # the toolkit's module hook (Ray imports it for the scheme)
    import sys

    import yaml

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hyperpod"))
    from fake_k8s import CONNECTION_GROUP, FakeKubernetes, FakeRayEndpoint

    from skyrl_core.runs import RunReader
    from skyrl_nb.cluster import connect

    with FakeKubernetes() as k8s, FakeRayEndpoint(remote.address, remote.token) as endpoint:
        k8s.ray_endpoints[("team-a", "my-hp")] = endpoint
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "hp",
            "clusters": [{"name": "eks", "cluster": {"server": k8s.server, "certificate-authority-data": k8s.ca_data}}],
            "users": [{"name": "me", "user": {"token": "k8s-aws-v1.ZmFrZQ"}}],
            "contexts": [{"name": "hp", "context": {"cluster": "eks", "user": "me"}}]}))
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", endpoint.ca_path)  # the endpoint's certificate
        cluster = connect("sagemaker_ray://my-hp/team-a")  # pings through the hook
        assert cluster.address == "sagemaker_ray://my-hp/team-a" and "token" not in repr(cluster).replace("no token", "")
        root = f"s3://{s3.bucket}/toolkit-{uuid.uuid4().hex[:8]}"
        job = cluster.launch("quickstart", overrides=[f"run.run_root={root}", "trainer.max_training_steps=2",
                                                      "trainer.eval_interval=0", "trainer.eval_before_train=false"],
                             run_id="via-toolkit")
        assert job.wait(timeout=240) == "succeeded", job.logs(tail=30)
    assert [row["step"] for row in RunReader(job.run_dir).metrics()] == [1, 2]
    connection = f"/apis/{CONNECTION_GROUP}/v1alpha1/namespaces/team-a/raydashboardconnections"
    assert ("POST", connection) in k8s.requests
    # the job and its shipped code went through the endpoint (packages already on the head are only looked up)
    assert ("POST", "/api/jobs/") in endpoint.forwarded
    assert any(path.startswith("/api/packages/") for _, path in endpoint.forwarded)


# A notebook cell, as a user writes it: one function closes over a local variable of another.
CELL = '''
import re

def make_rewards(bonus):
    def correct(prompt, completion, ground_truth, **_):
        numbers = re.findall(r"-?[0-9]+", completion)
        return float(bool(numbers) and numbers[-1] == str(ground_truth))

    def has_digit(prompts, completions, **columns):
        return [bonus * any(ch.isdigit() for ch in str(c)) for c in completions]

    return correct, has_digit

correct, has_digit = make_rewards(0.5)
'''


def _cell_namespace() -> dict[str, Any]:
    """``CELL`` run as Jupyter runs a cell: in ``__main__``'s name, its source in linecache (IPython keeps each
    cell there, which is how ``inspect.getsource`` finds a cell's function)."""
    import linecache

    filename = "<ipython-input-7-rewards>"
    linecache.cache[filename] = (len(CELL), None, CELL.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(CELL, filename, "exec"), namespace)  # noqa: S102 - the test's stand-in for a notebook cell
    return namespace


def test_own_data_and_cell_rewards_on_a_cluster_that_cannot_see_the_notebook(remote: Any, s3: Any) -> None:
    """Issue 35's done-when: a DataFrame and two reward functions from a cell (one a closure), on the remote head
    with the run store on S3; per-function series in the store and the dashboard, the functions' source and the
    data's hash in the run's record, and a stop + ``resume()`` that goes on with the same shipped data."""
    import hashlib
    import io

    import pandas as pd
    import pyarrow.parquet as pq

    from skyrl_core.runs import RunReader
    from skyrl_nb.cluster import connect
    from skyrl_nb.dashboard import Dashboard

    ns = _cell_namespace()
    df = pd.DataFrame({"question": [f"{a}+{b}" for a in range(5) for b in range(5)],
                       "answer": [str(a + b) for a in range(5) for b in range(5)]})
    cluster = connect(remote.address, token=remote.token)
    root = f"s3://{s3.bucket}/own-{uuid.uuid4().hex[:8]}"
    steps = 6
    job = cluster.launch("quickstart", overrides=[f"run.run_root={root}", f"trainer.max_training_steps={steps}",
                                                  "trainer.ckpt_interval=1", "trainer.eval_interval=0",
                                                  "trainer.eval_before_train=false", "data.val_data=[]"],
                         run_id="own-task", data=df, columns={"prompt": "question", "ground_truth": "answer"},
                         reward=[ns["correct"], (ns["has_digit"], 0.2)])
    dash = Dashboard(job, static=True)
    _follow(dash, job, lambda d: d.points >= 2 or d.finished)
    assert job.stop() is True
    assert job.wait(timeout=120) == "stopped"
    resumed = job.resume()
    dash2 = Dashboard(resumed, static=True)
    _follow(dash2, resumed, lambda d: d.finished)
    assert dash2.state == "succeeded", resumed.logs(tail=30)

    run = RunReader(job.run_dir)
    rows = run.metrics()
    assert [r["step"] for r in rows] == list(range(1, steps + 1))  # every step once, across the stop
    assert len([e for e in run.events() if e["kind"] == "resumed"]) == 1
    for r in rows:  # each function's own series; the reward is their weighted sum
        assert 0 <= r["reward/correct"] <= 1 and 0 <= r["reward/has_digit"] <= 0.5 and r["reward/errors"] == 0
        assert r["reward/avg_raw_reward"] == pytest.approx(r["reward/correct"] + 0.2 * r["reward/has_digit"])
    assert set(dash2.series.data["reward_parts"]) == {"correct", "has_digit"}
    assert dash2.series.data["reward_parts"]["correct"] == [r["reward/correct"] for r in rows]

    # what the run says it trained on: the DataFrame (rows, hash of the shipped bytes) and each function's source
    inputs = run.inputs()
    (train,) = inputs.data["train"]
    shipped = run.store.read(f"inputs/train-{train['sha256']}.parquet")
    assert train["rows"] == 25 and hashlib.sha256(shipped).hexdigest()[:16] == train["sha256"]
    assert pq.read_table(io.BytesIO(shipped)).to_pandas().equals(df)
    sources = {r["name"]: r["source"] for r in inputs.rewards}
    assert "def correct(prompt, completion, ground_truth, **_):" in sources["correct"]
    assert "return [bonus * any(" in sources["has_digit"] and inputs.rewards[1]["weight"] == 0.2
    # both attempts trained on it: every step's prompts are the DataFrame's questions
    asked = {q for step in range(1, steps + 1) for q in run.trajectories(step)["ground_truth"]}
    assert asked <= set(df["answer"])
