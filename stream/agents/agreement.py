"""Human labels joined with the scores they grade, and the judge's agreement measured (design
record 26).

Three agents:

- ``route-agreement`` reads the labels topic. A label is validated against the rule set (an
  unknown rule, criterion or a value off the rule's scale is dead-lettered with the reason)
  and forwarded, keyed by target id, to the internal agreement-events topic, where the
  agents that publish scores also send each ``ok`` score a judge gave (primary or shadow),
  without its bulky fields (``delivery/outbox.py``).
- ``join-agreement`` (``agreement_join.JoinAgent``) is the only writer of the ``agreement``
  table (co-partitioned with the internal topic): it pairs each label with the judged scores
  of its target, rule and criterion, and the primary score with each shadow's, whichever
  arrives first, and publishes each pair to the agreement topic. It holds the labels and
  the scores still waiting for a partner, not the scores (design record 36).
- ``measure-agreement`` reads the pairs again from an internal topic of one partition (one
  worker measures every rule, whatever the user's agreement topic's partitions) into the
  ``agreement-window`` table (a week of pairs) and exports ``scorer_judge_agreement`` per
  rule, judged model, variant, reference, measure and window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from datetime import datetime
from typing import Any

import faust
from faust.types import Message

from ..agreement.events import LABEL, SCORE, TICK
from ..agreement.join import Joined
from ..agreement.labels import LabelError, parse_label
from ..agreement.windows import AgreementWindows
from ..app import Topics
from ..delivery.dead_letter import DeadLetters
from ..delivery.publisher import Publisher, Send
from ..engine.scorer import Scorer
from ..kafka.lookback import RunReader
from ..kafka.mends.faust_state import owned_partitions
from ..observer import Observer
from ..settings import Settings
from .agreement_join import JoinAgent
from .forward import register_forwarder
from .keyed_table import KeyedTable

log = logging.getLogger(__name__)

JOIN_TABLE = "agreement"
WINDOW_TABLE = "agreement-window"
MEASURE_EVERY_S = 15.0  # how often the agreement gauges are worked out again
SWEEP_EVERY_S = 60.0  # how often the join table's expired keys and buckets are dropped


def register_agreement_agents(
    app: faust.App,
    topics: Topics,
    scorer: Scorer,
    settings: Settings,
    observer: Observer,
    bootstrap: str,
) -> AgreementWindows:
    """The three agents and their tables; returns the windows the measuring agent keeps."""
    publisher = Publisher(app)
    dead_letters = DeadLetters(topics.dlq, observer)
    assert topics.labels is not None and topics.agreement is not None
    assert topics.agreement_events is not None and topics.agreement_measure is not None
    events, agreement = topics.agreement_events, topics.agreement
    to_measure = topics.agreement_measure
    declare = [*topics.outputs(), events, agreement, to_measure]

    def route(message: Message) -> tuple[list[Send], datetime | None]:
        raw = message.value or b""
        try:
            label, _ = parse_label(raw, scorer.ruleset)
        except LabelError as exc:
            return dead_letters.invalid(message, exc, what="human label"), None
        return [(events, label.target_id.encode(), LABEL + raw, None)], None

    register_forwarder(
        app,
        topics.labels,
        "route-agreement",
        route,
        declare=declare,
        dead_letters=dead_letters,
        max_in_flight=settings.max_in_flight,
        observer=observer,
    )

    joins: KeyedTable[bytes] = KeyedTable(
        app,
        table_name=JOIN_TABLE,
        events=events,
        partitions=settings.topic_partitions,
        publisher=publisher,
        dead_letters=dead_letters,
        observer=observer,
    )

    def decode(value: bytes) -> bytes:
        if value[:1] not in (LABEL, SCORE, TICK):
            raise ValueError(f"not an agreement event: {value[:40]!r}")
        return value

    def pair_sends(pair: Joined) -> list[Send]:
        record = pair.model_dump_json().encode()
        return [
            (agreement, pair.target_id.encode(), record, None),
            (to_measure, pair.rule_id.encode(), record, None),
        ]

    # the scores before a label are read back from the internal topic they came in on
    reader = RunReader(bootstrap, events.get_topic_name(), settings.kafka)

    def close_reader(app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> Awaitable[None]:
        return reader.close()

    app.on_before_shutdown.connect(close_reader)
    join = JoinAgent(joins, scorer, settings, observer, reader, pair_sends)

    async def apply(message: Message, value: bytes) -> None:
        sends = await join.apply(message, value)
        if sends:  # on the broker before the state that forgets their sides is written
            await publisher.send_until_delivered(sends)
        join.commit()

    joins.agent(
        "join-agreement",
        decode=decode,
        what="agreement event",
        apply=apply,
        doing="joining labels and scores",
        declare=declare,
    )
    joins.clock(SWEEP_EVERY_S, progress=lambda now: None, tick=lambda now: TICK)

    windows = AgreementWindows()
    measured: KeyedTable[Joined] = KeyedTable(
        app,
        table_name=WINDOW_TABLE,
        events=to_measure,
        partitions=1,
        publisher=publisher,
        dead_letters=dead_letters,
        observer=observer,
    )

    def rebuild(partitions: set[int]) -> None:
        windows.__init__()  # type: ignore[misc]
        if 0 not in partitions:
            return
        for value in list(measured.table.data.values()):
            try:
                windows.add(Joined.model_validate_json(value))
            except ValueError:
                continue

    async def keep(message: Message, pair: Joined) -> None:
        measured.table[pair.agreement_id.encode()] = pair.model_dump_json().encode()
        windows.add(pair)

    measured.on_recover(rebuild)
    # emptied by ``rebuild`` on a worker that does not own the measuring partition
    observer.watch_held("agreement_window", lambda: len(windows), None)
    measured.agent(
        "measure-agreement",
        decode=Joined.model_validate_json,
        what="agreement pair",
        apply=keep,
        doing="measuring agreement",
        declare=declare,
    )

    async def export() -> None:
        """The gauges from the week's pairs (none where this worker does not measure), after
        dropping what the week no longer holds (tombstoned in the table's one partition). A
        failure is logged: an exception out of a Faust timer stops the worker."""
        try:
            if 0 not in owned_partitions(app, settings.agreement_measure_topic):
                observer.on_agreement_measured({})
                return
            now = time.time()
            for old in windows.expired(now):
                windows.forget(old)
                measured.table.send_changelog(0, old.encode(), None, value_serializer="raw")
                measured.table.data.pop(old.encode(), None)
            observer.on_agreement_measured(windows.measures(now))
        except Exception:
            log.exception("measuring agreement failed: measured again in %s s", MEASURE_EVERY_S)

    app.timer(MEASURE_EVERY_S, name="agreement-measures")(export)
    return windows
