"""The ``join-agreement`` agent: labels and judged scores joined as they arrive (design
records 30 and 36), the only writer of the ``agreement`` table.

The table holds what can still pair: the labels (for ``SCORER_LABEL_RETENTION_S``), a
primary or shadow score waiting for its partner, and the score index (``score_index``:
where each target's scores lie in the internal topic). A score passes through: it pairs
with the labels held for it and is not kept. A label reads back the scores that came
before it from the runs of its partition the index names (``RunReader``), pairs with them,
and is held for the scores still to come. Each event's pairs are on the broker before the
state that forgets their sides is written (``Staged``), so a redelivery after a crash makes
them again.

A clock tick (every minute, into each partition this worker owns) drops the keys whose
labels or partners have expired (``JoinIndex``: only those due are read), the buckets older
than the retention, and closes the open bucket when it is old enough.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from aiokafka import ConsumerRecord
from faust.types import Message

from ..agreement.events import LABEL, SCORE, TICK
from ..agreement.join import AgreementJoin, Arrived, Joined, state_key
from ..agreement.labels import parse_label, score_kinds, shadowed
from ..agreement.score_index import Range, ScoreIndex
from ..delivery.publisher import Send
from ..engine.scorer import Scorer
from ..kafka.lookback import IncompleteReadError, RunReader
from ..models import ScoreEvent
from ..observer import Observer
from ..settings import Settings
from .agreement_table import JoinIndex, Staged
from .keyed_table import KeyedTable

log = logging.getLogger(__name__)

Read = tuple[int, bytes, float]  # a score read back: its offset, target id and arrival


class RevokedError(Exception):
    """The partition went to another worker while its records were read back."""


class RecentPrimaries:
    """The primary scores of rules with shadows that this worker read last, by join key:
    their shadows, published right after them, pair without a read-back. Bounded; what it
    drops is read back when asked."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self.items: OrderedDict[bytes, list[Arrived]] = OrderedDict()

    def add(self, key: bytes, arrived: float, score: ScoreEvent) -> None:
        self.items.setdefault(key, []).append((arrived, score))
        self.items.move_to_end(key)
        while len(self.items) > self.limit:
            self.items.popitem(last=False)

    def of_close(self, key: bytes, close: int | None) -> list[Arrived] | None:
        """The key's primaries, if one is of the thread close ``close``."""
        found = self.items.get(key, [])
        if any(_close(score) == close for _, score in found):
            return found
        return None


def _close(score: ScoreEvent) -> int | None:
    return score.thread.close_seq if score.thread is not None else None


class JoinAgent:
    """``join-agreement`` on its keyed table; ``sends`` gives a pair's records to publish."""

    def __init__(
        self,
        joins: KeyedTable[bytes],
        scorer: Scorer,
        settings: Settings,
        observer: Observer,
        reader: RunReader,
        sends: Callable[[Joined], list[Send]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock
        self.joins = joins
        self.table = joins.table
        self.scorer = scorer
        self.retention_s = settings.label_retention_s
        self.observer = observer
        self.reader = reader
        self.sends = sends
        self.staged: Staged | None = None
        self.pairs: list[Joined] = []
        self.kinds = score_kinds(lambda: scorer.ruleset)  # how a score compares, by its rule
        self.shadowed = shadowed(lambda: scorer.ruleset)
        self.index = JoinIndex(settings.topic_partitions, settings.label_retention_s)
        self.scores = ScoreIndex(settings.label_retention_s)
        self.recent = RecentPrimaries()
        joins.on_recover(self.rebuild)
        observer.watch_held("agreement_keys", self.index.size, None)
        observer.watch_held(
            "agreement_index", lambda: self.scores.sizes()[0], lambda: self.scores.sizes()[1]
        )
        observer.watch_held("agreement_recent_primaries", lambda: len(self.recent.items), None)
        observer.watch_held("agreement_read_back", reader.cached_records, None)

    def rebuild(self, owned: set[int]) -> None:
        items = list(self.table.data.items())
        keys = self.index.rebuild(items, owned)
        buckets = self.scores.rebuild(items, owned)
        log.info("agreement join rebuilt: %d keys held, %d score buckets", keys, buckets)

    async def apply(self, message: Message, value: bytes) -> list[Send]:
        """One internal event applied; the pairs to publish (the caller publishes them,
        then calls ``commit``, which writes the state that forgets their sides)."""
        self.staged, self.pairs = None, []
        now = self.clock()
        kind, body = value[:1], value[1:]
        partition, offset = message.partition, message.offset
        try:
            # the record in its partition's open bucket (a new owner's first: what its
            # predecessor read after its last close is the bucket's unseen run)
            self.scores.seen(self.table, partition, offset, now)
            if kind == TICK:
                await self.tick(partition, now)
                return []
            staged = Staged(self.index.writing(self.table, partition))
            join = AgreementJoin(staged, self.retention_s, kind_of=self.kinds)
            if kind == LABEL:
                label, reference = parse_label(body, self.scorer.ruleset)
                earlier = await self.look_back(partition, offset, label.target_id, now)
                joined = join.add_label(label, reference, now, earlier)
            else:
                score = ScoreEvent.model_validate_json(body)
                partners = await self.partners(partition, offset, score, now)
                joined = join.add_score(score, now, partners)
                await self.index_score(message, now)
        except RevokedError:
            return []  # its next owner reads the event again
        self.staged, self.pairs = staged, joined
        return [send for pair in joined for send in self.sends(pair)]

    def commit(self) -> None:
        """Write the state of the event just applied (once its pairs are on the broker)."""
        if self.staged is not None:
            self.staged.flush()
        for pair in self.pairs:
            self.observer.on_agreement_joined(pair.rule_id, pair.reference)
        self.staged, self.pairs = None, []

    async def partners(
        self, partition: int, offset: int, score: ScoreEvent, now: float
    ) -> list[Arrived]:
        """What a score pairs with besides the labels: for a shadow's, its primary (one read
        just now, or read back); a primary of a rule with shadows is kept a while."""
        key = state_key(score.target_id, score.rule_id, score.criterion)
        if score.variant is None:
            if score.status == "ok" and self.shadowed(score):
                self.recent.add(key, now, score)
            return []
        if score.status != "ok":
            return []
        if (found := self.recent.of_close(key, _close(score))) is not None:
            return found
        return await self.look_back(partition, offset, score.target_id, now)

    async def index_score(self, message: Message, now: float) -> None:
        """The score's target in the open bucket of its partition (closed when full)."""
        partition, offset = message.partition, message.offset
        target = message.key if isinstance(message.key, bytes) else b""
        arrived = message.timestamp or now
        full = self.scores.add(self.table, partition, offset, target, arrived, now)
        if full and self.scores.unseen(partition) is not None:  # with a run another read
            await self.fill(partition)
            self.scores.close(self.table, partition)

    async def read(self, partition: int, runs: list[Range]) -> list[ConsumerRecord]:
        """The records of ``runs``, read again until they are read through (the broker
        away), while the partition is this worker's."""
        delay = 0.5
        while True:
            try:
                return await self.reader.read(partition, runs)
            except IncompleteReadError as exc:
                if partition not in self.joins.owned():
                    raise RevokedError from exc
                log.warning("agreement join: %s; reading it again in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(2 * delay, 30.0)

    async def look_back(
        self, partition: int, offset: int, target_id: str, now: float
    ) -> list[Arrived]:
        """The scores of ``target_id`` that came into ``partition`` before ``offset`` within
        the retention, read back from the runs the score index names."""
        key = target_id.encode()
        runs = self.scores.candidates(partition, key, offset, now)
        if not runs:
            return []
        unseen = self.scores.unseen(partition)
        records = await self.read(partition, runs)
        if unseen is not None:
            self.scores.fill(partition, _scores_in(records, unseen))
        found: list[Arrived] = []
        for r in records:
            if r.key != key or r.value is None or r.value[:1] != SCORE:
                continue
            try:
                found.append((r.timestamp / 1000, ScoreEvent.model_validate_json(r.value[1:])))
            except ValueError:
                log.warning(
                    "agreement join: offset %d of partition %d is not a score", r.offset, partition
                )
        self.observer.on_agreement_looked_back(len(runs), len(records), len(found))
        return found

    async def fill(self, partition: int) -> None:
        """Read back the run of the open bucket another worker read, and fill it."""
        if (unseen := self.scores.unseen(partition)) is not None:
            records = await self.read(partition, [unseen])
            self.scores.fill(partition, _scores_in(records, unseen))

    async def tick(self, partition: int, now: float) -> None:
        stale = self.index.stale(self.table, partition, now)
        AgreementJoin(stale, self.retention_s).expire(now)
        self.scores.expire(self.table, partition, now)
        if self.scores.due(partition, now):
            await self.fill(partition)
            self.scores.close(self.table, partition)
        await self.reader.close_if_idle()


def _scores_in(records: Iterable[ConsumerRecord], run: Range) -> list[Read]:
    """The scores among ``records`` in ``run``: offset, target id (the record's key), arrival."""
    return [
        (r.offset, r.key or b"", r.timestamp / 1000)
        for r in records
        if run[0] <= r.offset <= run[1] and (r.value or b"")[:1] == SCORE
    ]
