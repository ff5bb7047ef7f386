"""What a run was given besides its config, as its ``inputs/manifest.json`` records it (``skyrl_core.user_inputs``
writes it at launch): each data source with its row count and content hash, each reward function's name, weight
and source text. ``RunReader.inputs()`` returns it, so a finished run says exactly what it trained on."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunInputs"]


@dataclass(frozen=True)
class RunInputs:
    """A run's recorded inputs; empty (falsy) for a run launched without ``data=`` or ``reward=``."""

    data: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)
    rewards: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_manifest(cls, manifest: Any) -> RunInputs:
        if not isinstance(manifest, dict):
            return cls()
        data = manifest.get("data") if isinstance(manifest.get("data"), dict) else {}
        return cls({k: [e for e in v if isinstance(e, dict)] for k, v in data.items() if isinstance(v, list)},
                   dict(manifest.get("columns") or {}), [r for r in manifest.get("rewards") or [] if isinstance(r, dict)])

    def __bool__(self) -> bool:
        return bool(self.data or self.rewards)

    def sources(self, role: str = "train") -> list[str]:
        """One line per data source of ``role``: ``a pandas.DataFrame, 50 rows, sha256 3f2a...``."""
        return [", ".join(str(x) for x in (e.get("source"), e.get("rows") and f"{e['rows']} rows",
                                          e.get("sha256") and f"sha256 {e['sha256']}") if x)
                for e in self.data.get(role, [])]

    def reward_names(self) -> list[str]:
        return [str(r.get("name")) for r in self.rewards]

    def __repr__(self) -> str:
        if not self:
            return "RunInputs(none: the config's own data and environments)"
        parts = [f"{role}: {'; '.join(self.sources(role))}" for role in self.data]
        if self.rewards:
            parts.append("rewards: " + ", ".join(f"{r.get('name')} (x{r.get('weight', 1)}, {r.get('shape', '?')})"
                                                 for r in self.rewards))
        return "RunInputs(" + " | ".join(parts) + ")"

    def _repr_html_(self) -> str:
        if not self:
            return f"<code>{html.escape(repr(self))}</code>"
        rows = "".join(f"<tr><td>{html.escape(role)} data</td><td>{html.escape(line)}</td></tr>"
                       for role in self.data for line in self.sources(role))
        for r in self.rewards:
            source = html.escape(str(r.get("source") or "(source not available)"))
            rows += (f"<tr><td>reward {html.escape(str(r.get('name')))} &times;{r.get('weight', 1)}</td><td><details>"
                     f"<summary>{html.escape(str(r.get('shape', '')))}, sha256 {html.escape(str(r.get('sha256', '')))}"
                     f"</summary><pre>{source}</pre></details></td></tr>")
        return f"<table>{rows}</table>"
