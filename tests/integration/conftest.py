from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stream.broker import EmbeddedBroker
from stream.mockjudge import MockJudge

from .harness import Names, Worker

pytestmark = pytest.mark.integration


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
