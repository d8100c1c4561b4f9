"""Faust's fetch loop, each record handed to the agents without a race when nothing can
make it wait (mend 10 of ``consumer.py``: a cost, not a defect).

Faust's ``Consumer._drain_messages`` hands every fetched record to the conductor as
``wait_first(callback(record), suspend_flow.wait())``: a race, so that a hand-over waiting
for room (a full agent queue, the producer's buffer, suspended flow, the conductor's
re-index lock) is abandoned when a rebalance suspends the flow. The race costs two tasks
and an event-loop turn per record (about 25 µs here; a fifth of what a Faust agent that
only forwards spends per record), although a hand-over nearly never waits.

Here the record is handed over directly when none of the conductor's waits can happen
(``ConductorWaits.none_for``: each one its handler awaits, checked before the call, with no await
in between), and through Faust's race otherwise. The handler is the one
``Conductor._build_handler`` returns: faust-streaming 0.15's Cython ``ConductorHandler``
(``transport/_cython/conductor.pyx``, built in the installed wheel: flow control, the
producer's ebb, a full queue) or, where it is not built, ``ConductorCompiler.build``'s
``on_message`` in ``transport/conductor.py`` (the same waits and the callback map's lock);
both are fingerprinted in ``tests/kafka/test_upstream_fingerprints.py``. The objects those
checks read (flow control, the conductor's lock and index, the producer's buffer, its
``producer_threaded`` setting) are looked up once a fetch (``ConductorWaits``), their state
per record: the buffer's size as ``ProducerBuffer.size`` measures it (fingerprinted too), but
with the setting read once, not through Faust's settings registry per record. The rest of the
loop is Faust's, minus its read offsets (switched off by mend 3, ``delivery.py``): stop
checks, a yield every 100 records, the commit every ``broker_commit_every`` acks, the
fetching flag, and the same handling of a stopped consumer and of cancellation.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import faust
from faust.transport.consumer import CONSUMER_FETCHING
from faust.types import TP
from mode import Service, ServiceT

YIELD_EVERY = 100  # records handed over between two turns of the event loop (as Faust)


class ConductorWaits:
    """Would the conductor hand a record to its agents without waiting? Each check is one
    await of the handler ``Conductor._build_handler`` returns (the Cython
    ``ConductorHandler.__call__``, or ``ConductorCompiler.build``'s ``on_message``), for the
    records of one fetch: what holds the waits looked up once, their state read per record. The producer buffer's size is ``ProducerBuffer.size``'s,
    the ``producer_threaded`` setting it reads per call read once: the length of the queue
    the property measures in that mode (``qsize()``, its ``len(_queue)``)."""

    __slots__ = ("buffer", "flow", "index", "lock", "threaded")

    def __init__(self, app: faust.App) -> None:
        conductor: Any = app.topics
        self.flow = app.flow_control
        self.lock: asyncio.Lock = conductor._tp_to_callback_lock
        self.index: dict[TP, Any] = conductor._tp_index
        self.buffer: Any = app.producer.buffer
        self.threaded = bool(app.conf.producer_threaded)

    def none_for(self, tp: TP) -> bool:
        """True when no wait of the conductor can happen for a record of ``tp`` now."""
        if not self.flow.is_active():  # on_message: acquire_flow_control()
            return False
        if self.lock.locked():  # async with _tp_to_callback_lock
            return False
        buffer = self.buffer
        if self.threaded:  # ProducerBuffer.size
            queue = buffer.queue
            size = queue.qsize() if queue else 0
        else:
            size = buffer.pending.qsize()
        if size > buffer.max_messages:  # wait_until_producer_ebb()
            return False
        # a full queue: asyncio.wait(... chan.put(event) ...)
        return not any(channel.queue.full() for channel in self.index.get(tp, ()))


class DirectHandover:
    """Faust's consumer with the fetch loop of this module."""

    async def _drain_messages(self, fetcher: ServiceT) -> None:
        consumer: Any = self
        app: faust.App = consumer.app
        callback, getmany = consumer.callback, consumer.getmany
        consumer_stopped = cast(Service, consumer)._stopped.is_set
        fetcher_stopped = cast(Service, fetcher)._stopped.is_set
        suspended = consumer.suspend_flow
        since_yield = 0
        try:
            while not (consumer_stopped() or fetcher_stopped()):
                consumer.diag.set_flag(CONSUMER_FETCHING)
                records = getmany(timeout=1.0)
                await consumer.sleep(0)  # getmany may be called in a loop that never yields
                if not consumer.should_stop:
                    waits = ConductorWaits(app)
                    async for tp, message in records:
                        since_yield += 1
                        if since_yield > YIELD_EVERY:
                            await asyncio.sleep(0)
                            since_yield = 0
                        every = consumer._commit_every
                        if every is not None and consumer._n_acked >= every:
                            consumer._n_acked = 0
                            await consumer.commit()
                        if not suspended.is_set() and waits.none_for(tp):
                            await callback(message)
                        else:
                            await consumer.wait_first(callback(message), suspended.wait())
                consumer.diag.unset_flag(CONSUMER_FETCHING)
        except consumer.consumer_stopped_errors:
            if consumer.transport.app.should_stop:
                consumer.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if consumer.transport.app.should_stop:
                consumer.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            consumer.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            consumer.diag.unset_flag(CONSUMER_FETCHING)
