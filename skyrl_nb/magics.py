"""`%skyrl` / `%%skyrl`: launch and follow training jobs from notebook cells.

    %load_ext skyrl_nb
    %skyrl launch --preset quickstart trainer.max_training_steps=50
    %%skyrl launch --preset quickstart
    trainer:
      algorithm: {advantage_estimator: rloo}
    %skyrl status [RUN]      %skyrl logs RUN [--tail N]     %skyrl stop RUN
    %skyrl resume RUN        %skyrl list                    %skyrl dashboard RUN     %skyrl inspect RUN

Settings: `%config SkyrlMagics.run_root = "/fsx/runs"` (also `preset`, `cluster`, `show_dashboard`,
`log_tail`). Every mistake is a one-line `UsageError`, raised before anything is submitted.
"""

from __future__ import annotations

import os
from typing import Any

import yaml
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.utils.process import arg_split
from traitlets import Bool, Integer, Unicode

COMMANDS = ("launch", "status", "logs", "stop", "resume", "list", "dashboard", "inspect")
_NEEDS_RUN = ("logs", "stop", "resume", "dashboard", "inspect")


def _one_line(problems: list[str] | str) -> str:
    items = [problems] if isinstance(problems, str) else list(problems)
    text = "; ".join(" ".join(str(p).split()) for p in items if str(p).strip())
    return text or "invalid input"


def _flatten_yaml(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested (or dotted) YAML mapping -> {dotted key: value}."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten_yaml(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


@magics_class
class SkyrlMagics(Magics):
    """The `%skyrl` line and `%%skyrl` cell magic (see the module docstring)."""

    run_root = Unicode("~/skyrl-runs", help="Where runs are written (run.run_root) and listed.").tag(config=True)
    preset = Unicode("quickstart", help="Preset used by `launch` when --preset is not given.").tag(config=True)
    cluster = Unicode("", help="Name of a notebook variable holding the Cluster to use when --cluster is not "
                               "given; empty: the local cluster (started on first launch).").tag(config=True)
    show_dashboard = Bool(True, help="Show the live dashboard after launch / resume.").tag(config=True)
    log_tail = Integer(50, help="Lines `%skyrl logs` shows when --tail is not given.").tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.jobs: dict[str, Any] = {}
        self.last_run: str | None = None

    # -- the magic --------------------------------------------------------------------------------

    @line_cell_magic
    @magic_arguments()
    @argument("command", help=f"one of: {', '.join(COMMANDS)}")
    @argument("args", nargs="*", help="launch: key=value overrides; other commands: the run id")
    @argument("-p", "--preset", default=None, help="preset to start from (launch)")
    @argument("-c", "--cluster", default=None, help="notebook variable holding a Cluster (launch)")
    @argument("-n", "--tail", type=int, default=None, help="log lines to show (logs)")
    @argument("--run-id", default=None, help="run id to use (launch)")
    @argument("--wait", action="store_true", help="block until the job ends (launch, resume)")
    @argument("--no-dashboard", action="store_true", help="do not show the dashboard (launch, resume)")
    def skyrl(self, line: str = "", cell: str | None = None) -> Any:
        """Launch and follow skyrl-nb training jobs; `%skyrl?` lists the commands."""
        if not line.strip():
            raise UsageError(f"%skyrl needs a command: {', '.join(COMMANDS)}")
        try:
            # Intermixed: options may come before, between or after the key=value overrides.
            args = self.skyrl.parser.parse_intermixed_args(arg_split(line, posix=True))
        except UsageError as err:
            raise UsageError("%skyrl: " + _one_line(str(err))) from None
        command = args.command
        if command not in COMMANDS:
            from skyrl_core.registry import did_you_mean

            raise UsageError(f"%skyrl: unknown command {command!r}; commands: {', '.join(COMMANDS)}"
                             + did_you_mean(command, list(COMMANDS)))
        if cell is not None and command != "launch":
            raise UsageError(f"%%skyrl {command}: only `launch` takes a cell body (YAML overrides)")
        if command != "launch" and (args.preset or args.cluster or args.run_id):
            raise UsageError(f"%skyrl {command}: --preset, --cluster and --run-id only go with launch")
        if command in _NEEDS_RUN and len(args.args) != 1:
            raise UsageError(f"%skyrl {command} needs exactly one run id, e.g. %skyrl {command} my-run")
        if command in ("status", "list") and len(args.args) > (1 if command == "status" else 0):
            raise UsageError(f"%skyrl {command}: too many arguments: {' '.join(args.args)}")
        if args.tail is not None and (command != "logs" or args.tail < 0):
            raise UsageError("%skyrl: --tail takes a number of lines >= 0 and only goes with logs")
        return getattr(self, f"_{command}")(args, cell)

    # -- commands ---------------------------------------------------------------------------------

    def _launch(self, args: Any, cell: str | None) -> Any:
        from skyrl_core.config import ConfigError
        from skyrl_nb.cluster.base import prepare_config

        overrides: dict[str, Any] = {"run.run_root": os.path.expanduser(self.run_root)}
        if cell is not None and cell.strip():
            try:
                body = yaml.safe_load(cell)
            except yaml.YAMLError as err:
                mark = getattr(err, "problem_mark", None)
                where = f" at line {mark.line + 1}" if mark is not None else ""
                raise UsageError(f"%%skyrl launch: the cell body is not valid YAML{where}") from None
            if body is not None and not isinstance(body, dict):
                raise UsageError(f"%%skyrl launch: the cell body must be a YAML mapping of keys, got {type(body).__name__}")
            overrides.update(_flatten_yaml(body or {}))
        for item in args.args:
            if "=" not in item:
                raise UsageError(f"%skyrl launch: {item!r} is not key=value (e.g. trainer.seed=3)")
            key, _, raw = item.partition("=")
            if not key.strip():
                raise UsageError(f"%skyrl launch: {item!r} has no key before '='")
            try:
                value = yaml.safe_load(raw) if raw.strip() else ""
            except yaml.YAMLError:
                value = raw
            overrides[key.strip()] = value
        preset = args.preset or self.preset
        try:
            cfg = prepare_config(preset, overrides=overrides, run_id=args.run_id)
        except ConfigError as err:
            raise UsageError(_one_line(err.problems)) from None
        cluster = self._cluster(args.cluster)
        job = cluster.launch(cfg)
        self._remember(job)
        return self._follow(job, args)

    def _status(self, args: Any, cell: str | None) -> Any:
        if not args.args and self.last_run is None:
            return self._list(args, cell)
        run = args.args[0] if args.args else self.last_run
        job = self._find_job(run, required=False)
        if job is not None:
            return job
        return self._open_run(run)

    def _logs(self, args: Any, cell: str | None) -> None:
        job = self._find_job(args.args[0])
        print(job.logs(tail=self.log_tail if args.tail is None else args.tail))

    def _stop(self, args: Any, cell: str | None) -> Any:
        job = self._find_job(args.args[0])
        stopped = job.stop()
        print(f"{job.submission_id}: {'stop requested' if stopped else 'was not running'}")
        return None

    def _resume(self, args: Any, cell: str | None) -> Any:
        job = self._find_job(args.args[0])
        try:
            new = job.resume()
        except RuntimeError as err:
            raise UsageError(_one_line(str(err))) from None
        self._remember(new)
        return self._follow(new, args)

    def _list(self, args: Any, cell: str | None) -> Any:
        from skyrl_core.runs import list_runs

        return list_runs(os.path.expanduser(self.run_root))

    def _dashboard(self, args: Any, cell: str | None) -> Any:
        from skyrl_nb.dashboard import Dashboard

        run = args.args[0]
        job = self._find_job(run, required=False)
        return Dashboard(job if job is not None else self._open_run(run))

    def _inspect(self, args: Any, cell: str | None) -> Any:
        from skyrl_nb.dashboard import open_inspector

        run = args.args[0]
        job = self._find_job(run, required=False)
        try:
            return open_inspector(job.run if job is not None else self._open_run(run))
        except RuntimeError as err:
            raise UsageError(_one_line(str(err))) from None

    # -- helpers ----------------------------------------------------------------------------------

    def _remember(self, job: Any) -> None:
        self.jobs[job.run_id] = job
        self.last_run = job.run_id
        self.shell.user_ns["_skyrl_job"] = job

    def _follow(self, job: Any, args: Any) -> Any:
        if self.show_dashboard and not args.no_dashboard:
            dash = job.dashboard().show()
            if args.wait:
                dash.wait()
        elif args.wait:
            job.wait()
        return job

    def _cluster(self, name: str | None) -> Any:
        from skyrl_nb.cluster.base import Cluster

        name = name or self.cluster
        if name:
            if name not in self.shell.user_ns:
                raise UsageError(f"%skyrl launch: --cluster {name!r}: no such variable in the notebook")
            cluster = self.shell.user_ns[name]
            if not isinstance(cluster, Cluster):
                raise UsageError(f"%skyrl launch: --cluster {name!r} is a {type(cluster).__name__}, not a Cluster "
                                 "(make one with skyrl_nb.cluster.local() or connect())")
            return cluster
        from skyrl_nb.cluster import local

        return local()

    def _find_job(self, run: str, required: bool = True) -> Any:
        if run in self.jobs:
            return self.jobs[run]
        for job in self.jobs.values():
            if job.submission_id == run:
                return job
        clusters = [self.shell.user_ns[self.cluster]] if self.cluster in self.shell.user_ns else []
        try:
            from skyrl_nb.cluster import local

            running = local(start=False)
            if running is not None:
                clusters.append(running)
        except Exception:
            pass
        for cluster in clusters:
            try:
                return cluster.job(run)
            except (KeyError, AttributeError):
                continue
            except Exception:
                continue
        if required:
            raise UsageError(f"%skyrl: no job for run {run!r} in this session or on the local cluster "
                             "(`%skyrl list` shows the runs on disk)")
        return None

    def _open_run(self, run: str) -> Any:
        from skyrl_core.runs import open_run

        path = run if os.path.isabs(os.path.expanduser(run)) else os.path.join(os.path.expanduser(self.run_root), run)
        try:
            return open_run(path)
        except FileNotFoundError:
            raise UsageError(f"%skyrl: no run {run!r} under {self.run_root} (`%skyrl list` shows the runs)") from None


def load_ipython_extension(ipython: Any) -> None:
    """Register `%skyrl` (and make `%config SkyrlMagics.<setting>` work)."""
    magics = SkyrlMagics(shell=ipython, parent=ipython)
    ipython.register_magics(magics)
    if magics not in ipython.configurables:
        ipython.configurables.append(magics)
