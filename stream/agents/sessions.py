"""The session agent: coaching-session events, validated and forwarded to their thread."""

from __future__ import annotations

from typing import cast

import faust
from faust.streams import Stream
from faust.types import AgentT, StreamT
from pydantic import ValidationError

from ..app import Topics
from ..delivery.dead_letter import DeadLetters
from ..delivery.ordered import OrderedDelivery
from ..delivery.publisher import Publisher, Send
from ..observer import Observer
from ..threads.events import parse_session
from ..threads.router import ThreadRouter
from ..threads.sources import SourceLog, source_name


def register_session_agent(
    app: faust.App,
    topics: Topics,
    router: ThreadRouter,
    *,
    max_in_flight: int,
    sources: SourceLog | None = None,
    observer: Observer | None = None,
) -> AgentT[bytes]:
    """Validate coaching-session events and forward them, keyed by session, to thread events.

    An invalid event goes to the DLQ with its bytes and error; offsets are acked in order once
    the forwarded event (or the DLQ copy) is on the broker. ``sources`` records how far
    each partition is read.
    """
    observer = observer or Observer()
    publisher = Publisher(app)
    dead_letters = DeadLetters(topics.dlq, observer)

    @app.agent(topics.sessions, concurrency=1, name="forward-sessions")
    async def forward_sessions(stream: StreamT[bytes]) -> None:
        await publisher.declare(topics.outputs())
        manual = cast(Stream[bytes], stream).noack()  # agents get a Stream: StreamT lacks noack
        delivery = OrderedDelivery(publisher, manual.ack, max_in_flight, observer)
        delivery.start()
        try:
            async for event in manual.events():
                tp, entry = await delivery.admit(event)
                message = event.message
                sends: list[Send]
                source = source_name(message.topic, message.partition)
                moment = None
                try:
                    session = parse_session(message.value)
                    thread_event = router.from_session(session, message.timestamp, source)
                    sends = [topics.to_threads(thread_event)]
                    moment = session.timestamp
                except (ValueError, ValidationError) as exc:
                    sends = dead_letters.invalid(message, exc, what="session event")
                await delivery.deliver(tp, entry, sends, [])
                if sources:
                    sources.read(source, message.offset, message.timestamp, moment)
        finally:
            delivery.stop()

    return forward_sessions
