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

Rows are counted from 1 in the order the file holds them (blank JSONL lines not counted). Pure Python;
pyarrow is imported only to read a Parquet file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from skyrl_core.registry import shown

__all__ = ["CHECKED_ROWS", "EXPECTED", "RowShapeError", "data_file_problems", "iter_rows", "prompt_parts"]

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
    """Each row of a ``.parquet``, ``.jsonl`` or ``.json`` file as a dict, read as it goes (a Parquet file in
    batches of ``batch_size`` rows), so the first rows cost what they are.

    :class:`RowShapeError` names a file that cannot be read, and a row that is no JSON object.
    """
    if path.endswith(".parquet"):
        yield from _parquet_rows(path, batch_size)
    elif path.endswith(".jsonl"):
        yield from _jsonl_rows(path)
    elif path.endswith(".json"):
        yield from _json_rows(path)
    else:
        raise RowShapeError(f"{shown(path)}: unknown dataset format; allowed: {', '.join(SUFFIXES)}")


def _parquet_rows(path: str, batch_size: int) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(path)
        names = reader.schema_arrow.names
    except Exception as err:  # noqa: BLE001 - pyarrow raises several kinds for a file it cannot read
        raise RowShapeError(f"{shown(path)}: not a Parquet file pyarrow can read ({_reason(err)})") from None
    if "prompt" not in names:
        raise RowShapeError(f"{shown(path)} row 1: column 'prompt' is missing (columns: {_columns(names)}); "
                            f"expected {EXPECTED}")
    for batch in reader.iter_batches(batch_size=batch_size):
        yield from batch.to_pylist()


def _jsonl_rows(path: str) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        number = 0
        for line in f:
            if not line.strip():
                continue
            number += 1
            try:
                row = json.loads(line)
            except ValueError as err:
                raise RowShapeError(f"{shown(path)} row {number}: not JSON ({_reason(err)}); expected one JSON "
                                    f"object per line with {EXPECTED}") from None
            yield _as_object(row, path, number)


def _json_rows(path: str) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
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


def prompt_parts(row: Mapping[str, Any], where: str) -> tuple[list[dict[str, str]], str | None, dict[str, Any]]:
    """``(messages, env_class, reward_spec)`` of one row, or :class:`RowShapeError` naming ``where`` (``"<file>
    row <n>"``), the column and what is expected.

    A ``prompt`` string is one user message, or the message list as JSON text (how some Parquet writers keep
    it). ``env_class`` is None when the row does not say; ``reward_spec`` {} when it has none.

    >>> prompt_parts({"prompt": "2+2", "reward_spec": {"ground_truth": "4"}}, "t row 1")
    ([{'role': 'user', 'content': '2+2'}], None, {'ground_truth': '4'})
    """
    if "prompt" not in row:
        raise RowShapeError(f"{where}: column 'prompt' is missing (columns: {_columns(row)}); expected {EXPECTED}")
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


def data_file_problems(key: str, path: str, rows: int = CHECKED_ROWS) -> list[str]:
    """One line (``<key>: <file> row <n>: column ...; expected ...``) when the first ``rows`` rows of the data
    file ``path`` are not what the engine trains on, or the file has none; [] when they are.

    The file must exist (the caller checks that first).
    """
    count = 0
    try:
        for count, row in enumerate(iter_rows(path, batch_size=rows), start=1):
            prompt_parts(row, f"{shown(path)} row {count}")
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
