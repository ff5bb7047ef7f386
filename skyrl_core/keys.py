"""Dotted keys over the config's schema and over plain nested dicts: which keys a section has, what kind of value a
key holds, flattening, getting and dropping by dotted name, and the HTML table a config shows itself as."""

from __future__ import annotations

import functools
import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError

from skyrl_core.registry import not_allowed, shown

_ABSENT = object()


def _dotted_get(tree: dict[str, Any], key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _leaf_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        sub = _section_type(field.annotation)
        if sub is not None:
            keys.extend(_leaf_keys(sub, f"{prefix}{name}."))
        else:
            keys.append(f"{prefix}{name}")
    return keys


def _section_type(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _optional_section_type(annotation: Any) -> type[BaseModel] | None:
    """``X`` for a ``X | None`` section (e.g. ``fsdp_config.mixed_precision``), whose keys may be set one by one."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        sections = [a for a in typing.get_args(annotation) if _section_type(a) is not None]
        if len(sections) == 1 and type(None) in typing.get_args(annotation):
            return sections[0]
    return None


def _kind_of(annotation: Any) -> type | None:
    if annotation in (bool, int, float):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, Annotated):
        kinds = {kind for arg in typing.get_args(annotation) if (kind := _kind_of(arg)) is not None}
        return kinds.pop() if len(kinds) == 1 else None
    return None


@functools.cache
def _scalar_kind(model: type[BaseModel], name: str) -> type | None:
    """``bool``, ``int`` or ``float`` for a key holding one of them (or None, or a list of them); else None."""
    field = model.model_fields.get(name)
    return None if field is None else _kind_of(field.annotation)


def _merge_section(node: dict[str, Any], value: dict[str, Any], model: type[BaseModel]) -> None:
    """Set in ``node`` (a section of ``model``) the keys ``value`` names, section by section; the others stay.

    ``{"trainer": {"seed": 3}}`` as an override changes the seed, not the whole trainer section. A key the
    section does not have is set as it is, so the unknown-key check names it.
    """
    for name, item in value.items():
        field = model.model_fields.get(name)
        sub = None if field is None else (_section_type(field.annotation) or _optional_section_type(field.annotation))
        if sub is not None and isinstance(item, dict) and isinstance(node.get(name), dict):
            _merge_section(node[name], item, sub)
        else:
            node[name] = item


def _drop_dotted(tree: dict[str, Any], key: str) -> None:
    """Remove ``key`` from the nested ``tree`` (so it takes its default); a missing one is fine."""
    *sections, leaf = key.split(".")
    node: Any = tree
    for part in sections:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(leaf, None)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def _dotted_table_html(flat: dict[str, Any]) -> str:
    import html

    rows = "".join(
        f"<tr><td style='text-align:left'><code>{html.escape(k)}</code></td>"
        f"<td style='text-align:left'>{html.escape(repr(v))}</td></tr>"
        for k, v in flat.items()
    )
    return f"<table>{rows}</table>"


def _allows_none(schema: type[BaseModel], loc: tuple[Any, ...]) -> bool:
    """Whether the field at ``loc`` (a pydantic error location in ``schema``) may be null (off)."""
    model: Any = schema
    annotation: Any = None
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return False
        annotation = field.annotation
        model = _section_type(annotation)
    origin = typing.get_origin(annotation)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


def _error_fields(schema: type[BaseModel], loc: tuple[Any, ...]) -> tuple[tuple[str, ...], bool]:
    """The field names of a pydantic error location (list indices dropped) and whether it went on past a leaf
    into a union's member (``str`` / ``list[str]`` of ``target_modules``): such a tag is not a key."""
    model: Any = schema
    fields: list[str] = []
    for part in loc:
        if isinstance(part, int):
            continue
        if model is None:
            return tuple(fields), True
        fields.append(str(part))
        field = model.model_fields.get(part) if isinstance(model, type) else None
        if field is None:
            model = "unknown"  # not a field: keep the rest of the location as it is
        elif isinstance(model, type):
            model = _section_type(field.annotation) or _optional_section_type(field.annotation)
    return tuple(fields), False


def pydantic_problems(schema: type[BaseModel], err: ValidationError) -> list[tuple[str, str]]:
    """``(key, line)`` per key pydantic refused while validating ``schema``; a list's bad items share their key's
    line."""
    lines: dict[str, str] = {}
    for e in err.errors(include_url=False):
        fields, union_member = _error_fields(schema, e["loc"])
        items = [p for p in e["loc"] if isinstance(p, int)]
        key = ".".join(str(p) for p in fields) or "config"
        value = e.get("input")
        msg = str(e["ctx"]["error"]) if e["type"] == "value_error" else e["msg"]
        if msg.startswith(f"{key}: "):
            line = msg  # a validator that words the whole line (the run-id rule)
        elif e["type"] in ("literal_error", "enum"):
            allowed = msg.split("Input should be ", 1)[-1].replace("'", "").replace(" or ", ", ").split(", ")
            line = not_allowed(key, value, allowed, none_ok=_allows_none(schema, fields))
        elif e["type"] in ("model_type", "model_attributes_type", "dict_type"):
            line = f"{key}: {shown(value)} is not allowed; it is a section: give a mapping of its keys"
        else:
            reason = ("it should be " + msg[len("Input should be "):] if msg.startswith("Input should be ")
                      else msg[:1].lower() + msg[1:])
            what = f"item {items[0]} ({shown(value)})" if items else shown(value)
            line = f"{key}: {what} is not allowed; {reason}"
        if key in lines:
            if items and line.startswith(f"{key}: item"):
                lines[key] += "; " + line[len(key) + 2:]
            elif union_member and "; it should be " in line:  # one line for every type the key takes
                lines[key] += " or " + line.split("; it should be ", 1)[1]
            continue
        lines[key] = line
    return list(lines.items())
