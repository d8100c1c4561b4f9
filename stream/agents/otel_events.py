"""Scores as OpenTelemetry evaluation events (design record 31): ``otel-events`` reads the
scores topic and sends each score that evaluated something (ok or error) as one OTLP logs
export holding its ``gen_ai.evaluation.result`` event (``stream.otlp.evaluation``) to
``SCORER_OTEL_EVENTS_TOPIC``, keyed by the score's target id (a trace's events share a
partition), in order and at least once: a score's offset is acked once its event is on the
broker. A skipped score is acked and sends nothing; a message that is not a score event is
dead-lettered with the reason.
"""

from __future__ import annotations

from datetime import datetime

import faust
from faust.types import AgentT, Message, TopicT
from pydantic import ValidationError

from ..app import Topics
from ..delivery.dead_letter import DeadLetters
from ..delivery.publisher import Send
from ..models import ScoreEvent
from ..observer import Observer
from ..otlp.evaluation import emitted, encode, message_key
from ..settings import Settings
from .forward import register_forwarder

AGENT_NAME = "otel-events"


def register_otel_events_agent(
    app: faust.App, topics: Topics, settings: Settings, observer: Observer
) -> AgentT[bytes]:
    """The agent writing each score's evaluation event to the events topic (set: not "")."""
    assert settings.otel_events_topic, "SCORER_OTEL_EVENTS_TOPIC is off"

    def raw_topic(name: str) -> TopicT:
        return app.topic(
            name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )

    scores, events = raw_topic(settings.scores_topic), raw_topic(settings.otel_events_topic)
    dead_letters = DeadLetters(topics.dlq, observer)
    encoding = settings.otel_events_encoding

    def convert(message: Message) -> tuple[list[Send], datetime | None]:
        try:
            score = ScoreEvent.model_validate_json(message.value or b"")
        except (ValueError, ValidationError) as exc:
            return dead_letters.invalid(message, exc, what="score event"), None
        if not emitted(score):
            return [], None
        return [(events, message_key(score), encode([score], encoding), None)], None

    return register_forwarder(
        app,
        scores,
        AGENT_NAME,
        convert,
        declare=[topics.dlq, events],
        dead_letters=dead_letters,
        max_in_flight=settings.max_in_flight,
        observer=observer,
    )
