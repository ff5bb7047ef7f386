"""`%skyrl` / `%%skyrl`: launch and follow training jobs from notebook cells.

    %load_ext skyrl_nb
    %skyrl launch --preset quickstart trainer.max_training_steps=50
    %%skyrl launch --preset quickstart
    trainer:
      algorithm: {advantage_estimator: rloo}
    %skyrl status [RUN]      %skyrl logs RUN [--tail N]     %skyrl stop RUN
    %skyrl resume RUN        %skyrl list                    %skyrl dashboard RUN     %skyrl inspect RUN
    %skyrl export RUN PATH [--step N] [--register GROUP]   (PATH: a new directory or s3://bucket/prefix)
    %skyrl launch --engine skyrl --dry-run    (SkyRL's own trainer: print the exact command line, submit nothing)

Settings: `%config SkyrlMagics.run_root = "/fsx/runs"` (also `preset`, `cluster`, `show_dashboard`,
`log_tail`). `%skyrl -h` prints the commands. Every mistake is a one-line `UsageError`, raised
before anything is submitted; looking a run up (`status`, `logs`, `stop`, ...) never writes a file.

One idea, the ``%skyrl`` command line; one method per subcommand, each a few lines over the Python API.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.utils.process import arg_split
from traitlets import Bool, Integer, Unicode

from skyrl_core.choices import RunState

#: Each command and what it does (`%skyrl -h` prints these).
COMMAND_HELP = {
    "launch": "[--preset P] [--run-id ID] [--engine skyrl_nb|skyrl] [--data D] [--val-data D] [--columns "
              "prompt=COL,ground_truth=COL] [--reward FN[,FN2:WEIGHT]] [--reward-errors skip|fail] [--dry-run] "
              "[key=value ...]: validate a config and submit it (a %%skyrl cell body adds YAML overrides; --data and "
              "--reward name notebook variables: a DataFrame, a Dataset, functions from a cell; --data also takes a "
              "file, hf://<name> or s3://...; --dry-run prints the job's command line instead)",
    "status": "[RUN]: the job of RUN (default: the last one launched here)",
    "logs": "RUN [--tail N]: the job's output",
    "stop": "RUN: ask Ray to stop the job",
    "resume": "RUN: resubmit the run from its latest checkpoint",
    "list": "the runs under run_root and the runs launched from this kernel",
    "dashboard": "RUN: the live training dashboard",
    "inspect": "RUN: the trajectory inspector",
    "export": "RUN PATH [--step N] [--register GROUP]: write a checkpoint (default: the latest) as a Hugging Face "
              "model directory at PATH (a new directory or s3://bucket/prefix); --register: then register it in "
              "that SageMaker model package group (skyrl_nb.register; docs/registry.md)",
}
COMMANDS = tuple(COMMAND_HELP)
MAX_LINE_CHARS = 1 << 20
"""A `%skyrl` line (or `%%skyrl` cell body) is at most this long, as a YAML config file is."""
MAX_EXPAND_CHARS = 4096
"""A line with ``$name`` or ``{expr}`` in it is expanded (as IPython does) up to this length: IPython's
expansion takes time quadratic in the line's length (a 64 KiB line: a minute)."""
_NEEDS_RUN = ("logs", "stop", "resume", "dashboard", "inspect")
_HELP_FLAGS = ("-h", "--help")


def _one_line(problems: list[str] | str) -> str:
    """Problems as one line (``; `` between them), each at most 500 characters."""
    items = [problems] if isinstance(problems, str) else list(problems)
    lines = [" ".join(str(p).split()) for p in items if str(p).strip()]
    text = "; ".join(line if len(line) <= 500 else line[:499] + "…" for line in lines)
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
    @no_var_expand  # done in `_expand`, after an absurd line is refused
    @magic_arguments()
    @argument("command", help=f"one of: {', '.join(COMMANDS)}")
    @argument("args", nargs="*", help="launch: key=value overrides; export: the run id and the path; other "
                                      "commands: the run id")
    @argument("-p", "--preset", default=None, help="preset to start from (launch)")
    @argument("-c", "--cluster", default=None, help="notebook variable holding a Cluster (launch)")
    @argument("-n", "--tail", type=int, default=None, help="log lines to show (logs)")
    @argument("--run-id", default=None, help="run id to use (launch)")
    @argument("--engine", default=None, help="who trains (launch): skyrl_nb (default) or skyrl (SkyRL's own "
                                             "trainer); sets run.engine")
    @argument("--dry-run", action="store_true", help="print the job's command line and submit nothing (launch)")
    @argument("--data", default=None, help="train data (launch): a notebook variable (DataFrame, Dataset, list of "
                                           "dicts), a file, hf://<name> or s3://...")
    @argument("--val-data", default=None, help="eval data (launch), as --data")
    @argument("--columns", default=None, help="your column names (launch): prompt=question,ground_truth=answer")
    @argument("--reward", default=None, help="reward functions (launch): notebook variables, FN or FN1,FN2:0.2")
    @argument("--reward-errors", default=None, help="a reward that raises (launch): skip (score 0) or fail")
    @argument("--step", type=int, default=None, help="checkpoint step to export (export; default: the latest)")
    @argument("--register", default=None, help="SageMaker model package group to register the export in (export)")
    @argument("--wait", action="store_true", help="block until the job ends (launch, resume)")
    @argument("--no-dashboard", action="store_true", help="do not show the dashboard (launch, resume)")
    def skyrl(self, line: str = "", cell: str | None = None) -> Any:
        """Launch and follow skyrl-nb training jobs; `%skyrl?` lists the commands."""
        if not line.strip():
            raise UsageError(f"%skyrl needs a command: {', '.join(COMMANDS)} (%skyrl -h explains them)")
        for what, text in (("line", line), ("cell body", cell or "")):
            if len(text) > MAX_LINE_CHARS:
                raise UsageError(f"%skyrl: the {what} is {len(text):,} characters long; at most {MAX_LINE_CHARS:,} "
                                 "(put a large config in a YAML file: --preset FILE)")
        line = self._expand(line)
        try:
            words = arg_split(line, posix=True)
        except ValueError as err:  # shlex: "No closing quotation", "No escaped character"
            raise UsageError(f"%skyrl: cannot split the line into words: {_one_line(str(err))} "
                             "(quote values with matching ' or \")") from None
        if any(word in _HELP_FLAGS for word in words):
            print(self._help())
            return None
        try:
            # Intermixed: options may come before, between or after the key=value overrides.
            args = self.skyrl.parser.parse_intermixed_args(words)
        except UsageError as err:
            raise UsageError("%skyrl: " + _one_line(str(err))) from None
        self._check_args(args, cell)
        return getattr(self, f"_{args.command}")(args, cell)

    def _expand(self, line: str) -> str:
        """The line with IPython's ``$name`` / ``{expr}`` expansion from the calling cell's namespace, as a magic
        that does not opt out gets it; a line without ``$`` or ``{`` has nothing to expand and stays as it is."""
        if "$" not in line and "{" not in line:
            return line
        if len(line) > MAX_EXPAND_CHARS:
            raise UsageError(f"%skyrl: the line is {len(line):,} characters long with $ or {{ in it; variables are "
                             f"expanded in lines of at most {MAX_EXPAND_CHARS:,}")
        from IPython.utils.text import DollarFormatter

        # the user's frame: the caller of run_line_magic (run_cell_magic: one further up), as IPython counts it
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_name not in ("run_line_magic", "run_cell_magic"):
            frame = frame.f_back
        ns = dict(self.shell.user_ns)
        if frame is not None:
            user = frame.f_back if frame.f_code.co_name == "run_line_magic" else getattr(frame.f_back, "f_back", None)
            ns.update(user.f_locals if user is not None else {})
        try:
            return DollarFormatter().vformat(line, args=[], kwargs=ns)
        except Exception:  # noqa: BLE001 - as IPython: a line it cannot format stays as it is
            return line

    def _help(self) -> str:
        """The usage line, the commands and the options."""
        width = max(map(len, COMMANDS))
        commands = "\n".join(f"  {name:<{width}}  {text}" for name, text in COMMAND_HELP.items())
        options = self.skyrl.parser.format_help().partition("options:")[2].rstrip()
        return (f"%skyrl COMMAND [RUN | key=value ...] [options]\n\ncommands:\n{commands}\n\noptions:{options}\n\n"
                f"settings: %config SkyrlMagics.run_root = {self.run_root!r} (also preset, cluster, show_dashboard, "
                "log_tail)")

    def _check_args(self, args: Any, cell: str | None) -> None:
        """Refuse, as one-line `UsageError`s, what the parser lets through."""
        command = args.command
        if command not in COMMANDS:
            from skyrl_core.registry import did_you_mean

            raise UsageError(f"%skyrl: unknown command {command!r}; commands: {', '.join(COMMANDS)}"
                             + did_you_mean(command, list(COMMANDS)))
        if cell is not None and command != "launch":
            raise UsageError(f"%%skyrl {command}: only `launch` takes a cell body (YAML overrides)")
        own = (args.data, args.val_data, args.columns, args.reward, args.reward_errors)
        if command != "launch" and (args.preset or args.cluster or args.run_id or args.engine or args.dry_run
                                    or any(v is not None for v in own)):
            raise UsageError(f"%skyrl {command}: --preset, --cluster, --run-id, --engine, --dry-run, --data, "
                             "--val-data, --columns, --reward and --reward-errors only go with launch")
        if args.engine is not None:
            from skyrl_core.choices import Engine, values
            from skyrl_core.registry import not_allowed

            if args.engine not in values(Engine):
                raise UsageError(f"%skyrl launch: {not_allowed('--engine', args.engine, values(Engine))}")
        if command in _NEEDS_RUN and len(args.args) != 1:
            raise UsageError(f"%skyrl {command} needs exactly one run id, e.g. %skyrl {command} my-run")
        if command == "export" and len(args.args) != 2:
            raise UsageError("%skyrl export needs a run id and a path, e.g. %skyrl export my-run ~/models/my-run "
                             "(or s3://bucket/prefix)")
        if args.step is not None and (command != "export" or args.step < 0):
            raise UsageError("%skyrl: --step takes a checkpoint step >= 0 and only goes with export")
        if args.register is not None and command != "export":
            raise UsageError("%skyrl: --register takes a model package group name and only goes with export")
        if command in ("status", "list") and len(args.args) > (1 if command == "status" else 0):
            raise UsageError(f"%skyrl {command}: too many arguments: {' '.join(args.args)}")
        if args.tail is not None and (command != "logs" or args.tail < 0):
            raise UsageError("%skyrl: --tail takes a number of lines >= 0 and only goes with logs")
        empty = {"--preset": "a preset name or a YAML file", "--cluster": "the name of a notebook variable",
                 "--run-id": "a run id, or leave the option out for a fresh one"}
        for flag, value in (("--preset", args.preset), ("--cluster", args.cluster), ("--run-id", args.run_id)):
            if value is not None and not value.strip():
                raise UsageError(f"%skyrl {command}: {flag} is empty; give {empty[flag]}")
        if command != "launch" and any(not run.strip() for run in args.args):
            raise UsageError(f"%skyrl {command}: the run id is empty; give one, e.g. %skyrl {command} my-run")

    # -- commands ---------------------------------------------------------------------------------

    def _launch(self, args: Any, cell: str | None) -> Any:
        from skyrl_core.config import ConfigError, parse_override, parse_yaml_mapping
        from skyrl_nb.cluster.launching import prepare_config

        overrides: dict[str, Any] = {"run.run_root": os.path.expanduser(self.run_root)}
        if cell is not None and cell.strip():
            try:  # the config's own YAML reading: too long, too deep or not YAML is one line
                body = parse_yaml_mapping(cell, "the cell body")
            except ConfigError as err:
                raise UsageError(f"%%skyrl launch: {_one_line(err.problems).removeprefix('config: ')}") from None
            overrides.update(_flatten_yaml(body))
        for item in args.args:
            if "=" not in item:
                raise UsageError(f"%skyrl launch: {item!r} is not key=value (e.g. trainer.seed=3)")
            key, _, raw = item.partition("=")
            if not key.strip():
                raise UsageError(f"%skyrl launch: {item!r} has no key before '='")
            if not raw.strip():
                raise UsageError(f"%skyrl launch: {item!r} has no value after '='; give one ({key.strip()}=null "
                                 "clears an optional key)")
            try:  # the config's own override parsing: an absurd value is one line, not a traceback
                key, value = parse_override(item)
            except ConfigError as err:
                raise UsageError(f"%skyrl launch: {_one_line(err.problems)}") from None
            overrides[key] = value
        if args.engine:
            overrides["run.engine"] = args.engine
        preset = args.preset or self.preset
        # a cluster named by a notebook variable is only looked up; the local one is started later, after
        # everything that needs no cluster was checked
        name = args.cluster or self.cluster
        named = self._cluster(name) if name and not args.dry_run else None
        # the files the config names are judged where the job reads them: the local cluster is this machine, so
        # here and now (a missing data file never starts a Ray head); a cluster elsewhere checks them in
        # cluster.launch (with a probe job)
        check_here = not args.dry_run and (named is None or named.runs_here)
        try:
            cfg = prepare_config(preset, overrides=overrides, run_id=args.run_id, check_files=check_here)
        except ConfigError as err:
            raise UsageError(_one_line(err.problems)) from None
        except (ValueError, TypeError, OSError) as err:  # validation is all that ran: nothing was written
            raise UsageError(f"%skyrl launch: {_one_line(f'{type(err).__name__}: {err}')}") from None
        own = self._own_inputs(args)  # a wrong option is refused before a cluster is started
        if args.dry_run:
            return self._dry_run(cfg, args)
        cluster = named if named is not None else self._cluster(None)
        try:
            if cfg.run.engine == "skyrl":  # SkyRL's trainer must import there: one line now, not a failed job
                from skyrl_nb.cluster.skyrl_check import check_skyrl

                check_skyrl(cluster, cluster.engine_code())
            job = cluster.launch(cfg, **own)
        except ConfigError as err:  # plug-ins that cannot ship; launch removed what it wrote
            raise UsageError(_one_line(err.problems)) from None
        self._remember(job)
        return self._follow(job, args)

    def _own_inputs(self, args: Any) -> dict[str, Any]:
        """launch's ``data``, ``val_data``, ``columns``, ``reward`` and ``reward_errors`` from the options: names
        are looked up in the notebook's namespace (a DataFrame, a function from a cell); a name that is no
        variable is a file, ``hf://`` or ``s3://`` for data, and refused for a reward."""
        ns = self.shell.user_ns if self.shell is not None else {}
        found: dict[str, Any] = {}
        for key, value in (("data", args.data), ("val_data", args.val_data)):
            if value is not None:
                found[key] = ns[value] if value.isidentifier() and value in ns else value
        if args.columns is not None:
            pairs = [p.partition("=") for p in args.columns.split(",") if p.strip()]
            if not pairs or any(not sep or not k.strip() or not v.strip() for k, sep, v in pairs):
                raise UsageError(f"%skyrl launch: --columns {args.columns!r} is not role=column,...; e.g. "
                                 "--columns prompt=question,ground_truth=answer")
            found["columns"] = {k.strip(): v.strip() for k, _, v in pairs}
        if args.reward is not None:
            functions: list[Any] = []
            for item in (p.strip() for p in args.reward.split(",")):
                name, _, weight = item.partition(":")
                if name not in ns:
                    raise UsageError(f"%skyrl launch: --reward {name!r} is no variable in this notebook; define the "
                                     "function in a cell first")
                try:
                    functions.append((ns[name], float(weight)) if weight else ns[name])
                except ValueError:
                    raise UsageError(f"%skyrl launch: --reward {item!r}: the weight {weight!r} is not a number") \
                        from None
            found["reward"] = functions
        if args.reward_errors is not None:
            from skyrl_core.choices import RewardErrors, values
            from skyrl_core.registry import not_allowed

            if args.reward_errors not in values(RewardErrors):
                raise UsageError(f"%skyrl launch: {not_allowed('--reward-errors', args.reward_errors, values(RewardErrors))}")
            found["reward_errors"] = args.reward_errors
        return found

    def _dry_run(self, cfg: Any, args: Any) -> None:
        """Print the command line the job would run (SkyRL's keys spelled out for run.engine=skyrl) and, for
        SkyRL, what the translation changed or did not send; nothing is started, written or submitted."""
        import sys

        from skyrl_core.submission import pack_config
        from skyrl_nb.cluster.base import Cluster

        name = args.cluster or self.cluster
        cluster = self.shell.user_ns.get(name) if name else None
        if not isinstance(cluster, Cluster):  # the local cluster launch would start runs the kernel's python
            if name:
                self._cluster(name)  # the same one-line error a launch gives
            cluster = Cluster("http://127.0.0.1:8265", name="dry-run")
            cluster.python = sys.executable
        config_arg = pack_config(cfg.to_yaml())[1]
        print(cluster.entrypoint(config_arg, cfg))
        if cfg.run.engine == "skyrl":
            for note in cfg.to_skyrl().notes():
                print(f"# {note}")
        else:
            print(f"# the config travels in the job's runtime env as {config_arg[len('env:'):]}; by hand, save "
                  "cfg.to_yaml() to a file and pass --config FILE")
        return None

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
        from skyrl_core.config import ConfigError
        from skyrl_nb.jobs import RESTART_HINT

        job = self._find_job(args.args[0])
        try:
            new = job.resume()
        except ConfigError as err:
            raise UsageError(_one_line(err.problems)) from None
        except RuntimeError as err:  # ResumeRefused among them: the reason, and how to start a new run here
            how = f"`%skyrl status {job.run_id}` gives the Job, then .restart_as_new()"
            raise UsageError(_one_line(str(err).replace(RESTART_HINT, how))) from None
        self._remember(new)
        return self._follow(new, args)

    def _list(self, args: Any, cell: str | None) -> Any:
        """The runs under run_root and those launched from this kernel (wherever they live), newest first.

        A run whose status.json says pending or running while Ray (or, on this machine, the process
        table) knows its job ended shows the job's state: `lost`, `failed`, `stopped`, ...
        """
        import dataclasses

        from skyrl_core.runs import RunList, RunReader, list_runs
        from skyrl_core.store import location_key
        from skyrl_nb.jobs import ENDED

        listed = list_runs(os.path.expanduser(self.run_root))  # never raises: what it skipped is in .warnings
        runs = {location_key(s.path): s for s in listed}
        jobs = {location_key(job.run_dir): job for job in self.jobs.values()}
        for path in jobs.keys() - runs.keys():
            try:
                reader = RunReader(path)
                if reader.exists():  # reward first -> last, as list_runs and the dashboard say it
                    runs[path] = dataclasses.replace(reader.summary(), reward=reader.reward_change())
            except Exception:  # a damaged run of ours must not hide the others
                continue
        live = [path for path, s in runs.items() if s.state in (RunState.PENDING, RunState.RUNNING)]
        if any(path not in jobs for path in live):
            jobs = {**self._cluster_jobs(), **jobs}
        for path in live:
            if path not in jobs:
                continue
            try:
                state, why = jobs[path].status_detail()
            except Exception:  # the cluster is gone or unreachable: keep what the run store says
                continue
            if state in ENDED:
                runs[path] = dataclasses.replace(runs[path], state=str(state), error=runs[path].error or why)
        return RunList(sorted(runs.values(), key=lambda s: s.started_at or 0, reverse=True), listed.warnings)

    def _dashboard(self, args: Any, cell: str | None) -> Any:
        from skyrl_nb.dashboard import Dashboard

        run = args.args[0]
        job = self._find_job(run, required=False)
        source = job if job is not None else self._open_run(run)
        try:
            return Dashboard(source)
        except (OSError, ValueError) as err:  # the readers name damage; what is left is one line, not a traceback
            raise UsageError(f"%skyrl dashboard {run}: {_one_line(f'{type(err).__name__}: {err}')}") from None

    def _inspect(self, args: Any, cell: str | None) -> Any:
        from skyrl_nb.dashboard import open_inspector

        run = args.args[0]
        job = self._find_job(run, required=False)
        source = job.run if job is not None else self._open_run(run)
        try:
            return open_inspector(source)
        except RuntimeError as err:
            raise UsageError(_one_line(str(err))) from None
        except (OSError, ValueError) as err:  # the readers name damage; what is left is one line, not a traceback
            raise UsageError(f"%skyrl inspect {run}: {_one_line(f'{type(err).__name__}: {err}')}") from None

    def _export(self, args: Any, cell: str | None) -> Any:
        """The run's checkpoint as a Hugging Face model (`RunReader.export`: the engine in a process of its own)."""
        run, path = args.args
        job = self._find_job(run, required=False)
        reader = job.run if job is not None else self._open_run(run)
        try:
            if args.register is not None:  # a bad group name is refused before the export, not after
                from skyrl_nb.model_registry import check_group, register

                check_group(args.register)
            result = reader.export(path, step=args.step)
            for warning in result.warnings:
                print(f"warning: {warning}")
            if args.register is not None:
                return register(result, args.register)
        except (ValueError, OSError, RuntimeError) as err:  # ExportError, RegistrationError: one line naming it
            raise UsageError(f"%skyrl export: {_one_line(str(err))}") from None
        return result

    # -- helpers ----------------------------------------------------------------------------------

    def _remember(self, job: Any) -> None:
        self.jobs[job.run_id] = job
        self.last_run = job.run_id
        self.shell.user_ns["_skyrl_job"] = job

    def _follow(self, job: Any, args: Any) -> Any:
        if self.show_dashboard and not args.no_dashboard:
            dash = job.dashboard().show()
            self._dashboard_above(job)
            if args.wait:
                dash.wait()
        elif args.wait:
            job.wait()
        return job

    def _dashboard_above(self, job: Any) -> None:
        """The job returned as this cell's value shows one line, not a second header under its dashboard;
        in later cells it shows its header again."""
        job._dashboard_above = True

        def later(*_: Any) -> None:
            job._dashboard_above = False
            self.shell.events.unregister("post_run_cell", later)

        self.shell.events.register("post_run_cell", later)

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

        try:
            return local()
        except (OSError, ValueError) as err:  # a folder it cannot use (read-only HOME, TMPDIR): one line naming it
            raise UsageError(f"%skyrl launch: {_one_line(str(err))}") from None

    def _clusters(self) -> list[Any]:
        """Where lookups ask: the cluster in the `cluster` setting's variable, then a local head already
        running. Nothing is started and nothing is written."""
        from skyrl_nb.cluster.base import Cluster

        found = []
        configured = self.shell.user_ns.get(self.cluster) if self.cluster else None
        if isinstance(configured, Cluster):
            found.append(configured)
        try:
            from skyrl_nb.cluster import local

            running = local(start=False)
            if running is not None:
                found.append(running)
        except Exception:  # no Ray installed, a stale state file: no local head to ask
            pass
        return found

    def _cluster_jobs(self) -> dict[str, Any]:
        """{run dir (`location_key`): its latest job} for the skyrl-nb jobs on the clusters lookups ask."""
        from skyrl_core.store import location_key

        latest: dict[str, Any] = {}
        for cluster in self._clusters():
            try:
                jobs = cluster.jobs()
            except Exception:
                continue
            for job in jobs:
                path = location_key(job.run_dir) if job.run_dir else None
                if path and (path not in latest or job.attempt > latest[path].attempt):
                    latest[path] = job
        return latest

    def _find_job(self, run: str, required: bool = True) -> Any:
        if run in self.jobs:
            return self.jobs[run]
        for job in self.jobs.values():
            if job.submission_id == run:
                return job
        for cluster in self._clusters():
            try:
                return cluster.job(run)
            except Exception:  # KeyError: not there; anything else: that cluster cannot answer now
                continue
        if required:
            raise UsageError(f"%skyrl: no job for run {run!r} in this session or on the local cluster "
                             "(`%skyrl list` shows the runs on disk)")
        return None

    def _run_path(self, run: str) -> str:
        """Where the run named RUN lives: a URL or an absolute (or ``~``) path as given; anything else is a run
        under `run_root`, and may not lead out of it through ``..`` or a symlink (`UsageError` naming the root)."""
        import posixpath

        from skyrl_core.store import is_url, join

        if "\x00" in run:
            raise UsageError(f"%skyrl: run {run!r} holds a NUL byte; give a run id under {self.run_root}")
        if is_url(run) or os.path.isabs(os.path.expanduser(run)):
            return run
        root = os.path.expanduser(self.run_root)
        if is_url(root):
            norm = posixpath.normpath(run.replace("\\", "/"))
            inside = norm != ".." and not norm.startswith("../")
        else:
            real_root = os.path.realpath(root)
            real = os.path.realpath(os.path.join(root, run))
            inside = real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)
        if not inside:
            how = "'..'" if ".." in run.replace("\\", "/").split("/") else "a symlink"
            raise UsageError(f"%skyrl: run {run!r} leads outside the run root {self.run_root} through {how}; give a "
                             "run id under it, or an absolute path")
        return join(self.run_root, run)

    def _open_run(self, run: str) -> Any:
        from skyrl_core.runs import open_run

        path = self._run_path(run)
        try:
            return open_run(path)
        except FileNotFoundError:
            raise UsageError(f"%skyrl: no run {run!r} under {self.run_root} (`%skyrl list` shows the runs)") from None
        except OSError as err:  # RunUnreadable: another user's folder, a symbolic-link loop
            raise UsageError(f"%skyrl: {_one_line(str(err))}") from None


def load_ipython_extension(ipython: Any) -> None:
    """Register `%skyrl` (and make `%config SkyrlMagics.<setting>` work)."""
    magics = SkyrlMagics(shell=ipython, parent=ipython)
    ipython.register_magics(magics)
    if magics not in ipython.configurables:
        ipython.configurables.append(magics)
