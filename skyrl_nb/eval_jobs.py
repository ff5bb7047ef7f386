"""Evaluation as a job of its own: ``skyrl_nb.evaluate(models, data, ...)`` and ``job.evaluate()``.

>>> res = skyrl_nb.evaluate(["builtin://tiny-qwen2", job], pass_at=[1, 4], n=4, cluster=cluster)  # doctest: +SKIP
>>> res = job.evaluate()          # the run's starting model against its latest checkpoint, on its own val data
>>> res.table(), res.diff()       # skyrl_nb.eval_results.EvalResult

One evaluation is one Ray job on the cluster, submitted the way a training run is (``Cluster.launch``'s pieces: the
whole validation first, the config in the submission, the engine's code shipped, data and reward functions from the
notebook shipped into the eval's own folder, a run store local or ``s3://``), running ``python -m skyrl_engine
evaluate``: the generation backends of training (torch or vLLM) sample every model on the same prompts with the
in-training eval's own code (``skyrl_engine.evaluation``). It writes an eval store beside the runs
(``skyrl_core.eval_store``), which :class:`EvalJob` follows and ``EvalResult`` reads.

Settings come from a job config: ``config=`` if given, else the first run among the models (its own eval settings,
val data, reward functions and environment), else the ``quickstart`` preset; ``n``, ``sampling``, ``batch_size``,
``backend``, ``data``, ``columns`` and ``reward`` change it. With ``seed=None`` the sampling is seeded as the run's
own eval at the evaluated checkpoint's step, so a run's checkpoint scores here exactly what its eval scored there.

One idea, an evaluation from the notebook's arguments to a submitted job and its handle; the models it takes are
found in ``skyrl_nb.eval_models``.
"""

from __future__ import annotations

import html
import json
import os
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skyrl_core.choices import ReadState, RunState
from skyrl_core.config import ConfigError
from skyrl_core.eval_config import SECTION, EvaluationSection, eval_config_dict, new_eval_id, section_problems

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig
    from skyrl_nb.cluster.base import Cluster
    from skyrl_nb.eval_models import FoundModel

#: The states whose reason an EvalJob shows.
_FAILED = (RunState.FAILED, ReadState.LOST)
#: Jobs API metadata of an eval job (not a run's: ``Cluster.jobs()`` lists training runs only).
META_EVAL_ID = "skyrl_nb_eval_id"
META_EVAL_DIR = "skyrl_nb_eval_dir"


def evaluate(models: Any, data: Any = None, *, cluster: Cluster | None = None, reward: Any = None,
             columns: dict[str, str] | None = None, n: int | None = None, pass_at: int | Sequence[int] = (1,),
             sampling: dict[str, Any] | None = None, backend: str | None = None, seed: int | None = None,
             batch_size: int | None = None, name: str | None = None, wait: bool = True, threshold: float = 1.0,
             config: Any = None, overrides: list[str] | None = None, run_root: str | None = None,
             runtime_env: dict[str, Any] | None = None, code: str | None = None, image: str | None = None,
             timeout: float | None = None) -> Any:
    """Evaluate ``models`` on the same data in one job on ``cluster``; the ``EvalResult`` (``wait=False``: the
    :class:`EvalJob`, whose ``result()`` waits for it).

    ``models``: a list, or a ``{name: model}`` dict, of runs (a Job, a RunReader, a run folder or URL, ``(run, N)``
    or ``"<run>@step=N"``), exports, model directories and built-in models (``skyrl_nb.eval_models``). ``data``,
    ``columns``, ``reward``: as ``launch`` takes them (a DataFrame, a list of dicts, a file, a URL...; functions from a
    cell), shipped with the job; default: the config's ``data.val_data``. ``n`` samples per prompt, ``sampling``
    (``{"temperature": 1.0, "max_generate_length": 64, ...}``), ``batch_size`` prompts per generation call and
    ``backend`` (``torch`` / ``vllm``) default to the config's in-training eval settings. ``pass_at`` are the k of
    pass@k (each at most ``n``); a sample is correct when its reward is at least ``threshold``. ``seed``: the
    sampling's seed (None: the evaluated run's own eval seed at its checkpoint's step). ``config``, ``overrides``: the
    job config to start from and ``key=value`` changes to it; ``run_root``: where the eval store goes (default: the
    config's run root, beside the run). ``runtime_env``, ``code``, ``image``: as for ``Cluster.launch``.

    Bad input (an unknown run, a step with no checkpoint, data without the ground truth a reward needs, ``pass_at``
    larger than ``n``) raises ``ConfigError`` in one line naming the argument, before anything is written or
    submitted.
    """
    job = submit_evaluation(models, data, cluster=cluster, reward=reward, columns=columns, n=n, pass_at=pass_at,
                            sampling=sampling, backend=backend, seed=seed, batch_size=batch_size, name=name,
                            threshold=threshold, config=config, overrides=overrides, run_root=run_root,
                            runtime_env=runtime_env, code=code, image=image)
    return job.result(timeout=timeout) if wait else job


def evaluate_run(run: Any, data: Any = None, *, step: int | None = None, against: Any = "base",
                 **kwargs: Any) -> Any:
    """``job.evaluate()``: the run's own starting model (``against="base"``; another model to compare with, or None
    for the checkpoint alone) against its checkpoint ``step`` (default: its latest), named ``base`` and ``trained``,
    with the run's config (its val data, reward, eval settings, cluster). ``kwargs`` as :func:`evaluate` takes them."""
    from skyrl_nb.eval_models import run_config

    config = kwargs.pop("config", None) or run_config(run)
    trained = (run, step) if step is not None else run
    models: dict[str, Any] = {}
    if against == "base":
        start = ((config.get("trainer") or {}).get("policy") or {}).get("model", {}).get("path")
        if not start:
            raise ConfigError(["against: the run's config names no trainer.policy.model.path to start from; give "
                               "against=<a model> or against=None"])
        models["base"] = start
    elif against is not None:
        models["base"] = against
    models["trained"] = trained
    if getattr(run, "cluster", None) is not None:
        kwargs.setdefault("cluster", run.cluster)
    kwargs.setdefault("name", run.run_id if hasattr(run, "run_id") else None)
    return evaluate(models, data, config=config, **kwargs)


def submit_evaluation(models: Any, data: Any = None, *, cluster: Cluster | None = None, reward: Any = None,
                      columns: dict[str, str] | None = None, n: int | None = None,
                      pass_at: int | Sequence[int] = (1,), sampling: dict[str, Any] | None = None,
                      backend: str | None = None, seed: int | None = None, batch_size: int | None = None,
                      name: str | None = None, threshold: float = 1.0, config: Any = None,
                      overrides: list[str] | None = None, run_root: str | None = None,
                      runtime_env: dict[str, Any] | None = None, code: str | None = None,
                      image: str | None = None) -> EvalJob:
    """Check everything (see :func:`evaluate`), write the eval store's config and a ``pending`` status, ship the
    inputs and submit ``python -m skyrl_engine evaluate``; the :class:`EvalJob`. If the submission fails, what was
    written is removed."""
    from skyrl_core.config import check_config
    from skyrl_core.user_inputs import JobInputs
    from skyrl_nb.cluster.packages import package_problems
    from skyrl_nb.cluster.versions import check_versions
    from skyrl_nb.eval_models import find_models

    root_hint = run_root or (str(check_config(config, check_files=False).run.run_root) if config is not None
                             else os.path.expanduser("~/skyrl-runs"))
    found = find_models(models, run_root=root_hint,
                        sees_here=lambda path: cluster is None or cluster.runs_here or cluster._under_shared(path))
    cluster = cluster or next((f.cluster for f in found if f.cluster is not None), None)
    if cluster is None:
        raise ConfigError(["cluster: give the cluster to evaluate on (skyrl_nb.cluster.local(), connect(...)); "
                           "none of the models is a Job that names one"])
    first_run = next((f for f in found if f.model.kind == "run"), None)
    start = config if config is not None else (first_run.run_config if first_run is not None else "quickstart")
    start_cfg = check_config(start, check_files=False)
    # data given without columns is read with the starting config's (a run's held-out rows in its own shape)
    given_columns = columns if columns is not None or data is None else (dict(start_cfg.data.columns) or None)
    inputs = JobInputs.gather(val_data=data, columns=given_columns, reward=reward, ship_file=cluster._ships)
    eval_id = new_eval_id(name or (first_run.model.location.rstrip("/").rpartition("/")[2] if first_run else
                                   found[0].name))
    changes = _settings(start_cfg, n=n, sampling=sampling, backend=backend,
                        batch_size=batch_size, run_root=run_root)
    cfg = cluster.prepare(start, overrides=[*changes, *(overrides or []), *inputs.overrides()], run_id=eval_id)
    cfg = inputs.ship_named(cfg, cluster._ships)
    cfg = inputs.ship_environments(cfg)
    section = _section(found, pass_at, threshold, seed,
                       dict(start_cfg.data.columns) if cfg.data.columns != start_cfg.data.columns else None)
    problems = section_problems(section, cfg.generator.eval_n_samples_per_prompt)
    problems += _ground_truth_problems(cfg, inputs)
    problems += package_problems(cfg, cluster)
    if problems:
        raise ConfigError(problems)
    _try_rewards(cfg, inputs)
    engine_code = cluster.engine_code(code, image)
    check_versions(cluster, engine_code)
    cfg, _ = cluster.run_store(cfg)
    cluster.check_files(cfg, runtime_env, engine_code)
    _check_locations(cluster, found)
    # the run's own shipped data and functions travel when its config is the one in use (job.evaluate passes it)
    own = first_run is not None and (config is None or config == first_run.run_config)
    copy_from = first_run.model.location if own else None
    return _submit(cluster, cfg, section, inputs, runtime_env, engine_code, copy_from)


def _settings(cfg: JobConfig, *, n: int | None, sampling: dict[str, Any] | None, backend: str | None,
              batch_size: int | None, run_root: str | None) -> list[str]:
    """``key=value`` changes of the starting config for the arguments given (JSON values, which YAML reads)."""
    found: dict[str, Any] = {"trainer.resume_mode": "none"}
    loggers = cfg.trainer.logger if isinstance(cfg.trainer.logger, list) else [cfg.trainer.logger]
    # the eval job logs to MLflow where the run did; the other trackers follow training steps, which it has none of
    found["trainer.logger"] = ["console", "mlflow"] if "mlflow" in {str(x) for x in loggers} else "console"
    if n is not None:
        found["generator.eval_n_samples_per_prompt"] = n
    if batch_size is not None:
        found["trainer.eval_batch_size"] = batch_size
    if backend is not None:
        found["generator.inference_engine.backend"] = backend
    if run_root is not None:
        found["run.run_root"] = run_root
    if sampling is not None:
        if not isinstance(sampling, dict):
            raise ConfigError([f"sampling: {sampling!r} is not a dict; give e.g. {{'temperature': 1.0, "
                               "'max_generate_length': 64}"])
        for key, value in sampling.items():
            found[f"generator.eval_sampling_params.{key}"] = value
    return [f"{key}={json.dumps(value)}" for key, value in found.items()]


def _section(found: list[FoundModel], pass_at: Any, threshold: float, seed: int | None,
             train_columns: dict[str, str] | None) -> EvaluationSection:
    from skyrl_core.eval_config import read_section

    ks = [pass_at] if isinstance(pass_at, int) and not isinstance(pass_at, bool) else pass_at
    if not isinstance(ks, (list, tuple)) or not ks or not all(isinstance(k, int) and not isinstance(k, bool)
                                                               for k in ks):
        raise ConfigError([f"pass_at: {pass_at!r} is not allowed; give a k or a list of k, e.g. [1, 4]"])
    runs = [f.model for f in found if f.model.kind == "run" and f.model.step is not None]
    seed_step = runs[-1].step if runs else 0  # the evaluated run's eval at that step drew with this seed
    try:
        return read_section({"models": [f.model.model_dump() for f in found], "pass_at": list(ks),
                             "threshold": threshold, "seed": seed, "seed_step": seed_step,
                             "train_columns": train_columns})
    except ConfigError as err:  # the notebook's arguments by their own names
        raise ConfigError([line.removeprefix(f"{SECTION}.") for line in err.problems]) from None


def _first_rows(cfg: JobConfig, inputs: Any) -> list[tuple[str, dict[str, Any]]]:
    """``(where, first canonical row)`` of each evaluated data source this notebook can read."""
    from skyrl_core.datarows import canonical_row, iter_rows
    from skyrl_core.registry import shown
    from skyrl_core.user_inputs import ShippedData

    found = []
    for item in inputs.val or []:
        if isinstance(item, ShippedData):
            found.append((item.source, item.first))
    if inputs.val is None:
        for location in cfg.data.val_data:
            path = os.path.expanduser(str(location))
            if "://" in location or not os.path.isfile(path):
                continue  # built-in data (it has answers), shipped or remote data: the job checks it
            try:
                found.append((shown(location), canonical_row(next(iter_rows(path, batch_size=1)), cfg.data.columns,
                                                             f"{shown(location)} row 1")))
            except Exception:  # noqa: BLE001 - unreadable here: the job reads it and says so
                continue
    return found


def _ground_truth_problems(cfg: JobConfig, inputs: Any) -> list[str]:
    """``data: ... has no ground truth, which reward 'x' needs`` when the first row of the data lacks one."""
    from skyrl_core.datarows import prompt_parts
    from skyrl_core.eval_config import ground_truth_user

    functions = inputs.rewards if inputs.rewards else []
    if not functions and cfg.reward.functions:
        return []  # the run's own functions (shipped pickles): the job checks their rows
    for where, row in _first_rows(cfg, inputs):
        _, env_class, reward_spec = prompt_parts(row, where)
        user = ground_truth_user(functions, cfg.environment.env_class, env_class)
        if user and reward_spec.get("ground_truth") is None:
            return [f"data: {where} row 1 has no ground truth, which {user} needs; give columns={{'ground_truth': "
                    "'<your answer column>'}, or a reward function that needs none"]
    return []


def _try_rewards(cfg: JobConfig, inputs: Any) -> None:
    """Each reward function given, tried once on the evaluated data's first row (as launch tries a run's)."""
    from skyrl_core.config import check_config
    from skyrl_core.user_inputs import JobInputs

    if not inputs.rewards:
        return
    probe = JobInputs(list(inputs.val or []), None, inputs.columns, inputs.rewards, None)
    probe.packed = inputs.packed
    probe.try_rewards(check_config(cfg, {"data.train_data": list(cfg.data.val_data)}, check_files=False))


def _check_locations(cluster: Cluster, found: list[FoundModel]) -> None:
    """A run, export or model folder on this notebook's disk must be one the cluster sees (`Cluster.sees`)."""
    from skyrl_core.store import is_url

    for f in found:
        location = f.model.location
        if f.model.kind in ("run", "export", "model") and not is_url(location) and os.path.exists(location) \
                and not cluster.sees(location):
            raise ConfigError([f"models: {f.model.source!r} is on this notebook's disk ({location}), which the "
                               f"cluster at {cluster.address} cannot see; evaluate a run on s3:// or an export to "
                               "s3:// (job.export('s3://...')), or a folder both mount (connect(..., shared_paths=))"])


def _submit(cluster: Cluster, cfg: JobConfig, section: EvaluationSection, inputs: Any,
            runtime_env: dict[str, Any] | None, engine_code: Any, copy_from: str | None) -> EvalJob:
    """Write config.yaml and a ``pending`` status in the eval's folder, ship the inputs, submit the job."""
    import yaml

    from skyrl_core.runs import RunWriter
    from skyrl_core.submission import pack_config
    from skyrl_core.user_inputs import copy_inputs
    from skyrl_nb.cluster.launching import job_env

    eval_id, eval_dir = str(cfg.run.run_id), str(cfg.run_dir)
    whole = eval_config_dict(cfg, section)
    try:
        config_vars, config_arg = pack_config(yaml.safe_dump(whole, sort_keys=False))
    except ValueError as err:
        raise ConfigError([str(err)]) from None
    module = cluster.engine_module or os.environ.get("SKYRL_NB_ENGINE_MODULE") or "skyrl_engine"
    entrypoint = f"{shlex.quote(cluster.python)} -m {module} evaluate --config {shlex.quote(config_arg)}"
    writer = RunWriter(eval_dir)
    writer.write_config(whole)
    writer.set_status(RunState.PENDING, step=0, total_steps=len(section.models))
    with tempfile.TemporaryDirectory(prefix="skyrl-nb-plugins-") as staging:
        env = job_env(eval_dir, runtime_env, config_vars, engine_code, cfg.plugins, staging)
        try:
            if copy_from:  # the run's own shipped data and reward functions (its config names them inputs://)
                copy_inputs(copy_from, eval_dir)
            if not inputs.empty:
                inputs.stage(eval_dir)
            cluster._submit_with_retry(entrypoint=entrypoint, submission_id=eval_id, runtime_env=env,
                                       metadata={META_EVAL_ID: eval_id, META_EVAL_DIR: eval_dir})
        except BaseException:
            cluster._forget_pending(writer, eval_dir)
            raise
    return EvalJob(cluster, eval_id=eval_id, eval_dir=eval_dir, model_names=section.names())


@dataclass(eq=False, repr=False)
class EvalJob:
    """One evaluation job on a cluster and the eval store it writes (see :func:`evaluate`).

    ``status()``, ``logs()``, ``stop()``, ``wait()`` are a training `Job`'s (the same lifecycle files, so a job
    that died early or was lost is told the same way); ``result()`` waits and returns the ``EvalResult``;
    ``reader`` is the store's ``EvalReader``.
    """

    cluster: Any
    eval_id: str
    eval_dir: str
    model_names: list[str] = field(default_factory=list)
    _job: Any = field(default=None, init=False)

    def __post_init__(self) -> None:
        from skyrl_nb.jobs import Job

        self._job = Job(self.cluster, submission_id=self.eval_id, run_id=self.eval_id, run_dir=self.eval_dir)

    @property
    def submission_id(self) -> str:
        return self.eval_id

    @property
    def reader(self) -> Any:
        """The eval store's ``skyrl_core.eval_store.EvalReader``."""
        from skyrl_core.eval_store import EvalReader

        return EvalReader(self.eval_dir)

    def status(self) -> str:
        """``pending``, ``running``, ``succeeded``, ``failed``, ``stopped`` or ``lost`` (as `Job.status`)."""
        return self._job.status()

    def status_detail(self) -> tuple[str, str | None]:
        """``(state, why)`` as `Job.status_detail`: why it failed, was lost or ended before the engine started."""
        return self._job.status_detail()

    def logs(self, tail: int | None = None) -> str:
        """The job's output so far (the last ``tail`` lines)."""
        return self._job.logs(tail=tail)

    def stop(self) -> bool:
        """Ask Ray to stop the job; True if it was running. The models done so far keep their samples."""
        return self._job.stop()

    def wait(self, timeout: float | None = None, poll_s: float = 1.0) -> str:
        """Block until the job ends; its final state. TimeoutError after ``timeout`` s."""
        return self._job.wait(timeout=timeout, poll_s=poll_s)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job and return its ``EvalResult`` (``skyrl_nb.eval_results``). RuntimeError (one line: the
        state and why, from the job's status or log) when it did not succeed."""
        state = self.wait(timeout=timeout)
        if state != RunState.SUCCEEDED:
            _, why = self.status_detail()
            raise RuntimeError(f"evaluation {self.eval_id} {state}: {why or 'see .logs()'}")
        from skyrl_nb.eval_results import EvalResult

        return EvalResult(self.reader)

    def _summary(self) -> tuple[str, str | None, int]:
        try:
            state, why = self.status_detail()
        except Exception as exc:  # noqa: BLE001 - an unreachable cluster: say so, show the store
            state, why = f"unknown ({type(exc).__name__})", None
        try:
            done = len(self.reader.done())
        except Exception:  # noqa: BLE001 - an unreadable store: nothing done to show
            done = 0
        return str(state), why, done

    def __repr__(self) -> str:
        state, why, done = self._summary()
        said = f", error={why!r}" if why and state in _FAILED else ""
        return (f"EvalJob(eval_id={self.eval_id!r}, state={state!r}, models=[{', '.join(self.model_names)}], "
                f"done={done}/{len(self.model_names)}{said})")

    def _repr_html_(self) -> str:
        state, why, done = self._summary()
        url = f"{self.cluster.dashboard_url.rstrip('/')}/#/jobs/{self.eval_id}"
        rows = [("evaluation", f'<a href="{html.escape(url)}" target="_blank">{html.escape(self.eval_id)}</a>'),
                ("state", html.escape(state)), ("models", html.escape(", ".join(self.model_names))),
                ("done", f"{done} / {len(self.model_names)}"), ("eval store", f"<code>{html.escape(self.eval_dir)}</code>")]
        if why and state in _FAILED:
            rows.append(("error", f"<span style='color:#b00'>{html.escape(why)}</span>"))
        body = "".join(f"<tr><td style='text-align:left;padding-right:1em'><b>{k}</b></td>"
                       f"<td style='text-align:left'>{v}</td></tr>" for k, v in rows)
        return f"<div><b>EvalJob</b><table>{body}</table></div>"
