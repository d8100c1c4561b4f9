"""The worker's garbage collector settings (``scorer worker``: ``settle_collector``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from stream.cli.commands import GEN0_THRESHOLD, settle_collector


@pytest.fixture
def collector() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@pytest.mark.usefixtures("collector")
def test_the_worker_freezes_what_it_imported_and_collects_its_youngest_less_often() -> None:
    gc.set_threshold(700, 10, 10)  # Python's defaults
    alive = [object] * 1  # a container of this test, alive before the worker settles
    settle_collector()
    assert gc.get_threshold() == (GEN0_THRESHOLD, 10, 10)
    assert GEN0_THRESHOLD > 700
    assert gc.get_freeze_count() > 0
    assert all(o is not alive for o in gc.get_objects())  # frozen: out of every generation


@pytest.mark.usefixtures("collector")
def test_cyclic_garbage_made_after_the_start_is_still_collected() -> None:
    settle_collector()

    class Node:
        other: object = None

    first, second = Node(), Node()
    first.other, second.other = second, first
    del first, second
    assert gc.collect() >= 2  # a full pass still finds the cycle (it was made after the freeze)
