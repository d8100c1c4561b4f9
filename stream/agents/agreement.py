"""Human labels joined with the scores they grade, and the judge's agreement measured (design
record 26).

Three agents:

- ``route-agreement`` reads the labels topic and the scores topic. A label is validated
  against the rule set (an unknown rule, criterion or a value off the rule's scale is
  dead-lettered with the reason); an ``ok`` score a judge gave (primary or shadow) is kept
  without its bulky fields. Both are forwarded, keyed by target id, to the internal
  agreement-events topic; other scores are acked and dropped.
- ``join-agreement`` is the only writer of the ``agreement`` table (co-partitioned with the
  internal topic): ``AgreementJoin`` pairs each label with the judged scores of its target,
  rule and criterion, and the primary score with each shadow's, whichever arrives first, and
  publishes each pair to the agreement topic. A clock drops what is older than
  ``SCORER_LABEL_RETENTION_S`` from the partitions each worker owns.
- ``measure-agreement`` reads the pairs again from an internal topic of one partition (one
  worker measures every rule, whatever the user's agreement topic's partitions) into the
  ``agreement-window`` table (a week of pairs) and exports ``scorer_judge_agreement`` per
  rule, judged model, variant, reference, measure and window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, MutableMapping
from datetime import datetime

import faust
import orjson
from faust.types import Message
from pydantic import ValidationError

from ..agreement.join import AgreementJoin, Joined
from ..agreement.labels import LabelError, parse_label, score_kinds
from ..agreement.windows import AgreementWindows
from ..app import Topics
from ..delivery.dead_letter import DeadLetters
from ..delivery.publisher import Publisher, Send
from ..engine.scorer import Scorer
from ..kafka.faust_state import owned_partitions
from ..kafka.partitioning import key_hash
from ..models import ScoreEvent
from ..observer import Observer
from ..settings import Settings
from .forward import register_forwarder
from .keyed_table import KeyedTable

log = logging.getLogger(__name__)

JOIN_TABLE = "agreement"
WINDOW_TABLE = "agreement-window"
LABEL, SCORE, TICK = b"L", b"S", b"T"  # the internal events: a label, a score, a clock tick
MEASURE_EVERY_S = 15.0  # how often the agreement gauges are worked out again
SWEEP_EVERY_S = 60.0  # how often the join table's expired keys are dropped


def judged(score: ScoreEvent) -> bool:
    """A score a judge gave, with a value: what a label or another judge can agree with."""
    return score.status == "ok" and score.raw_value is not None and score.judge_model is not None


def slim(score: ScoreEvent) -> bytes:
    """The score without what the join never reads (its reason, details, usage)."""
    return score.model_copy(update={"reason": None, "details": None, "usage": None}).to_bytes()


class PartitionView(MutableMapping[bytes, bytes]):
    """The entries of one partition of the join table, whose keys name their target id (what
    the internal topic is keyed by, so where Kafka's partitioner put them): the join's
    expiry sees only the partition being ticked, so its tombstones go to that partition's
    changelog."""

    def __init__(self, table: MutableMapping[bytes, bytes], partition: int, partitions: int):
        self.table = table
        self.partition = partition
        self.partitions = partitions

    def _mine(self, key: bytes) -> bool:
        try:
            target = str(orjson.loads(key)[0])  # join.state_key: [target, rule, criterion]
        except (orjson.JSONDecodeError, IndexError, TypeError):
            return False  # not the join's: left alone
        return bool(key_hash(target.encode()) % self.partitions == self.partition)

    def __getitem__(self, key: bytes) -> bytes:
        if not self._mine(key):
            raise KeyError(key)
        return self.table[key]

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.table[key] = value

    def __delitem__(self, key: bytes) -> None:
        del self.table[key]

    def __iter__(self) -> Iterator[bytes]:
        return (key for key in list(self.table.keys()) if self._mine(key))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def register_agreement_agents(
    app: faust.App,
    topics: Topics,
    scorer: Scorer,
    settings: Settings,
    observer: Observer,
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
        if message.topic == settings.labels_topic:
            try:
                label, _ = parse_label(raw, scorer.ruleset)
            except LabelError as exc:
                return dead_letters.invalid(message, exc, what="human label"), None
            return [(events, label.target_id.encode(), LABEL + raw, None)], None
        try:
            score = ScoreEvent.model_validate_json(raw)
        except (ValueError, ValidationError) as exc:
            return dead_letters.invalid(message, exc, what="score event"), None
        if not judged(score):
            return [], None
        return [(events, score.target_id.encode(), SCORE + slim(score), None)], None

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

    kinds = score_kinds(lambda: scorer.ruleset)  # how a score compares, by its rule now

    def decode(value: bytes) -> bytes:
        if value[:1] not in (LABEL, SCORE, TICK):
            raise ValueError(f"not an agreement event: {value[:40]!r}")
        return value

    async def apply(message: Message, value: bytes) -> None:
        now = time.time()
        kind, body = value[:1], value[1:]
        if kind == TICK:
            view = PartitionView(joins.table, message.partition, settings.topic_partitions)
            AgreementJoin(view, settings.label_retention_s).expire(now)
            return
        join = AgreementJoin(joins.table, settings.label_retention_s, kind_of=kinds)
        if kind == LABEL:
            label, reference = parse_label(body, scorer.ruleset)
            joined = join.add_label(label, reference, now)
        else:
            joined = join.add_score(ScoreEvent.model_validate_json(body), now)
        if joined:
            sends: list[Send] = []
            for pair in joined:
                record = pair.model_dump_json().encode()
                sends.append((agreement, pair.target_id.encode(), record, None))
                sends.append((to_measure, pair.rule_id.encode(), record, None))
            await publisher.send_until_delivered(sends)
            for pair in joined:
                observer.on_agreement_joined(pair.rule_id, pair.reference)

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
        for old in windows.expired(time.time()):
            windows.forget(old)
            measured.table.pop(old.encode(), None)

    measured.on_recover(rebuild)
    measured.agent(
        "measure-agreement",
        decode=Joined.model_validate_json,
        what="agreement pair",
        apply=keep,
        doing="measuring agreement",
        declare=declare,
    )

    async def export() -> None:
        if 0 not in owned_partitions(app, settings.agreement_measure_topic):
            observer.on_agreement_measured({})
            return
        observer.on_agreement_measured(windows.measures(time.time()))

    app.timer(MEASURE_EVERY_S, name="agreement-measures")(export)
    return windows
