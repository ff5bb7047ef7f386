"""Cluster panel: the HyperPod cluster (instance groups, node health), the RayCluster state, Up / Scale /
Down buttons and the Ray dashboard link.

A view only: it shows a snapshot dict (``HyperPodRayCluster.snapshot()``) and calls the actions it is
given; each action returns a fresh snapshot (or ``None``, then ``on_refresh`` is called).
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

import ipywidgets as w

Snapshot = dict[str, Any]

_STATE_COLOURS = {"ready": "#1a7f37", "failed": "#cf222e", "suspended": "#9a6700"}  # not a run state: a RayCluster's (KubeRay's words)


def _hyperpod_html(hp: dict[str, Any] | None) -> str:
    if not hp:
        return "<i>HyperPod cluster not looked up yet (dry run or plan only)</i>"
    rows = []
    for g in hp.get("instance_groups", []):
        health = hp.get("node_health", {}).get(g["name"], {})
        badge = ", ".join(f"{escape(k)}: {v}" for k, v in sorted(health.items())) or "no nodes"
        bad = any(k != "Running" for k in health)
        rows.append(f"<tr><td>{escape(str(g['name']))}</td><td>{escape(str(g['instance_type']))}</td>"
                    f"<td>{g.get('current')}/{g.get('target')}</td><td>{g.get('gpus_per_node', 0)}</td>"
                    f"<td style='color:{'#cf222e' if bad else '#1a7f37'}'>{badge}</td></tr>")
    return (f"<b>HyperPod {escape(hp['name'])}</b> <code>{escape(hp.get('status', '?'))}</code> "
            f"(EKS {escape(str(hp.get('eks_cluster')))}, {escape(str(hp.get('region')))})"
            "<table><tr><th>instance group</th><th>type</th><th>nodes</th><th>GPUs/node</th>"
            f"<th>node health</th></tr>{''.join(rows)}</table>")


def _raycluster_html(snap: Snapshot) -> str:
    rc = snap.get("raycluster")
    title = f"RayCluster {escape(snap.get('namespace', ''))}/{escape(snap.get('name', ''))}"
    if not rc:
        return f"<b>{title}</b>: <code>not created</code>"
    state = rc.get("state") or "pending"  # not a run state: the RayCluster's
    colour = _STATE_COLOURS.get(state, "#57606a")
    pods = "".join(
        f"<tr><td>{escape(p['name'])}</td><td>{escape(p['group'])}</td><td>{escape(p['phase'])}</td>"
        f"<td>{'✔' if p['ready'] else '…'}</td><td>{p.get('gpus', 0)}</td>"
        f"<td>{escape(p.get('reason') or '')}</td></tr>" for p in rc.get("pods", []))
    return (f"<b>{title}</b>: <code style='color:{colour}'>{escape(state)}</code>, workers "
            f"{rc.get('ready_workers', 0)}/{rc.get('desired_workers', 0)} ready, {rc.get('gpus', 0)} GPUs"
            "<table><tr><th>pod</th><th>group</th><th>phase</th><th>ready</th><th>GPUs</th>"
            f"<th>waiting on</th></tr>{pods}</table>")


class ClusterPanel(w.VBox):
    """The panel. ``panel.update(snapshot)`` redraws it; buttons call ``on_up()``, ``on_scale(group,
    replicas)``, ``on_down()`` (Down asks for a second click to confirm)."""

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        on_up: Callable[[], Snapshot | None] | None = None,
        on_scale: Callable[[str, int], Snapshot | None] | None = None,
        on_down: Callable[[], Snapshot | None] | None = None,
        on_refresh: Callable[[], Snapshot] | None = None,
    ) -> None:
        self._on_up, self._on_scale, self._on_down, self._on_refresh = on_up, on_scale, on_down, on_refresh
        self.hyperpod_html = w.HTML()
        self.raycluster_html = w.HTML()
        self.link_html = w.HTML()
        self.message = w.HTML()
        self.up_button = w.Button(description="Up", button_style="success", icon="play", disabled=on_up is None)
        self.group = w.Dropdown(description="group", layout=w.Layout(width="220px"))
        self.replicas = w.BoundedIntText(value=1, min=0, max=1024, description="replicas",
                                         layout=w.Layout(width="160px"))
        self.scale_button = w.Button(description="Scale", icon="arrows-v", disabled=on_scale is None)
        self.down_button = w.Button(description="Down", button_style="danger", icon="stop",
                                    disabled=on_down is None)
        self.refresh_button = w.Button(description="Refresh", icon="refresh", disabled=on_refresh is None)
        self._confirm_down = False
        self.up_button.on_click(lambda _: self._run("up", self._on_up))
        self.scale_button.on_click(lambda _: self._run(
            "scale", (lambda: self._on_scale(self.group.value, int(self.replicas.value))) if self._on_scale else None))
        self.down_button.on_click(lambda _: self._down())
        self.refresh_button.on_click(lambda _: self._run("refresh", self._on_refresh))
        self.group.observe(self._group_changed, names="value")
        controls = w.HBox([self.up_button, self.group, self.replicas, self.scale_button, self.down_button,
                           self.refresh_button])
        super().__init__([self.hyperpod_html, self.raycluster_html, controls, self.link_html, self.message])
        self.snapshot: Snapshot = {}
        self.update(snapshot)

    def update(self, snapshot: Snapshot) -> None:
        """Redraw from a snapshot dict."""
        self.snapshot = snapshot
        self.hyperpod_html.value = _hyperpod_html(snapshot.get("hyperpod"))
        self.raycluster_html.value = _raycluster_html(snapshot)
        rc = snapshot.get("raycluster") or {}
        groups = rc.get("groups") or snapshot.get("groups") or {}
        current = self.group.value
        self.group.options = list(groups)
        if current in groups:
            self.group.value = current
        elif groups:
            self.group.value = next(iter(groups))
        if self.group.value in groups:
            self.replicas.value = int(groups[self.group.value])
        url = snapshot.get("dashboard_url")
        self.link_html.value = (f'<a href="{escape(url)}" target="_blank">Ray dashboard ↗</a>' if url
                                else "<i>Ray dashboard: connect() to open a tunnel</i>")

    def _group_changed(self, change: dict[str, Any]) -> None:
        groups = (self.snapshot.get("raycluster") or {}).get("groups") or self.snapshot.get("groups") or {}
        if change["new"] in groups:
            self.replicas.value = int(groups[change["new"]])

    def _down(self) -> None:
        if not self._confirm_down:
            self._confirm_down = True
            self.down_button.description = "Confirm down"
            self.message.value = "<span style='color:#9a6700'>Click again to delete the RayCluster.</span>"
            return
        self._confirm_down = False
        self.down_button.description = "Down"
        self._run("down", self._on_down)

    def _run(self, what: str, action: Callable[[], Snapshot | None] | None) -> None:
        if action is None:
            return
        self.message.value = f"<i>{escape(what)}…</i>"
        try:
            snap = action()
            if not isinstance(snap, dict) and self._on_refresh is not None:
                snap = self._on_refresh()
        except Exception as e:  # shown in the panel: a callback has no caller to raise to
            self.message.value = f"<span style='color:#cf222e'>{escape(what)} failed: {escape(str(e))}</span>"
            return
        if isinstance(snap, dict):
            self.update(snap)
        self.message.value = f"<span style='color:#1a7f37'>{escape(what)}: done</span>"

    def __repr__(self) -> str:
        rc = self.snapshot.get("raycluster") or {}
        return (f"ClusterPanel({self.snapshot.get('namespace')}/{self.snapshot.get('name')}: "
                f"{rc.get('state') or 'not created'})")


def start_progress_html(title: str, stages: list[tuple[str, float]], seconds: float, *, done: bool = False,
                        ok: bool = True) -> str:
    """A cluster start as it goes: ``title``, the seconds so far, and each stage reached with its time (the
    last one marked as current until ``done``). Colours are JupyterLab's theme variables."""
    rows = []
    for i, (text, at) in enumerate(stages):
        last = i == len(stages) - 1
        mark = ("✔" if ok else "✖") if last and done else ("⏳" if last else "✔")
        rows.append(f"<div><span style='display:inline-block;width:1.4em'>{mark}</span>{escape(text)} "
                    f"<span style='color:var(--jp-ui-font-color2, #757575)'>{at:.1f} s</span></div>")
    state = ("up" if ok else "failed") if done else "starting"  # not a run state: the cluster start's
    return (f"<div style='font-family:var(--jp-ui-font-family, sans-serif);font-size:13px;"
            f"color:var(--jp-ui-font-color1, #222)'><b>{escape(title)}</b> {state} &middot; "
            f"{seconds:.0f} s{''.join(rows)}</div>")
