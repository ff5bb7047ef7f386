"""`skyrl_nb.configure(preset)`: a form over the job config with live validation and a Launch button.

>>> form = skyrl_nb.configure("quickstart")
>>> form                                   # edit fields; messages appear beside bad ones
>>> form.config.to_yaml() == form.to_yaml()  # the form round-trips with YAML
>>> form.from_yaml(open("run.yaml").read())

The fields cover model, environment and data, algorithm, group size, batch sizes, learning rate,
KL, steps and placement; every other key keeps the preset's value (edit it in the YAML tab).

The placement is checked by the engine's own rules (`skyrl_core.placement`) as you edit; with a
`cluster`, against what its nodes have, each training rank's memory against one device, and whether
vLLM, SkyRL and the trackers' packages the config needs are there (one probe per cluster, asked once):
the same lines `Cluster.plan` and `Cluster.launch` give. What cannot run keeps Launch disabled, with
each reason on a line of its own beside the field it is about, in the words of the form's labels (the
dotted key in small print below). A machine with less memory than the chosen model was measured to need
(this one for the local head, the head node of a remote cluster) gets a one-line warning under the resources,
naming the instance to pick (`skyrl_core.machine_memory`); Launch stays on.
"""

from __future__ import annotations

import html
import types
import typing
from enum import Enum
from typing import Any

from skyrl_core.choices import Backend

_INT, _FLOAT = "int", "float"


def input_kind(key: str) -> tuple[str, tuple[str, ...]]:
    """How the form edits the dotted ``key``: its kind and, for a ``choice``, the allowed values.

    Read from the config schema: an enum or a registry (advantage estimators and policy losses, plug-ins
    included) is a choice, ``bool`` / ``int`` / ``float`` / ``list`` are themselves, anything else text.

    >>> input_kind("generator.inference_engine.backend")
    ('choice', ('torch', 'vllm'))
    """
    from skyrl_core.choices import values
    from skyrl_core.config import JobConfig
    from skyrl_core.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES

    for registry in (ADVANTAGE_ESTIMATORS, POLICY_LOSSES):
        if key == registry.key:
            return "choice", tuple(registry.names())
    model: Any = JobConfig
    *sections, leaf = key.split(".")
    for section in sections:
        model = model.model_fields[section].annotation
    annotation = model.model_fields[leaf].annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))  # `int | None`: int
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "choice", values(annotation)
    if typing.get_origin(annotation) is list:
        return "list", ()
    return {bool: "bool", int: _INT, float: _FLOAT}.get(annotation, "text"), ()


def resources_for(cfg: Any, device: str | None = None) -> dict[str, Any]:
    """What a job with `cfg` reserves on a cluster whose slots are `device` ("GPU" or "CPU"): the engine's own
    placement plan (`skyrl_core.placement`). Without a `device` (no cluster to ask) vLLM is taken to run on
    GPUs and the torch backend on CPUs.

    >>> from skyrl_core.config import load_config
    >>> resources_for(load_config("quickstart", ["trainer.placement.colocate_all=false"]), "CPU")["text"]
    '2 CPU(s), no GPU: disaggregated: policy 1 node(s) × 1 CPU + 1 engine(s) × tp 1 CPU'
    """
    from skyrl_core.placement import plan_placement, runs_in_job_process

    unit = device or ("GPU" if cfg.generator.inference_engine.backend == Backend.VLLM else "CPU")
    if runs_in_job_process(cfg, unit):
        return {"CPU": 0, "GPU": 0, "text": "no CPU actors: trainer and sampler take turns in the job's own process "
                                            "(colocated, one rank, no GPU)"}
    plan = plan_placement(cfg, unit)
    total = plan.total()
    cpus, gpus = int(total.get("CPU", 0)), int(total.get("GPU", 0))
    text = f"{gpus} GPU(s) and {cpus} CPU(s)" if gpus else f"{cpus} CPU(s), no GPU"
    return {"CPU": cpus, "GPU": gpus, "text": f"{text}: {plan.describe()}"}


class ConfigForm:
    """The form behind `configure()`. `config` is the last valid config (None while invalid)."""

    def __init__(self, preset: str = "quickstart", *, overrides: list[str] | None = None,
                 cluster: Any = None, **own: Any) -> None:
        from skyrl_core.config import load_config
        from skyrl_core.user_inputs import JobInputs
        from skyrl_widgets.config_form import ConfigFormView, form_keys

        # your own data and reward functions (launch's keywords), read and checked once; launch ships them
        self.own = own
        ships = getattr(cluster, "_ships", lambda _path: False)
        self.inputs = JobInputs.gather(**own, ship_file=ships)
        cfg = load_config(preset, overrides=[*(overrides or []), *self.inputs.overrides()])
        self.preset = preset
        self.cluster = cluster
        self.job: Any = None
        self.config: Any = None
        self.problems: list[str] = []
        self.memory: Any = None  # the form config's MemoryEstimate (skyrl_core.memory); None while a value is bad
        self.warnings: list[str] = []  # what may go wrong without keeping Launch off (the machine's memory)
        self._nodes: list[dict[str, float]] | None = None  # the cluster's node resources, read once
        self._base = cfg.to_dict()
        inputs = {key: input_kind(key) for key in form_keys()}
        self.view = ConfigFormView({key: kind for key, (kind, _) in inputs.items()},
                                   {key: choices for key, (_, choices) in inputs.items() if choices},
                                   title=f"skyrl-nb job config (preset {preset})")
        self.view.set_values(cfg.to_dotted())
        self.view.set_preview(self.inputs.preview_html())
        self.view.on_change(lambda key: self.validate())
        self.view.apply_yaml.on_click(lambda _: self.from_yaml(self.view.yaml.value))
        self.view.launch.on_click(lambda _: self.launch())
        self.validate()

    # -- values -----------------------------------------------------------------------------------

    def _overrides(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.view.raw_values().items():
            kind = self.view.kinds[key]
            if kind in (_INT, _FLOAT) and isinstance(value, str):
                text = value.strip()
                if not text:
                    value = None
                else:
                    try:
                        value = int(text) if kind == _INT else float(text)
                    except ValueError:
                        value = text  # validation names the field and the bad text
            out[key] = value
        return out

    def validate(self) -> list[str]:
        """Re-check the form; shows messages beside fields and returns every problem ([] when valid)."""
        from skyrl_core.config import config_problems
        from skyrl_core.memory import rank_memory
        from skyrl_nb.cluster.planning import memory_warnings

        cfg, problems = config_problems(self._base, self._overrides())  # the one validation launch uses too
        self.memory = rank_memory(cfg) if cfg is not None else None
        if cfg is not None:
            problems = [*problems, *self.cluster_problems(cfg)]
        per_key: dict[str, list[str]] = {}
        general: list[str] = []
        for line in problems:
            key, _, msg = line.partition(":")
            if key in self.view.inputs:
                per_key.setdefault(key, []).append(msg.strip())
            else:
                general.append(line)
        self.view.set_messages(per_key, general)
        self.problems = problems
        self.config = cfg if not problems else None
        if cfg is not None:
            self.warnings = memory_warnings(cfg, self.cluster, self._node_list())
            self.view.set_resources(resources_for(cfg, self._device())["text"], self.memory.summary(), self.warnings)
            if not problems:
                self.view.set_yaml(cfg.to_yaml())
        return problems

    def _node_list(self) -> list[dict[str, float]]:
        """The cluster's alive nodes' resources, read once ([] without a cluster or when it cannot be told)."""
        if self.cluster is None or not hasattr(self.cluster, "node_resources"):
            return []
        if self._nodes is None:
            try:
                self._nodes = self.cluster.node_resources()
            except Exception:  # noqa: BLE001 - an unreachable dashboard: show the estimate, refuse nothing
                self._nodes = []
        return self._nodes

    def _device(self) -> str | None:
        """What one slot is on the form's cluster (GPU when it has any), None when unknown."""
        from skyrl_core.placement import ClusterResources

        nodes = self._node_list()
        return ClusterResources.from_nodes(nodes).device if nodes else None

    def cluster_problems(self, cfg: Any) -> list[str]:
        """What keeps ``cfg`` off the form's cluster, one line each starting with the keys it is about: the
        engine's placement rules (the config-only ones without a cluster), each rank's memory against one
        device there, and vLLM, SkyRL or a tracker's package missing there (one probe per cluster, asked once).
        The lines `Cluster.plan` and `Cluster.launch` give (`skyrl_nb.cluster.base.cluster_problems`)."""
        from skyrl_nb.cluster.packages import packages_needed
        from skyrl_nb.cluster.planning import cluster_problems

        nodes = self._node_list()
        asking = (self.cluster is not None and packages_needed(cfg)
                  and getattr(self.cluster, "_package_report", None) is None)
        if asking:
            self.view.set_checking("which packages does the cluster have (vLLM, SkyRL, trackers)? asking it once…")
        try:
            return cluster_problems(cfg, nodes or None, self.cluster)
        finally:
            if asking:
                self.view.set_checking("")

    def set(self, key: str, value: Any) -> list[str]:
        """Set one field as a user would type it (text for numbers) and return the problems."""
        widget = self.view.inputs[key]
        widget.value = value if not isinstance(value, list) else ", ".join(value)
        return self.problems

    # -- YAML ---------------------------------------------------------------------------------------

    def to_yaml(self) -> str:
        """The form's config as YAML; raises ConfigError while the form has problems."""
        from skyrl_core.config import ConfigError

        if self.config is None:
            raise ConfigError(self.problems or ["config: the form is not valid"])
        return self.config.to_yaml()

    def from_yaml(self, text: str) -> list[str]:
        """Load a whole config from YAML into the form; returns the problems ([] when valid)."""
        from skyrl_core.config import ConfigError, JobConfig

        try:
            cfg = JobConfig.from_yaml_text(text)
        except ConfigError as err:
            self.view.set_messages({}, list(err.problems))
            self.problems = list(err.problems)
            return self.problems
        self._base = cfg.to_dict()
        self.view.set_values(cfg.to_dotted())
        return self.validate()

    # -- launch ---------------------------------------------------------------------------------

    def launch(self) -> Any:
        """Submit the form's config to `cluster` (the local cluster when none was given)."""
        from IPython.display import display

        if self.validate():
            return None
        if self.cluster is None:
            from skyrl_nb.cluster import local

            self.cluster = local()
        self.job = self.cluster.launch(self.config, **self.own)
        with self.view.output:
            display(self.job.dashboard())
        return self.job

    # -- display --------------------------------------------------------------------------------

    def __repr__(self) -> str:
        state = "valid" if self.config is not None else f"{len(self.problems)} problem(s)"
        warned = "".join(f"\n  warning: {w}" for w in self.warnings)
        return f"ConfigForm(preset={self.preset!r}, {state}){warned}"

    def _repr_html_(self) -> str:
        body = html.escape(self.config.to_yaml()) if self.config is not None else html.escape("\n".join(self.problems))
        head = html.escape(repr(self).split("\n")[0])
        warned = "".join(f"<div style='color:#b45309'>&#9888; {html.escape(w)}</div>" for w in self.warnings)
        return f"{warned}<details><summary><b>{head}</b></summary><pre>{body}</pre></details>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle = dict(self.view.widget._repr_mimebundle_(include=include, exclude=exclude) or {})
        bundle["text/html"] = self._repr_html_()
        return bundle


def configure(preset: str = "quickstart", *, overrides: list[str] | None = None, cluster: Any = None,
              **own: Any) -> ConfigForm:
    """A config form for `preset` with live validation, the resources it asks for, each training rank's
    memory estimate (refused when `cluster` cannot hold it) and a Launch button. `own`: launch's `data`,
    `val_data`, `columns`, `reward`, `reward_errors` (`Cluster.launch`), previewed above the form (rows, columns,
    one example, reward names) and shipped by its Launch button; one that cannot be used raises `ConfigError`."""
    return ConfigForm(preset, overrides=overrides, cluster=cluster, **own)
