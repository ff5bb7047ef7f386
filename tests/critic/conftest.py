"""Shared fixtures for the critic tests: a private model cache (tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_model_cache(private_model_cache):
    """Every test here builds models into a per-session cache, never ~/.cache."""
    return private_model_cache
