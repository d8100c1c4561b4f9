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


def register_session_agent(
    app: faust.App,
    topics: Topics,
    router: ThreadRouter,
    *,
    max_in_flight: int,
    observer: Observer | None = None,
) -> AgentT[bytes]:
    """Validate coaching-session events and forward them, keyed by session, to thread events.

    An invalid event goes to the DLQ with its bytes and error; offsets are acked in order once
    the forwarded event (or the DLQ copy) is on the broker.
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
                try:
                    session = parse_session(message.value)
                    source = f"{message.topic}:{message.partition}"
                    thread_event = router.from_session(session, message.timestamp, source)
                    sends = [topics.to_threads(thread_event)]
                except (ValueError, ValidationError) as exc:
                    sends = dead_letters.invalid(message, exc, what="session event")
                await delivery.deliver(tp, entry, sends, [])
        finally:
            delivery.stop()

    return forward_sessions
