"""A private local Ray cluster for the placement and async tests."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


@pytest.fixture(scope="module")
def ray_cluster():
    """A private 3-CPU local Ray cluster (own short temp dir, token auth off), stopped afterwards.

    3 logical CPUs (the machine has 2 cores) so a policy bundle plus two engine bundles fit and a
    fourth does not.
    """
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("another Ray session is connected in this process")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    temp_dir = tempfile.mkdtemp(prefix="ra-", dir="/tmp")  # Ray's socket paths have a length limit
    ray.init(
        address="local",
        num_cpus=3,
        num_gpus=0,
        include_dashboard=False,
        _temp_dir=temp_dir,
        configure_logging=False,
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)
