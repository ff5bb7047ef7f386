"""``python -m skyrl_engine train|validate --config FILE_OR_PRESET [key=value ...]``.

Exit codes: 0 done (or valid), 1 the run failed (status ``failed``, traceback in events.jsonl),
2 the config is invalid (one line per problem on stderr, nothing started),
143 stopped by SIGTERM (status ``stopped``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
import traceback
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG, EXIT_STOPPED = 0, 1, 2, 143


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m skyrl_engine", description="skyrl-nb trainer engine")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("train", "run a training job"), ("validate", "check a config; exit 0 or 2")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", required=True, help="a preset name (e.g. quickstart) or a YAML file")
        p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.seed=3")
    return parser


def load_checked_config(source: str, overrides: list[str]):
    """The validated config, or ConfigError with every problem."""
    from skyrl_nb.config import load_config

    return load_config(source, overrides).check()


def _print_problems(problems: list[str]) -> None:
    for line in problems:
        print(line, file=sys.stderr)


def validate(source: str, overrides: list[str]) -> int:
    """Exit code 0 when the config can run, 2 (and one line per problem) when not."""
    from skyrl_nb.config import ConfigError

    try:
        cfg = load_checked_config(source, overrides)
    except ConfigError as err:
        _print_problems(err.problems)
        return EXIT_BAD_CONFIG
    print(f"ok: {cfg!r}")
    return EXIT_OK


def _on_sigterm(signum: int, frame: Any) -> None:
    from skyrl_engine.trainer import StopRequested

    raise StopRequested(f"signal {signum}")


def train(source: str, overrides: list[str]) -> int:
    """Run a training job to the end; see the module docstring for exit codes."""
    from skyrl_nb.config import ConfigError

    try:
        cfg = load_checked_config(source, overrides)
    except ConfigError as err:
        _print_problems(err.problems)
        return EXIT_BAD_CONFIG
    if cfg.run.run_id is None:
        cfg = cfg.with_overrides([f"run.run_id=run-{time.strftime('%Y%m%d-%H%M%S')}"])

    from skyrl_engine.trainer import StopRequested
    from skyrl_nb.runs import RunWriter

    writer = RunWriter(cfg.run_dir)
    writer.write_config(cfg)
    writer.set_status("pending", pid=os.getpid())
    signal.signal(signal.SIGTERM, _on_sigterm)
    held: dict[str, Any] = {}
    try:
        _start(cfg, writer, held)
        held["trainer"].train()
        return EXIT_OK
    except (StopRequested, KeyboardInterrupt):
        trainer = held.get("trainer")
        if trainer is not None:
            trainer.stopped()
        else:
            writer.log_event("finished", step=0, state="stopped")
            writer.set_status("stopped")
        return EXIT_STOPPED
    except Exception as err:  # the run failed: record it for the notebook, exit 1
        trainer = held.get("trainer")
        if trainer is not None:
            trainer.fail(err)
        else:
            text = f"{type(err).__name__}: {err}"
            writer.log_event("error", step=0, error=text, traceback=traceback.format_exc())
            writer.set_status("failed", error=text)
        traceback.print_exc()
        return EXIT_FAILED
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if "workers" in held:
            held["workers"].shutdown()
        if "connection" in held:
            held["connection"].close()


def _start(cfg, writer, held: dict[str, Any]) -> None:
    """Data, model, Ray, actors, trainer — in that order; each lands in ``held`` once it exists.

    ``generator.inference_engine.backend`` picks the generator (torch actor or vLLM engines),
    ``trainer.async_one_step`` / ``trainer.fully_async`` the schedule (synchronous or pipelined).
    """
    from skyrl_engine.async_pipeline import PipelinedTrainer, pipeline_mode, staleness_bound
    from skyrl_engine.models import resolve_model_path
    from skyrl_engine.policy import set_torch_threads
    from skyrl_engine.tasks import load_prompts
    from skyrl_engine.trainer import LocalWorkers, RLTrainer

    vllm_python = None
    if uses_vllm(cfg):  # before anything starts: RuntimeError naming SKYRL_VLLM_PYTHON when there is no vLLM
        from skyrl_engine.vllm_engine import find_vllm_python

        vllm_python = find_vllm_python()
        _log(f"vllm: engines run in {vllm_python or sys.executable}")
    set_torch_threads(cfg.trainer.num_threads)
    env_class = cfg.environment.env_class
    train_rows = load_prompts(cfg.data.train_data, env_class)
    val_rows = load_prompts(cfg.data.val_data, env_class) if cfg.data.val_data else []
    started = time.perf_counter()
    model_path = resolve_model_path(cfg.trainer.policy.model.path, train_rows, cfg.trainer.seed)
    _log(f"model ready at {model_path} ({time.perf_counter() - started:.1f}s)")
    total_steps = int(cfg.total_steps(len(train_rows)))
    _keep_tokenizer(model_path, str(cfg.run_dir))
    if runs_in_job_process(cfg):
        # On CPU "colocated" means: generator and trainer take turns on the same cores. One process
        # does that best — one copy of torch and the model, no actor start-up, no object-store hop.
        _log("placement: colocated on CPU: generator and trainer in this process")
        held["workers"] = LocalWorkers(model_path, cfg, total_steps, cfg.trainer.num_threads)
    else:
        _start_ray_workers(cfg, writer, held, model_path, total_steps, vllm_python)
    trainer = RLTrainer(cfg, writer, held["workers"], train_rows, val_rows)
    bound = staleness_bound(cfg)
    held["trainer"] = PipelinedTrainer(trainer, bound) if bound else trainer
    _log(f"training {total_steps} steps into {cfg.run_dir} ({pipeline_mode(bound)})")


def _start_ray_workers(cfg, writer, held: dict[str, Any], model_path: str, total_steps: int,
                       vllm_python: str | None) -> None:
    """Join or start Ray and put the generator / trainer (/ critic) actors there; see ``_start``."""
    from skyrl_engine.ray_runtime import RayWorkers, connect, is_submitted_job
    from skyrl_engine.trainer import LocalWorkers

    use_vllm = uses_vllm(cfg)
    try:
        held["connection"] = connect()
    except Exception as err:
        if is_submitted_job() or use_vllm:  # vLLM engines are Ray actors: no in-process fallback
            raise
        # By hand on a saturated machine Ray may not come up at all; the run still goes, in-process.
        message = f"local Ray did not start ({type(err).__name__}: {err}); generator and trainer run in this process"
        _log(message)
        writer.log_event("warning", step=0, message=message)
        held["workers"] = LocalWorkers(model_path, cfg, total_steps, cfg.trainer.num_threads)
    else:
        _log(f"ray: {held['connection'].mode}")
        if use_vllm:
            from skyrl_engine.vllm_engine import VLLMWorkers

            held["workers"] = VLLMWorkers(model_path, cfg, total_steps, python=vllm_python)
        else:
            held["workers"] = RayWorkers(model_path, cfg, total_steps)
        _log(f"placement: {held['workers'].placement.plan.describe()}")


def _keep_tokenizer(model_path: str, run_dir: str) -> None:
    """Copy the model's ``tokenizer.json`` into ``<run_dir>/tokenizer/``: the inspector decodes tokens with it."""
    source = os.path.join(model_path, "tokenizer.json")
    if os.path.isfile(source):
        target = os.path.join(run_dir, "tokenizer")
        os.makedirs(target, exist_ok=True)
        shutil.copyfile(source, os.path.join(target, "tokenizer.json"))


def uses_vllm(cfg) -> bool:
    """``generator.inference_engine.backend=vllm``: the generator is vLLM engine actors."""
    return cfg.generator.inference_engine.backend == "vllm"


def runs_in_job_process(cfg) -> bool:
    """True for a colocated run on CPU: the generator and trainer live in the job's own process.

    Disaggregated runs (``trainer.placement.colocate_all=false``) put them in Ray actors with their
    own CPU bundles; on a machine with CUDA colocated runs use actors that share the GPUs.
    """
    if uses_vllm(cfg):  # vLLM engines are always actors
        return False
    return bool(cfg.trainer.placement.colocate_all) and not _has_cuda()


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _log(text: str) -> None:
    print(f"[skyrl_engine] {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m skyrl_engine`` and the ``skyrl-engine`` script."""
    args = _parser().parse_args(argv)
    if args.command == "validate":
        return validate(args.config, args.overrides)
    return train(args.config, args.overrides)


if __name__ == "__main__":
    sys.exit(main())
