"""The row shape a dataset file must have, checked once for the engine's loader and for validation.

A row is SkyRL's (``skyrl_engine.tasks``)::

    {"prompt": [{"role": "user", "content": "17+25"}],      # or a plain string, or that list as JSON text
     "env_class": "arithmetic",                              # optional: else environment.env_class
     "reward_spec": {"method": "rule", "ground_truth": "42"},  # optional
     ...}                                                    # every other column reaches the env as extras

The engine reads every row through :func:`iter_rows` and :func:`prompt_parts`; validation reads the first
:data:`CHECKED_ROWS` rows the same way (:func:`data_file_problems`), where the data is: in the notebook when
the cluster shares its disk, else in the probe job ``python -m skyrl_engine validate`` on the cluster. So a
file the engine would refuse is refused before anything is submitted, with the line the engine would say.

Other shapes are read as that one by :func:`canonical_row`: veRL's and SageMaker RFT's (``reward_model:
{ground_truth, style}``), TRL's (``prompt`` text or messages; a plain ``ground_truth`` column), and any columns
mapped by name (``data.columns: {prompt: question, ground_truth: answer}``). Every column but the prompt still
reaches the environment as extras and a reward function as a keyword (``reward_columns``).

Rows are counted from 1 in the order the file holds them (blank JSONL lines not counted). Pure Python;
pyarrow is imported only to read a Parquet file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from skyrl_core.registry import shown

__all__ = ["CHECKED_ROWS", "COLUMN_ROLES", "EXPECTED", "RowShapeError", "canonical_row", "columns_problem",
           "data_file_problems", "iter_rows", "prompt_parts", "reward_columns"]

#: How many rows validation reads from the top of each data file.
CHECKED_ROWS = 16
#: What a row needs, in the words of every message.
EXPECTED = "prompt as a non-empty list of {role, content} messages (or a string)"
SUFFIXES = (".parquet", ".jsonl", ".json")
_PARQUET_BATCH = 1024


class RowShapeError(ValueError):
    """A data file, or one of its rows, the engine cannot train on; the message is one line naming the
    file, the row and the column, and what is expected."""


def iter_rows(path: str, *, batch_size: int = _PARQUET_BATCH) -> Iterator[dict[str, Any]]:
    """Each row of a ``.parquet``, ``.jsonl`` or ``.json`` file (a local path, or an object-store URL such as
    ``s3://bucket/key.parquet`` read through fsspec) as a dict, read as it goes (a Parquet file in batches of
    ``batch_size`` rows), so the first rows cost what they are.

    :class:`RowShapeError` names a file that cannot be read, and a row that is no JSON object.
    """
    if not path.endswith(SUFFIXES):
        raise RowShapeError(f"{shown(path)}: unknown dataset format; allowed: {', '.join(SUFFIXES)}")
    with _open(path) as f:
        if path.endswith(".parquet"):
            yield from _parquet_rows(f, path, batch_size)
        elif path.endswith(".jsonl"):
            yield from _jsonl_rows(f, path)
        else:
            yield from _json_rows(f, path)


def _open(path: str) -> Any:
    """``path`` opened for reading bytes: a local file, or a URL through fsspec (``s3://`` with s3fs)."""
    if "://" not in path:
        return open(path, "rb")
    import fsspec

    try:
        return fsspec.open(path, "rb").open()
    except FileNotFoundError:
        raise RowShapeError(f"{shown(path)}: no such object") from None
    except Exception as err:  # noqa: BLE001 - fsspec's backends raise many kinds (no credentials, no bucket)
        raise RowShapeError(f"{shown(path)}: cannot be opened ({_reason(err)})") from None


def _parquet_rows(f: Any, path: str, batch_size: int) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(f)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several kinds for a file it cannot read
        raise RowShapeError(f"{shown(path)}: not a Parquet file pyarrow can read ({_reason(err)})") from None
    for batch in reader.iter_batches(batch_size=batch_size):
        yield from batch.to_pylist()


def _jsonl_rows(f: Any, path: str) -> Iterator[dict[str, Any]]:
    number = 0
    for raw in f:
        line = raw.decode("utf-8")
        if not line.strip():
            continue
        number += 1
        try:
            row = json.loads(line)
        except ValueError as err:
            raise RowShapeError(f"{shown(path)} row {number}: not JSON ({_reason(err)}); expected one JSON "
                                f"object per line with {EXPECTED}") from None
        yield _as_object(row, path, number)


def _json_rows(f: Any, path: str) -> Iterator[dict[str, Any]]:
    try:
        data = json.loads(f.read().decode("utf-8"))
    except ValueError as err:
        raise RowShapeError(f"{shown(path)}: not JSON ({_reason(err)}); expected a list of rows with "
                            f"{EXPECTED}") from None
    for number, row in enumerate(data if isinstance(data, list) else [data], start=1):
        yield _as_object(row, path, number)


def _as_object(row: Any, path: str, number: int) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise RowShapeError(f"{shown(path)} row {number}: a {type(row).__name__}, not an object; expected "
                            f"an object with {EXPECTED}")
    return row


#: What ``data.columns`` may map, each to the name of a column in the user's rows.
COLUMN_ROLES = ("prompt", "ground_truth", "env_class", "data_source")


def columns_problem(columns: Any, key: str = "data.columns") -> str | None:
    """The one line refusing a ``data.columns`` mapping, or None: roles from :data:`COLUMN_ROLES`, each to a column
    name (text).

    >>> columns_problem({"prompt": "question", "answer": "a"})
    "data.columns: 'answer' is not a role; allowed: prompt, ground_truth, env_class, data_source"
    """
    if not isinstance(columns, Mapping):
        return f"{key}: {shown(columns)} is not a mapping; expected {{prompt: <column>, ground_truth: <column>}}"
    for role, column in columns.items():
        if role not in COLUMN_ROLES:
            return f"{key}: {shown(role)} is not a role; allowed: {', '.join(COLUMN_ROLES)}"
        if not isinstance(column, str) or not column:
            return f"{key}.{role}: {shown(column)} is not a column name; expected the name of a column (text)"
    return None


def canonical_row(raw: Mapping[str, Any], columns: Mapping[str, str] | None, where: str) -> dict[str, Any]:
    """``raw`` in SkyRL's row shape, whichever shape it came in (see the module docstring); the original columns
    are kept beside ``prompt``, ``env_class`` and ``reward_spec``. :class:`RowShapeError` names ``where``, the
    column and its role when a mapped column is missing.

    >>> canonical_row({"question": "2+2", "answer": "4"}, {"prompt": "question", "ground_truth": "answer"}, "r")
    {'question': '2+2', 'answer': '4', 'prompt': '2+2', 'reward_spec': {'ground_truth': '4'}}
    >>> canonical_row({"prompt": "hi", "reward_model": {"ground_truth": "5", "style": "rule"}}, None, "r")["reward_spec"]
    {'method': 'rule', 'ground_truth': '5'}
    """
    row = dict(raw)
    for role, column in (columns or {}).items():
        if column not in raw:
            raise RowShapeError(f"{where}: column {column!r} (data.columns.{role}) is missing (columns: "
                                f"{_columns(raw)})")
        value = raw[column]
        if role == "ground_truth":
            row["reward_spec"] = {**_mapping(row.get("reward_spec")), "ground_truth": value}
        else:
            row[role] = value
    spec = _mapping(row.get("reward_spec"))
    if "ground_truth" not in spec:
        model = row.get("reward_model")  # veRL's and SageMaker RFT's
        if isinstance(model, Mapping) and "ground_truth" in model:
            spec = {"method": model.get("style") or "rule", "ground_truth": model["ground_truth"]}
        elif "ground_truth" in row and not (columns or {}).get("ground_truth"):  # TRL's plain column
            spec = {**spec, "ground_truth": row["ground_truth"]}
        if spec:
            row["reward_spec"] = spec
    return row


def reward_columns(extras: Mapping[str, Any], ground_truth: Any) -> dict[str, Any]:
    """The keywords a reward function receives for one row: every column but the prompt (``extras``, without
    the ``reward_spec`` skyrl-nb made), and ``ground_truth`` when the row has one.

    >>> reward_columns({"answer": "4", "reward_spec": {"ground_truth": "4"}}, "4")
    {'answer': '4', 'ground_truth': '4'}
    """
    found = {k: v for k, v in extras.items() if k != "reward_spec"}
    if ground_truth is not None:
        found.setdefault("ground_truth", ground_truth)
    return found


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def prompt_parts(row: Mapping[str, Any], where: str) -> tuple[list[dict[str, str]], str | None, dict[str, Any]]:
    """``(messages, env_class, reward_spec)`` of one row, or :class:`RowShapeError` naming ``where`` (``"<file>
    row <n>"``), the column and what is expected.

    A ``prompt`` string is one user message, or the message list as JSON text (how some Parquet writers keep
    it). ``env_class`` is None when the row does not say; ``reward_spec`` {} when it has none.

    >>> prompt_parts({"prompt": "2+2", "reward_spec": {"ground_truth": "4"}}, "t row 1")
    ([{'role': 'user', 'content': '2+2'}], None, {'ground_truth': '4'})
    """
    if "prompt" not in row:
        raise RowShapeError(f"{where}: column 'prompt' is missing (columns: {_columns(row)}); expected {EXPECTED}, "
                            "or name the prompt's column: columns={'prompt': <column>}")
    prompt = row["prompt"]
    if isinstance(prompt, str) and prompt.lstrip().startswith("["):
        try:
            prompt = json.loads(prompt)
        except ValueError:
            pass  # text that starts with '[': a plain prompt
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}] if prompt.strip() else []
    if not isinstance(prompt, list) or not prompt:
        raise RowShapeError(f"{where}: column 'prompt' holds {shown(row['prompt'])}; expected {EXPECTED}")
    messages = []
    for i, message in enumerate(prompt):
        if (not isinstance(message, Mapping) or not isinstance(message.get("role"), str)
                or not isinstance(message.get("content"), str)):
            raise RowShapeError(f"{where}: column 'prompt' message {i + 1} is {shown(message)}; expected "
                                "{role: <text>, content: <text>}")
        messages.append({"role": message["role"], "content": message["content"]})
    env_class = row.get("env_class")
    if env_class is not None and not isinstance(env_class, str):
        raise RowShapeError(f"{where}: column 'env_class' holds {shown(env_class)}; expected an environment "
                            "name (text) or nothing (environment.env_class is used)")
    reward_spec = row.get("reward_spec")
    if reward_spec is not None and not isinstance(reward_spec, Mapping):
        raise RowShapeError(f"{where}: column 'reward_spec' holds {shown(reward_spec)}; expected a mapping such "
                            "as {method: rule, ground_truth: <answer>}, or nothing")
    return messages, env_class or None, dict(reward_spec or {})


def data_file_problems(key: str, path: str, rows: int = CHECKED_ROWS,
                       columns: Mapping[str, str] | None = None) -> list[str]:
    """One line (``<key>: <file> row <n>: column ...; expected ...``) when the first ``rows`` rows of the data
    file ``path`` are not what the engine trains on, or the file has none; [] when they are.

    The file must exist (the caller checks that first); ``columns`` is ``data.columns``.
    """
    count = 0
    try:
        for count, row in enumerate(iter_rows(path, batch_size=rows), start=1):
            where = f"{shown(path)} row {count}"
            prompt_parts(canonical_row(row, columns, where), where)
            if count >= rows:
                break
    except RowShapeError as err:
        return [f"{key}: {err}"]
    except (OSError, UnicodeDecodeError) as err:
        return [f"{key}: {shown(path)} cannot be read ({_reason(err)})"]
    if count == 0:
        return [f"{key}: {shown(path)} has no rows; expected rows with {EXPECTED}"]
    return []


def _columns(names: Any) -> str:
    names = [str(n) for n in names]
    listed = ", ".join(shown(n) for n in names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
    return listed or "none"


def _reason(err: BaseException) -> str:
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= 100 else text[:97] + "..."
