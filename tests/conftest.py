"""Shared pytest configuration; factories live in fixtures.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY


@pytest.fixture
def metric_value() -> Callable[..., float]:
    """Read one sample from the worker's Prometheus registry (0.0 when absent)."""

    def read(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    return read
