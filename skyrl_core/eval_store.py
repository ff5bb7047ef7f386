"""The eval store: what an evaluation job writes and a notebook reads, in a folder beside the runs.

Layout of one evaluation (``<run_root>/<eval_id>/``, a local folder or an object-store URL like a run)::

    config.yaml, status.json, events.jsonl     the run store's lifecycle files, written by the same writer
    inputs/                                    data and reward functions shipped with the job (as a run's)
    eval/models.json                           [{"name", "source", "kind", "step", "path", "location"}, ...]
    eval/samples/<model name>.parquet          one row per sample (``SAMPLE_COLUMNS`` at least)
    eval/summary.json                          ``skyrl_core.eval_stats.summarize`` of every model's samples

``models.json`` lists the models in the user's order; the engine writes it once it has found every model (``path``
is the model directory it loaded, ``step`` the checkpoint a run gave). A model's samples file appears whole (one
atomic put) when its generation is done, so a reader sees a model's samples all or not at all. Every model answers
the same prompts: ``prompt_index`` is the row's index in the evaluated data, ``sample_index`` 0..n-1.

The engine writes through :func:`write_models`, :func:`write_samples` and :func:`write_summary` (beside a
``RunWriter`` for the lifecycle files); a notebook reads with :class:`EvalReader` (``open_eval``). pandas and
pyarrow are imported inside the functions that read or write Parquet.
"""

from __future__ import annotations

import html
import json
import os
from typing import Any

from skyrl_core.eval_config import MODEL_KINDS, SECTION, is_model_name
from skyrl_core.runs import RunReader
from skyrl_core.store import Store, is_url

__all__ = ["MODELS_FILE", "MODEL_KINDS", "SAMPLES_FOLDER", "SAMPLE_COLUMNS", "SUMMARY_FILE", "EvalReader",
           "is_eval_store", "open_eval", "samples_name", "write_models", "write_samples", "write_summary"]

EVAL_FOLDER = "eval"
MODELS_FILE = f"{EVAL_FOLDER}/models.json"
SAMPLES_FOLDER = f"{EVAL_FOLDER}/samples"
SUMMARY_FILE = f"{EVAL_FOLDER}/summary.json"
#: The columns every samples file has (more: ``reward/<fn>`` per reward function, ``finish_reason``, ``turns``).
SAMPLE_COLUMNS = ("prompt_index", "sample_index", "prompt", "response", "reward", "response_length", "ground_truth",
                  "data_source", "reward_error")


def samples_name(model_name: str) -> str:
    """``eval/samples/<model_name>.parquet``; ValueError for a name that cannot name a file."""
    if not is_model_name(model_name):
        raise ValueError(f"model: {model_name!r} cannot name a samples file; use letters, digits, '_', '.', '-'")
    return f"{SAMPLES_FOLDER}/{model_name}.parquet"


# ---------------------------------------------------------------------------------------------- writing


def write_models(store: Store, models: list[dict[str, Any]]) -> None:
    """Put ``eval/models.json`` (one entry per model, the user's order)."""
    for entry in models:
        if entry.get("kind") not in MODEL_KINDS:
            raise ValueError(f"models.json: kind {entry.get('kind')!r} is not one of {', '.join(MODEL_KINDS)}")
    store.put(MODELS_FILE, json.dumps(models, indent=1).encode())


def write_samples(store: Store, model_name: str, rows: list[dict[str, Any]]) -> str:
    """Put one model's samples as ``eval/samples/<model_name>.parquet`` (whole, atomically); returns the name.

    Rows need :data:`SAMPLE_COLUMNS`; ``ground_truth`` and ``reward_error`` may be None; every other key becomes a
    column too (a ``reward/<fn>`` score, ``finish_reason``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    missing = [c for c in SAMPLE_COLUMNS if rows and c not in rows[0]]
    if missing:
        raise ValueError(f"samples of {model_name}: the rows lack {', '.join(missing)}")
    types = {"prompt_index": pa.int64(), "sample_index": pa.int64(), "prompt": pa.string(), "response": pa.string(),
             "reward": pa.float64(), "response_length": pa.int64(), "ground_truth": pa.string(),
             "data_source": pa.string(), "reward_error": pa.string()}
    extra = list(dict.fromkeys(k for row in rows for k in row if k not in types))
    columns = {name: [row.get(name) for row in rows] for name in [*SAMPLE_COLUMNS, *extra]}
    arrays = {name: pa.array(values, type=types.get(name)) for name, values in columns.items()}
    table = pa.table(arrays) if rows else pa.table({n: pa.array([], type=t) for n, t in types.items()})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    name = samples_name(model_name)
    store.put(name, sink.getvalue().to_pybytes())
    return name


def write_summary(store: Store, summary: dict[str, Any]) -> None:
    """Put ``eval/summary.json`` (``skyrl_core.eval_stats.summarize``'s result)."""
    store.put(SUMMARY_FILE, json.dumps(summary, indent=1, default=float).encode())


# ---------------------------------------------------------------------------------------------- reading


class EvalReader:
    """Reads one eval store (a local folder or an object-store URL); the lifecycle files through a ``RunReader``.

    >>> ev = open_eval("~/skyrl-runs/my-run-eval-20261203-172500-1a2b")      # doctest: +SKIP
    >>> ev.status()["state"], [m["name"] for m in ev.models()]               # doctest: +SKIP
    ('succeeded', ['base', 'trained'])
    >>> ev.samples("trained").groupby("prompt_index").reward.mean()          # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.run = RunReader(path)
        self.store: Store = self.run.store
        #: the eval store's folder: a local path or a URL
        self.path = str(self.run.run_dir)
        self.eval_id = self.run.run_id

    @property
    def warnings(self) -> list[str]:
        """What could not be read (a damaged status.json, a line of a log), one line each."""
        return self.run.warnings

    def exists(self) -> bool:
        return self.run.exists() or self.store.exists(MODELS_FILE)

    def status(self) -> dict[str, Any]:
        """status.json (``state``: pending, running, succeeded, failed, stopped; ``step`` = models done of
        ``total_steps`` = models)."""
        return self.run.status()

    def config(self) -> dict[str, Any]:
        """The eval job's config (config.yaml): the job's sections and ``evaluation``."""
        return self.run.config()

    def events(self) -> list[dict[str, Any]]:
        """events.jsonl: stage, started, an ``eval`` event per model done (its metrics), error, finished."""
        return self.run.events()

    def models(self) -> list[dict[str, Any]]:
        """``eval/models.json``: the models in the user's order, once the job has found them all; before that the
        config's ``evaluation.models`` (without ``path``); [] when neither can be read."""
        try:
            data = json.loads(self.store.read(MODELS_FILE))
            if isinstance(data, list):
                return [m for m in data if isinstance(m, dict)]
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as err:
            self._warn(f"{MODELS_FILE} cannot be read ({type(err).__name__}); skipped")
        section = self.config().get(SECTION)
        models = section.get("models") if isinstance(section, dict) else None
        return [{k: m.get(k) for k in ("name", "source", "kind", "step")} | {"path": None}
                for m in models or [] if isinstance(m, dict)]

    def model_names(self) -> list[str]:
        return [str(m.get("name")) for m in self.models()]

    def done(self) -> list[str]:
        """The models whose samples are written, in the user's order."""
        present = self.store.list(SAMPLES_FOLDER)
        return [name for name in self.model_names() if f"{name}.parquet" in present]

    def samples(self, model_name: str):
        """One model's samples as a pandas DataFrame (a row per sample, :data:`SAMPLE_COLUMNS` and more).

        KeyError (one line naming the models) for a name that is not one of this evaluation's; FileNotFoundError
        when its samples are not written yet."""
        import io

        import pyarrow.parquet as pq

        names = self.model_names()
        if model_name not in names:
            raise KeyError(f"model: {model_name!r} is not a model of {self.eval_id}; its models: {', '.join(names)}")
        try:
            data = self.store.read(samples_name(model_name))
        except FileNotFoundError:
            raise FileNotFoundError(f"model: {model_name!r} has no samples in {self.path} yet (state "
                                    f"{self.status().get('state')})") from None
        return pq.read_table(io.BytesIO(data)).to_pandas()

    def summary(self) -> dict[str, Any] | None:
        """``eval/summary.json`` (per model: pass@k, mean reward, their intervals; see ``eval_stats.summarize``);
        None until the job has written it."""
        try:
            data = json.loads(self.store.read(SUMMARY_FILE))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            self._warn(f"{SUMMARY_FILE} cannot be read ({type(err).__name__}); skipped")
            return None
        return data if isinstance(data, dict) else None

    def _warn(self, line: str) -> None:
        if line not in self.run.warnings:
            self.run.warnings.append(line)

    def __repr__(self) -> str:
        status = self.status()
        models = ", ".join(self.model_names()) or "none yet"
        return (f"EvalReader({self.eval_id!r}, state={status.get('state')}, models=[{models}], "
                f"done={len(self.done())}, path={self.path!r})")

    def _repr_html_(self) -> str:
        status = self.status()
        done = set(self.done())
        rows = "".join(
            f"<tr><td style='text-align:left'>{html.escape(str(m.get('name')))}</td>"
            f"<td style='text-align:left'>{html.escape(str(m.get('kind')))}</td>"
            f"<td style='text-align:left'><code>{html.escape(str(m.get('source')))}</code></td>"
            f"<td>{'' if m.get('step') is None else m.get('step')}</td>"
            f"<td>{'samples written' if m.get('name') in done else '-'}</td></tr>" for m in self.models())
        error = status.get("error")
        note = f"<div style='color:#b00'>{html.escape(str(error))}</div>" if error else ""
        return (f"<div><b>Evaluation</b> <code>{html.escape(self.eval_id)}</code>: {html.escape(str(status.get('state')))}"
                f"<table><tr><th>model</th><th>kind</th><th>source</th><th>step</th><th></th></tr>{rows}</table>"
                f"<small><code>{html.escape(self.path)}</code></small>{note}</div>")


def is_eval_store(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds an eval store (its models.json, or a config with an ``evaluation`` section)."""
    reader = EvalReader(path)
    return reader.store.exists(MODELS_FILE) or SECTION in reader.config()


def open_eval(path: str | os.PathLike[str]) -> EvalReader:
    """Open an eval store (running or done). FileNotFoundError (one line) when ``path`` holds none.

    >>> open_eval("s3://bucket/skyrl-runs/my-run-eval-20261203-172500-1a2b")   # doctest: +SKIP
    """
    location = os.fspath(path) if is_url(path) else os.path.expanduser(os.fspath(path))
    reader = EvalReader(location)
    if not reader.exists() or not is_eval_store(location):
        raise FileNotFoundError(f"eval: {str(path)!r} is not an eval store (no {MODELS_FILE} and no config.yaml "
                                f"with an {SECTION} section)")
    return reader

