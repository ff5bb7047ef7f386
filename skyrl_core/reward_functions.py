"""Reward functions written in a notebook cell: how one is judged, shipped with a job, and called.

Two shapes are read, by the names of the function's first two parameters:

- TRL's, batched: ``fn(prompts, completions, **columns) -> list[float]``. ``prompts`` are the rows' prompts as the
  data holds them (text, or a list of messages); ``completions`` the sampled answers, text for a text prompt and
  ``[{"role": "assistant", "content": text}]`` for a conversational one (TRL's convention); each column a list.
- per sample: ``fn(prompt, completion, **columns) -> float``, ``completion`` always text.

Either may be ``async``. The columns are every column of the row but the prompt, and ``ground_truth`` when the
row has one (``skyrl_core.datarows.reward_columns``); a function without ``**kwargs`` receives only the columns
it names. Several run at once with weights: ``reward=[exact, (format_bonus, 0.2)]`` scores each sample
``1.0 * exact + 0.2 * format_bonus``.

In the notebook :func:`reward_functions` reads what the user gave, :meth:`RewardFunction.pack` pickles one by
value (cloudpickle: closures and the cell's globals it uses travel with it) and :func:`trial` calls the shipped
copy once on a real row, so a function the job could not call is refused before anything is submitted, in one
line naming it. In the engine :func:`unpack` reads it back and ``skyrl_engine.rewards`` calls it through
:meth:`RewardFunction.scores` in a pool. No heavy import: cloudpickle only to pack or unpack.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import math
import re
import sys
import sysconfig
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyrl_core.registry import shown

__all__ = ["RESERVED_NAMES", "RewardFunction", "RewardFunctionError", "made_up_completion", "reward_functions",
           "trial", "unpack"]

#: ``reward/<name>`` series skyrl-nb already writes: a function may not take one of these names.
RESERVED_NAMES = ("avg_raw_reward", "std_raw_reward", "mean_positive_reward", "errors")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_BATCHED = ("prompts", "completions")
_PER_SAMPLE = ("prompt", "completion")


class RewardFunctionError(ValueError):
    """A reward function that cannot be used; the message is one line naming it. In the engine, a reward that
    raised while ``reward.errors`` is ``fail``."""


@dataclass
class RewardFunction:
    """One reward function and how it is called (see the module docstring); ``weight`` scales its score in the
    sample's reward. Shows its name, shape and weight."""

    name: str
    fn: Callable[..., Any]
    weight: float = 1.0
    batched: bool = False
    is_async: bool = False
    keywords: frozenset[str] | None = None
    """The column keywords it names; None when it takes ``**kwargs`` (then it receives every column)."""
    source: str = field(default="", repr=False)

    @classmethod
    def of(cls, fn: Any, weight: float = 1.0) -> RewardFunction:
        """``fn`` judged by its signature; :class:`RewardFunctionError` (one line naming it) when it is not a
        function of one of the two shapes, or its name cannot label a series."""
        name = getattr(fn, "__name__", None)
        if not callable(fn) or not isinstance(name, str):
            raise RewardFunctionError(f"reward: {shown(fn)} is not a function; give a function "
                                      "fn(prompts, completions, **columns) or fn(prompt, completion, **columns)")
        if name == "<lambda>":
            raise RewardFunctionError("reward: a lambda has no name to show its series under; define it with def")
        if not _NAME_RE.match(name) or name in RESERVED_NAMES:
            raise RewardFunctionError(f"reward {name!r}: the name cannot label a series reward/{name}; rename the "
                                      f"function (letters, digits, '_'; not {', '.join(RESERVED_NAMES)})")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise RewardFunctionError(f"reward {name!r}: weight {shown(weight)} is not a number; give (fn, 0.5)")
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            raise RewardFunctionError(f"reward {name!r}: its signature cannot be read; define it with def") from None
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:2]
        if tuple(positional) not in (_BATCHED, _PER_SAMPLE):
            shown_sig = ", ".join(p.name for p in params)
            raise RewardFunctionError(
                f"reward {name!r}: takes ({shown_sig}); expected (prompts, completions, **columns) -> list[float] "
                "(batched, as TRL) or (prompt, completion, **columns) -> float (per sample)")
        takes_all = any(p.kind is p.VAR_KEYWORD for p in params)
        keywords = None if takes_all else frozenset(p.name for p in params[2:]
                                                    if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        target = inspect.unwrap(fn)
        return cls(name=name, fn=fn, weight=float(weight), batched=tuple(positional) == _BATCHED,
                   is_async=inspect.iscoroutinefunction(target), keywords=keywords,
                   source=_source(fn))  # a column it requires and the data lacks: trial() says

    # -- calling ------------------------------------------------------------------------------
    def scores(self, prompts: Sequence[Any], completions: Sequence[str], columns: Sequence[Mapping[str, Any]]) -> list[float]:
        """Its score for each sample (all of one call: a batched function once, a per-sample one per sample).
        Raises what the function raises, or :class:`RewardFunctionError` when it returns something that is not
        one finite number per sample."""
        if self.batched:
            kwargs = {key: [c.get(key) for c in columns] for key in self._keys(columns)}
            shown_completions = [[{"role": "assistant", "content": text}] if isinstance(p, list) else text
                                 for p, text in zip(prompts, completions, strict=True)]
            got = self._run(list(prompts), shown_completions, **kwargs)
            if not isinstance(got, (list, tuple)) or len(got) != len(completions):
                raise RewardFunctionError(f"reward {self.name!r} returned {shown(got)}; expected a list of "
                                          f"{len(completions)} numbers, one per completion")
            return [self._number(v) for v in got]
        return [self._number(self._run(p, text, **{k: c.get(k) for k in self._keys([c])}))
                for p, text, c in zip(prompts, completions, columns, strict=True)]

    def _keys(self, columns: Sequence[Mapping[str, Any]]) -> list[str]:
        names = list(dict.fromkeys(k for c in columns for k in c))
        return names if self.keywords is None else [k for k in names if k in self.keywords]

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return asyncio.run(self.fn(*args, **kwargs))
        got = self.fn(*args, **kwargs)
        return asyncio.run(got) if inspect.iscoroutine(got) else got

    def _number(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) and not _is_number_like(value):
            raise RewardFunctionError(f"reward {self.name!r} returned {shown(value)} ({type(value).__name__}); "
                                      "expected a number")
        number = float(value)
        if not math.isfinite(number):
            raise RewardFunctionError(f"reward {self.name!r} returned {number}; expected a finite number")
        return number

    # -- shipping -----------------------------------------------------------------------------
    def pack(self) -> bytes:
        """The function pickled by value with cloudpickle (its closure and the globals it uses with it), so a
        cluster that cannot import the notebook's cell or module can call it; :class:`RewardFunctionError`
        names what it holds that cannot travel (a lock, a socket, an open file)."""
        return pack_by_value(self.fn, f"reward {self.name!r}")

    def describe(self) -> dict[str, Any]:
        """What the run records of it: name, weight, shape and source text."""
        return {"name": self.name, "weight": self.weight, "shape": "batched" if self.batched else "per sample",
                "async": self.is_async, "source": self.source}

    def __repr__(self) -> str:
        shape = "batched" if self.batched else "per sample"
        return f"RewardFunction({self.name}, {shape}{', async' if self.is_async else ''}, weight={self.weight:g})"

    def _repr_html_(self) -> str:
        import html

        return f"<code>{html.escape(repr(self))}</code>"


def pack_by_value(obj: Any, what: str) -> bytes:
    """``obj`` (a function, a class) pickled by value with cloudpickle: defined in ``__main__`` or in a module of
    the user's that is not installed, it travels with its code and the globals it uses. :class:`RewardFunctionError`
    (``what`` names it) says what it holds that cannot travel."""
    import cloudpickle

    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    by_value = module is not None and module.__name__ != "__main__" and not _installed(module)
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(obj)
    except Exception as err:  # noqa: BLE001 - pickling a user's objects raises many kinds
        raise RewardFunctionError(f"{what}: cannot be shipped with the job: {_unshippable(obj, err)}") from None
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)


def reward_functions(reward: Any) -> list[RewardFunction]:
    """What ``launch(reward=...)`` was given, as :class:`RewardFunction` s: a function, ``(fn, weight)``, or a list
    of those. One line (:class:`RewardFunctionError`) for anything else, and for two functions of one name.

    >>> def exact(prompt, completion, ground_truth, **_): return float(completion.strip() == ground_truth)
    >>> reward_functions([exact])
    [RewardFunction(exact, per sample, weight=1)]
    """
    if reward is None:
        return []
    items: Iterable[Any] = reward if isinstance(reward, list) else [reward]
    found: list[RewardFunction] = []
    for item in items:
        if isinstance(item, tuple):
            if len(item) != 2:
                raise RewardFunctionError(f"reward: {shown(item)} is not (function, weight)")
            found.append(RewardFunction.of(item[0], item[1]))
        else:
            found.append(RewardFunction.of(item))
    names = [f.name for f in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise RewardFunctionError(f"reward: two functions are named {twice[0]!r}; each series reward/<name> needs "
                                  "its own name")
    return found


def made_up_completion(ground_truth: Any) -> str:
    """The answer :func:`trial` offers a function: a sentence ending in the row's ground truth, as a model's would."""
    return f"The answer is {ground_truth}." if ground_truth not in (None, "") else "The answer is 42."


def trial(function: RewardFunction, prompt: Any, columns: Mapping[str, Any], timeout_s: float = 30.0) -> float:
    """Ship ``function`` (pack, then unpack as the engine will) and call the copy once on one real row with a
    made-up completion; its score, or :class:`RewardFunctionError` in one line naming the function and what
    went wrong (cannot travel, raised, a wrong return, a column it needs that the data lacks, too slow)."""
    import threading

    shipped = unpack(function.pack(), function)
    completion = made_up_completion(columns.get("ground_truth"))
    result: dict[str, Any] = {}

    def call() -> None:
        try:
            result["score"] = shipped.scores([prompt], [completion], [columns])[0]
        except BaseException as err:  # noqa: BLE001 - reported below, in one line
            result["error"] = err

    thread = threading.Thread(target=call, daemon=True, name=f"reward-trial-{function.name}")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise RewardFunctionError(f"reward {function.name!r}: one call did not return within {timeout_s:g} s "
                                  "(reward.timeout_s) on the first row")
    err = result.get("error")
    if isinstance(err, RewardFunctionError):
        raise RewardFunctionError(f"{err} (tried on the first row)") from None
    if isinstance(err, TypeError) and "argument" in str(err):
        raise RewardFunctionError(f"reward {function.name!r}: {error_line(err)}; the row's columns are "
                                  f"{', '.join(sorted(columns)) or 'none'}") from None
    if err is not None:
        raise RewardFunctionError(f"reward {function.name!r} raised on the first row with completion "
                                  f"{completion!r}: {error_line(err)}") from None
    return float(result["score"])


def unpack(data: bytes, like: RewardFunction | None = None, *, name: str | None = None,
           weight: float | None = None) -> RewardFunction:
    """A shipped function read back (the engine), judged again by its signature; ``like`` or ``name``/``weight``
    give the weight it travelled with."""
    import cloudpickle

    fn = cloudpickle.loads(data)
    function = RewardFunction.of(fn, like.weight if like is not None else (1.0 if weight is None else weight))
    if like is not None:
        function.source = like.source
    if name is not None and name != function.name:
        raise RewardFunctionError(f"reward {name!r}: the shipped file holds {function.name!r}")
    return function


def digest(data: bytes) -> str:
    """The content address of shipped bytes (a SHA-256's first 16 hex digits)."""
    return hashlib.sha256(data).hexdigest()[:16]


def error_line(err: BaseException) -> str:
    """An exception as the one line kept with a sample: its type and its message's last line, cut to 200 chars."""
    text = str(err).strip().splitlines()
    line = f"{type(err).__name__}: {text[-1]}" if text else type(err).__name__
    return line if len(line) <= 200 else line[:197] + "..."


def _is_number_like(value: Any) -> bool:
    """numpy scalars and 0-d tensors: they convert with float() (``float(np.float32(1))``)."""
    return type(value).__module__.split(".")[0] in ("numpy", "torch") and getattr(value, "ndim", 0) == 0


def _source(fn: Any) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def _installed(module: Any) -> bool:
    """Whether ``module`` comes from an installed package (the cluster imports it by name) rather than a file
    of the user's (a notebook's helper module, a test), which travels by value."""
    import os

    path = getattr(module, "__file__", None)
    if not path:
        return True  # built in
    name = module.__name__.split(".")[0]
    if name in ("skyrl_core", "skyrl_engine", "skyrl_nb", "skyrl_widgets"):
        return True
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    real = os.path.realpath(path)
    return any(real.startswith(os.path.realpath(root) + os.sep) for root in roots)


def _unshippable(fn: Any, err: BaseException) -> str:
    """What in ``fn``'s closure or globals cannot be pickled, in words; else the pickler's own reason."""
    import cloudpickle

    try:
        found = inspect.getclosurevars(fn)
        held = {**found.nonlocals, **found.globals}
    except (TypeError, ValueError):  # a class: the globals its methods use
        held = {}
        for member in vars(fn).values() if isinstance(fn, type) else ():
            if inspect.isfunction(member):
                held.update(inspect.getclosurevars(member).globals)
    for var, value in held.items():
        if inspect.ismodule(value):
            continue
        try:
            cloudpickle.dumps(value)
        except Exception:  # noqa: BLE001 - this is the one we are looking for
            return (f"it holds {var!r} ({type(value).__module__}.{type(value).__qualname__}), which cannot be "
                    "pickled; create it inside the function instead")
    return error_line(err)
