"""Axes for the charts: a range and "nice" ticks (0, 0.25, 0.5 ...), computed once here for the live SVG
widgets (``charts.js`` draws what it is sent) and the static SVG alike.

>>> value_axis([0.21, 0.64], fixed=(0.0, 1.0))["ticks"]
[[0.0, '0'], [0.25, '0.25'], [0.5, '0.5'], [0.75, '0.75'], [1.0, '1']]
>>> step_axis(0, 40)["ticks"]
[[0, '0'], [10, '10'], [20, '20'], [30, '30'], [40, '40']]
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)


def nice_step(span: float, count: int = 5) -> float:
    """The tick spacing from 1, 2, 2.5 or 5 times a power of ten that cuts ``span`` into about ``count - 1`` parts."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    rough = span / max(1, count - 1)
    power = 10.0 ** math.floor(math.log10(rough))
    return next(m * power for m in _STEPS if m * power >= rough * 0.999)


def tick_labels(values: list[float], step: float) -> list[list[Any]]:
    """``[[value, label], ...]``; all in thousands (``7.5k``, ``10k``) when the largest reaches 10,000."""
    if values and max(abs(v) for v in values) >= 10_000:
        return [[v, tick_label(v / 1000, step / 1000) + ("k" if v else "")] for v in values]
    return [[v, tick_label(v, step)] for v in values]


def tick_label(value: float, step: float) -> str:
    """``value`` with as many decimals as the spacing needs: 0.25 -> '0.25', 0 -> '0'."""
    if abs(value) < abs(step) * 1e-6:
        return "0"
    decimals = next((d for d in range(7) if abs(step * 10**d - round(step * 10**d)) < 1e-6 * 10**d), 6)
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def ticks_within(lo: float, hi: float, count: int = 5, integer: bool = False) -> tuple[float, list[float]]:
    """The spacing and the multiples of it that lie in ``[lo, hi]``."""
    step = nice_step(hi - lo, count)
    if integer:
        step = max(1.0, math.ceil(step))
        step = next((m for m in (1, 2, 5, 10, 20, 25, 50) if m >= step), step)
        if step > 50:
            step = nice_step(hi - lo, count)
    first = math.ceil(lo / step - 1e-9)
    values = []
    k = first
    while k * step <= hi + step * 1e-9:
        values.append(round(k * step, 12))
        k += 1
    return step, values


def value_axis(values: Iterable[Any], *, fixed: tuple[float, float] | None = None, floor: float | None = None,
               count: int = 5) -> dict[str, Any]:
    """``{"range": [lo, hi], "ticks": [[value, label], ...]}`` for a y axis.

    ``fixed``: the range is exactly that and every tick lies in it (the reward axis: the reward's own
    scale). Otherwise the range covers the finite ``values`` (and ``floor``, e.g. 0 for a time) and is
    widened to the nice ticks on either side.
    """
    if fixed is not None:
        lo, hi = float(fixed[0]), float(fixed[1])
        if hi <= lo:
            hi = lo + 1.0
        step, ticks = ticks_within(lo, hi, count)
        return {"range": [lo, hi], "ticks": tick_labels(ticks, step)}
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if floor is not None:
        finite.append(float(floor))
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = (lo - pad, hi + pad) if floor is None or lo - pad >= floor else (floor, hi + pad)
    step = nice_step(hi - lo, count)
    lo, hi = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    step, ticks = ticks_within(lo, hi, count)
    return {"range": [round(lo, 12), round(hi, 12)], "ticks": tick_labels(ticks, step)}


def step_axis(first: int, last: int, count: int = 6) -> dict[str, Any]:
    """An x axis over training steps ``[first, last]``: integer ticks only, labelled ``step``."""
    first, last = int(first), int(last)
    if last <= first:
        last = first + 1
    step, ticks = ticks_within(first, last, count, integer=True)
    return {"range": [first, last], "ticks": [[int(v), label] for v, label in tick_labels(ticks, step)], "label": "step"}


def reward_range(*curves: Iterable[Any]) -> tuple[float, float]:
    """The reward axis' fixed range: ``[0, 1]`` (the scale of a verifiable reward), widened to any mean or
    pass@n outside it. The ±std band never widens it (a 0/1 reward's band runs past 0 and 1)."""
    finite = [float(v) for c in curves for v in c if isinstance(v, (int, float)) and math.isfinite(v)]
    return (min([0.0, *finite]), max([1.0, *finite]))
