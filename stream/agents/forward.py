"""An agent that forwards each message of an input topic, converted, in order.

The session agent and the spans agent are the same loop: read a message, turn it into the
messages to send (or a dead letter), hand them to the producer, ack offsets in order once
they are on the broker, and record how far the source partition is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import cast

import faust
from faust.streams import Stream
from faust.types import AgentT, Message, StreamT, TopicT

from ..delivery.ordered import OrderedDelivery
from ..delivery.publisher import Publisher, Send
from ..observer import Observer
from ..threads.sources import SourceLog, source_name

# a message -> what to send for it, and its event time (None: unknown)
Convert = Callable[[Message], tuple[list[Send], datetime | None]]


def register_forwarder(
    app: faust.App,
    topic: TopicT,
    name: str,
    convert: Convert,
    *,
    declare: Iterable[TopicT],
    max_in_flight: int,
    sources: SourceLog | None = None,
    observer: Observer | None = None,
) -> AgentT[bytes]:
    """An agent on ``topic`` sending ``convert(message)`` for each message, in order."""
    observer = observer or Observer()
    publisher = Publisher(app)
    outputs = list(declare)

    async def forward(stream: StreamT[bytes]) -> None:
        await publisher.declare(outputs)
        manual = cast(Stream[bytes], stream).noack()  # agents get a Stream: StreamT lacks noack
        delivery = OrderedDelivery(publisher, manual.ack, max_in_flight, observer)
        delivery.start()
        try:
            async for event in manual.events():
                tp, entry = await delivery.admit(event)
                message = event.message
                sends, moment = convert(message)
                await delivery.deliver(tp, entry, sends, [])
                if sources:
                    source = source_name(message.topic, message.partition)
                    sources.read(source, message.offset, message.timestamp, moment)
        finally:
            delivery.stop()

    return app.agent(topic, concurrency=1, name=name)(forward)
