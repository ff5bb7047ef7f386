"""The config form view: one labelled input per config key, a message slot beside each.

Views only: `ConfigFormView` knows nothing about validation or clusters. It reports edits through
`on_change(callback)` and shows what it is told (`set_values`, `set_messages`, `set_resources`,
`set_yaml`). `skyrl_nb.form` wires it to the config model.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

# The form's layout: sections of {dotted key: label}. What each input is (text, list, int, float, bool
# or a choice, and its choices) is the config schema's to say: `skyrl_nb.form.input_kinds`.
SECTIONS: dict[str, dict[str, str]] = {
    "Model and data": {
        "trainer.policy.model.path": "model", "environment.env_class": "environment",
        "data.train_data": "train data", "data.val_data": "eval data",
    },
    "Algorithm": {
        "trainer.algorithm.advantage_estimator": "advantage", "trainer.algorithm.policy_loss_type": "policy loss",
        "generator.n_samples_per_prompt": "group size", "trainer.policy.optimizer_config.lr": "learning rate",
        "trainer.algorithm.use_kl_loss": "KL loss", "trainer.algorithm.kl_loss_coef": "KL coef",
    },
    "Batches and steps": {
        "trainer.train_batch_size": "prompts / step", "trainer.policy_mini_batch_size": "prompts / update",
        "trainer.micro_train_batch_size_per_gpu": "micro batch", "trainer.max_training_steps": "steps",
        "trainer.eval_interval": "eval every",
    },
    "Placement": {
        "generator.inference_engine.backend": "inference", "generator.inference_engine.num_engines": "engines",
        "trainer.placement.colocate_all": "colocate all", "trainer.strategy": "strategy",
        "trainer.placement.policy_num_nodes": "policy nodes",
        "trainer.placement.policy_num_gpus_per_node": "policy GPUs / node", "run.run_root": "run root",
    },
}


def form_keys() -> list[str]:
    """Every dotted key the form has an input for, in display order."""
    return [key for fields in SECTIONS.values() for key in fields]


LABELS: dict[str, str] = {key: label for fields in SECTIONS.values() for key, label in fields.items()}
"""Each form key's label, as the form shows it."""


def in_words(text: str) -> str:
    """``text`` with every dotted key the form has a field for replaced by that field's label, quoted:
    ``trainer.train_batch_size`` -> ``'prompts / step'`` (longest keys first, so no key eats another)."""
    for key in sorted(LABELS, key=len, reverse=True):
        text = text.replace(key, f"'{LABELS[key]}'")
    return text


def one_line(text: str) -> str:
    """``text`` on one line: every run of whitespace (newlines too) becomes one space."""
    return " ".join(str(text).split())


def _split(line: str) -> tuple[list[str], str]:
    """``key[, key]: message`` (``skyrl_core.config``'s form of a problem) -> (keys, message), on one line."""
    keys, sep, message = one_line(line).partition(": ")
    if not sep or " " in keys.replace(", ", ","):
        return [], line
    return [k.strip() for k in keys.split(",") if k.strip()], message


def in_labels(line: str) -> str:
    """A problem line as the form's words: ``policy GPUs / node, strategy: the policy needs ...``."""
    named, message = _split(line)
    return (", ".join(LABELS.get(k, k) for k in named) + ": " if named else "") + in_words(message)


def message_html(line: str, *, key_known: bool = False) -> str:
    """One problem for people: the words of the form's labels, the dotted keys it is about in small print.

    ``key_known``: the message sits beside its own field, so the leading key is not repeated in words.
    """
    named, message = _split(line)
    head = "" if key_known or not named else ", ".join(LABELS.get(k, k) for k in named) + ": "
    small = (f" <small style='color:var(--jp-ui-font-color2, #757575);font-family:var(--jp-code-font-family, "
             f"monospace)'>{html.escape(', '.join(named))}</small>") if named else ""
    return (f"<span style='color:var(--jp-error-color1, #c62828)'>{html.escape(head + in_words(message))}</span>"
            f"{small}")


class ConfigFormView:
    """The ipywidgets of the form. `widget` is the box to display.

    ``kinds`` gives each key of :func:`form_keys` its kind (``text``, ``list``, ``int``, ``float``, ``bool``
    or ``choice``); ``choices`` the options of the ``choice`` ones.
    """

    def __init__(self, kinds: dict[str, str], choices: dict[str, tuple[str, ...]], title: str = "") -> None:
        import ipywidgets as w

        self._w = w
        self.inputs: dict[str, Any] = {}
        self.kinds: dict[str, str] = {}
        self.messages: dict[str, Any] = {}
        self._callbacks: list[Callable[[str], None]] = []
        self._muted = False
        label_layout = w.Layout(width="130px")
        sections = []
        for section, fields in SECTIONS.items():
            rows = [w.HTML(f"<b>{html.escape(section)}</b>")]
            for key, label in fields.items():
                kind = kinds[key]
                widget = self._input(kind, choices.get(key, ()))
                widget.tooltip = key
                widget.observe(lambda change, k=key: self._changed(k), names="value")
                self.inputs[key] = widget
                self.kinds[key] = kind
                self.messages[key] = w.HTML(layout=w.Layout(width="360px"))
                rows.append(w.HBox([w.Label(label, layout=label_layout), widget, self.messages[key]]))
            sections.append(w.VBox(rows))
        self.general = w.HTML()
        self.preview = w.HTML()  # your own data and reward functions (`set_preview`)
        self.resources = w.HTML()
        self.checking = w.HTML()
        self.launch_reason = w.HTML()
        self.yaml = w.Textarea(layout=w.Layout(width="100%", height="260px"))
        self.apply_yaml = w.Button(description="Apply YAML", icon="upload")
        self.launch = w.Button(description="Launch", button_style="success", icon="rocket")
        self.output = w.Output()
        yaml_box = w.VBox([self.yaml, self.apply_yaml])
        tabs = w.Tab(children=[w.VBox(sections), yaml_box])
        tabs.set_title(0, "Form")
        tabs.set_title(1, "YAML")
        head = w.HTML(f"<b>{html.escape(title)}</b>") if title else w.HTML()
        self.widget = w.VBox([head, self.preview, tabs, self.general, self.resources, self.checking,
                              w.HBox([self.launch, self.launch_reason]), self.output])

    def _input(self, kind: str, choices: tuple[str, ...]) -> Any:
        w = self._w
        layout = w.Layout(width="260px")
        if kind == "bool":
            return w.Checkbox(indent=False, layout=w.Layout(width="260px"))
        if kind == "choice":
            return w.Dropdown(options=list(choices), layout=layout)
        # Numbers are typed as text so a bad value ("1e-x", "-3") reaches validation and gets a message.
        return w.Text(layout=layout)

    def _changed(self, key: str) -> None:
        if self._muted:
            return
        for cb in list(self._callbacks):
            cb(key)

    def on_change(self, callback: Callable[[str], None]) -> None:
        """Call `callback(key)` after the user edits a field."""
        self._callbacks.append(callback)

    def set_values(self, values: dict[str, Any]) -> None:
        """Show these values (dotted key -> value) without firing change callbacks."""
        self._muted = True
        try:
            for key, value in values.items():
                if key not in self.inputs:
                    continue
                kind, widget = self.kinds[key], self.inputs[key]
                if kind == "bool":
                    widget.value = bool(value)
                elif kind == "choice":
                    if value not in widget.options:
                        widget.options = [*widget.options, value]
                    widget.value = value
                elif kind == "list":
                    widget.value = ", ".join(str(v) for v in (value or []))
                else:
                    widget.value = "" if value is None else (f"{value:g}" if isinstance(value, float) else str(value))
        finally:
            self._muted = False

    def raw_values(self) -> dict[str, Any]:
        """What the fields hold, as typed (text for numbers; lists split on commas)."""
        out: dict[str, Any] = {}
        for key, widget in self.inputs.items():
            kind = self.kinds[key]
            if kind == "list":
                out[key] = [p.strip() for p in str(widget.value).split(",") if p.strip()]
            else:
                out[key] = widget.value
        return out

    def set_messages(self, per_key: dict[str, str | list[str]], general: list[str]) -> None:
        """Messages beside fields (one or several per field) and the ones about several keys or keys the form has
        no field for, in the labels' words with the keys in small print, each problem on a line of its own.
        Launch is disabled while there is any, and says why: every problem, none hidden."""
        lines: list[str] = []
        for key, box in self.messages.items():
            msgs = per_key.get(key) or []
            msgs = [msgs] if isinstance(msgs, str) else list(msgs)
            box.value = "".join(f"<div>{message_html(f'{key}: {m}', key_known=True)}</div>" for m in msgs)
            lines += [f"{key}: {m}" for m in msgs]
        lines += list(general)
        self.general.value = "".join(f"<div>{message_html(m)}</div>" for m in general)
        self.launch.disabled = bool(lines)
        reasons = [in_labels(line) for line in lines]
        self.launch.tooltip = "\n".join(reasons) or "submit this config to the cluster"
        style = "color:var(--jp-ui-font-color1, #222)"
        self.launch_reason.value = "<br>".join(
            f"<span style='{style}'>{'Launch is off: ' if i == 0 else ''}{html.escape(reason)}</span>"
            for i, reason in enumerate(reasons))

    def set_preview(self, html_text: str) -> None:
        """What the job trains on besides the form's fields (data rows, columns, one example; reward names), as
        HTML made by ``skyrl_core.user_inputs.JobInputs.preview_html`` ('' when nothing)."""
        self.preview.value = html_text

    def set_checking(self, text: str) -> None:
        """A line saying what the form is asking the cluster right now ('' when nothing)."""
        self.checking.value = f"<i>{html.escape(text)}</i>" if text else ""

    def set_resources(self, text: str, memory: str = "", warnings: Sequence[str] = ()) -> None:
        """The line saying what the job will ask the cluster for, one with each rank's memory, and a line for each
        warning (the machine's memory short of the run's: Launch stays on)."""
        self.resources.value = f"<i>asks for:</i> {html.escape(text)}" + (
            f"<br><i>memory per rank:</i> {html.escape(memory)}" if memory else "") + "".join(
            f"<div style='color:#b45309'>&#9888; {html.escape(line)}</div>" for line in warnings)

    def set_yaml(self, text: str) -> None:
        """Replace the YAML tab's text."""
        self.yaml.value = text
