"""SkyRL's own trainer behind skyrl-nb's run store: ``python -m skyrl_engine.skyrl_bridge``.

    python -m skyrl_engine.skyrl_bridge --run-dir DIR [--no-token-data] [--columns JSON] key=value ...  # SkyRL's keys
    python -m skyrl_engine.skyrl_bridge --probe       # one JSON line: is SkyRL importable here, which version

A config with ``run.engine: skyrl`` launches this (``skyrl_core.skyrl_translate`` writes the ``key=value``
words; ``%skyrl launch --engine skyrl --dry-run`` prints the line). It runs SkyRL's experiment
(``skyrl.train.entrypoints.main_base.BasePPOExp``, subclassed in ``skyrl_classes.py``) in this process,
with SkyRL's Ray actors doing the GPU work. SkyRL 0.4 or 0.3 (``skyrl_translate.SUPPORTED``): the words are the
translation's for 0.4, and on 0.3 the keys it lacks are dropped where that changes nothing, refused otherwise. And:

- :class:`RunStoreTracker` is SkyRL's tracker: each ``tracker.log(metrics, step)`` becomes a metrics line
  with SkyRL's own names (step 0, eval before training, becomes an ``eval`` event), the status gets a
  heartbeat every few seconds, checkpoints and evals become events, and the end (or the failure, with its
  traceback) becomes the final status;
- :func:`skyrl_engine.skyrl_batches.trajectory_rows` turns each step's SkyRL ``GeneratorOutput`` (with the advantages SkyRL computed)
  into a trajectory part in the run store's schema: prompt, response, reward, advantage, the sampler's
  log-probs, ``turns`` for multi-turn episodes.

skyrl-nb's inputs are resolved here first (:func:`resolve_args`): ``builtin://`` datasets, data shipped with
the job (``inputs://`` files in the run folder), object-store URLs and files in any row shape
(``skyrl_core.datarows``, ``--columns``) are written as Parquet files in SkyRL's format in the engine's cache,
``builtin://`` models become local Hugging Face directories (SkyRL reads local files only). Reward functions
(``reward.functions``) score through the skyrl-gym environment ``skyrl_engine.skyrl_reward_env``. SkyRL itself
is imported only by :func:`main`, :func:`skyrl_config` and ``skyrl_classes.py``; this module's pieces run with or
without it.

Exit codes: 0 done, 1 the run failed (status ``failed``, traceback in events.jsonl), 2 SkyRL is missing or
refused the config (one line on stderr and in status.json), 3 ``--probe`` found no usable SkyRL, 143 stopped.

One idea, SkyRL's trainer behind the run store: its tracker, its inputs and its main.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import traceback
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from skyrl_core.choices import RunState
from skyrl_core.datarows import SUFFIXES, canonical_row, prompt_parts
from skyrl_core.lifecycle import HEARTBEAT_S, RunLifecycle
from skyrl_core.registry import shown
from skyrl_core.reward_functions import digest
from skyrl_core.runs import RunReader, RunWriter
from skyrl_core.sections import AlertsConfig
from skyrl_core.skyrl_translate import REWARD_ENV, TEXT_PROMPT_COLUMN
from skyrl_core.user_inputs import INPUTS_PREFIX, resolve_input, reward_prompt
from skyrl_engine.alerts import RunAlerts
from skyrl_engine.cache import cache_root
from skyrl_engine.models import keep_tokenizer, resolve_model_path
from skyrl_engine.tasks import BUILTIN_PREFIX, env_configs_from_environ, load_prompts, read_rows, write_rows
from skyrl_engine.text2sql_data import builtin_db_root

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_NO_SKYRL, EXIT_STOPPED = 0, 1, 2, 3, 143
"""``decode(token_ids, skip_special_tokens) -> text`` (a tokenizer's ``decode``)."""


class JobStopped(BaseException):
    """SIGTERM (Ray's job stop). A BaseException: SkyRL's ``BasePPOExp.run`` records every ``Exception`` as a
    failure before re-raising it, and a requested stop is not one."""


# ------------------------------------------------------------------------------------------ the tracker


class RunStoreTracker:
    """SkyRL's tracker interface (``log``, ``finish``, ``log_exception``, ``log_samples_to_table``), writing
    skyrl-nb's run store at ``run_dir``; ``inner`` (SkyRL's own ``Tracking``, e.g. its console logger) gets
    every call too.

    ``policy_gpus`` turns SkyRL's ``trainer/tokens_per_second_per_gpu`` into the dashboard's
    ``trainer/tokens_per_second`` (see :func:`dashboard_aliases`); ``heartbeat_s`` is how often the status is
    refreshed while SkyRL trains.

    >>> tracker = RunStoreTracker("/tmp/runs/demo")                     # doctest: +SKIP
    >>> tracker.started(total_steps=10); tracker.log({"reward/avg_raw_reward": 0.5}, step=1)  # doctest: +SKIP
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, inner: Any = None, policy_gpus: int = 1,
                 heartbeat_s: float = HEARTBEAT_S):
        self.writer = RunWriter(run_dir)
        #: the run's status, heartbeat and lifecycle events, recorded as skyrl-nb's engine records them
        self.life = RunLifecycle(self.writer, heartbeat_s)
        self.inner = inner
        self.policy_gpus = max(1, int(policy_gpus))
        #: skyrl-nb's ``trainer.alerts`` for this run (:meth:`start_alerts`), None without them
        self.alerts: Any = None

    @property
    def step(self) -> int:
        """The last step SkyRL reported."""
        return self.life.step

    @property
    def ended(self) -> str | None:
        """The final state once recorded (None while the run lives)."""
        return self.life.ended

    @property
    def run_dir(self) -> str:
        return str(self.writer.run_dir)

    def __repr__(self) -> str:
        return f"RunStoreTracker(run_dir={self.run_dir!r}, step={self.step}, ended={self.ended!r})"

    # -- lifecycle --------------------------------------------------------------------------------
    def pending(self) -> None:
        """The job's process is up (status ``pending`` with its pid)."""
        self.life.status(RunState.PENDING, pid=os.getpid())

    def started(self, total_steps: int | None, resumed_from: int = 0, **info: Any) -> None:
        """Training begins (after a resume from ``resumed_from``): status running, a heartbeat, a started event."""
        self.life.running(step=resumed_from, **({} if total_steps is None else {"total_steps": int(total_steps)}))
        if resumed_from == 0:
            self.life.started(total_steps, engine="skyrl", **info)

    # -- SkyRL's tracker interface ------------------------------------------------------------------
    def log(self, data: Mapping[str, Any], step: int, commit: bool = False) -> None:
        """One of SkyRL's ``tracker.log`` calls: a metrics line for ``step`` (SkyRL's names, plus the dashboard's
        aliases), an ``eval`` event when the payload carries ``eval/*``; step 0 (eval before training) is an
        ``eval`` event only (metric lines count steps from 1)."""
        metrics = {k: _plain(v) for k, v in data.items()}
        evals = {k: v for k, v in metrics.items() if k.startswith("eval/")}
        if step > 0:
            self.writer.log_metrics(step, {**metrics, **dashboard_aliases(metrics, self.policy_gpus)})
            self.life.running(step=max(self.step, int(step)))
        if evals or step == 0:
            self.writer.log_event("eval", step=int(step), **(evals if step > 0 else metrics))
        if self.inner is not None:
            self.inner.log(data, step=step, commit=commit)

    def finish(self) -> None:
        """SkyRL's end of training: status succeeded and a finished event (nothing after a failure or stop)."""
        self.stop_alerts()
        self.life.succeeded()
        if self.inner is not None:
            self.inner.finish()

    def log_exception(self, e: BaseException, step: int = 0) -> None:
        """The run failed: an error event with the traceback, status failed naming the error (once)."""
        self.life.step = max(self.step, int(step or 0))
        self.life.failed(e, traceback.format_exc()[-10000:])
        if self.alerts is not None:
            self.alerts.failed(e, self.step + 1)  # once per run and step, however often this is called
        if self.inner is not None:
            self.inner.log_exception(e, step=step)

    def log_samples_to_table(self, key: str, columns: list[str], samples: list[tuple[Any, ...]], step: int) -> None:
        """SkyRL's wandb sample tables: the run store keeps whole trajectory parts instead; passed to ``inner``."""
        if self.inner is not None:
            self.inner.log_samples_to_table(key, columns, samples, step)

    # -- what the bridge's trainer adds ------------------------------------------------------------------
    def stopped(self) -> None:
        """A requested stop (SIGTERM): status stopped and a finished event."""
        self.stop_alerts()
        self.life.stopped()

    def refused(self, message: str) -> None:
        """The job could not start (no SkyRL, a config SkyRL refused): status failed with the one line."""
        self.life.refused(message)
        if self.alerts is not None:
            self.alerts.failed(RuntimeError(message), self.step + 1)

    def start_alerts(self) -> None:
        """skyrl-nb's ``trainer.alerts`` (``skyrl_engine.alerts``) from the config ``launch`` wrote into the run store:
        the failure (or a refusal), a stall between SkyRL's steps and a reward collapse in its ``reward/avg_raw_reward``
        reach the webhook as they do from skyrl-nb's engine. A run started by hand (SkyRL's own config) has none."""
        try:
            config = RunReader(self.run_dir).config()
        except (OSError, ValueError):
            return
        section = (config.get("trainer") or {}).get("alerts") if isinstance(config.get("trainer"), dict) else None
        if not isinstance(section, dict) or not section.get("webhook"):
            return
        run_id = (config.get("run") or {}).get("run_id") or os.path.basename(self.run_dir.rstrip("/"))
        job = SimpleNamespace(run=SimpleNamespace(run_id=run_id),
                              trainer=SimpleNamespace(alerts=AlertsConfig.model_validate(section)))
        self.alerts = RunAlerts.start(job, self.writer, self.step)  # type: ignore[arg-type] - the two fields it reads
        if self.alerts is not None:
            self.writer.metric_listeners.append(self.alerts.observe)

    def stop_alerts(self) -> None:
        if self.alerts is not None:
            if self.alerts.observe in self.writer.metric_listeners:
                self.writer.metric_listeners.remove(self.alerts.observe)
            self.alerts.stop()

    def checkpoint_saved(self, step: int, path: str) -> None:
        self.writer.log_event("checkpoint_saved", step=int(step), path=str(path))

    def write_trajectories(self, step: int, rows: list[dict[str, Any]]) -> None:
        """One trajectory part for ``step`` (atomic); a part that cannot be written is a warning, not a failure."""
        try:
            self.writer.write_trajectories(int(step), rows)
        except Exception as err:  # the run store must not stop SkyRL's training
            self.writer.log_event("warning", step=int(step), message=f"trajectory part not written: "
                                                                      f"{type(err).__name__}: {err}")


def _plain(value: Any) -> Any:
    """A metric value as JSON takes it: torch / numpy scalars and one-element arrays (SkyRL's rollout metrics
    hold some, e.g. ``np.zeros(1)``) become Python numbers."""
    if hasattr(value, "item"):
        try:
            return value.item()
        except (ValueError, RuntimeError):  # more than one element: left to the writer (a list)
            return value
    return value


def dashboard_aliases(metrics: Mapping[str, Any], policy_gpus: int = 1) -> dict[str, Any]:
    """The names skyrl-nb's dashboard reads that SkyRL (0.3, 0.4) spells otherwise, added beside SkyRL's own:
    ``trainer/tokens_per_second`` = SkyRL's ``trainer/tokens_per_second_per_gpu`` × policy GPUs (kept when
    the payload has it already), and the reward functions' series ``reward/<name>`` and ``reward/errors``, which
    SkyRL names after the environment that reports them (``environment/reward/<name>``,
    ``skyrl_engine.skyrl_reward_env``). Every other name the dashboard draws (``reward/avg_raw_reward``,
    ``reward/avg_pass_at_{n}``, ``timing/{generate,policy_train,sync_weights,save_checkpoints}``,
    ``eval/all/avg_score``) is SkyRL's own.

    >>> dashboard_aliases({"trainer/tokens_per_second_per_gpu": 100.0, "environment/reward/exact": 0.5}, 4)
    {'reward/exact': 0.5, 'trainer/tokens_per_second': 400.0}
    """
    found = {key[len("environment/"):]: value for key, value in metrics.items()
             if key.startswith("environment/reward/") and key[len("environment/"):] not in metrics}
    per_gpu = metrics.get("trainer/tokens_per_second_per_gpu")
    if "trainer/tokens_per_second" not in metrics and isinstance(per_gpu, (int, float)):
        found["trainer/tokens_per_second"] = per_gpu * policy_gpus
    return found


# ------------------------------------------------------------------------------------------ trajectories


# ------------------------------------------------------------------------------------------ builtin:// inputs


def _parse_words(words: Sequence[str]) -> dict[str, Any]:
    import yaml

    parsed = {}
    for word in words:
        key, sep, raw = word.partition("=")
        if not sep:
            raise ValueError(f"{word!r} is not key=value (SkyRL's dotted keys, e.g. trainer.seed=3)")
        try:
            parsed[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            parsed[key.strip()] = raw
    return parsed


def resolve_args(words: Sequence[str], *, run_dir: str | None = None,
                 columns: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, Any]]:
    """SkyRL's ``key=value`` words with skyrl-nb's inputs made into files SkyRL reads.

    - each ``builtin://`` dataset in ``data.train_data`` / ``data.val_data`` is written once as a Parquet file
      in SkyRL's row format under the engine's cache (``skyrl_engine.cache.cache_root()/skyrl-data``; SkyRL
      reads it in this process), with ``max_turns`` from ``generator.max_turns`` added to rows that lack it,
      as skyrl-nb's agent loop does;
    - every other data file (``inputs://`` in ``run_dir``, an object-store URL, a local file) is read in any row
      shape skyrl-nb reads (``columns`` is ``data.columns``) and written there too, in SkyRL's layout
      (:func:`skyrl_rows`), content-addressed;
    - a ``builtin://`` or ``.gguf`` ``trainer.policy.model.path`` (and critic's) becomes a local Hugging Face
      directory (``skyrl_engine.models.resolve_model_path``: the tiny model is warm-started on the train rows);
    - the built-in text2sql databases become ``environment.skyrl_gym.text2sql.db_path`` unless it is given;
    - unless given, ``trainer.max_prompt_length`` becomes the longest prompt of the data (chat template applied,
      as SkyRL's filter counts it), so SkyRL drops no prompt (skyrl-nb's engine drops none), and with
      ``generator.max_turns > 1`` ``generator.max_input_length`` becomes the model's context minus
      ``max_generate_length`` (skyrl-nb's agent loop ends an episode when the sequence reaches the context).

    Returns ``(words, resolved)``: the words to hand SkyRL and ``{key: new value}`` for what changed.
    """
    from skyrl_core.skyrl_translate import skyrl_value

    values = _parse_words(words)
    resolved: dict[str, Any] = {}
    max_turns = int(values.get("generator.max_turns") or 1)
    reward_env = values.get("environment.env_class") == REWARD_ENV
    for key in ("data.train_data", "data.val_data"):
        paths = values.get(key) or []
        paths = [paths] if isinstance(paths, str) else list(paths)
        files = []
        for path in paths:
            if str(path).startswith(INPUTS_PREFIX) or str(path).endswith(SUFFIXES):
                files.append(_skyrl_file(str(path), run_dir, columns, REWARD_ENV if reward_env else None, max_turns))
                continue
            if not str(path).startswith(BUILTIN_PREFIX):
                files.append(path)
                continue
            name = str(path)[len(BUILTIN_PREFIX):].replace("/", "-")
            target = os.path.join(cache_root(), "skyrl-data", f"{name}-max_turns{max_turns}.parquet")
            if not os.path.exists(target):  # the built-in sets are fixed (seeded): made once, then reused
                rows = [{"max_turns": max_turns, **row} for row in read_rows(str(path))] if max_turns > 1 \
                    else read_rows(str(path))
                partial = f"{target}.{os.getpid()}.tmp.parquet"
                write_rows(partial, rows)
                os.replace(partial, target)
            files.append(target)
        if files != paths:
            resolved[key] = files
    if any(str(p).startswith("builtin://text2sql/") for k in ("data.train_data", "data.val_data")
           for p in (values.get(k) or [])) and "environment.skyrl_gym.text2sql.db_path" not in values:

        given = env_configs_from_environ().get("text2sql", {}).get("db_path")
        resolved["environment.skyrl_gym.text2sql.db_path"] = given or builtin_db_root()
    train_files = resolved.get("data.train_data", values.get("data.train_data") or [])
    for key in ("trainer.policy.model.path", "trainer.critic.model.path"):
        model = values.get(key)
        if isinstance(model, str) and (model.startswith(BUILTIN_PREFIX) or model.endswith(".gguf")):

            rows = load_prompts(list(train_files), str(values.get("environment.env_class") or "arithmetic"))
            resolved[key] = resolve_model_path(model, rows, int(values.get("trainer.seed") or 42))
    model_dir = resolved.get("trainer.policy.model.path", values.get("trainer.policy.model.path"))
    if isinstance(model_dir, str) and os.path.isdir(model_dir):
        data = [*train_files, *resolved.get("data.val_data", values.get("data.val_data") or [])]
        resolved.update(_prompt_limits(model_dir, data, values, max_turns))
    out = [w for w in words if w.partition("=")[0].strip() not in resolved]
    out += [f"{key}={skyrl_value(value)}" for key, value in resolved.items()]
    return out, resolved


def skyrl_rows(raw_rows: Sequence[Mapping[str, Any]], *, columns: Mapping[str, str] | None = None,
               env_class: str | None = None, max_turns: int = 1, where: str = "data") -> list[dict[str, Any]]:
    """Rows in any shape skyrl-nb reads (``skyrl_core.datarows.canonical_row``) in SkyRL's layout: ``prompt`` as
    messages, ``env_class`` (``env_class`` when given, for every row: the reward functions' environment),
    ``reward_spec`` with the ground truth, every other column kept (SkyRL hands them to the environment);
    ``max_turns`` where ``max_turns > 1``; for the reward environment, ``TEXT_PROMPT_COLUMN``.
    RowShapeError (a ValueError) names the row and the column.

    >>> skyrl_rows([{"q": "2+2", "a": "4"}], columns={"prompt": "q", "ground_truth": "a"})
    [{'q': '2+2', 'a': '4', 'prompt': [{'role': 'user', 'content': '2+2'}], 'reward_spec': {'ground_truth': '4'}}]
    """
    out = []
    for number, raw in enumerate(raw_rows, start=1):
        row = canonical_row(raw, columns, f"{where} row {number}")
        messages, _, spec = prompt_parts(row, f"{where} row {number}")
        if env_class == REWARD_ENV:  # the functions get the prompt as the row gave it: text, or messages
            row[TEXT_PROMPT_COLUMN] = isinstance(reward_prompt(row), str)
        row["prompt"] = messages
        if spec:
            row["reward_spec"] = spec
        if env_class is not None:
            row["env_class"] = env_class
        if max_turns > 1:
            row.setdefault("max_turns", max_turns)
        out.append(row)
    return out


def _skyrl_file(path: str, run_dir: str | None, columns: Mapping[str, str] | None, env_class: str | None,
                max_turns: int) -> str:
    """``path`` (``inputs://`` in ``run_dir``, a URL or a file) read and written in SkyRL's layout under the engine's
    cache, named by its content: the local Parquet file SkyRL reads."""
    if path.startswith(INPUTS_PREFIX) and not run_dir:
        raise ValueError(f"{path}: a file shipped with the job; the bridge reads it from --run-dir, which is missing")
    source = resolve_input(path, run_dir) if run_dir else path
    rows = skyrl_rows(read_rows(source), columns=columns, env_class=env_class, max_turns=max_turns, where=shown(path))
    folder = os.path.join(cache_root(), "skyrl-data")
    partial = write_rows(os.path.join(folder, f"{os.getpid()}.tmp.parquet"), rows)
    with open(partial, "rb") as f:
        address = digest(f.read())
    target = os.path.join(folder, f"{os.path.basename(path).rsplit('.', 1)[0][:40]}-{address}.parquet")
    os.replace(partial, target)
    return target


def _prompt_limits(model_dir: str, data_files: Sequence[str], values: Mapping[str, Any],
                   max_turns: int) -> dict[str, int]:
    """``trainer.max_prompt_length`` (and, multi-turn, ``generator.max_input_length``) where not given; see
    :func:`resolve_args`."""
    from transformers import AutoTokenizer


    found: dict[str, int] = {}
    if "trainer.max_prompt_length" not in values:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        rows = load_prompts([str(f) for f in data_files if os.path.exists(str(f))], "arithmetic")
        lengths = [len(tokenizer.apply_chat_template(r.prompt, add_generation_prompt=True, tokenize=True,
                                                     return_dict=False)) for r in rows]
        if lengths:
            found["trainer.max_prompt_length"] = max(lengths)
    config = os.path.join(model_dir, "config.json")
    if max_turns > 1 and "generator.max_input_length" not in values and os.path.exists(config):
        with open(config) as f:
            context = json.load(f).get("max_position_embeddings")
        budget = int(values.get("generator.sampling_params.max_generate_length") or 1024)
        prompt = found.get("trainer.max_prompt_length", int(values.get("trainer.max_prompt_length") or 512))
        if isinstance(context, int) and context - budget >= prompt:
            found["generator.max_input_length"] = context - budget
    return found


def resume_step(ckpt_path: str, resume_mode: str | None, resume_path: str | None) -> int:
    """The step SkyRL will resume after (0: a fresh start), read as SkyRL reads it: ``latest`` from
    ``<ckpt_path>/latest_ckpt_global_step.txt``, ``from_path`` from the ``global_step_N`` folder's name."""
    import re

    if resume_mode in (None, "none"):
        return 0
    if resume_mode == "from_path":
        m = re.search(r"global_step_(\d+)", str(resume_path or ""))
        return int(m.group(1)) if m else 0
    try:
        with open(os.path.join(os.path.expanduser(ckpt_path), "latest_ckpt_global_step.txt")) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


# ------------------------------------------------------------------------------------------ the command


def probe() -> dict[str, Any]:
    """Whether SkyRL's trainer imports in this Python, and which SkyRL: ``{"python", "skyrl", "supported", "error"}``
    (``skyrl`` the installed version, None and ``error`` one line when there is none that imports; ``supported``
    the releases the translation takes, ``skyrl_translate.SUPPORTED``)."""
    from importlib import import_module, metadata

    from skyrl_core.skyrl_translate import SUPPORTED

    report: dict[str, Any] = {"python": sys.version.split()[0], "skyrl": None, "supported": list(SUPPORTED),
                              "error": None}
    try:
        report["skyrl"] = metadata.version("skyrl")
    except metadata.PackageNotFoundError:
        report["error"] = "the skyrl package is not installed"
        return report
    try:
        import_module("skyrl.train.entrypoints.main_base")
    except Exception as err:  # one of SkyRL's own imports failing: its GPU packages, or this Python
        report["error"] = _one_line(err)
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", help="the run store to write (<run_root>/<run_id>)")
    parser.add_argument("--no-token-data", action="store_true", help="no token_ids / token_logprobs columns")
    parser.add_argument("--columns", type=json.loads, default=None,
                        help='data.columns as JSON: the rows\' own column names, {"prompt": "question", ...}')
    parser.add_argument("--probe", action="store_true", help="print whether SkyRL imports here (one JSON line)")
    parser.add_argument("overrides", nargs="*", help="SkyRL's dotted key=value overrides")
    return parser


def _on_sigterm(signum: int, frame: Any) -> None:
    raise JobStopped(f"signal {signum}")


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:500]}"


def main(argv: list[str] | None = None) -> int:
    """Run SkyRL's trainer into a run store; see the module docstring for the exit codes."""
    args = _parser().parse_args(argv)
    if args.probe:
        report = probe()
        print(json.dumps(report), flush=True)
        return EXIT_OK if report["error"] is None else EXIT_NO_SKYRL
    run_dir = args.run_dir or os.environ.get("SKYRL_NB_RUN_DIR")
    if not run_dir:
        print("--run-dir: missing; give the run store to write (<run_root>/<run_id>)", file=sys.stderr)
        return EXIT_REFUSED
    tracker = RunStoreTracker(run_dir)
    tracker.pending()
    tracker.start_alerts()
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _run(args, run_dir, tracker)
    except (JobStopped, KeyboardInterrupt):
        tracker.stopped()
        return EXIT_STOPPED
    except Exception as err:
        tracker.log_exception(err, step=tracker.step)  # idempotent: SkyRL's run() may have recorded it
        traceback.print_exc()
        return EXIT_FAILED
    finally:
        tracker.stop_alerts()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def skyrl_config(words: Sequence[str], *, run_dir: str | None, columns: Mapping[str, str] | None = None
                 ) -> tuple[Any, dict[str, Any]]:
    """What the bridge hands SkyRL: ``words`` with skyrl-nb's inputs resolved (:func:`resolve_args`), loaded into
    ``skyrl_classes.BridgeConfig`` by SkyRL's ``from_cli_overrides`` and checked by SkyRL's ``validate_cfg``. The words
    are the translation's for ``skyrl_translate.SKYRL_VERSION``; for an older release installed here the keys it lacks
    are dropped where that changes nothing (``skyrl_translate.adapt_to_release``). Returns ``(cfg, resolved)``;
    ValueError with the one line (a release it does not take, a key the release lacks, ``data: ...`` or ``SkyRL
    refused the config: ...``)."""
    from importlib import metadata

    from skyrl.train.utils import validate_cfg

    from skyrl_core.skyrl_translate import adapt_to_release, release_problem
    from skyrl_engine.skyrl_classes import BridgeConfig  # imports SkyRL, an optional dependency

    version = metadata.version("skyrl")
    words, problems = adapt_to_release(list(words), version)  # the translation is for the newest release
    problem = release_problem(version) or (problems[0] if problems else None)
    if problem:
        raise ValueError(problem)
    try:
        words, resolved = resolve_args(words, run_dir=run_dir, columns=columns)
    except (ValueError, OSError) as err:  # a data file that cannot be read, or a row SkyRL could not train on
        raise ValueError(f"data: {_one_line(err)}") from None
    try:
        cfg = BridgeConfig.from_cli_overrides(list(words))
        validate_cfg(cfg)
    except (ValueError, AssertionError, TypeError) as err:
        raise ValueError(f"SkyRL refused the config: {_one_line(err)}") from None
    return cfg, resolved


def _run(args: argparse.Namespace, run_dir: str, tracker: RunStoreTracker) -> int:
    from skyrl_core.skyrl_translate import SKYRL_VERSION

    try:
        from skyrl.train.utils.utils import initialize_ray

        # SkyRL itself is an optional dependency
        from skyrl_engine.skyrl_classes import experiment_class
    except Exception as err:  # noqa: BLE001 - any import failure means: no usable SkyRL here
        return _refuse(tracker, f"SkyRL's trainer does not import in this Python ({sys.version.split()[0]}): "
                                f"{_one_line(err)}; install skyrl[fsdp]=={SKYRL_VERSION} on the cluster (docs/skyrl.md)")
    try:
        cfg, resolved = skyrl_config(args.overrides, run_dir=run_dir, columns=args.columns)
    except ValueError as err:
        return _refuse(tracker, str(err))
    if cfg.trainer.fully_async.enabled:
        return _refuse(tracker, "trainer.fully_async.enabled: true is not run by the bridge (SkyRL's fully async "
                                "trainer takes only rollout_is / dppo losses); allowed: false")
    start = resume_step(cfg.trainer.ckpt_path, cfg.trainer.resume_mode, cfg.trainer.resume_path)
    from skyrl_core.resume import attempt_from_env, resume_problem

    # resume_mode=latest with history but no checkpoint would overwrite that history: refused, nothing rewritten
    refusal = None if start or cfg.trainer.resume_mode != "latest" else resume_problem(
        run_dir, os.path.expanduser(cfg.trainer.ckpt_path), cfg.trainer.ckpt_interval, instead="launch it under a new run id")
    if refusal:
        return _refuse(tracker, refusal)
    tracker.writer.truncate_after(start)
    if start:
        tracker.life.resumed(start, attempt_from_env(1), path=os.path.join(cfg.trainer.ckpt_path, f"global_step_{start}"))
    p = cfg.trainer.placement
    tracker.policy_gpus = max(1, p.policy_num_nodes * p.policy_num_gpus_per_node)
    _describe_run(tracker, cfg)
    print(f"[skyrl_bridge] SkyRL trainer into {run_dir}; resolved {sorted(resolved)}", flush=True)
    initialize_ray(cfg)
    exp = experiment_class()(cfg, tracker, store_token_data=not args.no_token_data, resumed_from=start,
                             resolved=resolved)
    exp.run()
    tracker.finish()  # SkyRL's train() has called it already; a no-op then
    return EXIT_OK


def _describe_run(tracker: RunStoreTracker, cfg: Any) -> None:
    """What readers need beside the logs: the model's tokenizer (the inspector decodes token ids with it) and,
    for a run started by hand (``launch`` writes skyrl-nb's config first), SkyRL's config as config.yaml."""
    import dataclasses


    keep_tokenizer(cfg.trainer.policy.model.path, tracker.writer)
    if not tracker.writer.store.exists("config.yaml"):
        tracker.writer.write_config(json.loads(json.dumps(dataclasses.asdict(cfg), default=str)))


def _refuse(tracker: RunStoreTracker, message: str) -> int:
    print(message, file=sys.stderr, flush=True)
    tracker.refused(message)
    return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
