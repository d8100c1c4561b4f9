from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from scripted_judge import MockJudge

from stream.kafka.broker import EmbeddedBroker

from .harness import Names, Worker

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this folder needs the embedded broker: ``-m "not integration"`` is the
    fast tier. (A ``pytestmark`` in a conftest marks nothing.)"""
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    embedded = EmbeddedBroker(log_path=log).start()
    yield embedded
    embedded.stop()


@pytest.fixture
def names() -> Names:
    return Names()


@pytest.fixture
def judge() -> Iterator[MockJudge]:
    with MockJudge() as server:
        yield server


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()
