"""A record of the co-partitioned sessions topic, taken by the thread agent: folded in its
thread's partition, or forwarded there (``sessions.py`` says when the thread agent reads the
sessions topic itself; design record 33)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from faust.types import Message
from pydantic import ValidationError

from ..app import Topics
from ..delivery.dead_letter import DeadLetters
from ..delivery.publisher import Publisher
from ..kafka.mends.partitioning import key_hash
from ..observer import Observer
from ..sources.log import SourceLog, source_name
from ..threads.events import ThreadEvent, parse_session
from ..threads.router import ThreadRouter

log = logging.getLogger(__name__)


class SessionIntake:
    """What the thread agent does with a record of the co-partitioned sessions topic: a valid
    event in its thread's partition is folded at once (``fold``, writing the table in the
    record's context, so its changelog record goes to the record's partition); one in
    another partition is forwarded there and on the broker before ``take`` returns (the
    record is acked after it); an invalid one goes to the DLQ. Then the source is read up
    to it (``SourceLog``): what it brought is folded or on the broker by then."""

    def __init__(
        self,
        topics: Topics,
        router: ThreadRouter,
        partitions: int,
        *,
        publisher: Publisher,
        dead_letters: DeadLetters,
        sources: SourceLog | None,
        observer: Observer,
    ) -> None:
        self.topics = topics
        self.router = router
        self.partitions = partitions
        self.publisher = publisher
        self.dead_letters = dead_letters
        self.sources = sources
        self.observer = observer
        self.forwarded = 0  # events not in their thread's partition (logged the first time)

    def placed(self, event: ThreadEvent) -> int:
        """The partition its thread is in (as the producer places ``to_threads``)."""
        return key_hash(event.placement) % self.partitions

    async def take(
        self, message: Message, fold: Callable[[Message, ThreadEvent], Awaitable[None]]
    ) -> None:
        source = source_name(message.topic, message.partition)
        moment = None
        try:
            session = parse_session(message.value)
            event = self.router.from_session(session, message.timestamp, source, message.key)
        except (ValueError, ValidationError) as exc:
            invalid = self.dead_letters.invalid(message, exc, what="session event")
            await self.publisher.send_until_delivered(invalid)
        else:
            moment = session.timestamp
            if self.placed(event) == message.partition:
                await fold(message, event)
            else:
                self._forwarding(message)
                await self.publisher.send_until_delivered([self.topics.to_threads(event)])
        if self.sources is not None:
            self.sources.read(source, message.offset, message.timestamp, moment)

    def _forwarding(self, message: Message) -> None:
        self.forwarded += 1
        if self.forwarded == 1:
            log.warning(
                "a session event of %s[%d] (key %r) is not in its session's partition: "
                "forwarded, one round trip each; key session events by session id",
                message.topic,
                message.partition,
                message.key[:64] if message.key else None,
            )
