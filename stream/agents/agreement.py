"""Human labels joined with the scores they grade, and the judge's agreement measured (design
record 26).

Three agents:

- ``route-agreement`` reads the labels topic. A label is validated against the rule set (an
  unknown rule, criterion or a value off the rule's scale is dead-lettered with the reason)
  and forwarded, keyed by target id, to the internal agreement-events topic, where the
  agents that publish scores also send each ``ok`` score a judge gave (primary or shadow),
  without its bulky fields (``agreement_sends``).
- ``join-agreement`` is the only writer of the ``agreement`` table (co-partitioned with the
  internal topic): ``AgreementJoin`` pairs each label with the judged scores of its target,
  rule and criterion, and the primary score with each shadow's, whichever arrives first, and
  publishes each pair to the agreement topic. A clock drops what is older than
  ``SCORER_LABEL_RETENTION_S`` from the partitions each worker owns (``JoinIndex``: only the
  keys of the ticked partition not written for the retention are read).
- ``measure-agreement`` reads the pairs again from an internal topic of one partition (one
  worker measures every rule, whatever the user's agreement topic's partitions) into the
  ``agreement-window`` table (a week of pairs) and exports ``scorer_judge_agreement`` per
  rule, judged model, variant, reference, measure and window.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from datetime import datetime

import faust
import orjson
from faust.types import Message

from ..agreement.join import AgreementJoin, Joined, newest
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


def agreement_sends(topics: Topics, scores: Iterable[ScoreEvent]) -> list[Send]:
    """What the join gets of published scores: each judged one, keyed by its target, on the
    internal agreement-events topic, in the same at-least-once set as the score itself (none
    when the join is off). Sent where scores are published (the trace and thread agents, the
    batch queue) rather than read back from the scores topic: a deterministic check's score,
    most of them, costs the join nothing."""
    if topics.agreement_events is None:
        return []
    events = topics.agreement_events
    return [(events, s.target_id.encode(), SCORE + slim(s), None) for s in scores if judged(s)]


class _Keys(MutableMapping[bytes, bytes]):
    """A table seen through some of its keys (what ``AgreementJoin`` reads and writes):
    writes and deletes go to the table and are told to ``JoinIndex``."""

    def __init__(
        self,
        table: MutableMapping[bytes, bytes],
        keys: Iterable[bytes] | None,
        wrote: Callable[[bytes], object],
        dropped: Callable[[bytes], object],
    ) -> None:
        self.table = table
        self.keys_ = None if keys is None else list(keys)
        self.wrote = wrote
        self.dropped = dropped

    def __getitem__(self, key: bytes) -> bytes:
        if self.keys_ is not None and key not in self.keys_:
            raise KeyError(key)
        return self.table[key]

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.table[key] = value
        self.wrote(key)

    def __delitem__(self, key: bytes) -> None:
        del self.table[key]
        self.dropped(key)

    def __iter__(self) -> Iterator[bytes]:
        keys = self.table.keys() if self.keys_ is None else self.keys_
        return (key for key in list(keys) if key in self.table)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class JoinIndex:
    """When each key of the join table was last written, per partition, so the clock's
    expiry reads only the keys of the partition it ticks that have not been written for the
    retention (not every key of the table each minute). A key's partition is where Kafka's
    partitioner put its target id (``join.state_key``: [target, rule, criterion]), the key of
    the internal topic; rebuilt from the table after each recovery."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.written: defaultdict[int, dict[bytes, float]] = defaultdict(dict)

    def partition_of(self, key: bytes) -> int | None:
        try:
            target = str(orjson.loads(key)[0])
        except (orjson.JSONDecodeError, IndexError, TypeError, KeyError):
            return None  # not the join's: left alone
        return key_hash(target.encode()) % self.partitions

    def rebuild(self, items: Iterable[tuple[bytes, bytes]], owned: set[int]) -> int:
        """The index of the ``owned`` partitions from the table's ``items``; how many keys."""
        self.written.clear()
        count = 0
        for key, value in items:
            partition = self.partition_of(key)
            if partition not in owned:
                continue
            try:
                self.written[partition][key] = newest(orjson.loads(value))
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue
            count += 1
        return count

    def writing(
        self, table: MutableMapping[bytes, bytes], partition: int, now: float
    ) -> MutableMapping[bytes, bytes]:
        """``table`` as a join writes it while an event of ``partition`` is applied."""
        keys = self.written[partition]

        def wrote(key: bytes) -> None:
            keys[key] = now

        return _Keys(table, None, wrote, lambda key: keys.pop(key, None))

    def stale(
        self, table: MutableMapping[bytes, bytes], partition: int, now: float, retention_s: float
    ) -> MutableMapping[bytes, bytes]:
        """The keys of ``partition`` not written for ``retention_s``: what expiry reads."""
        keys = self.written[partition]
        old = [key for key, at in keys.items() if now - at > retention_s]
        return _Keys(table, old, lambda key: None, lambda key: keys.pop(key, None))


def log_rebuilt(count: int) -> None:
    log.info("agreement join index rebuilt: %d keys", count)


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

    kinds = score_kinds(lambda: scorer.ruleset)  # how a score compares, by its rule now

    def decode(value: bytes) -> bytes:
        if value[:1] not in (LABEL, SCORE, TICK):
            raise ValueError(f"not an agreement event: {value[:40]!r}")
        return value

    index = JoinIndex(settings.topic_partitions)
    joins.on_recover(lambda owned: log_rebuilt(index.rebuild(joins.table.data.items(), owned)))

    async def apply(message: Message, value: bytes) -> None:
        now = time.time()
        kind, body = value[:1], value[1:]
        retention = settings.label_retention_s
        if kind == TICK:
            stale = index.stale(joins.table, message.partition, now, retention)
            AgreementJoin(stale, retention).expire(now)
            return
        store = index.writing(joins.table, message.partition, now)
        join = AgreementJoin(store, retention, kind_of=kinds)
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
