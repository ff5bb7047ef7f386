"""A private local Ray cluster for tests that put roles on Ray actors (own temp dir, token auth off)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@contextmanager
def private_ray_cluster(num_cpus: int) -> Iterator[Any]:
    """Start a private ``num_cpus``-CPU Ray cluster in this process; yield the ``ray`` module; stop it after.

    Skips the test when another Ray session is already connected in this process.
    """
    ray = pytest.importorskip("ray")
    from skyrl_engine.placement import start_private_ray

    if ray.is_initialized():
        pytest.skip("another Ray session is connected in this process")
    temp_dir = start_private_ray(num_cpus=num_cpus)
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
