"""``python -m skyrl_engine train|validate --config FILE_OR_PRESET [key=value ...]``,
``python -m skyrl_engine export SOURCE DEST [--step N]`` (a checkpoint as a Hugging Face model: export.py),
``python -m skyrl_engine evaluate --config FILE_OR_env:NAME [key=value ...]`` (an evaluation job: evaluation.py).

Exit codes: 0 done (or valid, or exported), 1 the run (or the export) failed (status ``failed``, traceback
in events.jsonl), 2 the config is invalid or the export's source, step or destination cannot be used
(one line per problem on stderr, nothing started or written), 143 stopped by SIGTERM (status ``stopped``).

With ``trainer.max_restarts`` > 0, ``train`` is the restart supervisor (``skyrl_engine.supervisor``): it runs
the trainer as ``train --attempt N`` in a child process and restarts it after a failure outside the user's code.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from typing import Any

from skyrl_engine import checkpoint
from skyrl_engine.async_pipeline import pipeline_mode, staleness_bound
from skyrl_engine.placement import validate_placement
from skyrl_engine.prometheus import StepMetricsExporter
from skyrl_engine.ray_runtime import connect, is_submitted_job
from skyrl_engine.tracking import Tracking

EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG, EXIT_STOPPED = 0, 1, 2, 143


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m skyrl_engine", description="skyrl-nb trainer engine")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("train", "run a training job"), ("validate", "check a config; exit 0 or 2")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", required=True,
                       help="a preset name (e.g. quickstart), a YAML file, or env:NAME (the YAML in that variable)")
        p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.seed=3")
        if name == "train":
            p.add_argument("--attempt", type=int, default=None, help=argparse.SUPPRESS)  # the supervisor's child
    p = sub.add_parser("evaluate", help="evaluate models into an eval store (skyrl_core.eval_store)")
    p.add_argument("--config", required=True,
                   help="an eval job's YAML file (a job config with an evaluation: section), or env:NAME")
    p.add_argument("overrides", nargs="*", help="key=value overrides of the job config, e.g. trainer.eval_batch_size=8")
    p = sub.add_parser("export", help="write a checkpoint as a Hugging Face model directory (or s3://bucket/prefix)")
    p.add_argument("source", help="a run directory, a checkpoint root, a global_step_N directory or its policy/")
    p.add_argument("dest", help="a new local directory or s3://bucket/prefix")
    p.add_argument("--step", type=int, default=None, help="the checkpoint's global step (default: the latest)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line (what RunReader.export reads)")
    return parser


def load_checked_config(source: str, overrides: list[str]):
    """The validated config, or ConfigError with every problem (``skyrl_core.config.check_config``).

    ``env:NAME`` reads the YAML from that variable: how a submission from a notebook carries its config
    (``skyrl_core.submission``), so the cluster needs no disk shared with the notebook.
    """
    from skyrl_core.config import ConfigError, check_config
    from skyrl_core.submission import config_source

    try:
        return check_config(config_source(source), overrides)
    except ValueError as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError([str(err)]) from None


def _print_problems(problems: list[str]) -> None:
    for line in problems:
        print(line, file=sys.stderr)


def _config_or_problems(source: str, overrides: list[str]):
    """The validated config, or None after printing one line per problem on stderr."""
    from skyrl_core.config import ConfigError

    try:
        return load_checked_config(source, overrides)
    except ConfigError as err:
        _print_problems(err.problems)
        return None


def validate(source: str, overrides: list[str]) -> int:
    """Exit code 0 when the config can run here, 2 (and one line per problem) when not: the config's own checks,
    its placement, and the packages it needs (the lines the notebook's form and ``Cluster.launch`` give)."""
    cfg = _config_or_problems(source, overrides)
    if cfg is None:
        return EXIT_BAD_CONFIG
    from skyrl_core.packages import answer_here, package_lines, packages_needed

    # what train would refuse at its start: the placement (skyrl_core.placement; the cluster's size too when run
    # as a job) and the packages the config needs here (vLLM, SkyRL, trackers: skyrl_core.packages)
    problems = validate_placement(cfg)
    if packages_needed(cfg):
        problems += package_lines(cfg, answer_here())
    if problems:
        _print_problems(problems)
        return EXIT_BAD_CONFIG
    print(f"ok: {cfg!r}")
    return EXIT_OK


_sigterm_seen = False
"""A SIGTERM arrived. Its StopRequested may not reach ``train``: raised in a ``__del__`` it is ignored (seen, in the
garbage collector), a library may wrap it (torch's ``load_state_dict``); the restart supervisor signals again."""


def _on_sigterm(signum: int, frame: Any) -> None:
    global _sigterm_seen
    _sigterm_seen = True
    from skyrl_engine.trainer import StopRequested  # the train path only: it imports torch

    raise StopRequested(f"signal {signum}")


def train(source: str, overrides: list[str], attempt: int | None = None) -> int:
    """Run a training job to the end; see the module docstring for exit codes. ``attempt`` is given to the
    trainer the restart supervisor runs (0 the first time); without it a config with ``trainer.max_restarts``
    > 0 runs the supervisor."""
    from skyrl_core.config import ConfigError

    try:
        cfg = load_checked_config(source, overrides)
    except ConfigError as err:
        _print_problems(err.problems)
        _record_early_failure("the config was refused where the job runs: " + "; ".join(err.problems))
        return EXIT_BAD_CONFIG
    if cfg.run.run_id is None:
        cfg = cfg.with_overrides([f"run.run_id=run-{time.strftime('%Y%m%d-%H%M%S')}"])
    if attempt is None and cfg.trainer.max_restarts > 0:
        from skyrl_engine.supervisor import supervise  # no torch: the supervisor only runs the trainer

        return supervise(source, overrides, cfg, log=_log)

    from skyrl_core.choices import RunState, Stage
    from skyrl_core.resume import attempt_from_env, supervisor_pid
    from skyrl_core.runs import RunWriter
    from skyrl_engine.trainer import StopRequested  # the train path only: it imports torch

    writer = RunWriter(cfg.run_dir)
    writer.write_config(cfg)
    writer.set_status(RunState.PENDING, pid=supervisor_pid() or os.getpid(), attempt=attempt_from_env(0))
    writer.log_event("stage", step=0, stage=Stage.ENVIRONMENT)  # the job's Python is up; torch, data and Ray next
    signal.signal(signal.SIGTERM, _on_sigterm)
    held: dict[str, Any] = {}
    try:
        _start(cfg, writer, held)
        held["trainer"].train()
        return EXIT_OK
    except (StopRequested, KeyboardInterrupt):
        _record_stop(held, writer)
        return EXIT_STOPPED
    except Exception as err:  # the run failed: record it for the notebook, exit 1
        if _sigterm_seen:  # a library wrapped SIGTERM's StopRequested (torch's load_state_dict does): a stop still
            traceback.print_exc()
            _record_stop(held, writer)
            return EXIT_STOPPED
        trainer = held.get("trainer")
        if trainer is not None:
            trainer.fail(err)
        else:  # with whether a resume can help; under the supervisor, it writes the final status
            writer.record_failure(err, traceback=traceback.format_exc(), final=supervisor_pid() is None)
        traceback.print_exc()
        return EXIT_FAILED
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if "tracking" in held:
            held["tracking"].finish(_final_checkpoint(held))
        if "workers" in held:
            held["workers"].shutdown()
        if "connection" in held:
            held["connection"].close()
        if "prometheus" in held:
            held["prometheus"].close()


def _record_stop(held: dict[str, Any], writer: Any) -> None:
    """Record a requested stop (status stopped, a finished event), undisturbed by a second SIGTERM."""
    from skyrl_core.lifecycle import RunLifecycle

    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop is enough: record it undisturbed
    trainer = held.get("trainer")
    if trainer is not None:
        trainer.stopped()
    else:  # stopped before training began
        RunLifecycle(writer).stopped()


def _record_early_failure(error: str) -> None:
    """Say why in the run's status.json when the job ends before it opened its run store. A notebook that
    submitted the job (``SKYRL_NB_RUN_DIR``) wrote a ``pending`` status there, which would otherwise stay
    pending; a status the run already has past that (an earlier attempt's end) is left as it is."""
    run_dir = os.environ.get("SKYRL_NB_RUN_DIR")
    if not run_dir:
        return
    try:
        from skyrl_core.choices import RunState
        from skyrl_core.runs import RunReader, RunWriter

        if not RunReader(run_dir).exists():
            return  # no run there to speak for
        writer = RunWriter(run_dir)
        if writer.state != RunState.PENDING:
            return
        error = error if len(error) <= 1000 else error[:997] + "..."
        writer.log_event("error", step=0, error=error)
        writer.set_status(RunState.FAILED, error=error)
    except Exception as err:  # noqa: BLE001 - the job's exit code and log still say why
        _log(f"could not record the failure in {run_dir} ({type(err).__name__}: {err})")


def _start(cfg, writer, held: dict[str, Any]) -> None:
    """The engine (:func:`skyrl_engine.build.build`: data, model, Ray, workers, trainer), then the trackers
    and the metrics port; each lands in ``held`` once it exists, so the job can close it whatever happens.

    :meth:`skyrl_engine.workers.Workers.create` puts each role where the config says (in this process,
    or Ray actors in placement groups); ``trainer.async_one_step`` / ``trainer.fully_async`` pick the
    schedule (synchronous or pipelined).
    """
    from skyrl_engine.build import build  # the train path only: torch
    from skyrl_engine.workers import uses_vllm  # the train path only: torch

    vllm_python = None
    if uses_vllm(cfg):  # before anything starts: RuntimeError naming SKYRL_VLLM_PYTHON when there is no vLLM
        from skyrl_engine.vllm_engine import find_vllm_python  # an optional dependency

        vllm_python = find_vllm_python()
        _log(f"vllm: engines run in {vllm_python or sys.executable}")
    engine = build(cfg, writer, connect=lambda: _connect_ray(cfg, writer, held), log=_log, vllm_python=vllm_python)
    held["workers"], held["trainer"] = engine.workers, engine.trainer
    total_steps = engine.total_steps
    if engine.workers.placement is not None:
        _log(f"placement: {engine.workers.placement.plan.describe()}")
    else:
        _log("placement: " + ("colocated on CPU: every role in this process" if cfg.trainer.placement.colocate_all
                              else "every role in this process (no Ray)"))
    _log(f"workers: {engine.workers!r}")

    held["tracking"] = Tracking(cfg, writer, total_steps)  # trainer.logger: console, mlflow, tensorboard, wandb
    _log(f"trackers: {held['tracking']!r}")
    if cfg.run.prometheus_port is not None:

        held["prometheus"] = StepMetricsExporter(str(cfg.run.run_id), cfg.run.prometheus_port, total_steps)
        writer.metric_listeners.append(held["prometheus"].observe)
        _log(f"prometheus: step metrics on port {held['prometheus'].port} (/metrics, run_id={cfg.run.run_id})")
    _log(f"training {total_steps} steps into {cfg.run_dir} ({pipeline_mode(staleness_bound(cfg))})")


def _connect_ray(cfg, writer, held: dict[str, Any]) -> bool:
    """Join or start Ray for the actors; False when a run by hand must fall back to this process."""
    from skyrl_engine.workers import uses_vllm  # the train path only: torch

    try:
        held["connection"] = connect()
    except Exception as err:
        if is_submitted_job() or uses_vllm(cfg):  # vLLM engines are Ray actors: no in-process fallback
            raise
        # By hand on a saturated machine Ray may not come up at all; the run still goes, in-process.
        message = f"local Ray did not start ({type(err).__name__}: {err}); generator and trainer run in this process"
        _log(message)
        writer.log_event("warning", step=0, message=message)
        return False
    _log(f"ray: {held['connection'].mode}")
    return True


def _final_checkpoint(held: dict[str, Any]) -> str | None:
    """Where the run's newest checkpoint is (a local folder or a URL), for the trackers; None without one."""

    trainer = held.get("trainer")
    try:
        step = checkpoint.latest_step(trainer.ckpt_root) if trainer is not None else None
    except (OSError, ValueError):
        return None
    return None if step is None else checkpoint.step_dir(trainer.ckpt_root, step)


def evaluate(source: str, overrides: list[str]) -> int:
    """Run an evaluation job (``skyrl_engine.evaluation.run_evaluation``); the exit codes of ``train``. A model that
    cannot be found (a run without the checkpoint asked for) or data that cannot be scored fails the job with one
    line in its status.json and on stderr."""
    from skyrl_core.config import ConfigError, check_config
    from skyrl_core.eval_config import split_eval_config

    try:
        rest, section = split_eval_config(_eval_config_mapping(source))
        cfg = check_config(rest, overrides)
        if cfg.run.run_id is None:
            raise ConfigError(["run.run_id: an eval job writes its eval store at <run.run_root>/<run.run_id>; give one"])
    except ConfigError as err:
        _print_problems(err.problems)
        _record_early_failure("the eval config was refused where the job runs: " + "; ".join(err.problems))
        return EXIT_BAD_CONFIG

    from skyrl_core.choices import RunState, Stage
    from skyrl_core.exports import ExportError
    from skyrl_core.runs import RunWriter

    # the evaluate path only: it imports torch
    from skyrl_engine.evaluation import EvalRefused, StopRequested, run_evaluation, vllm_python_for

    writer = RunWriter(cfg.run_dir)
    writer.set_status(RunState.PENDING, pid=os.getpid())
    writer.log_event("stage", step=0, stage=Stage.ENVIRONMENT)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        run_evaluation(cfg, section, writer, log=_log, vllm_python=vllm_python_for(cfg))
        return EXIT_OK
    except (StopRequested, KeyboardInterrupt):
        return EXIT_STOPPED
    except (EvalRefused, ExportError) as err:
        _print_problems([str(err)])
        return EXIT_FAILED
    except Exception:
        traceback.print_exc()
        return EXIT_FAILED
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _eval_config_mapping(source: str) -> dict[str, Any]:
    """The mapping ``--config`` names: ``env:NAME``'s YAML, or a YAML file's."""
    from skyrl_core.config import ConfigError
    from skyrl_core.sources import parse_yaml_mapping
    from skyrl_core.submission import config_source

    try:
        found = config_source(source)
    except ValueError as err:
        raise ConfigError([str(err)]) from None
    if isinstance(found, dict):
        return found
    try:
        with open(os.path.expanduser(found), encoding="utf-8") as f:
            return parse_yaml_mapping(f.read(), found)
    except OSError as err:
        raise ConfigError([f"--config: {found!r} cannot be read ({err.strerror or err})"]) from None


def export(source: str, dest: str, step: int | None, as_json: bool = False) -> int:
    """Export a checkpoint (``skyrl_engine.export.export_model``); prints the result line (``as_json``: the
    ``ExportResult`` as one JSON line). Exit 0, 2 when the source, step or destination cannot be used (one line on
    stderr), 1 when the export failed."""
    from skyrl_engine.export import ExportError, export_model  # the export path only: it imports torch

    try:
        result = export_model(source, dest, step=step)
    except ExportError as err:
        _print_problems([str(err)])
        return EXIT_BAD_CONFIG
    except Exception:
        traceback.print_exc()
        return EXIT_FAILED
    if as_json:
        print(result.to_json())
        return EXIT_OK
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(result)
    return EXIT_OK


def _log(text: str) -> None:
    print(f"[skyrl_engine] {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m skyrl_engine`` and the ``skyrl-engine`` script."""
    args = _parser().parse_args(argv)
    if args.command == "validate":
        return validate(args.config, args.overrides)
    if args.command == "export":
        return export(args.source, args.dest, args.step, args.json)
    if args.command == "evaluate":
        return evaluate(args.config, args.overrides)
    return train(args.config, args.overrides, args.attempt)


if __name__ == "__main__":
    sys.exit(main())
