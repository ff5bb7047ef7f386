"""``trainer.alerts``: a local HTTP server stands for the webhook.

- The engine (the shared ``scripted_run`` of conftest.py, ~25 s, and its resume here to the end, ~8 s): exactly
  one message each for the stall, the reward collapse and the failure, none again when the run resumes, the URL
  never written whole.
- The notebook: a Job that finds its run lost sends one ``lost`` message, once (~1 s).
- SNS through moto, the config's refusals, a webhook that is down (a warning, never a failed run): ~2 s.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import RAISE_AT, RUN_ID, scripted_env, train_command


def _events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_one_message_each_for_stall_collapse_and_failure_and_none_again_on_resume(scripted_run: Any,
                                                                                   tiny_model_dir: str) -> None:
    import subprocess

    run, inbox = scripted_run, scripted_run.inbox
    assert run.returncode == 1, run.output[-3000:]
    texts = inbox.texts()
    wanted = ("stalled at step 5", "reward collapsed at step 6", f"failed at step {RAISE_AT}")
    assert sorted(w for t in texts for w in wanted if w in t) == sorted(wanted) and len(texts) == 3, texts
    assert all(m["type"] == "application/json" and m["path"] == "/hook" and set(m["json"]) == {"text"}
               for m in inbox.messages)
    failed = next(t for t in texts if "failed at" in t)
    assert f"run {RUN_ID}" in failed and "scripted failure at step 7" in failed and str(run.run_dir) in failed
    assert "the mean reward of steps 5-6 is 0" in next(t for t in texts if "collapsed" in t)
    # each sent alert is an event with its key; the URL is shown as scheme and host only, nowhere whole
    alerts = [e for e in _events(run.run_dir) if e["kind"] == "alert"]
    assert sorted(e["key"] for e in alerts) == ["failed@7", "reward_collapse@6", "stalled@5"]
    masked = inbox.url + "/…"
    assert all(e["to"] == f"env:SKYRL_ALERTS_WEBHOOK ({masked})" for e in alerts)
    whole = inbox.url + "/hook"
    for text in (run.output, (run.run_dir / "events.jsonl").read_text(), (run.run_dir / "config.yaml").read_text()):
        assert whole not in text

    # the same run resumed from its step-6 checkpoint, its reward still 0 and no longer raising: its reward window
    # (steps 5-6, replayed from the kept rows) is still collapsed, so steps 7-8 send nothing
    started = time.monotonic()
    env = scripted_env(inbox, SCRIPTED_FIRST_STEP="7", SCRIPTED_HOLD_AT="0", SCRIPTED_RAISE_AT="0")
    again = subprocess.run(train_command(run.run_root, tiny_model_dir, "trainer.resume_mode=latest"), env=env,
                           capture_output=True, text=True, timeout=600)
    resume_s = time.monotonic() - started
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    events = _events(run.run_dir)
    assert any(e["kind"] == "resumed" and e["from_step"] == 6 for e in events)
    assert [e["step"] for e in events if e["kind"] == "finished"] == [8]
    assert len(inbox.messages) == 3, inbox.texts()[3:]
    assert sorted(e["key"] for e in events if e["kind"] == "alert") == ["failed@7", "reward_collapse@6", "stalled@5"]
    # and a failure in step 7 of any later attempt finds its alert sent (the engine's own check, as fail() calls it)
    from skyrl_core.config import load_config
    from skyrl_core.runs import RunWriter
    from skyrl_engine.alerts import RunAlerts

    cfg = load_config(str(run.run_dir / "config.yaml"))
    later = RunAlerts(cfg, RunWriter(run.run_dir), f"{inbox.url}/hook", start_step=6)
    later.failed(RuntimeError("scripted failure at step 7"), 7)
    assert len(inbox.messages) == 3 and "failed@7" in later.sent
    print(f"scripted run: {run.seconds}; resume {resume_s:.1f} s")


def _running_run(tmp_path: Path, alerts: dict[str, Any]) -> Path:
    from skyrl_core.config import load_config
    from skyrl_core.runs import RunWriter

    cfg = load_config("quickstart", [f"run.run_root={tmp_path}", "run.run_id=gone",
                                     *(f"trainer.alerts.{k}={v}" for k, v in alerts.items())])
    writer = RunWriter(cfg.run_dir)
    writer.write_config(cfg)
    writer.set_status("running", step=3, total_steps=9, pid=os.getpid())
    return Path(cfg.run_dir)


def test_a_job_found_lost_sends_one_lost_alert(tmp_path: Path, inbox: Any) -> None:
    from skyrl_core.alerts import alert_lost_run
    from skyrl_nb.cluster.base import Cluster
    from skyrl_nb.jobs import Job

    run_dir = _running_run(tmp_path, {"webhook": "env:SKYRL_TEST_HOOK"})
    client = SimpleNamespace(get_job_info=lambda _id: SimpleNamespace(
        status="FAILED", message="Job entrypoint command failed with exit code -9", start_time=(time.time() - 60) * 1000))
    cluster = Cluster("http://127.0.0.1:9", token="t")
    cluster._client_obj = client
    job = Job(cluster, submission_id="gone", run_id="gone", run_dir=str(run_dir),
              runtime_env={"env_vars": {"SKYRL_TEST_HOOK": f"{inbox.url}/hook"}})
    for _ in range(3):  # a dashboard asks every second: one message
        assert job.status() == "lost"
    text = inbox.wait_for("was lost at step 3", 10)
    assert "exit code -9" in text and "run gone" in text
    deadline = time.monotonic() + 10  # the thread records the alert just after sending it
    while not any(e["kind"] == "alert" for e in _events(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    # another notebook (or this one after a restart of its kernel) finds the alert in the run's events
    again = alert_lost_run(str(run_dir), "its process is gone", {"SKYRL_TEST_HOOK": f"{inbox.url}/hook"})
    assert again == "the lost alert of step 3 was already sent"
    time.sleep(0.3)
    assert len(inbox.messages) == 1
    (event,) = [e for e in _events(run_dir) if e["kind"] == "alert"]
    assert event["key"] == "lost@3" and event["to"] == f"env:SKYRL_TEST_HOOK ({inbox.url}/…)"
    # a run without alerts for lost: nothing is sent, nothing said
    quiet = _running_run(tmp_path / "q", {"webhook": "env:SKYRL_TEST_HOOK", "events": "[failed]"})
    assert alert_lost_run(str(quiet), "gone", {"SKYRL_TEST_HOOK": f"{inbox.url}/hook"}) is None


def test_an_sns_topic_gets_subject_and_text(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("moto")
    from moto import mock_aws

    from skyrl_core.alerts import AlertError, alert_text, send

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        import boto3

        sns, sqs = boto3.client("sns", region_name="eu-west-1"), boto3.client("sqs", region_name="eu-west-1")
        arn = sns.create_topic(Name="skyrl-alerts")["TopicArn"]
        queue = sqs.create_queue(QueueName="inbox")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=queue_arn)
        subject, text = alert_text("failed", "r1", 7, "RuntimeError: boom", "s3://bucket/runs/r1")
        send(arn, subject, text, timeout_s=5)  # the ARN names its region: eu-west-1, not the default
        (message,) = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
        body = json.loads(message["Body"])
        assert body["Subject"] == "skyrl-nb: run r1 failed at step 7"
        assert body["Message"] == "skyrl-nb: run r1 failed at step 7: RuntimeError: boom (run store: s3://bucket/runs/r1)"
        missing = arn.replace("skyrl-alerts", "nobody")
        with pytest.raises(AlertError, match="was not sent"):
            send(missing, subject, text)


def test_where_alerts_go_is_checked_in_one_line_and_never_shown_whole() -> None:
    from skyrl_core.alerts import AlertError, masked, resolve
    from skyrl_core.config import ConfigError, load_config

    secret = "https://hooks.slack.com/services/T000/B000/s3cr3tT0ken"
    cases = {
        f"trainer.alerts.webhook={secret}": "trainer.alerts.webhook: a URL (https://hooks.slack.com/…) is not allowed",
        "trainer.alerts.webhook=env:9x": "trainer.alerts.webhook: 'env:9x' does not name an environment variable",
        "trainer.alerts.webhook=arn:aws:sns:us-east-1:1:t": "trainer.alerts.webhook: 'arn:aws:sns:us-east-1:1:t' is "
                                                           "not an SNS topic ARN",
        "trainer.alerts.webhook=xoxb-s3cr3t": "trainer.alerts.webhook: a value of 11 characters is not allowed",
        "trainer.alerts.events=[failed,crashed]": "trainer.alerts.events: 'crashed' is not allowed; allowed: failed, "
                                                  "lost, stalled, reward_collapse",
        "trainer.alerts.stall_factor=1": "trainer.alerts.stall_factor: 1 is not allowed",
    }
    for override, start in cases.items():
        with pytest.raises(ConfigError) as err:
            load_config("quickstart", [override])
        (line,) = err.value.problems
        assert line.startswith(start) and "s3cr3t" not in line, line
    ok = load_config("quickstart", ["trainer.alerts.webhook=arn:aws:sns:us-east-1:123456789012:alerts"])
    assert ok.trainer.alerts.webhook.endswith(":alerts")
    assert masked(secret) == "https://hooks.slack.com/…" and masked("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    with pytest.raises(AlertError, match="the variable SKYRL_X is not set") as err:
        resolve("env:SKYRL_X", {})
    with pytest.raises(AlertError, match="holds neither") as err:
        resolve("env:SKYRL_X", {"SKYRL_X": "xoxb-s3cr3t"})
    assert "s3cr3t" not in str(err.value)
    assert resolve("env:SKYRL_X", {"SKYRL_X": secret}) == secret


def test_a_webhook_that_is_down_is_a_warning_and_a_missing_variable_turns_alerts_off(tmp_path: Path) -> None:
    from ray_clusters import _free_ports

    from skyrl_core.config import load_config
    from skyrl_core.runs import RunWriter
    from skyrl_engine.alerts import RunAlerts

    cfg = load_config("quickstart", [f"run.run_root={tmp_path}", "run.run_id=down",
                                     "trainer.alerts.webhook=env:SKYRL_TEST_HOOK", "trainer.alerts.timeout_s=2"])
    writer = RunWriter(cfg.run_dir)
    down = f"http://127.0.0.1:{_free_ports(1)[0]}/hook/s3cr3t"
    alerts = RunAlerts.start(cfg, writer, 0, environ={"SKYRL_TEST_HOOK": down})
    assert alerts is not None and "s3cr3t" not in repr(alerts)
    alerts.stop()
    alerts.failed(RuntimeError("boom"), 3)  # refused at once: the run's own end goes on
    (warning,) = [e for e in _events(Path(cfg.run_dir)) if e["kind"] == "warning"]
    assert warning["message"].startswith("the failed alert was not sent: the alert to http://127.0.0.1:")
    assert "s3cr3t" not in warning["message"]
    assert RunAlerts.start(cfg, writer, 0, environ={}) is None
    off = [e for e in _events(Path(cfg.run_dir)) if e["kind"] == "warning"][-1]
    assert "alerts are off" in off["message"] and "SKYRL_TEST_HOOK is not set" in off["message"]


def test_no_stall_is_called_while_the_driver_evaluates_or_checkpoints(tmp_path: Path) -> None:
    """A step that evaluates or checkpoints may take many steps' time: the quiet time counts from the end of such a
    phase (the trainer's telemetry phases), so a long eval is no stall and a step stuck after it still is (~5 s)."""
    from skyrl_core.config import load_config
    from skyrl_core.runs import RunWriter
    from skyrl_engine.alerts import RunAlerts

    cfg = load_config("quickstart", [f"run.run_root={tmp_path}", "run.run_id=evals",
                                     "trainer.alerts.webhook=env:SKYRL_TEST_HOOK", "trainer.alerts.stall_factor=2",
                                     "trainer.alerts.stall_min_s=2"])
    now, phases, sent = [0.0], [()], []
    alerts = RunAlerts(cfg, RunWriter(cfg.run_dir), "http://127.0.0.1:9/hook", clock=lambda: now[0],
                       send_fn=lambda *message: sent.append(message), phases=lambda: phases[0])
    try:
        for step in (1, 2, 3):  # one step a second: a stall after 2 quiet seconds
            now[0] = float(step)
            alerts.observe(step, {"step": step})
        assert alerts.stall_limit() == 2.0
        phases[0], now[0] = ("eval",), 60.0  # step 4 evaluates for a minute
        time.sleep(1.5)
        phases[0], now[0] = ("idle",), 61.0  # the eval ended a second ago
        time.sleep(1.5)
        assert sent == []
        now[0] = 64.0  # three quiet seconds after the eval: step 4 is stuck
        deadline = time.monotonic() + 5
        while not sent and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        alerts.stop()
    assert len(sent) == 1 and "stalled" in sent[0][1] and "step 4" in sent[0][2], sent
