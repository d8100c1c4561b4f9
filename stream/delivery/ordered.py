"""Ordered, at-least-once delivery of what each consumed message produced."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, cast

from faust.types import TP, EventT

from ..models import ScoreEvent
from ..observer import Observer
from .acking import InOrderAcker, Pending
from .publisher import Publisher, Send
from .slots import Slots

log = logging.getLogger(__name__)

# one consumed message's delivery: where it is, what it sends, its scores, its early sends
Delivery = tuple[
    TP, Pending, list[Send], list[ScoreEvent], tuple[list[Send], list[Awaitable[Any]]] | None
]


class OrderedDelivery:
    """Publish what each consumed message produced; ack its offset once the broker has all of
    it and every earlier offset of its partition is acked too (at-least-once, in order).

    At most ``max_in_flight`` messages are in flight; a failed send is retried in the
    background until it succeeds (the offset stays unacked meanwhile). ``retrying`` is told
    when a message's retries begin (True) and when they have delivered (False): later
    messages go on meanwhile, so what was sent after it is no sign that it was. With
    ``ack_all`` (``ack`` for a list of events at once), what the broker's answer to a batch
    lets be acked is acked in one call.
    """

    def __init__(
        self,
        publisher: Publisher,
        ack: Callable[[EventT[bytes]], Awaitable[Any]],
        max_in_flight: int,
        observer: Observer | None = None,
        retrying: Callable[[TP, Pending, bool], None] | None = None,
        ack_all: Callable[[list[EventT[bytes]]], Any] | None = None,
    ) -> None:
        self.publisher = publisher
        self.retrying = retrying
        self.observer = observer or Observer()
        self.acker = InOrderAcker(ack, ack_all)
        self.slots = Slots(max_in_flight)
        # what the broker has, in the order it was told so: a batch's entries in one item
        self.finished: asyncio.Queue[list[tuple[TP, Pending]]] = asyncio.Queue()
        self.background: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` in the background until it ends or delivery stops."""
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def start(self) -> None:
        self.spawn(self._ack_finished())

    def stop(self) -> None:
        for task in list(self.background):
            task.cancel()

    async def admit(self, event: EventT[bytes]) -> tuple[TP, Pending]:
        """Wait for a free slot, then track ``event`` as in flight (in offset order)."""
        await self.slots.acquire()
        return self._track(event)

    def admit_now(self, event: EventT[bytes]) -> tuple[TP, Pending] | None:
        """``admit`` when a slot is free now, without a wait; None when there is none."""
        return self._track(event) if self.slots.take() else None

    def _track(self, event: EventT[bytes]) -> tuple[TP, Pending]:
        message = event.message
        return message.tp, self.acker.track(event, message.tp, message.offset)

    async def _ack_finished(self) -> None:
        finish, finish_all = self.acker.finish, self.acker.finish_all
        while True:
            finished = await self.finished.get()
            if self.acker.ack_all is not None:  # what the item releases, acked at once
                try:
                    finish_all(finished)
                except Exception:
                    log.exception("acking %s failed", finished)
                continue
            for tp, entry in finished:
                try:
                    await finish(tp, entry)
                except Exception:  # never let one failed ack stop every later ack
                    log.exception("acking %s@%s failed", tp, entry.offset)

    def _published(
        self,
        entries: list[tuple[TP, Pending]],
        scores: list[ScoreEvent],
        latency: float | None = None,
    ) -> None:
        """The broker has every message of these entries (``latency`` after they were handed
        over, if timed: one observation a message): count their scores, free their slots, and
        let the acker ack them, as one item, once the offsets before them are done too."""
        try:
            if latency is not None:
                for _ in entries:
                    self.observer.on_publish_latency(latency)
            self.observer.on_scores_published(scores)
        finally:  # a metric that raises must not hold a partition back
            for _ in entries:
                self.slots.release()
            self.finished.put_nowait(entries)

    def _delivered(
        self,
        tp: TP,
        entry: Pending,
        sends: list[Send],
        scores: list[ScoreEvent],
        handed: float,
        delivery: asyncio.Future[Any],
    ) -> None:
        if _failed(delivery):
            self.failed(tp, entry)
            self.spawn(self._redeliver(tp, entry, sends, scores))
            return
        self._published([(tp, entry)], scores, time.perf_counter() - handed)

    async def _redeliver(
        self, tp: TP, entry: Pending, sends: list[Send], scores: list[ScoreEvent]
    ) -> None:
        await self.publisher.send_until_delivered(sends)
        if self.retrying:
            self.retrying(tp, entry, False)
        self._published([(tp, entry)], scores)

    def watch(self, tp: TP, entry: Pending, futures: list[Awaitable[Any]]) -> None:
        """``entry``'s messages sent ahead of ``deliver`` (their delivery ``futures``): one
        that fails is ``failed`` at once, not only when ``deliver`` gathers them."""
        for future in futures:
            cast(asyncio.Future[Any], future).add_done_callback(
                lambda done: self.failed(tp, entry) if _failed(done) else None
            )

    def failed(self, tp: TP, entry: Pending) -> None:
        """A send of ``entry`` failed: it will be sent again (say so before anything else
        runs, so that no report sent meanwhile counts it as delivered)."""
        if self.retrying:
            self.retrying(tp, entry, True)

    async def deliver(
        self,
        tp: TP,
        entry: Pending,
        sends: list[Send],
        scores: list[ScoreEvent],
        early: tuple[list[Send], list[Awaitable[Any]]] | None = None,
    ) -> None:
        """Hand ``sends`` to the producer; the offset is acked once the broker has them all,
        and the ``early`` messages (already sent, with their delivery futures) too."""
        early_sends, early_futures = early or ([], [])
        try:
            futures = await self.publisher.send(sends)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.failed(tp, entry)
            self.spawn(self._redeliver(tp, entry, early_sends + sends, scores))
            return
        delivery = asyncio.gather(*early_futures, *futures)
        delivery.add_done_callback(
            partial(self._delivered, tp, entry, early_sends + sends, scores, time.perf_counter())
        )

    async def deliver_batch(self, batch: list[Delivery]) -> None:
        """``deliver`` for many consumed messages at once: their sends handed to the producer
        as whole record batches (``Publisher.send_batched``), one wait for all of them.

        Each offset is acked as ``deliver`` acks it: once the broker has all its messages
        (and its ``early`` ones), in offset order. If any send of the batch fails, every
        entry of the batch is sent again on its own (a message may then be on the broker
        twice: at least once, never lost).
        """
        if not batch:
            return
        sends = [send for _, _, entry_sends, _, _ in batch for send in entry_sends]
        try:
            futures = await self.publisher.send_batched(sends)
        except asyncio.CancelledError:
            raise
        except Exception:
            for tp, entry, entry_sends, scores, early in batch:
                self._resend(tp, entry, (early or ([], []))[0] + entry_sends, scores)
            return
        # a record batch's messages share its future: each waited for once
        unique = dict.fromkeys(futures)
        for _, _, _, _, early in batch:
            if early is not None:
                unique.update(dict.fromkeys(early[1]))
        delivery = asyncio.gather(*unique)
        delivery.add_done_callback(partial(self._batch_delivered, batch, time.perf_counter()))

    def _batch_delivered(
        self, batch: list[Delivery], handed: float, delivery: asyncio.Future[Any]
    ) -> None:
        if _failed(delivery):
            for tp, entry, sends, scores, early in batch:
                self._resend(tp, entry, (early or ([], []))[0] + sends, scores)
            return
        self._published(
            [(tp, entry) for tp, entry, _, _, _ in batch],
            [score for _, _, _, scores, _ in batch for score in scores],
            time.perf_counter() - handed,
        )

    def _resend(self, tp: TP, entry: Pending, sends: list[Send], scores: list[ScoreEvent]) -> None:
        self.failed(tp, entry)
        self.spawn(self._redeliver(tp, entry, sends, scores))


def _failed(delivery: asyncio.Future[Any]) -> bool:
    return delivery.cancelled() or delivery.exception() is not None
