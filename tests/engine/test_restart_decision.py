"""What the restart supervisor decides after its trainer ended (``skyrl_core.resume.decide_restart``) and how it
reads that end (``skyrl_engine.supervisor.attempt_end``), on a real run store; no training (~3 s: one test imports
the trainer)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from skyrl_core.failures import RESUMABLE, FailureKind, classify_failure, failure_of
from skyrl_core.resume import decide_restart
from skyrl_core.runs import RunWriter


def _run(tmp_path: Path, *, history: int = 0, checkpoint: int | None = None, folder: bool = True) -> Path:
    run_dir = tmp_path / "run"
    writer = RunWriter(run_dir)
    for step in range(1, history + 1):
        writer.log_metrics(step, {"reward/avg_raw_reward": 0.5})
    if checkpoint is not None:
        (run_dir / "checkpoints").mkdir(exist_ok=True)
        (run_dir / "checkpoints" / "latest_ckpt_global_step.txt").write_text(str(checkpoint))
        if folder:
            (run_dir / "checkpoints" / f"global_step_{checkpoint}").mkdir()
    return run_dir


def _decide(run_dir: Path, exit_code: int = 1, failure=None, *, stopped: bool = False, done: int = 0,
            most: int = 2):
    return decide_restart(exit_code, failure, stopped=stopped, restarts_done=done, max_restarts=most,
                          run_dir=run_dir, ckpt_root=str(run_dir / "checkpoints"), ckpt_interval=2)


def _failure(kind: FailureKind):
    return failure_of({"error": "SomeError: something", "error_kind": kind.value})


@pytest.mark.parametrize("kind", list(FailureKind))
def test_each_failure_kind_is_restarted_only_when_resumable(tmp_path: Path, kind: FailureKind) -> None:
    decision = _decide(_run(tmp_path, history=5, checkpoint=4), failure=_failure(kind))
    assert decision.restart is (kind in RESUMABLE), decision
    if decision.restart:
        assert (decision.from_step, decision.resume_latest) == (4, True)
        assert decision.why == "restart 1 of 2 from the checkpoint of step 4"
    else:
        assert decision.why.startswith("not restarted: ") and "\n" not in decision.why


def test_what_is_never_restarted(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, history=5, checkpoint=4)
    died = classify_failure("ActorDiedError: the actor died unexpectedly")
    assert died.kind == FailureKind.WORKER_DIED
    assert _decide(run_dir, 0, None).why == "the trainer succeeded"
    for code in (143, 130, -15, -2):  # the trainer's stop, SIGINT, or killed by either
        assert not _decide(run_dir, code, died).restart
    stop = _decide(run_dir, -9, died, stopped=True)  # the job was asked to stop: whatever the trainer's end
    assert not stop.restart and "stopped" in stop.why
    assert not _decide(run_dir, 2, died).restart  # the config was refused where the job runs
    assert "not known why" in _decide(run_dir, 1, None).why
    used = _decide(run_dir, 1, died, done=2)
    assert not used.restart and used.why == "not restarted: trainer.max_restarts=2 restart(s) used"
    assert _decide(run_dir, 1, died, done=1).restart  # one restart left


def test_without_a_checkpoint_only_a_run_with_no_history_starts_over(tmp_path: Path) -> None:
    died = classify_failure("NodeDiedError: node 1 died")
    fresh = _decide(_run(tmp_path), -9, died)
    assert (fresh.restart, fresh.from_step, fresh.resume_latest) == (True, 0, False)
    with_history = _decide(_run(tmp_path, history=3), 1, died)
    assert not with_history.restart
    assert "has no checkpoint (trainer.ckpt_interval=2, stopped at step 3)" in with_history.why
    assert "overwrite steps 1-3" in with_history.why


def test_a_checkpoint_that_cannot_be_read_is_not_restarted(tmp_path: Path) -> None:
    decision = _decide(_run(tmp_path, history=3, checkpoint=2, folder=False), 1,
                       classify_failure(MemoryError()))
    assert not decision.restart and "checkpoint cannot be read" in decision.why and "global_step_2" in decision.why


def test_attempt_end_reads_the_trainers_error_event_else_its_exit(tmp_path: Path) -> None:
    from skyrl_engine.supervisor import attempt_end

    run_dir = _run(tmp_path, history=2)
    writer = RunWriter(run_dir)
    since = time.time()
    writer.log_event("error", step=1, error="ValueError: an older attempt's", error_kind="code_or_data",
                     time=since - 100)  # before this attempt started: not its failure
    end = attempt_end(str(run_dir), -9, 4242, since)
    assert not end.recorded and end.failure.kind == FailureKind.WORKER_DIED and end.failure.resumable
    assert end.line.startswith("TrainerDied: the trainer process (pid 4242) was killed by SIGKILL (exit code -9)")
    exited = attempt_end(str(run_dir), 1, 4242, since)
    assert exited.failure.kind == FailureKind.CODE_OR_DATA and "exited with code 1 without recording" in exited.line

    writer.log_event("error", time=since + 5, step=2, error="Traceback line\nActorDiedError: the actor died", traceback="tb",
                     error_kind="worker_died", resumable=True)
    end = attempt_end(str(run_dir), 1, 4242, since)
    assert end.recorded and end.line == "ActorDiedError: the actor died" and end.traceback == "tb"
    assert end.failure.kind == FailureKind.WORKER_DIED
    assert attempt_end(str(run_dir), 0, 4242, since).failure is None


@pytest.mark.parametrize(("value", "says"), [("-1", "greater than or equal to 0"), ("two", "a valid integer"),
                                             ("true", "not true or false")])
def test_a_bad_max_restarts_is_one_line_naming_the_key(value: str, says: str) -> None:
    from skyrl_core.config import ConfigError, check_config

    with pytest.raises(ConfigError) as err:
        check_config("quickstart", [f"trainer.max_restarts={value}"])
    (line,) = err.value.problems
    assert line.startswith("trainer.max_restarts: ") and "is not allowed" in line and says in line
    assert check_config("quickstart", ["trainer.max_restarts=3"]).trainer.max_restarts == 3


def test_skyrls_own_trainer_refuses_max_restarts() -> None:
    from skyrl_core.config import ConfigError, check_config

    with pytest.raises(ConfigError) as err:
        check_config("quickstart", ["run.engine=skyrl", "trainer.max_restarts=2", "run.run_id=r"])
    assert any(p.startswith("trainer.max_restarts: 2 is not allowed with run.engine=skyrl") for p in err.value.problems)


def test_a_restarted_trainer_waits_for_the_nodes_its_placement_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a lost node the cluster may lack it until its replacement joins: the restarted trainer's placement
    waits (``NODE_WAIT_ENV``, set by the supervisor) instead of being refused at once."""
    from skyrl_core.config import load_config
    from skyrl_core.placement import ClusterResources
    from skyrl_core.resume import NODE_WAIT_ENV
    from skyrl_engine import placement

    plan = placement.plan_placement(load_config("quickstart", ["trainer.placement.colocate_all=false"]), device="CPU")
    small, big = ClusterResources.from_nodes([{"CPU": 1.0}]), ClusterResources.from_nodes([{"CPU": 1.0}, {"CPU": 2.0}])
    seen = iter([small, small, big])
    monkeypatch.setattr(placement, "cluster_resources", lambda: next(seen))
    said: list[str] = []
    assert placement.wait_until_possible(plan, 30, poll_s=0.01, log=said.append) == []
    assert len(said) == 1 and said[0].startswith("placement: waiting up to 30 s for nodes to join")
    monkeypatch.setattr(placement, "cluster_resources", lambda: small)
    assert placement.wait_until_possible(plan, 0.05, poll_s=0.01)  # still missing: the refusal's lines
    monkeypatch.delenv(NODE_WAIT_ENV, raising=False)
    assert placement.restart_wait_s() == 0
    monkeypatch.setenv(NODE_WAIT_ENV, "1200")
    assert placement.restart_wait_s() == 1200


def test_a_stop_that_a_library_wrapped_is_still_a_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM's StopRequested raised inside torch's ``load_state_dict`` comes back as a RuntimeError (seen: a stop
    during the weight sync recorded as a failure). Once a SIGTERM arrived, the run is stopped, not failed, so the
    restart supervisor does not restart it and no failure alert goes out."""
    import skyrl_engine.__main__ as main
    from skyrl_core.lifecycle import RunLifecycle
    from skyrl_core.runs import RunReader

    class Trainer:  # what _start leaves in `held`: a trainer that is stopped by SIGTERM in a torch call
        def __init__(self, writer: RunWriter) -> None:
            self.life = RunLifecycle(writer)

        def train(self) -> None:
            self.life.running(step=3, total_steps=9)
            main._sigterm_seen = True  # _on_sigterm ran ...
            raise RuntimeError("Error(s) in loading state_dict for Qwen2ForCausalLM: ... ('signal 15',).")

        def stopped(self) -> None:
            self.life.stopped()

        def fail(self, err: BaseException) -> None:
            self.life.failed(err)

    monkeypatch.setattr(main, "_sigterm_seen", False)
    monkeypatch.setattr(main, "_start", lambda cfg, writer, held: held.update(trainer=Trainer(writer)))
    code = main.train("quickstart", [f"run.run_root={tmp_path}", "run.run_id=wrapped"])
    assert code == main.EXIT_STOPPED
    status = RunReader(tmp_path / "wrapped").status()
    assert status["state"] == "stopped" and status["error"] is None, status


def test_a_failure_not_restarted_ends_the_run_as_the_supervisor_records_it(tmp_path: Path) -> None:
    """Restarts used up after a trainer killed by a signal (it recorded nothing): the supervisor writes the error
    event, the ``failed`` status with the failure's kind (resumable: ``job.resume()`` may still help) and a
    warning saying why it did not restart."""
    from skyrl_core.config import load_config
    from skyrl_core.runs import RunReader
    from skyrl_engine.supervisor import Supervisor, attempt_end

    cfg = load_config("quickstart", [f"run.run_root={tmp_path}", "run.run_id=r", "trainer.max_restarts=1"])
    supervisor = Supervisor("quickstart", [], cfg)
    RunWriter(cfg.run_dir).set_status("running", step=7, pid=1)
    end = attempt_end(str(cfg.run_dir), -9, 4242, time.time())
    decision = _decide(Path(cfg.run_dir), -9, end.failure, done=1, most=1)
    supervisor._record_failure(end, decision)
    status = RunReader(cfg.run_dir).status()
    assert (status["state"], status["step"], status["error_kind"], status["resumable"]) == ("failed", 7, "worker_died",
                                                                                            True)
    assert status["error"] == end.line
    events = RunReader(cfg.run_dir).events()
    assert [e["kind"] for e in events] == ["error", "warning"]
    assert events[1]["message"] == "the run was not restarted: trainer.max_restarts=1 restart(s) used"
