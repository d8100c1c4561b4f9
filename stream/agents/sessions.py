"""The session agent: coaching-session events, validated and forwarded to their thread."""

from __future__ import annotations

from datetime import datetime

import faust
from faust.types import AgentT, Message
from pydantic import ValidationError

from ..app import Topics
from ..delivery.dead_letter import DeadLetters
from ..delivery.publisher import Send
from ..observer import Observer
from ..threads.events import parse_session
from ..threads.router import ThreadRouter
from ..threads.sources import SourceLog, source_name
from .forward import register_forwarder


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
    dead_letters = DeadLetters(topics.dlq, observer)

    def convert(message: Message) -> tuple[list[Send], datetime | None]:
        source = source_name(message.topic, message.partition)
        try:
            session = parse_session(message.value)
            thread_event = router.from_session(session, message.timestamp, source, message.key)
        except (ValueError, ValidationError) as exc:
            return dead_letters.invalid(message, exc, what="session event"), None
        return [topics.to_threads(thread_event)], session.timestamp

    return register_forwarder(
        app,
        topics.sessions,
        "forward-sessions",
        convert,
        declare=topics.outputs(),
        dead_letters=dead_letters,
        max_in_flight=max_in_flight,
        sources=sources,
        observer=observer,
    )
