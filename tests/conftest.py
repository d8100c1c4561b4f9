"""Shared pytest configuration; factories live in fixtures.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings
from prometheus_client import REGISTRY

# property tests run the same examples every time (no flaky CI, nothing saved between runs),
# and as many as keep the unit tier fast
settings.register_profile(
    "scorer",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("scorer")

# the agent tests' fixtures (``worker``, ``sent``)
pytest_plugins = ["agent_tools"]


@pytest.fixture
def metric_value() -> Callable[..., float]:
    """Read one sample from the worker's Prometheus registry (0.0 when absent)."""

    def read(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    return read


def require_tool(name: str) -> str:
    """The path of a command-line tool the suite needs (`make test` installs them); missing,
    the test fails under CI and is skipped on a developer's machine, saying how to get it."""
    import os
    import shutil

    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed: run `make tools` (apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path
