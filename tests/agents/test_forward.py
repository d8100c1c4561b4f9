"""The forwarding loop the session and spans agents share: whatever a converter raises on
one message dead-letters that message, and the partition moves on."""

from __future__ import annotations

from datetime import datetime

from agent_tools import Worker, counted, dead_letters, settled
from faust.types import Message

from stream.agents.forward import register_forwarder
from stream.delivery.dead_letter import DeadLetters
from stream.delivery.publisher import Send


async def test_a_message_its_converter_raises_on_is_dead_lettered_and_the_rest_go_on(
    worker: Worker, sent: list[Send]
) -> None:
    app, topics, _, metrics = worker
    source, out = app.topic("coaching-sessions"), app.topic("out")

    def convert(message: Message) -> tuple[list[Send], datetime | None]:
        if message.value == b"poison":
            raise AttributeError("'int' object has no attribute 'get'")  # a converter's bug
        return [(out, message.key, message.value, None)], None

    agent = register_forwarder(
        app,
        source,
        "forward-test",
        convert,
        declare=[out],
        dead_letters=DeadLetters(topics.dlq, metrics),
        max_in_flight=4,
        observer=metrics,
    )
    async with agent.test_context() as context:
        events = [await context.put(value, key=b"s-1") for value in (b"a", b"poison", b"b")]
        await settled(lambda: all(event.message.acked for event in events))

    assert [(topic, value) for topic, _, value, _ in sent] == [
        (out, b"a"),
        (topics.dlq, b"poison"),
        (out, b"b"),
    ]
    (letter,) = dead_letters(sent, topics)
    assert letter["scorer.error.reason"] == "engine_error"
    assert letter["scorer.error"] == (
        "converting the message (forward-test) failed: "
        "AttributeError: 'int' object has no attribute 'get'"
    )
    assert letter["scorer.source.offset"] == "1"
    assert counted(metrics, "scorer_dlq_messages_total", reason="engine_error") == 1
