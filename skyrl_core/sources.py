"""Reading a config from where it is given: a YAML file (judged by ``stat`` before it is opened, so a folder, a FIFO, a
device or a link loop is named, not read), YAML text, or a value; size and nesting limits keep every input to one
line of error in bounded time."""

from __future__ import annotations

import os
from typing import Any

import yaml

from skyrl_core.errors import ConfigError
from skyrl_core.registry import (
    shown,
)

MAX_CONFIG_BYTES = 1 << 20
"""A YAML config (file, text or one override's value) is at most this long: a real one is a few KiB, and
parsing megabytes holds validation for many seconds."""


MAX_CONFIG_DEPTH = 32
"""Mappings and lists in a config nest at most this deep (the schema needs 6): deeper ones are refused before
anything walks them, so no input reaches Python's recursion limit."""


def _file_kind_problem(path: str, shown_as: str, what: str) -> str | None:
    """Why ``path`` is not a regular file to read (``what``: "a YAML file", ...), or None when it is one.

    Judged by ``stat`` alone, so a FIFO, a device such as ``/dev/zero`` or a symlink loop is named, never
    opened: reading one would hang or never end.
    """
    import errno
    import stat

    if "\x00" in path:
        return f"{shown_as} is not a file name (it holds a NUL byte); give {what}"
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return f"{shown_as} is a symlink loop, not {what}"
        if err.errno == errno.ENOENT:
            return f"file {shown_as} does not exist" if not os.path.islink(path) else \
                f"{shown_as} is a symlink to nothing (its target does not exist), not {what}"
        if err.errno == errno.ENAMETOOLONG:
            return f"{shown_as} is too long for a file name; give {what}"
        return f"file {shown_as} cannot be read ({err.strerror or err})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return f"{shown_as} is a folder, not {what}"
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
    return f"{shown_as} is {kind}, not a regular file; give {what}"


def _size(n: int) -> str:
    """``n`` bytes for a person: ``512 B``, ``3.0 KiB``, ``60.0 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _read_yaml_file(text: str) -> dict[str, Any]:
    path = os.path.expanduser(text)
    problem = _file_kind_problem(path, shown(text), "a YAML file")
    if problem:
        raise ConfigError([f"config: {problem}"])
    try:
        with open(path, "rb") as f:  # at most one byte past the limit, even if the file grows meanwhile
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError([f"config: file {shown(text)} cannot be read ({err.strerror or err})"]) from None
    if len(data) > MAX_CONFIG_BYTES:
        size = os.path.getsize(path)
        raise ConfigError([f"config: file {shown(text)} is {_size(size)}; a config file is at most "
                           f"{_size(MAX_CONFIG_BYTES)} (a real one is a few KiB)"])
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError([f"config: file {shown(text)} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
                           f"{err.start}); save it as UTF-8 YAML"]) from None
    return parse_yaml_mapping(decoded, shown(text))


# libyaml's parser when there is one: the same safe loading, and pure-Python PyYAML takes time quadratic in
# the nesting depth (a 100 KB line of brackets would hold validation for minutes)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _safe_yaml(text: str) -> tuple[Any, str | None]:
    """``(value, None)``, or ``(None, why)`` when ``text`` is not YAML this process can hold: longer than
    :data:`MAX_CONFIG_BYTES`, not YAML, nested deeper than :data:`MAX_CONFIG_DEPTH`, or a number Python will
    not read (more than 4300 digits)."""
    if len(text) > MAX_CONFIG_BYTES:
        return None, f"is {_size(len(text))} long; a config is at most {_size(MAX_CONFIG_BYTES)}"
    too_deep = f"nests deeper than {MAX_CONFIG_DEPTH} levels (a config needs 6)"
    try:
        value = yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as err:
        if "nesting depth" in str(getattr(err, "problem", "")):  # libyaml's own limit
            return None, too_deep
        mark = getattr(err, "problem_mark", None)
        return None, "is not valid YAML" + (f" at line {mark.line + 1}" if mark is not None else "")
    except RecursionError:
        return None, too_deep
    except (ValueError, OverflowError):  # e.g. an integer of more than 4300 digits
        return None, "holds a number too large to read"
    return (None, too_deep) if _too_deep(value) else (value, None)


def _plain_copy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """``value`` with every dict and list copied (shared ones once, as YAML aliases share them) and every other
    value as it is: what validation may change is then its own, whatever the leaves are (a memoryview, which
    ``copy.deepcopy`` refuses, is still named by its key's check). ``value`` nests at most
    :data:`MAX_CONFIG_DEPTH` deep (``_too_deep`` was asked first)."""
    memo = {} if memo is None else memo
    if not isinstance(value, (dict, list)):
        return value
    if id(value) not in memo:
        if isinstance(value, dict):
            memo[id(value)] = out = {}
            out.update((k, _plain_copy(v, memo)) for k, v in value.items())
        else:
            memo[id(value)] = out = []
            out.extend(_plain_copy(v, memo) for v in value)
    return memo[id(value)]


def _too_deep(value: Any, limit: int = MAX_CONFIG_DEPTH) -> bool:
    """Whether mappings and lists in ``value`` nest deeper than ``limit`` (walked without recursion, so a
    cycle or a 100,000-deep list is answered, not followed; a container shared by YAML aliases is walked once
    per depth, so an alias bomb is not expanded)."""
    stack = [(value, 1)]
    seen: set[tuple[int, int]] = set()
    while stack:
        node, depth = stack.pop()
        if (id(node), depth) in seen:
            continue
        seen.add((id(node), depth))
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def parse_yaml_mapping(text: str, where: str = "<yaml>") -> dict[str, Any]:
    """``text`` (a YAML config, a ``%%skyrl launch`` cell body) as a mapping; ConfigError with one ``config:``
    line naming ``where`` when it is not YAML, not a mapping, too long or nested too deep.

    >>> parse_yaml_mapping("trainer: {seed: 3}")
    {'trainer': {'seed': 3}}
    """
    data, problem = _safe_yaml(text)
    if problem:
        raise ConfigError([f"config: {where} {problem}"])
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"config: {where} must be a YAML mapping of sections (trainer:, generator:, ...), got "
                           f"{type(data).__name__}"])
    return data
