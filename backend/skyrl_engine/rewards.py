"""The reward stage for reward functions written in Python (``reward.functions``): each sample scored by every
function, in a pool of threads so that slow functions (an API call, a sandbox) overlap instead of serialising the step.

A per-sample function is one call per sample; a batched (TRL-shaped) one is one call per prompt's group of ``n``
samples. Each call has ``reward.timeout_s``; a call that raises, returns something that is not a finite number or
runs out of time scores 0 for its samples, the error's last line is kept with them (the ``reward_error``
trajectory column, which the inspector shows) and counted in ``reward/errors``; with ``reward.errors: fail`` the
step raises :class:`~skyrl_core.reward_functions.RewardFunctionError` with that line instead, and the run fails
with it in its status. Each function's mean score is the series ``reward/<name>``; a sample's reward is the
weighted sum. The pool's threads are daemons: a call that never returns is left behind (a fresh thread takes its
place), never waited for at exit.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from skyrl_core.reward_functions import RewardFunction, RewardFunctionError, error_line, unpack
from skyrl_core.user_inputs import read_input

ERROR_COLUMN = "reward_error"


@dataclass
class Scored:
    """One step's scores: the weighted reward of each sample, each function's scores, the errors' lines."""

    rewards: list[float]
    by_function: dict[str, list[float]]
    errors: list[str | None]

    def metrics(self) -> dict[str, float]:
        found = {f"reward/{name}": sum(s) / max(1, len(s)) for name, s in self.by_function.items()}
        found["reward/errors"] = float(sum(1 for e in self.errors if e))
        return found

    def columns(self) -> list[dict[str, Any]]:
        """The trajectory columns of each sample: ``reward_error`` and ``reward/<name>``."""
        return [{ERROR_COLUMN: error, **{f"reward/{name}": scores[b] for name, scores in self.by_function.items()}}
                for b, error in enumerate(self.errors)]


class _DaemonPool:
    """``max_workers`` daemon threads taking calls from one queue; :meth:`submit` returns a Future."""

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers
        self._tasks: queue.SimpleQueue[tuple[Future, Callable[[], Any], list[float]]] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, call: Callable[[], Any]) -> tuple[Future, list[float]]:
        """The Future of ``call`` and a one-item list that holds its start time once a thread takes it."""
        future: Future = Future()
        started: list[float] = []
        self._tasks.put((future, call, started))
        if len(self._threads) < self.max_workers:  # threads never exit: no scan of them per call
            with self._lock:
                if len(self._threads) < self.max_workers:
                    self._start()
        return future, started

    def replace(self, count: int) -> None:
        """``count`` threads are stuck in calls that ran out of time: start as many fresh ones."""
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            for _ in range(count):
                self._start()

    def _start(self) -> None:
        thread = threading.Thread(target=self._work, daemon=True, name="skyrl-reward")
        thread.start()
        self._threads.append(thread)

    def _work(self) -> None:
        while True:
            future, call, started = self._tasks.get()
            if not future.set_running_or_notify_cancel():
                continue
            started.append(time.monotonic())
            try:
                future.set_result(call())
            except BaseException as err:  # noqa: BLE001 - handed to the step with the sample
                future.set_exception(err)


class RewardPool:
    """Scores samples with ``functions`` (see the module docstring).

    >>> pool = RewardPool([RewardFunction.of(exact)], timeout_s=5, errors="skip", max_workers=4)  # doctest: +SKIP
    >>> pool.score(["2+2"], ["4"], [{"ground_truth": "4"}], group_size=1).rewards                 # doctest: +SKIP
    [1.0]
    """

    def __init__(self, functions: Sequence[RewardFunction], *, timeout_s: float, errors: str, max_workers: int) -> None:
        self.functions = list(functions)
        self.timeout_s = float(timeout_s)
        self.fail = str(errors) == "fail"
        self.pool = _DaemonPool(max_workers)

    @classmethod
    def from_config(cls, reward: Any, run_dir: str) -> RewardPool | None:
        """The pool ``reward`` (the config's section) asks for, its functions read from the run's folder (or imported,
        for ``module:function``); None when it names no function."""
        if not reward.functions:
            return None
        functions = [load_function(f.file, run_dir, name=f.name, weight=f.weight) for f in reward.functions]
        return cls(functions, timeout_s=reward.timeout_s, errors=reward.errors, max_workers=reward.max_workers)

    def score(self, prompts: Sequence[Any], completions: Sequence[str], columns: Sequence[dict[str, Any]],
              group_size: int) -> Scored:
        """Every function's score of every sample; samples are prompt-major in groups of ``group_size``."""
        n = len(completions)
        calls: list[tuple[RewardFunction, range, Future, list[float]]] = []
        for function in self.functions:
            step = group_size if function.batched else 1
            for start in range(0, n, step):
                span = range(start, min(n, start + step))

                def call(f: RewardFunction = function, s: range = span) -> list[float]:
                    return f.scores([prompts[b] for b in s], [completions[b] for b in s], [columns[b] for b in s])

                calls.append((function, span, *self.pool.submit(call)))
        by_function = {f.name: [0.0] * n for f in self.functions}
        errors: list[list[str]] = [[] for _ in range(n)]
        for function, span, future, started in calls:
            try:
                got = self._wait(future, started)
            except BaseException as err:  # noqa: BLE001 - the function's own error, kept with its samples
                got = err
                if isinstance(err, TimeoutError) and not future.done():
                    self.pool.replace(1)  # its thread is stuck in the call: a fresh one takes the queue
                    got = RewardFunctionError(f"did not return within {self.timeout_s:g} s (reward.timeout_s)")
            if isinstance(got, BaseException):
                line = f"{function.name}: {_line(got, function)}"
                if self.fail:
                    raise RewardFunctionError(f"reward function {line} (reward.errors=fail)")
                for b in span:
                    errors[b].append(line)
                continue
            for b, value in zip(span, got, strict=True):
                by_function[function.name][b] = value
        rewards = [sum(f.weight * by_function[f.name][b] for f in self.functions) for b in range(n)]
        return Scored(rewards, by_function, ["; ".join(e) or None for e in errors])

    def _wait(self, future: Future, started: list[float]) -> Any:
        """``future``'s result, waiting at most ``timeout_s`` from when a thread took its call (waiting for a thread
        while the pool is busy does not count); TimeoutError when the call runs longer."""
        while True:
            left = self.timeout_s if not started else started[0] + self.timeout_s - time.monotonic()
            try:
                return future.result(timeout=max(0.0, left))
            except TimeoutError:
                if started and time.monotonic() >= started[0] + self.timeout_s:
                    raise

    def __repr__(self) -> str:
        return (f"RewardPool({', '.join(repr(f) for f in self.functions)}; timeout {self.timeout_s:g} s, "
                f"{self.pool.max_workers} threads, errors={'fail' if self.fail else 'skip'})")


def _line(err: BaseException, function: RewardFunction) -> str:
    text = str(err)
    prefix = f"reward {function.name!r} "
    return text[len(prefix):] if isinstance(err, RewardFunctionError) and text.startswith(prefix) else error_line(err)


def load_function(location: str, run_dir: str, *, name: str, weight: float) -> RewardFunction:
    """A reward function of ``reward.functions``: a shipped ``inputs://`` pickle from the run's folder (a local one
    or an object store), or ``module:function`` imported."""
    if ":" in location and "://" not in location:
        import importlib

        module, _, attr = location.partition(":")
        fn = getattr(importlib.import_module(module), attr)
        function = RewardFunction.of(fn, weight)
    else:
        function = unpack(read_input(location, run_dir), name=name, weight=weight)
    function.name = name
    return function


def register_shipped_environments(shipped: dict[str, str], run_dir: str) -> list[str]:
    """Register with skyrl-gym the environment classes launch shipped by value (``environment.shipped``: name ->
    ``inputs://`` pickle in the run's folder), so ``skyrl_gym.make(name)`` builds them in this process; the names."""
    if not shipped:
        return []
    import cloudpickle
    from skyrl_gym.envs import registration

    for name, location in shipped.items():
        if name not in registration.registry:
            registration.register(id=name, entry_point=cloudpickle.loads(read_input(location, run_dir)))
    return list(shipped)
