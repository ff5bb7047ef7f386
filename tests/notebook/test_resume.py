"""Resume never loses history (issue 33, item 2).

- With a checkpoint, the engine (the real ``RLTrainer``, in-process on the tiny model) keeps every row up to
  the checkpoint byte for byte, trains the later steps again once each, writes a ``resumed`` event with
  ``from_step`` and ``attempt``, and the dashboard's header says so; through Ray, ``Job.resume()`` hands the
  attempt to the job.
- Without one, a resume is refused in one line, by the engine (nothing written) and, before anything is
  submitted, by ``Job.resume()``, the dashboard's Resume button and ``%skyrl resume``; a new run is offered
  and the old run's files stay byte for byte (real local Ray cluster, ``fake_engine`` jobs).
- A run that failed for a reason a resume repeats offers no Resume.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest


def _files(run_dir: Path) -> dict[str, bytes]:
    """Every file under a run directory, by relative path, with its bytes."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_failures_are_sorted_by_whether_a_resume_can_help() -> None:
    from skyrl_core.config import ConfigError
    from skyrl_core.failures import FailureKind, classify_failure, failure_of
    from skyrl_core.resume import ResumeRefused

    class PlacementError(RuntimeError):  # the engine's, by name: the notebook never imports it
        pass

    cases = {
        ConfigError(["trainer.lr: 3 is not allowed"]): (FailureKind.CONFIG, False),
        PlacementError("the policy uses 2 CPU"): (FailureKind.CONFIG, False),
        FileNotFoundError("data/train.parquet"): (FailureKind.CONFIG, False),
        ModuleNotFoundError("my_plugin"): (FailureKind.CONFIG, False),
        KeyError("answer"): (FailureKind.CODE_OR_DATA, False),  # a reward function's bug repeats on resume
        ResumeRefused("run r has no checkpoint"): (FailureKind.NO_CHECKPOINT, False),
        RuntimeError("PolicyWorker × 2: rank 1 died (its process exited): ActorDiedError: x"):
            (FailureKind.WORKER_DIED, True),
        MemoryError(): (FailureKind.OUT_OF_MEMORY, True),
        ConnectionResetError("peer"): (FailureKind.INTERRUPTED, True),
    }
    for err, (kind, resumable) in cases.items():
        got = classify_failure(err)
        assert (got.kind, got.resumable) == (kind, resumable), (err, got)
        # the same verdict from the error line alone (a status.json without error_kind)
        line = f"{type(err).__name__}: {err}"
        assert failure_of({"error": line}).kind == kind, line
        assert failure_of({"error": line, **got.fields()}) == got
    assert failure_of({"error": None}) is None
    # Ray's word for a driver killed before the engine wrote anything (written through by Job.status_detail)
    assert failure_of({"error": "the job ended before the engine recorded anything: Job entrypoint command "
                                "failed with exit code -9"}).resumable
    assert not failure_of({"error": "the job ended before the engine recorded anything: runtime env setup failed"}
                          ).resumable


@pytest.mark.timeout(180)
def test_engine_resume_keeps_history_and_refuses_without_a_checkpoint(
        tmp_path: Path, tiny_model_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from skyrl_core.config import load_config
    from skyrl_core.resume import ATTEMPT_ENV, ResumeRefused
    from skyrl_core.runs import RunReader, RunWriter
    from skyrl_engine.tasks import load_prompts
    from skyrl_engine.trainer import RLTrainer, StopRequested
    from skyrl_engine.workers import Workers
    from skyrl_nb.dashboard import Dashboard

    def trainer(run_id: str, *extra: str) -> RLTrainer:
        cfg = load_config("quickstart", [
            f"trainer.policy.model.path={tiny_model_dir}", f"run.run_root={tmp_path}", f"run.run_id={run_id}",
            "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2", "trainer.micro_train_batch_size_per_gpu=4",
            "generator.n_samples_per_prompt=2", "trainer.max_training_steps=4", "trainer.eval_interval=0",
            "trainer.eval_before_train=false", "trainer.num_threads=1", "generator.sampling_params.max_generate_length=3",
            *extra])
        rows = load_prompts(cfg.data.train_data, "arithmetic")
        workers = Workers.create(cfg, tiny_model_dir, cfg.total_steps(len(rows)), in_process=True)
        return RLTrainer(cfg, RunWriter(cfg.run_dir), workers, rows, [])

    def stopped_after(t: RLTrainer, last: int) -> None:
        """Train steps 1..last, then stop as a SIGTERM does (``python -m skyrl_engine train``)."""
        def steps(first: int):
            for step in range(first, last + 1):
                yield step, t.train_one_step(step)
            raise StopRequested("test")
        with pytest.raises(StopRequested):
            t.train(steps)
        t.stopped()

    # -- with a checkpoint at step 2, stopped after step 3: resume from 2
    first = trainer("ck", "trainer.ckpt_interval=2", "trainer.resume_mode=none")
    stopped_after(first, 3)
    run = tmp_path / "ck"
    lines_before = (run / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    parts_before = _files(run / "trajectories")
    assert [int(line.split(b'"step": ')[1].split(b",")[0]) for line in lines_before] == [1, 2, 3]
    monkeypatch.setenv(ATTEMPT_ENV, "1")
    trainer("ck", "trainer.ckpt_interval=2", "trainer.resume_mode=latest").train()
    lines_after = (run / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    assert lines_after[:2] == lines_before[:2]  # steps at or before the checkpoint: not one byte rewritten
    assert {k: v for k, v in _files(run / "trajectories").items() if k < "step_000003"} == \
        {k: v for k, v in parts_before.items() if k < "step_000003"}
    assert [r["step"] for r in RunReader(run).metrics()] == [1, 2, 3, 4]  # step 3 trained again, counted once
    events = RunReader(run).events()
    assert [e["kind"] for e in events].count("started") == 1
    (resumed,) = [e for e in events if e["kind"] == "resumed"]
    assert (resumed["from_step"], resumed["attempt"], resumed["step"]) == (2, 1, 2)
    dash = Dashboard(run, static=False)
    header = dash.widget().children[0]
    dash.refresh()
    assert header.note == "resumed from step 2 (attempt 1)" and dash.state == "succeeded"
    assert "succeeded (resumed from step 2 (attempt 1))" in dash.header()
    assert "resumed from step 2" in dash._html()

    # -- no checkpoint yet (interval 50), stopped after step 2: the engine refuses before writing anything
    monkeypatch.delenv(ATTEMPT_ENV)
    stopped_after(trainer("nock", "trainer.ckpt_interval=50", "trainer.resume_mode=none"), 2)
    run = tmp_path / "nock"
    before = _files(run)
    again = trainer("nock", "trainer.ckpt_interval=50", "trainer.resume_mode=latest")
    with pytest.raises(ResumeRefused) as refused:
        again.train()
    message = str(refused.value)
    assert "\n" not in message and message.startswith(
        "run nock has no checkpoint (trainer.ckpt_interval=50, stopped at step 2): resuming would start over"), message
    assert _files(run) == before
    again.fail(refused.value)  # what python -m skyrl_engine train does next: status and an error event say why
    status = RunReader(run).status()
    assert status["state"] == "failed" and status["error_kind"] == "no_checkpoint" and status["resumable"] is False
    assert all(_files(run)[name] == data for name, data in before.items()
               if name.startswith("trajectories/") or name == "metrics.jsonl")


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.2)


@pytest.mark.timeout(180)
def test_resume_is_refused_before_submitting_and_a_new_run_is_offered(
        ray_cluster: Any, shell: Any, tmp_path: Path) -> None:
    from IPython.core.error import UsageError

    from skyrl_core.resume import ResumeRefused
    from skyrl_nb.dashboard import Dashboard

    runs = tmp_path / "runs"
    common = ["trainer.max_training_steps=60", f"run.run_root={runs}"]  # stopped long before the end
    env = {"FAKE_ENGINE_STEP_S": "0.3"}
    job = ray_cluster.launch("quickstart", overrides=common, run_id="nock",
                             runtime_env={"env_vars": {**env, "FAKE_ENGINE_CKPT_INTERVAL": "0"}})
    bad = ray_cluster.launch("quickstart", overrides=common, run_id="bad",
                             runtime_env={"env_vars": {**env, "FAKE_ENGINE_FAIL": "1"}})
    ck = ray_cluster.launch("quickstart", overrides=common, run_id="ck", runtime_env={"env_vars": env})
    _wait_for(lambda: len(job.run.metrics()) >= 2 and len(ck.run.metrics()) >= 2, 90, "2 steps")
    assert job.stop() is True and ck.stop() is True
    assert job.wait(timeout=60) == "stopped" and ck.wait(timeout=60) == "stopped"

    # with a checkpoint (every step here): resumed through Ray, the attempt travels with the submission
    ck_lines = (runs / "ck" / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    resumed = ck.resume(overrides=[f"trainer.max_training_steps={len(ck_lines) + 1}"])
    assert resumed.submission_id == "ck-r1" and resumed.wait(timeout=90) == "succeeded", resumed.logs(tail=20)
    (event,) = [e for e in resumed.run.events() if e["kind"] == "resumed"]
    assert (event["from_step"], event["attempt"]) == (len(ck_lines), 1)
    assert (runs / "ck" / "metrics.jsonl").read_bytes().splitlines(keepends=True)[:len(ck_lines)] == ck_lines
    ck_dash = Dashboard(resumed, static=False)
    ck_header = ck_dash.widget().children[0]
    ck_dash.refresh()
    assert ck_header.note == f"resumed from step {len(ck_lines)} (attempt 1)" and ck_header.actions == ["logs"]
    ck_dash.stop()
    done = job.run.metrics()[-1]["step"]
    run = runs / "nock"
    before = _files(run)
    jobs_before = len(ray_cluster.jobs())

    # Job.resume(): refused in one line, nothing submitted, not a byte changed
    with pytest.raises(ResumeRefused) as refused:
        job.resume()
    assert str(refused.value) == (
        f"run nock has no checkpoint (trainer.ckpt_interval=50, stopped at step {done}): resuming would start over "
        f"and overwrite steps 1-{done}; launch a new run with the same config instead: job.restart_as_new()")
    # %skyrl resume: the same line, as a UsageError
    shell.user_ns["c"] = ray_cluster
    shell.run_line_magic("config", "SkyrlMagics.cluster = 'c'")
    with pytest.raises(UsageError) as usage:
        shell.run_line_magic("skyrl", "resume nock --no-dashboard")
    line = str(usage.value)
    assert "\n" not in line and "has no checkpoint (trainer.ckpt_interval=50" in line and "restart_as_new()" in line
    # the dashboard: the reason beside the state, New run instead of Resume; a Resume press says why
    dash = Dashboard(job, static=False)
    header = dash.widget().children[0]
    dash.refresh()
    assert header.actions == ["new_run", "logs"] and "has no checkpoint" in header.note
    header._handle_message(header, {"action": "resume"}, [])
    assert dash.error == str(refused.value)
    assert len(ray_cluster.jobs()) == jobs_before and _files(run) == before

    # New run: the same config under a new run id, followed by the dashboard; the old run untouched
    header._handle_message(header, {"action": "new_run"}, [])
    new = dash.job
    assert new.run_id == "nock-new" and dash.reader.run_id == "nock-new" and new.run_dir == str(runs / "nock-new")
    _wait_for(lambda: len(new.run.metrics()) >= 2, 90, "2 steps of the new run")
    new.stop()
    assert new.wait(timeout=60) == "stopped"
    assert [r["step"] for r in new.run.metrics()][:2] == [1, 2]  # from step 0, in its own folder
    assert new.submitted_config()["trainer"]["resume_mode"] == "none"
    assert _files(run) == before

    # a failure a resume would repeat (an exception in the run's code): no Resume, and resume() says why
    assert bad.wait(timeout=90) == "failed"
    with pytest.raises(ResumeRefused, match=r"^run bad failed with 'ValueError: fake failure at step 2': an error "
                                            r"in the run's code or data: a resume repeats"):
        bad.resume()
    bad_dash = Dashboard(bad, static=False)
    bad_header = bad_dash.widget().children[0]
    bad_dash.refresh()
    assert "resume" not in bad_header.actions and "a resume repeats" in bad_header.note
    dash.stop()
    bad_dash.stop()


def test_checkpoints_on_the_clusters_own_disk_are_left_to_the_engine(tmp_path) -> None:
    """A remote cluster whose ``trainer.ckpt_path`` this notebook cannot see: no refusal from here (the engine's own
    guard refuses a resume that would overwrite history); the same run on a cluster on this machine is refused."""
    from types import SimpleNamespace

    from skyrl_core.runs import RunWriter
    from skyrl_nb.jobs import Job

    run_dir = tmp_path / "runs" / "far"
    writer = RunWriter(run_dir)
    writer.log_metrics(1, {"reward/avg_raw_reward": 0.5})
    writer.set_status("stopped", step=1)
    config = {"trainer": {"ckpt_path": "/cluster-only/ckpts", "ckpt_interval": 50}}
    for runs_here, refused in ((False, False), (True, True)):
        cluster = SimpleNamespace(runs_here=runs_here, shared_paths=[], _under_shared=lambda path: False)
        job = Job(cluster, submission_id="far", run_id="far", run_dir=str(run_dir))
        job.status = lambda: "stopped"  # what Ray says of the ended job
        job.submitted_config = lambda: config
        problem, final = job.resume_check()
        assert final and (problem is not None) == refused, (runs_here, problem)
