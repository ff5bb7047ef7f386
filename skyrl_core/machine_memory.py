"""What a built-in model's run needs of a machine's memory, as measured, and the SageMaker instance that holds it.

>>> need = MEASURED[0]
>>> need.model == "builtin://tiny-qwen2", need.tuning
(True, 'full')
>>> instance_for(3.0).name
'ml.t3.medium'

Each figure is the peak of a whole run on one machine, the way the quickstart notebook runs it: the kernel,
the local Ray head (GCS, raylet, the dashboard and its module processes, its agents, the log monitor), the
Jobs API's driver and the workers, and the evaluation job the notebook submits at the end. It is the sum of
the processes' proportional set sizes (PSS: a page shared by several processes counted once), sampled every
quarter second by ``python -m bench memory`` (``bench/results/memory.json``, docs/benchmarks.md). It holds
for the preset's own batch sizes and lengths; a larger batch, a critic or a reference model needs more.

A machine needs the peak plus :data:`HEADROOM_GIB` (the OS, the Jupyter server, slack). Linux reports a
little less than an instance's nominal memory (an ml.t3.medium's 4 GiB reads about 3.8 GiB), so a machine
is short of a need when it has less than :data:`REPORTED_SHARE` of it: :func:`memory_warning` then says so in
one line, naming the run, the need, the machine's memory and the instance to pick. It warns, it never refuses.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from skyrl_core.catalog import SMOLLM2, TINY_MODEL

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig

GIB = 2**30
HEADROOM_GIB = 1.0
"""What a machine needs beyond a run's measured peak: the OS, the Jupyter server, slack."""
REPORTED_SHARE = 0.93
"""The share of an instance's nominal memory Linux reports as its total (an ml.t3.medium: ~3.8 of 4 GiB)."""


@dataclass(frozen=True)
class Instance:
    """A SageMaker instance type (Studio notebooks and training): its name, nominal memory and vCPUs."""

    name: str
    memory_gib: int
    vcpus: int

    def __repr__(self) -> str:
        return f"{self.name} ({self.memory_gib} GiB, {self.vcpus} vCPU)"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


#: The CPU instances the advice picks from, smallest memory first; the first of a size is picked (ml.t3.medium
#: is Studio's default; the m5 sizes keep their CPU speed where a t3's burst credits run out).
INSTANCES: tuple[Instance, ...] = (
    Instance("ml.t3.medium", 4, 2),
    Instance("ml.m5.large", 8, 2),
    Instance("ml.m5.xlarge", 16, 4),
    Instance("ml.m5.2xlarge", 32, 8),
    Instance("ml.m5.4xlarge", 64, 16),
)


def instance_for(gib: float) -> Instance | None:
    """The smallest instance of :data:`INSTANCES` with at least ``gib`` GiB (None: none is that large)."""
    return next((i for i in INSTANCES if i.memory_gib >= gib), None)


@dataclass(frozen=True)
class MeasuredNeed:
    """One measured run: the model, ``lora`` or ``full`` fine-tuning, the preset it ran as, its peak memory
    (GiB, PSS summed over the process tree) and where it was measured."""

    model: str
    tuning: str
    preset: str
    peak_gib: float
    measured: str

    @property
    def label(self) -> str:
        """How a person names the run: ``the quickstart preset`` or ``the smollm2 preset (full fine-tune)``."""
        if self.model == TINY_MODEL:
            return f"the {self.preset} preset"
        return f"the {self.preset} preset ({'LoRA' if self.tuning == 'lora' else 'full fine-tune'})"

    @property
    def need_gib(self) -> float:
        """Memory the machine needs: the peak plus :data:`HEADROOM_GIB`."""
        return round(self.peak_gib + HEADROOM_GIB, 1)

    def instance(self) -> Instance | None:
        """The smallest SageMaker instance that holds it."""
        return instance_for(self.need_gib)

    def __repr__(self) -> str:
        return (f"{self.label}: peak {self.peak_gib:g} GiB, needs {self.need_gib:g} GiB -> "
                f"{self.instance() or 'no listed instance'} (measured {self.measured})")

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


_WHERE = "python -m bench memory, 2026-12-04, 2-core AMD EPYC, 24 GiB, load 0.5-11"
_WHERE_NOW = "python -m bench memory, 2026-12-04 (after the sampler of issue 38), 2-core AMD EPYC, 24 GiB, load 1.1-2.5"

#: The measured runs (``python -m bench memory``; docs/benchmarks.md, docs/instances.md).
MEASURED: tuple[MeasuredNeed, ...] = (
    MeasuredNeed(TINY_MODEL, "full", "quickstart", 1.8, _WHERE_NOW),
    MeasuredNeed(SMOLLM2, "lora", "smollm2", 5.4, _WHERE_NOW),
    MeasuredNeed(SMOLLM2, "full", "smollm2", 6.4, _WHERE),
)


def need_for(cfg: JobConfig) -> MeasuredNeed | None:
    """The measured run for ``cfg``'s model and tuning (LoRA when ``lora.rank > 0``); None for a model not measured."""
    model = cfg.trainer.policy.model
    tuning = "lora" if model.lora.rank > 0 else "full"
    return next((m for m in MEASURED if m.model == model.path and m.tuning == tuning), None)


def machine_memory_bytes() -> int | None:
    """This machine's total physical memory in bytes (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def memory_warning(cfg: JobConfig, total_bytes: int | None, where: str = "this machine") -> str | None:
    """One line when ``total_bytes`` of memory (``where`` has them) is short of what ``cfg``'s run needs; None when
    it is enough, or when either is unknown.

    >>> from skyrl_core.config import load_config
    >>> memory_warning(load_config("smollm2", ["trainer.policy.model.lora.rank=0"]), 4 * GIB)  # doctest: +ELLIPSIS
    'memory: the smollm2 preset (full fine-tune) needs about ... GiB; this machine has 4.0 GiB: pick ml.m5...'
    """
    need = need_for(cfg)
    if need is None or total_bytes is None or total_bytes >= need.need_gib * REPORTED_SHARE * GIB:
        return None
    instance = need.instance()
    pick = f"pick {instance.name} ({instance.memory_gib} GiB) or larger" if instance else "pick a larger machine"
    return (f"memory: {need.label} needs about {need.need_gib:g} GiB (its measured peak {need.peak_gib:g} GiB + "
            f"{HEADROOM_GIB:g} GiB for the OS and Jupyter); {where} has {total_bytes / GIB:.1f} GiB: {pick}")
