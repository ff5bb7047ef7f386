"""A Ray cluster seen from the notebook: its dashboard address, a bearer token, and the Jobs API.

`Cluster` is the thin client every cluster kind shares (local, `connect`, HyperPod). It talks to
Ray only through the dashboard's HTTP APIs (`JobSubmissionClient` for jobs, the state API for
resources), so the kernel never joins the cluster and never imports torch.

One idea, the thin client every cluster kind shares; addresses, launch inputs and planning live beside it.
"""

from __future__ import annotations

import html
import os
import shlex
import tempfile
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from skyrl_core.choices import RunState
from skyrl_nb.cluster.addresses import (
    display_dashboard_url,
    find_token,
    module_address,
    normalize_address,
    read_token_file,
    studio_proxy_url,
)
from skyrl_nb.cluster.launching import (
    META_ATTEMPT,
    META_RUN_DIR,
    META_RUN_ID,
    job_env,
    new_run_id,
    plugin_py_modules,
    prepare_config,
)
from skyrl_nb.cluster.planning import JobPlan, cluster_problems, memory_warnings

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig
    from skyrl_nb.cluster.shipping import EngineCode
    from skyrl_nb.jobs import Job


# ----------------------------------------------------------------------------- Studio


# ----------------------------------------------------------------------------- tokens



# what this module offered before its launch inputs, addresses and planning got modules of their own
__all__ = ["META_ATTEMPT", "META_RUN_DIR", "META_RUN_ID", "Cluster", "JobPlan", "cluster_problems", "connect",
           "display_dashboard_url", "find_token", "new_run_id", "normalize_address", "plugin_py_modules", "prepare_config",
           "read_token_file", "studio_proxy_url"]

# ----------------------------------------------------------------------------- the cluster


class Cluster:
    """A Ray cluster reached through its dashboard HTTP address with a bearer token.

    >>> c = Cluster("http://127.0.0.1:8265", token="...")
    >>> job = c.launch("quickstart")          # submits `python -m skyrl_engine train --config ...`
    >>> c.jobs(), c.resources()

    `address` is the dashboard HTTP address; `dashboard_url` is what a browser should open (defaults
    to `address`, rewritten to Studio's proxy path inside SageMaker Studio); `verify` is TLS
    verification for https addresses. The token never appears in reprs.
    """

    #: Python the job's entrypoint runs; `LocalCluster` uses the kernel's own interpreter.
    python: str = "python"
    #: The module run as `python -m <engine_module> train --config FILE` (None: `$SKYRL_NB_ENGINE_MODULE`,
    #: else `skyrl_engine`).
    engine_module: str | None = None
    #: Whether the cluster's jobs run on this machine, so a job's pid in its run's status.json can be
    #: checked here (`Job.status` reports `lost` as soon as that process is gone).
    runs_here: bool = False
    #: How the engine's code reaches a job unless `launch(code=..., image=...)` says otherwise:
    #: `ship` (Ray py_modules of the installed packages) or `installed` (`skyrl_nb.cluster.shipping`).
    code: str = "ship"
    #: Local folders the cluster sees at the same path as this notebook (a shared FSx/EFS mount); a run
    #: root elsewhere on this disk is probed with a tiny job before a launch uses it.
    shared_paths: tuple[str, ...] = ()

    def __init__(
        self,
        address: str,
        token: str | None = None,
        *,
        dashboard_url: str | None = None,
        name: str = "ray",
        verify: bool = True,
    ) -> None:
        self.address = normalize_address(address)
        self._token = token
        self.dashboard_url = dashboard_url or display_dashboard_url(self.address)
        self.name = name
        self.verify = verify
        self._client_obj: Any = None
        self._seen: dict[str, bool] = {}  # local folder -> whether a probe job saw it

    # -- HTTP ---------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    @property
    def client(self) -> Any:
        """The `ray.job_submission.JobSubmissionClient` for this cluster (made on first use)."""
        if self._client_obj is None:
            from ray.job_submission import JobSubmissionClient

            self._client_obj = JobSubmissionClient(self.address, headers=self._headers(), verify=self.verify)
        return self._client_obj

    def _get(self, path: str, timeout: float = 10.0) -> Any:
        import requests

        if module_address(self.address):  # the hook's client holds the endpoint and its session cookie
            resp = self.client._do_request("GET", path, timeout=timeout)
        else:
            resp = requests.get(self.address + path, headers=self._headers(), timeout=timeout, verify=self.verify)
        if resp.status_code in (401, 403):
            raise PermissionError(
                f"{self.address} refused the request ({resp.status_code}): "
                + ("no token was given" if not self._token else "the token is not valid for this cluster")
            )
        resp.raise_for_status()
        return resp.json()

    def ping(self, timeout: float = 5.0) -> str:
        """Check the dashboard answers and accepts our token; returns Ray's version."""
        return str(self._get("/api/version", timeout=timeout).get("ray_version", "?"))

    # -- jobs ---------------------------------------------------------------------------------

    def entrypoint(self, config_arg: str, cfg: JobConfig | None = None) -> str:
        """The shell command a job runs for ``--config <config_arg>`` (``env:SKYRL_NB_CONFIG``: the config
        travels in the runtime env, `skyrl_core.submission`). With ``run.engine: skyrl`` it is the bridge's
        command line instead, SkyRL's keys spelled out (``JobConfig.to_skyrl``)."""
        if cfg is not None and cfg.run.engine == "skyrl":
            return cfg.to_skyrl().command_line(self.python)
        module = self.engine_module or os.environ.get("SKYRL_NB_ENGINE_MODULE") or "skyrl_engine"
        return f"{shlex.quote(self.python)} -m {module} train --config {shlex.quote(config_arg)}"

    def _runtime_env(self, cfg: JobConfig, run_dir: str, runtime_env: dict[str, Any] | None,
                     staging: str, code: EngineCode) -> tuple[dict[str, Any], str]:
        """``(runtime_env, config_arg)``: the caller's runtime env plus the config (in ``env_vars``), our
        env vars, the engine's code (`code`) and the config's plug-in modules.

        ``staging`` is a folder that lives until the job is submitted (see :func:`plugin_py_modules`).
        """
        from skyrl_core.config import ConfigError
        from skyrl_core.submission import pack_config

        try:
            config_vars, config_arg = pack_config(cfg.to_yaml())
        except ValueError as err:
            raise ConfigError([str(err)]) from None
        return job_env(run_dir, runtime_env, config_vars, code, cfg.plugins, staging), config_arg

    def engine_code(self, code: str | None = None, image: str | None = None) -> EngineCode:
        """How the engine's code reaches a job launched with ``code`` / ``image`` (default: `self.code`)."""
        from skyrl_core.config import ConfigError
        from skyrl_nb.cluster.shipping import EngineCode

        try:
            return EngineCode.resolve(code, image, self.code)
        except (ValueError, RuntimeError) as err:
            raise ConfigError([str(err)]) from None

    def _under_shared(self, folder: str) -> bool:
        """Whether ``folder`` is one of `shared_paths` or inside one."""
        path = os.path.realpath(os.path.expanduser(folder))
        roots = [os.path.realpath(os.path.expanduser(shared)) for shared in self.shared_paths]
        return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)

    def sees(self, folder: str) -> bool:
        """Whether this cluster's jobs see the notebook's local ``folder`` at the same path: always on this
        machine (`runs_here`), under one of `shared_paths`, else asked once of the cluster with a probe
        job (`shipping.probe_path`)."""
        if self.runs_here or self._under_shared(folder):
            return True
        path = os.path.realpath(os.path.expanduser(folder))
        if path not in self._seen:
            from skyrl_nb.cluster.shipping import probe_path

            self._seen[path] = probe_path(self, path)
        return self._seen[path]

    def run_store(self, cfg: JobConfig) -> tuple[JobConfig, str]:
        """``(config, line)``: the config with the run root this cluster's jobs will write, and one line saying
        where that is. In SageMaker Studio a cluster that is not on this machine gets
        ``s3://<SageMaker default bucket>/skyrl-runs`` when no run root was given (the default
        ``~/skyrl-runs``); a local run root the cluster cannot see is refused (`ConfigError`, one line).
        """
        from skyrl_core.config import ConfigError, RunConfig, check_config
        from skyrl_core.store import is_url

        root = str(cfg.run.run_root)
        if is_url(root):
            return cfg, f"{root} (an object store: the job writes it, this notebook reads it)"
        if self.runs_here:
            return cfg, f"{root} (this machine's disk, which the cluster shares)"
        default = RunConfig().run_root
        if root in (default, os.path.expanduser(default)) and not self._under_shared(root):
            from skyrl_nb import studio

            if studio.in_studio():
                bucket_root = studio.default_run_root()
                cfg = check_config(cfg, {"run.run_root": bucket_root})
                return cfg, (f"{bucket_root} (SageMaker's default bucket: no run root was given and the "
                             "cluster is not on this notebook's machine)")
        if not self.sees(root):
            raise ConfigError([f"run.run_root: {root!r} is on this notebook's disk, which the cluster at "
                               f"{self.address} cannot see (a probe job found no file there); use "
                               "s3://<bucket>/<prefix>, or a folder both mount at the same path "
                               "(connect(..., shared_paths=[...]))"])
        return cfg, f"{root} (a folder this cluster sees at the same path)"

    def prepare(self, config: Any, *, overrides: list[str] | None = None, run_id: str | None = None) -> JobConfig:
        """Validate `config` (+ `overrides`) fully; see `prepare_config`. Nothing is submitted. The files it
        names are checked here only when this cluster shares the notebook's disk (`check_files` does the rest)."""
        return prepare_config(config, overrides=overrides, run_id=run_id, check_files=self.runs_here)

    def check_files(self, cfg: JobConfig, runtime_env: dict[str, Any] | None = None,
                    code: EngineCode | None = None) -> str:
        """Check the files ``cfg`` names (models, data, a resume path: `skyrl_core.config.local_paths`) where the
        job will read them; one line saying how, or `ConfigError` with the engine's own lines.

        On this machine, or when every path is under `shared_paths`, they are checked here. Otherwise a probe
        job runs ``python -m skyrl_engine validate`` on the cluster with the job's own config and code, so a
        model on the cluster's FSx that this notebook cannot see is fine, and one that is missing there is
        refused before anything is written or submitted."""
        from skyrl_core.config import ConfigError, all_keys, local_paths
        from skyrl_nb.cluster.shipping import probe_job

        paths = [p for found in local_paths(cfg).values() for p in found]
        if not paths:
            return "none on a disk (built-in or object-store data and model)"
        if self.runs_here or all(self._under_shared(p) for p in paths):
            found = cfg.problems()
            if found:
                raise ConfigError(found)
            return "checked here (the cluster sees this disk)"
        code = code or self.engine_code()
        module = self.engine_module or os.environ.get("SKYRL_NB_ENGINE_MODULE") or "skyrl_engine"
        with tempfile.TemporaryDirectory(prefix="skyrl-nb-plugins-") as staging:
            env, config_arg = self._runtime_env(cfg, str(cfg.run_dir), runtime_env, staging, code)
            try:
                result = probe_job(self, None, f"-m {module} validate --config {shlex.quote(config_arg)}",
                                   runtime_env=env)
            except TimeoutError as err:
                raise ConfigError([f"{next(iter(local_paths(cfg)))}: could not be checked on the cluster: {err}"]) \
                    from None
        if result.state == "SUCCEEDED":
            return f"{len(paths)} path(s) checked on the cluster by a probe job"
        keys = set(all_keys())
        lines = [line for line in result.lines if line.split(":", 1)[0] in keys]
        raise ConfigError(lines or [f"{next(iter(local_paths(cfg)))}: could not be checked on the cluster: the "
                                    f"probe job `{module} validate` ended {result.state.lower()} ({result.last[:200]})"])

    def launch(
        self,
        config: Any,
        *,
        runtime_env: dict[str, Any] | None = None,
        overrides: list[str] | None = None,
        run_id: str | None = None,
        code: str | None = None,
        image: str | None = None,
        data: Any = None,
        val_data: Any = None,
        columns: dict[str, str] | None = None,
        reward: Any = None,
        reward_errors: str | None = None,
        inputs_from: str | None = None,
    ) -> Job:
        """Validate `config` and submit `python -m skyrl_engine train` for it; returns the `Job`.

        `config` is a preset name, a YAML path, a dict or a `JobConfig`; `overrides` are
        `key=value` strings. What `plan` refuses is refused here, before anything is written or submitted
        (`launch_problems`: placement, each rank's memory, vLLM / SkyRL / trackers' packages on the cluster).
        The submission id is the run id; the run directory is
        `<run.run_root>/<run.run_id>` (see `run_store`: a local run root must be one the cluster sees).
        The resolved config travels with the submission; the engine's code too with `code="ship"`
        (the default for a cluster elsewhere), or it comes from the cluster (`code="installed"`) or
        from a container `image` (`skyrl_nb.cluster.shipping`).

        Your own task (`skyrl_core.user_inputs`): `data` / `val_data` are a pandas DataFrame, a list of dicts, a
        `datasets.Dataset` or `DatasetDict`, a file, a saved dataset, `hf://<name>` or an `s3://` URL; `columns` maps
        `prompt` / `ground_truth` to your column names; `reward` is a function written in a cell, `(fn, weight)`,
        or a list of those (`skyrl_core.reward_functions`), tried once here on the first row; `reward_errors`
        is `skip` (a sample whose reward raises scores 0) or `fail`. What only this notebook sees travels with the
        job in the run's folder. `inputs_from`: a run folder whose shipped inputs this run reuses (a restart).

        >>> job = cluster.launch("quickstart", overrides=["trainer.max_training_steps=20"])
        >>> job = cluster.launch("quickstart", data=df, columns={"prompt": "question", "ground_truth": "answer"},
        ...                      reward=[exact, (format_bonus, 0.2)])
        """
        from skyrl_core.config import ConfigError
        from skyrl_core.user_inputs import JobInputs
        from skyrl_nb.cluster.versions import check_versions

        inputs = JobInputs.gather(data=data, val_data=val_data, columns=columns, reward=reward,
                                  reward_errors=reward_errors, ship_file=self._ships)
        cfg = self.prepare(config, overrides=[*(overrides or []), *inputs.overrides()], run_id=run_id)
        cfg = inputs.ship_named(cfg, self._ships)  # hf:// and files only this notebook sees, named in the config
        cfg = inputs.ship_environments(cfg)  # environment classes registered in a cell travel by value
        # what plan() and the form refuse, refused here too, before anything is written or submitted
        problems = self.launch_problems(cfg, nodes=self._nodes_or_none())
        if problems:
            raise ConfigError(problems)
        inputs.try_rewards(cfg)
        engine_code = self.engine_code(code, image)
        check_versions(self, engine_code)  # the cluster's Ray and Python against the job's, before any submission
        cfg, _ = self.run_store(cfg)
        self.check_files(cfg, runtime_env, engine_code)
        return self._submit(cfg, submission_id=cfg.get("run.run_id"), attempt=0, runtime_env=runtime_env,
                            code=engine_code, inputs=inputs, inputs_from=inputs_from)

    def _ships(self, path: str) -> bool:
        """Whether a data file named by a local ``path`` travels with the job: it exists here and the cluster
        neither runs on this machine nor shares the folder (`shared_paths`). A path missing here is the
        cluster's own (its probe job checks it)."""
        return not self.runs_here and os.path.exists(os.path.expanduser(path)) and not self._under_shared(path)

    def _submit(self, cfg: JobConfig, *, submission_id: str, attempt: int, runtime_env: dict[str, Any] | None,
                code: EngineCode, inputs: Any = None, inputs_from: str | None = None) -> Job:
        from skyrl_core.user_inputs import copy_inputs
        from skyrl_nb.cluster.versions import check_versions
        from skyrl_nb.jobs import Job

        if attempt:  # a resume: launch checked the first attempt
            check_versions(self, code)

        run_id = str(cfg.get("run.run_id"))
        run_dir = str(cfg.run_dir)
        with tempfile.TemporaryDirectory(prefix="skyrl-nb-plugins-") as staging:  # uploaded by submit_job
            job_env, config_arg = self._runtime_env(cfg, run_dir, runtime_env, staging, code)
            writer = self._mark_pending(cfg, run_dir) if attempt == 0 else None
            try:
                if attempt == 0 and inputs_from:
                    copy_inputs(inputs_from, run_dir)
                if attempt == 0 and inputs is not None and not inputs.empty:
                    inputs.stage(run_dir)
                self._submit_with_retry(entrypoint=self.entrypoint(config_arg, cfg), submission_id=submission_id,
                                        runtime_env=job_env,
                                        metadata={META_RUN_ID: run_id, META_RUN_DIR: run_dir,
                                                  META_ATTEMPT: str(attempt)})
            except BaseException:
                if writer is not None:
                    self._forget_pending(writer, run_dir)
                raise
        return Job(self, submission_id=submission_id, run_id=run_id, run_dir=run_dir, attempt=attempt,
                   runtime_env=runtime_env, code=code)

    def _submit_with_retry(self, **submission: Any) -> None:
        """``client.submit_job(**submission)``, retried while a fresh head has no job agent yet."""
        deadline = time.monotonic() + 120
        while True:
            try:
                from skyrl_nb.cluster.shipping import ray_info_quiet

                client = self.client  # Ray's client modules, and so their loggers, exist before they are quieted
                with ray_info_quiet():  # Ray's "Uploading package ..." INFO lines would land in the notebook's stderr
                    client.submit_job(**submission)
                return
            except RuntimeError as exc:
                # A fresh head registers its job agent a few seconds after the dashboard answers.
                if "No available agent" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    @staticmethod
    def _forget_pending(writer: Any, run_dir: str) -> None:
        """Undo `_mark_pending` and the staged inputs of a submission that failed: no half-made run is left
        behind, and the same run id can be launched again."""
        from skyrl_core.user_inputs import remove_inputs

        remove_inputs(run_dir)
        for name in ("config.yaml", "status.json"):
            writer.store.delete(name)

    @staticmethod
    def _mark_pending(cfg: JobConfig, run_dir: str) -> Any:
        """Write config.yaml and a `pending` status.json so `list_runs` shows the run at once; returns the writer."""
        from skyrl_core.runs import RunWriter

        writer = RunWriter(run_dir)
        writer.write_config(cfg)
        writer.set_status(RunState.PENDING, step=0, total_steps=cfg.total_steps())
        return writer

    def jobs(self) -> list[Job]:
        """The skyrl-nb jobs on this cluster (every submission, resumes included), newest first."""
        from skyrl_nb.jobs import Job

        out = []
        for info in self.client.list_jobs():
            meta = info.metadata or {}
            if META_RUN_ID not in meta or not info.submission_id:
                continue
            out.append(Job(self, submission_id=info.submission_id, run_id=meta[META_RUN_ID],
                           run_dir=meta.get(META_RUN_DIR, ""), attempt=int(meta.get(META_ATTEMPT, 0)),
                           _info=info))
        out.sort(key=lambda j: (j._info.start_time or 0) if j._info else 0, reverse=True)
        return out

    def job(self, run_id: str) -> Job:
        """The latest submission of run `run_id` (a resume supersedes the first launch); KeyError if none."""
        matches = [j for j in self.jobs() if j.run_id == run_id or j.submission_id == run_id]
        if not matches:
            raise KeyError(f"no skyrl-nb job for run {run_id!r} on {self.address}")
        return max(matches, key=lambda j: j.attempt)

    # -- resources ------------------------------------------------------------------------------

    def node_resources(self) -> list[dict[str, float]]:
        """Each alive node's total resources, as Ray counts them: `CPU`, `GPU`, `memory` (bytes),
        `accelerator_type:<name>`, ..."""
        data = self._get("/api/v0/nodes?limit=1000&detail=false")
        nodes = (data.get("data") or {}).get("result") or {}
        rows = nodes.get("result", nodes) if isinstance(nodes, dict) else nodes
        return [{k: float(v) for k, v in (node.get("resources_total") or {}).items()}
                for node in rows if node.get("state") == "ALIVE"]

    def resources(self) -> dict[str, Any]:
        """Total resources of the alive nodes: `{"nodes": n, "CPU": .., "GPU": .., "memory_gb": ..}`."""
        nodes = self.node_resources()
        totals: dict[str, float] = {}
        for node in nodes:
            for key, value in node.items():
                if key in ("CPU", "GPU", "memory", "object_store_memory") or key.startswith("accelerator_type"):
                    totals[key] = totals.get(key, 0.0) + value
        out: dict[str, Any] = {"nodes": len(nodes), "CPU": totals.get("CPU", 0.0), "GPU": totals.get("GPU", 0.0)}
        if "memory" in totals:
            out["memory_gb"] = round(totals["memory"] / 2**30, 1)
        out.update({k: v for k, v in totals.items() if k.startswith("accelerator_type")})
        return out

    def launch_problems(self, cfg: JobConfig, nodes: list[dict[str, float]] | None = None) -> list[str]:
        """Why a job with the validated ``cfg`` cannot run on this cluster, one line each ([] when it can); the
        checks `plan`, `launch` and the config form share (`cluster_problems`). ``nodes``: the alive nodes'
        resources (None: the cluster-size rules are skipped, as when the dashboard cannot be read)."""
        return cluster_problems(cfg, nodes, self)

    def _nodes_or_none(self) -> list[dict[str, float]] | None:
        """`node_resources`, or None when the dashboard cannot be read (then only the config's own rules apply)."""
        try:
            return self.node_resources()
        except Exception:  # noqa: BLE001 - an unreadable node list refuses nothing by itself
            return None

    def plan(self, config: Any, *, overrides: list[str] | dict[str, Any] | None = None, code: str | None = None,
             image: str | None = None) -> JobPlan:
        """What `config` (+ `overrides`) asks of this cluster, what it has, each training rank's memory
        estimate against one of its devices, how the engine's code and the config reach the job, and
        where its run store is (`run_store`). Nothing is submitted (a local run root the cluster may not
        see is checked with a tiny probe job, once).

        A config that is invalid, whose placement the engine would refuse on this cluster, whose ranks cannot
        fit, or that needs a package the cluster's jobs cannot import is refused with `ConfigError`, one line per
        problem naming its keys (`launch_problems`: the same lines `launch` and the config form give). A GPU's
        memory comes from Ray's `accelerator_type` resource (`skyrl_core.memory.GPU_MEMORY_GIB`); when it is
        unknown the estimate is shown and nothing refused. A machine with less memory than the run was measured to
        need is warned about, not refused (`JobPlan.warnings`: `planning.memory_warnings`, docs/instances.md).

        >>> cluster.plan("quickstart", overrides=["trainer.placement.policy_num_gpus_per_node=2"])  # doctest: +SKIP
        """
        from skyrl_core.config import ConfigError, check_config
        from skyrl_core.memory import capacity_from_nodes, rank_memory
        from skyrl_nb.cluster.packages import describe, package_report, packages_needed
        from skyrl_nb.form import resources_for

        cfg = check_config(config, overrides, check_files=self.runs_here)
        nodes = self.node_resources()
        problems = self.launch_problems(cfg, nodes=nodes)
        if problems:
            raise ConfigError(problems)
        memory = rank_memory(cfg)
        capacity = capacity_from_nodes(nodes, cfg.trainer.placement.policy_num_gpus_per_node)
        engine_code = self.engine_code(code, image)
        cfg, store_line = self.run_store(cfg)
        size = len(cfg.to_yaml().encode()) / 1024
        delivery = {"engine code": engine_code.describe(),
                    "config": f"travels in the submission ({size:.1f} KiB of YAML in the runtime env)",
                    "run store": store_line, "files": self.check_files(cfg, code=engine_code)}
        if packages_needed(cfg):
            delivery["packages"] = describe(package_report(self))
        if cfg.run.engine == "skyrl":  # SkyRL's trainer must import on the cluster: the package probe said so
            from skyrl_nb.cluster.skyrl_check import check_skyrl

            delivery["skyrl"] = check_skyrl(self, engine_code)
        from skyrl_core.placement import ClusterResources

        asks = resources_for(cfg, ClusterResources.from_nodes(nodes).device if nodes else None)["text"]
        return JobPlan(cfg, asks, self.resources(), memory, capacity, delivery, memory_warnings(cfg, self, nodes))

    def shutdown(self) -> None:
        """Forget this connection. A cluster this object did not start keeps running."""
        self._client_obj = None

    # -- display ----------------------------------------------------------------------------------

    def _kind(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        auth = "token" if self._token else "no token"
        return f"{self._kind()}(name={self.name!r}, address={self.address!r}, dashboard={self.dashboard_url!r}, auth={auth})"

    def _repr_rows(self) -> list[tuple[str, str]]:
        return [
            ("address", html.escape(self.address)),
            ("dashboard", f'<a href="{html.escape(self.dashboard_url)}" target="_blank">{html.escape(self.dashboard_url)}</a>'),
            ("auth", "bearer token (hidden)" if self._token else "none"),
        ]

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td style='text-align:left;padding-right:1em'><b>{k}</b></td><td style='text-align:left'>{v}</td></tr>"
            for k, v in self._repr_rows()
        )
        return (
            f"<div><b>{html.escape(self._kind())}</b> <code>{html.escape(self.name)}</code>"
            f"<table>{rows}</table></div>"
        )


def connect(address: str | None = None, token: str | None = None, verify: bool = True, *, name: str = "ray",
            dashboard_url: str | None = None, check: bool = True, code: str = "ship",
            shared_paths: Iterable[str] = ()) -> Cluster:
    """Attach to a running Ray cluster by its dashboard HTTP address.

    The token comes from `token`, else `RAY_AUTH_TOKEN`, else the file named by
    `RAY_AUTH_TOKEN_PATH`, else Ray's `~/.ray/auth_token`. With `check` the dashboard is asked for
    its version first, so a wrong address or token fails here, with the reason. `code` is how the
    engine's code reaches its jobs (`ship`: with each job; `installed`: the cluster has skyrl-nb);
    `shared_paths` are local folders the cluster sees at the same path (a shared file system).

    ``sagemaker_ray://<cluster>/<namespace>`` goes through AWS's toolkit-for-ray-on-sagemaker-ai
    (`skyrl_nb.cluster.hyperpod_aws.connect_sagemaker_ray`): no token here, the toolkit's session cookie.

    >>> cluster = connect("http://10.0.0.5:8265")
    >>> cluster = connect("http://10.0.0.5:8265", shared_paths=["/fsx"])
    >>> cluster = connect("sagemaker_ray://my-hyperpod/team-a")
    >>> cluster = connect()   # in a Studio Space attached to a Ray cluster (`addresses.attached_address`)
    """
    attached = address is None
    if attached:
        from skyrl_nb.cluster.addresses import require_attached_address

        address = require_attached_address()
    if address.strip().startswith("sagemaker_ray://"):
        from skyrl_nb.cluster.hyperpod_aws import connect_sagemaker_ray

        cluster = connect_sagemaker_ray(address.strip(), verify=verify)
    else:
        cluster = Cluster(address, find_token(token), dashboard_url=dashboard_url, name=name, verify=verify)
    cluster.code = code
    cluster.shared_paths = tuple(shared_paths)
    if check:
        try:
            cluster.ping()
        except PermissionError:
            raise
        except Exception as exc:  # requests' errors are long; say what was tried
            raise ConnectionError(f"cannot reach the Ray dashboard at {cluster.address}: {type(exc).__name__}") from exc
        if attached:  # Studio does not warn when only Python differs; ray.init() from this kernel would fail
            from skyrl_nb.cluster.versions import warn_client_mismatch

            warn_client_mismatch(cluster)
    return cluster


