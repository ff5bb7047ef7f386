"""A job's own inputs from the notebook: data from where it is and reward functions from a cell, shipped with the job.

``launch(data=..., val_data=..., columns=..., reward=...)`` takes data as a pandas DataFrame, a list of dicts, a
``datasets.Dataset`` / ``DatasetDict``, a local ``.parquet`` / ``.jsonl`` / ``.json`` file, a dataset saved with
``save_to_disk``, ``hf://<name>`` (or a hub dataset name) through ``datasets``, or an object-store URL
(``s3://...``, which the job reads itself). :class:`JobInputs` reads each once here: what only the notebook can see
becomes Parquet, content-addressed, and travels in the run's own folder (``<run_dir>/inputs/``), named in the config
as ``inputs://train-<hash>.parquet``; a URL stays a URL. So no cluster needs the notebook's disk. Reward functions
travel the same way, pickled by value (``skyrl_core.reward_functions``). ``inputs/manifest.json`` records what the
run used: each data source, its row count and hash, each function's name, weight and source text.

Everything is checked before anything is written: the first rows in the shape the engine reads
(``skyrl_core.datarows``), each function called once on a real row; a problem is one line naming the input, the
row and the column. Nothing heavy is imported: pandas, pyarrow and datasets only when the input is one.

One idea, what travels with a job from the notebook besides its config, from each kind of input to the run's
folder and its record; it is longer than most modules because every kind of input a user holds is read here.
"""

from __future__ import annotations

import functools
import html
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from skyrl_core.catalog import BUILTIN_PREFIX, HF_PREFIX, INPUTS_PREFIX
from skyrl_core.datarows import (
    CHECKED_ROWS,
    RowShapeError,
    canonical_row,
    iter_rows,
    prompt_parts,
    reward_columns,
)
from skyrl_core.errors import ConfigError
from skyrl_core.registry import shown
from skyrl_core.reward_functions import (
    RewardFunction,
    RewardFunctionError,
    digest,
    pack_by_value,
    reward_functions,
    trial,
)

__all__ = ["HF_PREFIX", "INPUTS_FOLDER", "INPUTS_PREFIX", "MANIFEST", "MAX_SHIPPED_BYTES", "JobInputs", "ShippedData",
           "copy_inputs", "read_data", "read_input", "remove_inputs", "resolve_input", "reward_prompt"]

INPUTS_FOLDER = "inputs"
MANIFEST = f"{INPUTS_FOLDER}/manifest.json"
MAX_SHIPPED_BYTES = 100 << 20
"""Data that travels with a job is at most this much Parquet; larger data goes to an object store (``s3://``)."""
_FILE_SUFFIXES = (".parquet", ".jsonl", ".json")


def resolve_input(location: str, run_dir: str) -> str:
    """``location`` with an ``inputs://`` name turned into the file in ``run_dir`` (a folder or a URL); any other
    location as it is. The engine calls this on every data path and shipped function.

    >>> resolve_input("inputs://train-ab.parquet", "s3://b/runs/r1")
    's3://b/runs/r1/inputs/train-ab.parquet'
    """
    if not location.startswith(INPUTS_PREFIX):
        return location
    return f"{str(run_dir).rstrip('/')}/{INPUTS_FOLDER}/{location[len(INPUTS_PREFIX):]}"


def read_input(location: str, run_dir: str) -> bytes:
    """The bytes of a file launch shipped (``inputs://<name>``) from ``run_dir``: a folder or an object store."""
    from skyrl_core.store import open_store

    return open_store(run_dir).read(f"{INPUTS_FOLDER}/{location[len(INPUTS_PREFIX):]}")


@dataclass
class ShippedData:
    """Rows the notebook read that travel with the job as one Parquet file in the run's folder."""

    role: str
    source: str
    rows: int
    columns: list[str]
    parquet: bytes = field(repr=False)
    first: dict[str, Any] = field(repr=False, default_factory=dict)

    @functools.cached_property
    def sha256(self) -> str:
        return digest(self.parquet)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.sha256}.parquet"

    @property
    def location(self) -> str:
        return INPUTS_PREFIX + self.name

    def record(self) -> dict[str, Any]:
        return {"source": self.source, "rows": self.rows, "columns": self.columns, "sha256": self.sha256,
                "bytes": len(self.parquet), "location": self.location}

    def __repr__(self) -> str:
        return (f"ShippedData({self.role}: {self.source}, {self.rows} rows, columns {', '.join(self.columns)}, "
                f"sha256 {self.sha256})")


def read_data(data: Any, *, role: str, columns: Mapping[str, str] | None = None,
              ship_file: Callable[[str], bool] = lambda _path: False, key: str | None = None) -> list[str | ShippedData]:
    """``data`` as the config's data list: kept as a location (built-in, a URL, a file the job reads itself) or read
    here as :class:`ShippedData` (in-memory tables, saved and hub datasets, a file when ``ship_file(path)`` says it
    must travel). ``role`` is ``train`` or ``val`` (it picks a ``DatasetDict``'s split). :class:`ConfigError` in one
    line naming the input, row and column (``key``: the name it starts with; launch's keyword by default)."""
    key = key or ("data" if role == "train" else "val_data")
    if data is None:
        return []
    if isinstance(data, (list, tuple)) and data and all(isinstance(d, (str, os.PathLike)) for d in data):
        return [item for d in data for item in read_data(d, role=role, columns=columns, ship_file=ship_file, key=key)]
    if isinstance(data, os.PathLike):
        data = os.fspath(data)
    if isinstance(data, str):
        return [_from_text(data, key, role, columns, ship_file)]
    return [_ship(_table_rows(data, key, role), _kind(data), key, role, columns)]


def _from_text(text: str, key: str, role: str, columns: Mapping[str, str] | None,
               ship_file: Callable[[str], bool]) -> str | ShippedData:
    if text.startswith((BUILTIN_PREFIX, INPUTS_PREFIX)):
        return text
    if text.startswith(HF_PREFIX):
        return _ship(_hub_rows(text[len(HF_PREFIX):], key, role), text, key, role, columns)
    if "://" in text:
        return text  # an object store: the job reads it (validation reads its first rows)
    path = os.path.expanduser(text)
    if os.path.isdir(path):
        if any(os.path.exists(os.path.join(path, n)) for n in ("dataset_info.json", "dataset_dict.json")):
            return _ship(_disk_rows(path, key, role), text, key, role, columns)
        raise ConfigError([f"{key}: {shown(text)} is a folder, not a data file or a dataset saved with save_to_disk"])
    if path.endswith(_FILE_SUFFIXES):
        if not ship_file(text):
            return text  # the job reads it where it runs; validation says when it is not there
        try:
            rows = list(iter_rows(path))
        except RowShapeError as err:
            raise ConfigError([f"{key}: {err}"]) from None
        return _ship(rows, text, key, role, columns, label=shown(text))
    if os.path.exists(path) or text.count("/") > 1 or text.startswith(("/", ".", "~")):  # a path, not a hub name
        raise ConfigError([f"{key}: {shown(text)} has no suffix of {', '.join(_FILE_SUFFIXES)}; give a data file, "
                           "a dataset folder, hf://<name> or s3://<bucket>/<key>"])
    return _ship(_hub_rows(text, key, role), f"hf://{text}", key, role, columns)  # a hub dataset's name


def _kind(data: Any) -> str:
    module = type(data).__module__.split(".")[0]
    return f"a {type(data).__name__}" if module == "builtins" else f"a {module}.{type(data).__name__}"


def _table_rows(data: Any, key: str, role: str) -> list[dict[str, Any]]:
    """Rows of an in-memory table: a DataFrame, a ``datasets`` Dataset or DatasetDict, a list of dicts."""
    if _is_dataset_dict(data):
        return _table_rows(_split(data, key, role), key, role)
    if hasattr(data, "to_dict") and hasattr(data, "columns") and hasattr(data, "iloc"):  # pandas
        return data.to_dict("records")
    if hasattr(data, "to_list") and hasattr(data, "features"):  # datasets.Dataset
        return data.to_list()
    if isinstance(data, (list, tuple)):
        for i, row in enumerate(data, start=1):
            if not isinstance(row, Mapping):
                raise ConfigError([f"{key}: list row {i} is {shown(row)} ({type(row).__name__}), not a dict; give "
                                   "a list of dicts, a DataFrame, a datasets.Dataset or a file"])
        return [dict(row) for row in data]
    raise ConfigError([f"{key}: {shown(data)} ({type(data).__name__}) is not data; allowed: a pandas DataFrame, a list "
                       "of dicts, a datasets.Dataset or DatasetDict, a .parquet/.jsonl/.json file, a dataset "
                       "folder, hf://<name> or s3://<bucket>/<key>"])


def _is_dataset_dict(data: Any) -> bool:
    return isinstance(data, Mapping) and bool(data) and all(hasattr(v, "features") for v in data.values())


_SPLITS = {"train": ("train",), "val": ("test", "validation", "valid", "val")}


def _split(splits: Mapping[str, Any], key: str, role: str) -> Any:
    for name in _SPLITS[role]:
        if name in splits:
            return splits[name]
    raise ConfigError([f"{key}: the DatasetDict has splits {', '.join(splits)}; expected "
                       f"{' or '.join(_SPLITS[role])} (or give the split itself: data=ds['<split>'])"])


def _disk_rows(path: str, key: str, role: str) -> list[dict[str, Any]]:
    try:
        from datasets import load_from_disk
    except ImportError:
        raise ConfigError([f"{key}: {shown(path)} is a saved dataset; reading it needs `pip install datasets`"]) from None
    loaded = load_from_disk(path)
    return _table_rows(loaded, key, role)


def _hub_rows(name: str, key: str, role: str) -> list[dict[str, Any]]:
    try:
        from datasets import load_dataset
    except ImportError:
        raise ConfigError([f"{key}: hub dataset {name!r} needs `pip install datasets`"]) from None
    try:
        loaded = load_dataset(name)
    except Exception as err:  # noqa: BLE001 - no hub, no such dataset, no access: one line
        text = " ".join(f"{type(err).__name__}: {err}".split())[:160]
        raise ConfigError([f"{key}: {name!r} is no file here and no dataset datasets could load ({text})"]) from None
    return _table_rows(loaded, key, role)


def _ship(rows: list[dict[str, Any]], source: str, key: str, role: str,
          columns: Mapping[str, str] | None, label: str | None = None) -> ShippedData:
    """``rows`` checked (their first rows, as the engine reads them) and written as Parquet; ``label`` names
    the source in messages (a file's path quoted, as the engine's loader names it)."""
    label = label or source
    if not rows:
        raise ConfigError([f"{key}: {label} has no rows; expected rows with a prompt"])
    first: dict[str, Any] = {}
    for number, row in enumerate(rows[:CHECKED_ROWS], start=1):
        where = f"{label} row {number}"
        try:
            canonical = canonical_row(row, columns, where)
            prompt_parts(canonical, where)
        except RowShapeError as err:
            raise ConfigError([f"{key}: {err}"]) from None
        first = first or canonical
    parquet = _parquet(rows, source, key)
    if len(parquet) > MAX_SHIPPED_BYTES:
        raise ConfigError([f"{key}: {source} is {len(parquet) / (1 << 20):.1f} MiB as Parquet; at most "
                           f"{MAX_SHIPPED_BYTES >> 20} MiB travels with a job: write it to s3://<bucket>/<key>.parquet "
                           "(df.to_parquet) and give that URL, or name a folder the cluster mounts at the same path "
                           "(connect(..., shared_paths=[...]))"])
    names = list(dict.fromkeys(k for row in rows[:CHECKED_ROWS] for k in row))
    return ShippedData(role=role, source=source, rows=len(rows), columns=[str(n) for n in names], parquet=parquet,
                       first=first)


def _parquet(rows: list[dict[str, Any]], source: str, key: str) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pa.Table.from_pylist([_plain(row) for row in rows])
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError) as err:
        column = next((c for c in rows[0] if c in str(err)), None)
        where = f" column {column!r}" if column else ""
        raise ConfigError([f"{key}: {source}{where} cannot be stored as Parquet ({' '.join(str(err).split())[:160]}); "
                           "give each column one kind of value"]) from None
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _plain(value: Any) -> Any:
    """numpy arrays and scalars (a DataFrame's cells, a Dataset's sequences) as lists and Python numbers."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist") and type(value).__module__.split(".")[0] == "numpy":
        return _plain(value.tolist())
    return value


class JobInputs:
    """What ``launch(data=..., val_data=..., columns=..., reward=...)`` ships: read and checked by :meth:`gather`,
    put in the config by :meth:`overrides`, written into the run's folder by :meth:`stage` just before the job is
    submitted (and removed by :func:`remove_inputs` when it is not)."""

    def __init__(self, train: list[str | ShippedData], val: list[str | ShippedData] | None,
                 columns: Mapping[str, str] | None, rewards: list[RewardFunction], reward_errors: str | None) -> None:
        self.train, self.val, self.columns = train, val, dict(columns or {})
        self.rewards, self.reward_errors = rewards, reward_errors
        self.packed = {f.name: f.pack() for f in rewards}
        self.environments: dict[str, bytes] = {}  # environment classes shipped by value (ship_environments)

    @classmethod
    def gather(cls, *, data: Any = None, val_data: Any = None, columns: Mapping[str, str] | None = None,
               reward: Any = None, reward_errors: str | None = None,
               ship_file: Callable[[str], bool] = lambda _path: False) -> JobInputs:
        """Read and check every input (see the module docstring); :class:`ConfigError` in one line."""
        from skyrl_core.datarows import columns_problem

        if columns is not None and (problem := columns_problem(columns, "columns")):
            raise ConfigError([problem])
        if val_data is None and _is_dataset_dict(data) and any(s in data for s in _SPLITS["val"]):
            val_data = data
        train = read_data(data, role="train", columns=columns, ship_file=ship_file)
        val = None if val_data is None else read_data(val_data, role="val", columns=columns, ship_file=ship_file)
        try:
            rewards = reward_functions(reward)
            return cls(train, val, columns, rewards, reward_errors)
        except RewardFunctionError as err:
            raise ConfigError([str(err)]) from None

    @property
    def empty(self) -> bool:
        return not (self.train or self.val is not None or self.columns or self.rewards or self.reward_errors
                    or self.environments)

    def overrides(self) -> list[str]:
        """``key=value`` lines (values as JSON, which YAML reads) for the config."""
        found: dict[str, Any] = {}
        if self.train:
            found["data.train_data"] = [_location(d) for d in self.train]
        if self.val is not None:
            found["data.val_data"] = [_location(d) for d in self.val]
        if self.columns:
            found["data.columns"] = self.columns
        if self.rewards:
            found["reward.functions"] = [{"name": f.name, "weight": f.weight, "file": self.function_location(f)}
                                         for f in self.rewards]
        if self.reward_errors is not None:
            found["reward.errors"] = self.reward_errors
        return [f"{key}={json.dumps(value)}" for key, value in found.items()]

    def ship_named(self, cfg: Any, ship_file: Callable[[str], bool]) -> Any:
        """``cfg`` with the data it names that only this notebook can read (``hf://``, a saved dataset, a file
        ``ship_file`` says must travel) read here and shipped like ``data=`` (this object stages it too)."""
        from skyrl_core.config import check_config

        changed: dict[str, list[str]] = {}
        for key, role in (("train_data", "train"), ("val_data", "val")):
            items = list(getattr(cfg.data, key))
            found = [d for item in items for d in (read_data(item, role=role, columns=cfg.data.columns,
                                                             ship_file=ship_file, key=f"data.{key}")
                                                   if _travels(item, ship_file) else [item])]
            if any(isinstance(d, ShippedData) for d in found):
                setattr(self, role, found)  # data= was not given for this role (its items would be inputs://)
                changed[f"data.{key}"] = [_location(d) for d in found]
        return check_config(cfg, changed) if changed else cfg

    def ship_environments(self, cfg: Any) -> Any:
        """``cfg`` with the environment classes registered as classes (``register_environment("name", MyEnv)`` in a
        cell) that it uses pickled by value into ``environment.shipped``: the config's ``env_class`` and any the
        shipped data's first rows name. The engine registers them with skyrl-gym before it builds an env."""
        from skyrl_core.config import check_config
        from skyrl_core.registry import ENVIRONMENTS

        names = {cfg.environment.env_class, *(d.first.get("env_class") for d in self._shipped())}
        classes = {n: e for n, e in ENVIRONMENTS.registered().items() if n in names and isinstance(e, type)}
        if not classes:
            return cfg
        try:
            self.environments = {name: pack_by_value(cls, f"environment {name!r} ({cls.__qualname__})")
                                 for name, cls in classes.items()}
        except RewardFunctionError as err:
            raise ConfigError([str(err)]) from None
        return check_config(cfg, {"environment.shipped": {
            name: f"{INPUTS_PREFIX}env-{name}-{digest(data)}.pkl" for name, data in self.environments.items()}})

    def function_location(self, function: RewardFunction) -> str:
        return f"{INPUTS_PREFIX}reward-{function.name}-{digest(self.packed[function.name])}.pkl"

    def try_rewards(self, cfg: Any) -> list[float]:
        """Call each shipped function once on the first train row (with a made-up completion); one line naming
        the function when it cannot be shipped, raises, or returns something that is not one finite number."""
        if not self.rewards:
            return []
        prompt, cols = self.first_row(cfg)
        try:
            return [trial(f, prompt, cols, timeout_s=float(cfg.reward.timeout_s)) for f in self.rewards]
        except RewardFunctionError as err:
            raise ConfigError([str(err)]) from None

    def first_row(self, cfg: Any) -> tuple[Any, dict[str, Any]]:
        """``(prompt, columns)`` a reward function receives for the first train row the job reads: a shipped
        one's, a file's or URL's first row read here, or, for a built-in dataset or a file on the cluster's own disk
        (which this notebook cannot read), a made-up row with a prompt and a ground truth."""
        shipped = next((d for d in self.train if isinstance(d, ShippedData)), None)
        if shipped is not None:
            canonical = shipped.first
        else:
            location = str(cfg.data.train_data[0])
            only_there = "://" not in location and not os.path.exists(os.path.expanduser(location))
            if location.startswith(BUILTIN_PREFIX) or only_there:  # a file only the cluster sees: a row like it
                canonical = {"prompt": [{"role": "user", "content": "1+1"}], "reward_spec": {"ground_truth": "2"}}
            else:
                try:
                    raw = next(iter_rows(os.path.expanduser(location), batch_size=1))
                except (RowShapeError, OSError, StopIteration) as err:
                    raise ConfigError([f"data.train_data: {shown(location)} cannot be read to try the reward "
                                       f"functions ({err or 'no rows'})"]) from None
                canonical = canonical_row(raw, cfg.data.columns, f"{shown(location)} row 1")
        return reward_prompt(canonical), reward_columns({k: v for k, v in canonical.items()
                                                          if k not in ("prompt", "env_class")},
                                                         (canonical.get("reward_spec") or {}).get("ground_truth"))

    def stage(self, run_dir: str) -> None:
        """Write the shipped data, the pickled functions and ``inputs/manifest.json`` into ``run_dir``."""
        from skyrl_core.store import open_store

        store = open_store(run_dir)
        for item in self._shipped():
            store.put(f"{INPUTS_FOLDER}/{item.name}", item.parquet)
        for function in self.rewards:
            store.put(f"{INPUTS_FOLDER}/{self.function_location(function)[len(INPUTS_PREFIX):]}",
                      self.packed[function.name])
        for name, data in self.environments.items():
            store.put(f"{INPUTS_FOLDER}/env-{name}-{digest(data)}.pkl", data)
        store.put(MANIFEST, json.dumps(self.manifest(), indent=1).encode())

    def manifest(self) -> dict[str, Any]:
        """What the run records of its inputs (``RunReader.inputs``)."""
        def entry(d: str | ShippedData) -> dict[str, Any]:
            return d.record() if isinstance(d, ShippedData) else {"source": d, "location": d}

        return {"data": {"train": [entry(d) for d in self.train],
                         **({"val": [entry(d) for d in self.val]} if self.val is not None else {})},
                "columns": self.columns,
                "rewards": [{**f.describe(), "sha256": digest(self.packed[f.name]),
                             "location": self.function_location(f)} for f in self.rewards],
                **({"environments": {n: digest(d) for n, d in self.environments.items()}} if self.environments else {})}

    def preview_html(self) -> str:
        """The config form's preview: each data input's rows and columns with its first row, the columns map,
        each reward function's name, shape and weight ('' when there is nothing of one's own)."""
        if self.empty:
            return ""
        lines = []
        for role, items in (("train", self.train), ("eval", self.val or [])):
            for d in items:
                if isinstance(d, ShippedData):
                    example = html.escape(json.dumps(_plain(d.first), default=str)[:300])
                    lines.append(f"<b>{role} data</b>: {html.escape(d.source)}, {d.rows} rows, columns "
                                 f"{html.escape(', '.join(d.columns))}<br><small><code>{example}</code></small>")
                else:
                    lines.append(f"<b>{role} data</b>: <code>{html.escape(d)}</code> (read by the job)")
        if self.columns:
            lines.append("<b>columns</b>: " + html.escape(", ".join(f"{k} = {v}" for k, v in self.columns.items())))
        for f in self.rewards:
            lines.append(f"<b>reward</b> {html.escape(f.name)} &times;{f.weight:g} "
                         f"({'batched' if f.batched else 'per sample'}{', async' if f.is_async else ''})")
        if self.reward_errors:
            lines.append(f"<b>a reward that raises</b>: {html.escape(self.reward_errors)}")
        return "<div>" + "<br>".join(lines) + "</div>"

    def _shipped(self) -> list[ShippedData]:
        return [d for d in [*self.train, *(self.val or [])] if isinstance(d, ShippedData)]

    def __repr__(self) -> str:
        parts = [f"train={[repr(d) if isinstance(d, ShippedData) else d for d in self.train]}"]
        if self.val is not None:
            parts.append(f"val={[repr(d) if isinstance(d, ShippedData) else d for d in self.val]}")
        if self.rewards:
            parts.append(f"rewards={self.rewards}")
        return f"JobInputs({', '.join(parts)})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


def _travels(item: str, ship_file: Callable[[str], bool]) -> bool:
    if item.startswith(HF_PREFIX):
        return True
    if "://" in item:
        return False
    path = os.path.expanduser(item)
    return os.path.isdir(path) or ship_file(item)


def copy_inputs(from_run_dir: str, to_run_dir: str) -> None:
    """Copy one run's shipped inputs (``inputs/``) into another's: a restart reads the same data and functions."""
    from skyrl_core.store import open_store

    source, target = open_store(from_run_dir), open_store(to_run_dir)
    for name in source.list(INPUTS_FOLDER):
        target.put(f"{INPUTS_FOLDER}/{name}", source.read(f"{INPUTS_FOLDER}/{name}"))


def remove_inputs(run_dir: str) -> None:
    """Remove a run's ``inputs/`` (a submission that failed)."""
    from skyrl_core.store import open_store

    store = open_store(run_dir)
    for name in store.list(INPUTS_FOLDER):
        store.delete(f"{INPUTS_FOLDER}/{name}")


def reward_prompt(canonical: Mapping[str, Any]) -> Any:
    """The prompt a reward function receives: the row's text when it gave text, else its list of messages."""
    prompt = canonical.get("prompt")
    if isinstance(prompt, str) and not prompt.lstrip().startswith("["):
        return prompt
    messages, _, _ = prompt_parts(canonical, "row")
    return messages


def _location(item: str | ShippedData) -> str:
    return item.location if isinstance(item, ShippedData) else item
