"""An asyncio event loop on a virtual clock: time passes only when every task waits on a
timer, and then jumps straight to the next one. Minutes of pacing, backoff and provider
latency run in the CPU time their code takes, and the same run gives the same figures on any
machine (nothing depends on how fast the machine is).

How: asyncio's ``BaseEventLoop._run_once`` (CPython 3.11, ``asyncio/base_events.py``) asks
``self.time()`` when timers are due and blocks in ``self._selector.select(timeout)`` until the
next one; here ``time`` reads the virtual clock and ``select`` moves the clock by ``timeout``
instead of sleeping (real I/O is still polled, without waiting), except while a job runs in
the loop's executor (``asyncio.to_thread``: the openai SDK reads the platform so, once per
client), whose answer comes on the real clock: then time stands still. Code under test must read
the loop's clock (``loop.time``) where it would read ``time.monotonic``, and do no real I/O
it waits on: the provider simulator's in-process transport (``ProviderSim.transport``) is the
judge's HTTP here.
"""

from __future__ import annotations

import asyncio
import gc
import selectors
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

START = 1000.0  # far from zero: code that treats 0 as "never" is not fooled


class DeadlockError(RuntimeError):
    """Nothing is ready and no timer is due: on a real clock the loop would wait forever."""


def virtual_loop() -> asyncio.AbstractEventLoop:
    """A new event loop whose ``time()`` is virtual, starting at ``START``."""
    loop = asyncio.new_event_loop()
    now = [START]
    selector: selectors.BaseSelector = loop._selector  # type: ignore[attr-defined]
    real_select = selector.select

    threads = [0]  # executor jobs running: time stands still until they are done
    real_executor = loop.run_in_executor

    def run_in_executor(executor: Any, func: Callable[..., Any], *args: Any) -> Any:
        threads[0] += 1
        future = real_executor(executor, func, *args)
        future.add_done_callback(lambda _: threads.__setitem__(0, threads[0] - 1))
        return future

    def select(timeout: float | None = None) -> list[Any]:
        if threads[0]:
            return real_select(0.01)  # a thread's answer comes on the real clock
        if timeout is None:
            events = real_select(1.0)  # a real second for real I/O, then give up
            if not events:
                raise DeadlockError("no task is ready and no timer is due")
            return events
        now[0] += max(0.0, timeout)
        return real_select(0)

    selector.select = select  # type: ignore[method-assign]
    loop.run_in_executor = run_in_executor  # type: ignore[method-assign]
    loop.time = lambda: now[0]  # type: ignore[method-assign]
    return loop


def run_virtual(main: Callable[[], Awaitable[T]]) -> T:
    """``main()`` run to its end on a virtual loop (closed afterwards).

    The cyclic garbage collector is off meanwhile: it runs when allocations say so, and what
    it finalizes (an abandoned async generator's ``aclose``, scheduled on the loop) would
    reorder the loop's callbacks by how much the code allocated, logging included."""
    loop = virtual_loop()
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        if collecting:
            gc.enable()
        gc.collect()
