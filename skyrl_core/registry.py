"""Named plug-ins: advantage estimators, policy losses and environments, and the modules that add them.

Three registries, each seeded with the built-in names (``skyrl_core.choices``) and open to users the
way SkyRL's ``ppo_utils`` registries are::

    # my_plugins.py (imports nothing heavy at module level; torch inside the functions)
    from skyrl_core.registry import register_advantage_estimator, register_policy_loss

    @register_advantage_estimator("my_adv")
    def my_adv(token_level_rewards, response_mask, index, config, values=None): ...

    @register_policy_loss("my_loss")
    def my_loss(log_probs, old_log_probs, advantages, response_mask, config, rollout_logprobs=None): ...

    register_environment("my_env", "my_plugins:MyEnv")     # a skyrl-gym BaseTextEnv subclass

A job names such modules under ``plugins:`` in its config. :func:`load_plugins` imports them before
the config's names are checked, in the notebook (so ``launch`` refuses an unknown name before
submitting) and again in every engine process (the job's driver and each Ray worker). The notebook
ships each plug-in module with the job (Ray ``py_modules``), so the cluster needs no copy of its own.

The registries hold functions for the engine (``skyrl_engine.algorithms`` registers the built-ins at
import) and names for validation: a name is valid when it is built in or registered, whether or not
the engine module holding its function was imported in this process.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib
import importlib.util
import reprlib
import sys
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from skyrl_core.choices import AdvantageEstimator, PolicyLoss, values

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ENVIRONMENTS",
    "POLICY_LOSSES",
    "PluginError",
    "Registry",
    "did_you_mean",
    "environment_names",
    "load_plugins",
    "not_allowed",
    "plugin_problems",
    "register_advantage_estimator",
    "register_environment",
    "register_policy_loss",
    "shown",
]

# Values in messages are shown the way repr shows them, cut short: a YAML alias bomb in a 300-character
# override expands to megabytes of repr, and a message is one line for a person.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxdict, _SHOWN.maxset = 2, 4, 4, 3, 4
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong = 120, 60, 40  # room for a path
_MAX_NAME_CHARS = 100  # longer words get no "did you mean": difflib is quadratic in their length


def shown(value: Any) -> str:
    """``repr(value)`` for a one-line message, abbreviated with ``...`` when long or deeply nested.

    >>> shown("abc"), shown(list(range(100)))
    ("'abc'", '[0, 1, 2, 3, ...]')
    """
    try:
        text = _SHOWN.repr(value)
    except Exception:  # noqa: BLE001 - a repr that raises (an int over 4300 digits, a user's object)
        text = f"<an int of {value.bit_length()} bits>" if isinstance(value, int) else f"<{type(value).__name__}>"
    return text if len(text) <= 140 else text[:137] + "..."


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest of ``choices``, or '' when none is close.

    A dotted word matches a choice with the same last part first: ``trainer.lr`` → the one key whose
    last part is ``lr``.
    """
    if not isinstance(word, str) or len(word) > _MAX_NAME_CHARS:
        return ""
    choices = list(choices)
    leaf = word.rsplit(".", 1)[-1]
    same_leaf = [c for c in choices if c.rsplit(".", 1)[-1] == leaf and c != word]
    if same_leaf:
        close = difflib.get_close_matches(word, same_leaf, n=1, cutoff=0.0)
    else:
        close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def not_allowed(key: str, value: Any, allowed: Iterable[str], *, none_ok: bool = False) -> str:
    """The one line for a value outside a choice: ``key: 'x' is not allowed; allowed: a, b (did you mean 'a'?)``."""
    allowed = list(allowed)
    listed = (["null (off)"] if none_ok else []) + allowed
    hint = did_you_mean(value, allowed) if isinstance(value, str) else ""
    return f"{key}: {shown(value)} is not allowed; allowed: {', '.join(listed)}" + hint


class PluginError(ValueError):
    """A ``plugins:`` module that cannot be imported; the message is one line naming it."""


class Registry:
    """Names of one kind of plug-in (and, once registered, what each name stands for).

    ``builtin`` names are valid before the module that registers their functions is imported (the
    notebook never imports torch); :meth:`get` needs the registration itself.
    """

    def __init__(self, kind: str, key: str, builtin: Iterable[str] = ()) -> None:
        self.kind = kind
        self.key = key
        self.builtin = tuple(builtin)
        self._entries: dict[str, Any] = {}
        self._registered_in: dict[str, str] = {}  # name -> the module whose code registered it

    def register(self, name: str, entry: Any = None) -> Any:
        """Register ``entry`` under ``name``; without ``entry``, a decorator. A name is taken once."""

        def add(obj: Any) -> Any:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered (by {_describe(self._entries[name])})")
            self._entries[name] = obj
            self._registered_in[name] = _calling_module()
            return obj

        return add if entry is None else add(entry)

    def unregister(self, name: str) -> None:
        """Forget ``name`` (tests; a built-in name stays valid)."""
        self._entries.pop(name, None)
        self._registered_in.pop(name, None)

    def cell_problem(self, name: str) -> str | None:
        """The one line refusing ``name`` when it was registered from ``__main__`` (a notebook cell or a script)
        or stands for something defined there: a job's processes never run that code, so the cluster would not
        know the name. None when a module registered it (a ``plugins:`` module is imported there too).

        >>> ENVIRONMENTS.cell_problem("arithmetic") is None
        True
        """
        if name not in self._entries:
            return None
        entry = self._entries[name]
        if self is ENVIRONMENTS and isinstance(entry, type):
            return None  # a class itself: launch ships it by value (skyrl_core.user_inputs.JobInputs)
        defined_in = entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", None)
        if "__main__" not in (self._registered_in.get(name), defined_in):
            return None
        what = _describe(entry) if not isinstance(entry, str) else entry.partition(":")[2] or entry
        return (f"{self.key}: {name!r} ({what}) is registered from __main__ (a notebook cell), which the cluster "
                f"never runs; put {what} and its register call in a module and list that module under plugins: "
                "(a later release will ship cell-defined classes by value)")

    def get(self, name: str) -> Any:
        """What ``name`` stands for; ValueError listing the registered names when it is unknown."""
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(not_allowed(self.key, name, self.names())) from None

    def names(self) -> list[str]:
        """Built-in names first, then the registered ones, each once."""
        return list(dict.fromkeys([*self.builtin, *self._entries]))

    def registered(self) -> dict[str, Any]:
        """``{name: entry}`` of everything registered in this process."""
        return dict(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self.builtin or name in self._entries

    def __iter__(self):
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind}: {', '.join(self.names())})"

    def _repr_html_(self) -> str:
        import html

        return f"<code>{html.escape(repr(self))}</code>"


def _describe(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or repr(obj)


def _calling_module() -> str:
    """``__name__`` of the first module outside this one on the call stack: who registered a name."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return str(frame.f_globals.get("__name__")) if frame is not None else "?"


ADVANTAGE_ESTIMATORS = Registry("advantage estimator", "trainer.algorithm.advantage_estimator",
                                values(AdvantageEstimator))
"""name -> fn(token_level_rewards, response_mask, index, config, values=None) -> (advantages, returns)."""

POLICY_LOSSES = Registry("policy loss", "trainer.algorithm.policy_loss_type", values(PolicyLoss))
"""name -> fn(log_probs, old_log_probs, advantages, response_mask, config, rollout_logprobs=None)
-> (per-token loss [B, T], metrics)."""

ENVIRONMENTS = Registry("environment", "environment.env_class")
"""name -> skyrl-gym entry point ``"module:Class"``; the engine registers these with skyrl-gym."""

# skyrl-nb's own environments (the classes live in the engine; only their entry points are named here).
ENVIRONMENTS.register("arithmetic", "skyrl_engine.tasks:ArithmeticEnv")
ENVIRONMENTS.register("gsm8k_flexible", "skyrl_engine.tasks:GSM8kFlexibleEnv")


def register_advantage_estimator(name: str) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn(token_level_rewards, response_mask, index, config, values=None)`` as ``name``.

    The function returns ``(advantages[B, T], returns[B, T])``. Example::

        @register_advantage_estimator("raw_reward")
        def raw_reward(token_level_rewards, response_mask, index, config, values=None):
            adv = token_level_rewards.sum(-1, keepdim=True) * response_mask
            return adv, adv
    """
    return ADVANTAGE_ESTIMATORS.register(name)


def register_policy_loss(name: str) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn(log_probs, old_log_probs, advantages, response_mask, config, rollout_logprobs=None)``.

    The function returns ``(per_token_loss[B, T], metrics)``; metrics are ``name -> float``, ``clip_ratio`` for
    most. The engine applies ``off_policy_correction`` and the loss reduction to what it returns; a function with
    the attribute ``off_policy_correction = False`` is not corrected, and one with ``summed = True`` gets the
    advantages already divided by the reduction and its masked sum is the loss (SkyRL's convention;
    ``skyrl_engine.algorithms.more_losses``).
    """
    return POLICY_LOSSES.register(name)


def register_environment(name: str, entry_point: str | type) -> str | type:
    """Register a skyrl-gym environment class as ``environment.env_class=name``: ``"module:Class"`` (a plug-in
    module's), or the class itself, e.g. one defined in a notebook cell, which ``launch`` ships with the job by
    value (``skyrl_core.user_inputs``)."""
    if isinstance(entry_point, type):
        return ENVIRONMENTS.register(name, entry_point)
    if not isinstance(entry_point, str) or ":" not in entry_point:
        raise ValueError(f"environment {name!r}: entry point {entry_point!r} must look like 'module:Class' or be "
                         "the class")
    return ENVIRONMENTS.register(name, entry_point)


def environment_names() -> list[str] | None:
    """Every valid ``environment.env_class``: skyrl-gym's, skyrl-nb's and plug-ins'.

    None when skyrl-gym is not installed here (a notebook-only install): then only the cluster can
    tell. skyrl-gym's own registry is read where skyrl-gym is already imported (the engine); elsewhere
    the ids its package registers are read from its source, because importing it takes seconds.
    """
    gym = _skyrl_gym_env_names()
    if gym is None:
        return None
    return list(dict.fromkeys([*gym, *ENVIRONMENTS.names()]))


def _skyrl_gym_env_names() -> list[str] | None:
    registration = sys.modules.get("skyrl_gym.envs.registration")
    if registration is not None:
        return sorted(registration.registry)
    return _declared_skyrl_gym_envs()


@functools.lru_cache(maxsize=1)
def _declared_skyrl_gym_envs() -> list[str] | None:
    try:
        spec = importlib.util.find_spec("skyrl_gym")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    import os

    path = os.path.join(list(spec.submodule_search_locations)[0], "envs", "__init__.py")
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return None
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "register":
            for kw in node.keywords:
                if kw.arg == "id" and isinstance(kw.value, ast.Constant):
                    found.append(str(kw.value.value))
    return sorted(found)


def plugin_problems(names: Iterable[tuple[Registry, Any]]) -> list[str]:
    """One line for each ``(registry, name)`` a job would use that only this process knows: registered from
    ``__main__`` (:meth:`Registry.cell_problem`), so the cluster's processes would refuse it."""
    found = []
    for registry, name in names:
        line = registry.cell_problem(name) if isinstance(name, str) else None
        if line:
            found.append(line)
    return found


def load_plugins(modules: Iterable[str]) -> list[ModuleType]:
    """Import each ``plugins:`` module (once per process); :class:`PluginError` names one that fails."""
    loaded = []
    for name in modules:
        try:
            loaded.append(importlib.import_module(name))
        except Exception as err:  # noqa: BLE001 - any failure while importing a user's module
            reason = " ".join(f"{type(err).__name__}: {err}".split())
            reason = reason if len(reason) <= 120 else reason[:117] + "..."
            raise PluginError(f"plugins: {shown(name)} could not be imported ({reason}); give an importable "
                              "module name (on sys.path here, shipped to the cluster by launch)") from None
    return loaded
