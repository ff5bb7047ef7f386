"""What an export wrote: the contract between the engine, which exports a checkpoint as a Hugging Face model
(``python -m skyrl_engine export``, ``skyrl_engine.export.export_model``), and the notebook, which asks for one
(``RunReader.export``, ``Job.export``, ``%skyrl export``) without importing the engine: the result travels as one
JSON line (:meth:`ExportResult.to_json`)."""

from __future__ import annotations

import dataclasses
import html
import json
import os
from dataclasses import dataclass, field
from typing import Any


class ExportError(ValueError):
    """What was asked cannot be exported: one line naming the argument, its value and what is allowed."""


@dataclass(frozen=True)
class ExportResult:
    """A model directory written by :func:`export_model`."""

    path: str
    """Where it is: a local directory or ``s3://bucket/prefix``."""
    step: int | None
    """The checkpoint's global step (None for a policy directory outside ``global_step_N``)."""
    checkpoint: str
    """The policy directory that was exported."""
    run_dir: str | None
    base_model: str | None
    """``trainer.policy.model.path`` of the run, when its config was found."""
    files: tuple[str, ...]
    """Every file written, relative to ``path``."""
    total_bytes: int
    adapter: bool = False
    """True when ``adapter/`` holds the run's LoRA adapter."""
    warnings: tuple[str, ...] = field(default=())

    @property
    def run_id(self) -> str | None:
        return os.path.basename(self.run_dir) if self.run_dir else None

    def _what(self) -> str:
        step = f"step {self.step}" if self.step is not None else "a policy checkpoint"
        return f"{step} of run {self.run_id!r}" if self.run_id else step

    def __str__(self) -> str:
        adapter = " + adapter/" if self.adapter else ""
        return (f"exported {self._what()} to {self.path}: {len(self.files)} files, "
                f"{size_text(self.total_bytes)} (weights, tokenizer, generation config{adapter})")

    def __repr__(self) -> str:
        return (f"ExportResult(path={self.path!r}, step={self.step}, run={self.run_id!r}, files={len(self.files)}, "
                f"size={size_text(self.total_bytes)!r}, adapter={self.adapter}, warnings={len(self.warnings)})")

    def to_json(self) -> str:
        """One JSON line (``from_json`` reads it back)."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, line: str) -> ExportResult:
        data: dict[str, Any] = json.loads(line)
        data["files"], data["warnings"] = tuple(data.get("files") or ()), tuple(data.get("warnings") or ())
        return cls(**data)

    def _repr_html_(self) -> str:
        rows = [("model", f"<code>{html.escape(self.path)}</code>"), ("from", html.escape(self._what())),
                ("checkpoint", f"<code>{html.escape(self.checkpoint)}</code>"),
                ("base model", f"<code>{html.escape(str(self.base_model))}</code>"),
                ("files", f"{len(self.files)} ({size_text(self.total_bytes)})" + (", adapter/" if self.adapter else ""))]
        rows += [("warning", f"<span style='color:#b60'>{html.escape(w)}</span>") for w in self.warnings]
        body = "".join(f"<tr><td style='text-align:left;padding-right:1em'><b>{k}</b></td>"
                       f"<td style='text-align:left'>{v}</td></tr>" for k, v in rows)
        return f"<div><b>Exported model</b><table>{body}</table></div>"


def size_text(n: float) -> str:
    """``n`` bytes for a person: ``512 B``, ``9.8 MB``."""
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KB", "MB", "GB"):
        n /= 1024
        if n < 1024 or unit == "GB":
            break
    return f"{n:.1f} {unit}"
