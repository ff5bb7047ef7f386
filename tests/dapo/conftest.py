"""Shared fixtures for the engine tests: a private model cache and a tiny untrained model."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_model_cache(private_model_cache):
    """Every test here builds models into a per-session cache (tests/conftest.py), never ~/.cache."""
    return private_model_cache
