"""``Slots``: a semaphore's count with a synchronous take (what ``asyncio.Semaphore`` does,
from CPython 3.11's ``asyncio/locks.py``: FIFO waiters, a cancelled waiter passes its slot on)."""

from __future__ import annotations

import asyncio

import pytest

from stream.delivery.slots import Slots


def test_take_counts_down_to_none_and_release_frees_one() -> None:
    slots = Slots(2)
    assert slots.take() and slots.take()
    assert slots.locked() and not slots.take()
    slots.release()
    assert not slots.locked()
    assert slots.take()


async def test_a_waiter_gets_the_released_slot_before_anyone_takes_it() -> None:
    slots = Slots(1)
    assert slots.take()
    waiting = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    assert not waiting.done()
    slots.release()
    assert not slots.take()  # the released slot is the waiter's
    await asyncio.wait_for(waiting, 1)
    assert slots.free == 0 and slots.locked()


async def test_waiters_are_served_in_the_order_they_came() -> None:
    slots = Slots(1)
    assert slots.take()
    served: list[int] = []

    async def wait(number: int) -> None:
        await slots.acquire()
        served.append(number)

    tasks = [asyncio.create_task(wait(n)) for n in range(3)]
    await asyncio.sleep(0)
    for _ in range(3):
        slots.release()
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*tasks), 1)
    assert served == [0, 1, 2]


async def test_a_waiter_cancelled_before_its_turn_leaves_the_queue() -> None:
    slots = Slots(1)
    assert slots.take()
    first = asyncio.create_task(slots.acquire())
    second = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    slots.release()
    await asyncio.wait_for(second, 1)
    assert slots.free == 0


async def test_a_waiter_cancelled_after_it_was_given_a_slot_passes_it_on() -> None:
    slots = Slots(1)
    assert slots.take()
    first = asyncio.create_task(slots.acquire())
    second = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    slots.release()  # the slot goes to the first waiter...
    first.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)  # the slot went on to the second
    assert slots.free == 0
    slots.release()
    assert slots.free == 1 and not slots.locked()


@pytest.mark.parametrize("size", [0, -1])
def test_fewer_than_one_slot_is_refused(size: int) -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        Slots(size)
