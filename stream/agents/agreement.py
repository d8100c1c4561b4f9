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
    """The three agents and their tables (``AgreementAgents``); returns the windows the
    measuring agent keeps."""
    agents = AgreementAgents(app, topics, scorer, settings, observer, bootstrap)
    agents.register()
    return agents.windows


class AgreementAgents:
    """``route-agreement``, ``join-agreement`` (``JoinAgent``, on the ``agreement`` table)
    and ``measure-agreement`` (the ``agreement-window`` table), and the timer that exports
    the measures."""

    def __init__(
        self,
        app: faust.App,
        topics: Topics,
        scorer: Scorer,
        settings: Settings,
        observer: Observer,
        bootstrap: str,
    ) -> None:
        assert topics.labels is not None and topics.agreement is not None
        assert topics.agreement_events is not None and topics.agreement_measure is not None
        self.app = app
        self.topics = topics
        self.scorer = scorer
        self.settings = settings
        self.observer = observer
        self.publisher = publisher = Publisher(app)
        self.dead_letters = dead_letters = DeadLetters(topics.dlq, observer)
        self.labels = topics.labels
        self.events, self.agreement = topics.agreement_events, topics.agreement
        self.to_measure = topics.agreement_measure
        self.declare = [*topics.outputs(), self.events, self.agreement, self.to_measure]
        self.joins = KeyedTable[bytes](
            app,
            table_name=JOIN_TABLE,
            events=self.events,
            partitions=settings.topic_partitions,
            publisher=publisher,
            dead_letters=dead_letters,
            observer=observer,
        )
        # the scores before a label are read back from the internal topic they came in on
        self.reader = RunReader(bootstrap, self.events.get_topic_name(), settings.kafka)
        self.join = JoinAgent(self.joins, scorer, settings, observer, self.reader, self.pair_sends)
        self.windows = AgreementWindows()
        self.measured = KeyedTable[Joined](
            app,
            table_name=WINDOW_TABLE,
            events=self.to_measure,
            partitions=1,
            publisher=publisher,
            dead_letters=dead_letters,
            observer=observer,
        )

    def register(self) -> None:
        """The three agents, the join's clock, the reader's close at shutdown, the timer."""
        app, declare = self.app, self.declare
        register_forwarder(
            app,
            self.labels,
            "route-agreement",
            self.route,
            declare=declare,
            dead_letters=self.dead_letters,
            max_in_flight=self.settings.max_in_flight,
            observer=self.observer,
        )
        app.on_before_shutdown.connect(self.close_reader)
        self.joins.agent(
            "join-agreement",
            decode=self.decode,
            what="agreement event",
            apply=self.apply,
            doing="joining labels and scores",
            declare=declare,
        )
        self.joins.clock(SWEEP_EVERY_S, progress=lambda now: None, tick=lambda now: TICK)
        self.measured.on_recover(self.rebuild)
        # emptied by ``rebuild`` on a worker that does not own the measuring partition
        self.observer.watch_held("agreement_window", lambda: len(self.windows), None)
        self.measured.agent(
            "measure-agreement",
            decode=Joined.model_validate_json,
            what="agreement pair",
            apply=self.keep,
            doing="measuring agreement",
            declare=declare,
        )
        app.timer(MEASURE_EVERY_S, name="agreement-measures")(self.export)

    def route(self, message: Message) -> tuple[list[Send], datetime | None]:
        """A label, validated against the rule set, to the join's partition of its target."""
        raw = message.value or b""
        try:
            label, _ = parse_label(raw, self.scorer.ruleset)
        except LabelError as exc:
            return self.dead_letters.invalid(message, exc, what="human label"), None
        return [(self.events, label.target_id.encode(), LABEL + raw, None)], None

    def close_reader(self, app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> Awaitable[None]:
        return self.reader.close()

    @staticmethod
    def decode(value: bytes) -> bytes:
        if value[:1] not in (LABEL, SCORE, TICK):
            raise ValueError(f"not an agreement event: {value[:40]!r}")
        return value

    def pair_sends(self, pair: Joined) -> list[Send]:
        record = pair.model_dump_json().encode()
        return [
            (self.agreement, pair.target_id.encode(), record, None),
            (self.to_measure, pair.rule_id.encode(), record, None),
        ]

    async def apply(self, message: Message, value: bytes) -> None:
        sends = await self.join.apply(message, value)
        if sends:  # on the broker before the state that forgets their sides is written
            await self.publisher.send_until_delivered(sends)
        self.join.commit()

    def rebuild(self, partitions: set[int]) -> None:
        """The week of pairs read again from the table's one partition, where owned."""
        self.windows.__init__()  # type: ignore[misc]
        if 0 not in partitions:
            return
        for value in list(self.measured.table.data.values()):
            try:
                self.windows.add(Joined.model_validate_json(value))
            except ValueError:
                continue

    async def keep(self, message: Message, pair: Joined) -> None:
        self.measured.table[pair.agreement_id.encode()] = pair.model_dump_json().encode()
        self.windows.add(pair)

    async def export(self) -> None:
        """The gauges from the week's pairs (none where this worker does not measure), after
        dropping what the week no longer holds (tombstoned in the table's one partition). A
        failure is logged: an exception out of a Faust timer stops the worker."""
        observer, windows, measured = self.observer, self.windows, self.measured
        try:
            if 0 not in owned_partitions(self.app, self.settings.agreement_measure_topic):
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
