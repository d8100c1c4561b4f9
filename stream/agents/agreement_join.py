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

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, MutableMapping

import orjson
from aiokafka import ConsumerRecord
from faust.types import Message

from ..agreement.join import AgreementJoin, Joined, deadline
from ..agreement.labels import parse_label, score_kinds, shadows_expected
from ..agreement.score_index import ScoreIndex, is_index_key
from ..delivery.publisher import Send
from ..engine.scorer import Scorer
from ..kafka.lookback import RunReader
from ..kafka.partitioning import key_hash
from ..models import ScoreEvent
from ..observer import Observer
from ..settings import Settings
from .keyed_table import KeyedTable

log = logging.getLogger(__name__)

LABEL, SCORE, TICK = b"L", b"S", b"T"  # the internal events: a label, a score, a clock tick
Read = tuple[int, bytes, float]  # a score read back: its offset, target id and arrival


class _Keys(MutableMapping[bytes, bytes]):
    """A table seen through some of its keys (what ``AgreementJoin`` reads and writes):
    writes and deletes go to the table and are told to ``JoinIndex``."""

    def __init__(
        self,
        table: MutableMapping[bytes, bytes],
        keys: Iterable[bytes] | None,
        wrote: Callable[[bytes, bytes], object],
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
        self.wrote(key, value)

    def __delitem__(self, key: bytes) -> None:
        del self.table[key]
        self.dropped(key)

    def __iter__(self) -> Iterator[bytes]:
        keys = self.table.keys() if self.keys_ is None else self.keys_
        return (key for key in list(keys) if key in self.table)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Staged(MutableMapping[bytes, bytes]):
    """A store whose writes wait for ``flush``: reads see them at once."""

    def __init__(self, store: MutableMapping[bytes, bytes]) -> None:
        self.store = store
        self.pending: dict[bytes, bytes | None] = {}

    def __getitem__(self, key: bytes) -> bytes:
        if key in self.pending:
            value = self.pending[key]
            if value is None:
                raise KeyError(key)
            return value
        return self.store[key]

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.pending[key] = value

    def __delitem__(self, key: bytes) -> None:
        self[key]
        self.pending[key] = None

    def __iter__(self) -> Iterator[bytes]:
        gone = {k for k, v in self.pending.items() if v is None}
        seen = [k for k in self.store if k not in gone]
        return iter(
            [*seen, *(k for k, v in self.pending.items() if v is not None and k not in seen)]
        )

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def flush(self) -> None:
        for key, value in self.pending.items():
            if value is None:
                self.store.pop(key, None)
            else:
                self.store[key] = value
        self.pending.clear()


class JoinIndex:
    """When each key of the join table next has something to expire, per partition, so a
    clock tick reads only the keys of its partition that are due (not every key of the
    table each minute). A key's partition is where Kafka's partitioner put its target id
    (``join.state_key``: [target, rule, criterion]), the key of the internal topic; rebuilt
    from the table after each recovery."""

    def __init__(self, partitions: int, retention_s: float) -> None:
        self.partitions = partitions
        self.retention_s = retention_s
        self.due: defaultdict[int, dict[bytes, float]] = defaultdict(dict)

    def partition_of(self, key: bytes) -> int | None:
        if is_index_key(key):
            return None  # the score index's: kept by ``ScoreIndex``
        try:
            target = str(orjson.loads(key)[0])
        except (orjson.JSONDecodeError, IndexError, TypeError, KeyError):
            return None  # not the join's: left alone
        return key_hash(target.encode()) % self.partitions

    def _deadline(self, value: bytes) -> float | None:
        try:
            return deadline(orjson.loads(value), self.retention_s)
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            return None

    def rebuild(self, items: Iterable[tuple[bytes, bytes]], owned: set[int]) -> int:
        """The index of the ``owned`` partitions from the table's ``items``; how many keys."""
        self.due.clear()
        count = 0
        for key, value in items:
            partition = self.partition_of(key)
            if partition not in owned or (due := self._deadline(value)) is None:
                continue
            self.due[partition][key] = due
            count += 1
        return count

    def writing(
        self, table: MutableMapping[bytes, bytes], partition: int
    ) -> MutableMapping[bytes, bytes]:
        """``table`` as a join writes it while an event of ``partition`` is applied."""
        keys = self.due[partition]

        def wrote(key: bytes, value: bytes) -> None:
            if (due := self._deadline(value)) is not None:
                keys[key] = due

        return _Keys(table, None, wrote, lambda key: keys.pop(key, None))

    def stale(
        self, table: MutableMapping[bytes, bytes], partition: int, now: float
    ) -> MutableMapping[bytes, bytes]:
        """The keys of ``partition`` with something expired by ``now``: what expiry reads."""
        keys = self.due[partition]

        def wrote(key: bytes, value: bytes) -> None:
            if (due := self._deadline(value)) is not None:
                keys[key] = due

        old = [key for key, due in keys.items() if due <= now]
        return _Keys(table, old, wrote, lambda key: keys.pop(key, None))

    def size(self) -> int:
        return sum(len(keys) for keys in self.due.values())


class JoinAgent:
    """``join-agreement`` on its keyed table; ``publish`` sends each event's pairs."""

    def __init__(
        self,
        joins: KeyedTable[bytes],
        scorer: Scorer,
        settings: Settings,
        observer: Observer,
        reader: RunReader,
        sends: Callable[[Joined], list[Send]],
    ) -> None:
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
        self.expects = shadows_expected(lambda: scorer.ruleset)
        self.index = JoinIndex(settings.topic_partitions, settings.label_retention_s)
        self.scores = ScoreIndex(settings.label_retention_s)
        joins.on_recover(self.rebuild)

    def rebuild(self, owned: set[int]) -> None:
        items = list(self.table.data.items())
        keys = self.index.rebuild(items, owned)
        buckets = self.scores.rebuild(items, owned)
        log.info("agreement join rebuilt: %d keys held, %d score buckets", keys, buckets)

    async def apply(self, message: Message, value: bytes) -> list[Send]:
        """One internal event applied; the pairs to publish (the caller publishes them,
        then calls ``commit``)."""
        now = time.time()
        kind, body = value[:1], value[1:]
        partition, offset = message.partition, message.offset
        if kind == TICK:
            self.scores.seen(self.table, partition, offset)
            await self.tick(partition, now)
            return []
        staged = Staged(self.index.writing(self.table, partition))
        self.staged = staged
        join = AgreementJoin(staged, self.retention_s, kind_of=self.kinds, expects=self.expects)
        if kind == LABEL:
            self.scores.seen(self.table, partition, offset)
            label, reference = parse_label(body, self.scorer.ruleset)
            earlier = await self.look_back(partition, offset, label.target_id, now)
            joined = join.add_label(label, reference, now, earlier)
        else:
            target = message.key if isinstance(message.key, bytes) else b""
            arrived = message.timestamp or now
            if self.scores.add(self.table, partition, offset, target, arrived):
                await self.fill(partition)  # full, with a run another worker read
                self.scores.close(self.table, partition)
            joined = join.add_score(ScoreEvent.model_validate_json(body), now)
        self.pairs = joined
        return [send for pair in joined for send in self.sends(pair)]

    def commit(self) -> None:
        """Write the state of the event just applied (once its pairs are on the broker)."""
        if self.staged is not None:
            self.staged.flush()
            self.staged = None
        for pair in self.pairs:
            self.observer.on_agreement_joined(pair.rule_id, pair.reference)
        self.pairs = []

    async def look_back(
        self, partition: int, offset: int, target_id: str, now: float
    ) -> list[tuple[float, ScoreEvent]]:
        """The scores of ``target_id`` that came into ``partition`` before ``offset`` within
        the retention, read back from the runs the score index names."""
        runs = self.scores.candidates(partition, target_id.encode(), offset, now)
        if not runs:
            return []
        unseen = self.scores.unseen(partition)
        records = await self.reader.read(partition, runs)
        if unseen is not None:
            self.scores.fill(partition, _scores_in(records, unseen))
        key = target_id.encode()
        found = [
            (r.timestamp / 1000, ScoreEvent.model_validate_json(r.value[1:]))
            for r in records
            if r.key == key and r.value is not None and r.value[:1] == SCORE
        ]
        self.observer.on_agreement_looked_back(len(runs), len(records), len(found))
        return found

    async def fill(self, partition: int) -> None:
        """Read back the run of the open bucket another worker read, and fill it."""
        if (unseen := self.scores.unseen(partition)) is not None:
            records = await self.reader.read(partition, [unseen])
            self.scores.fill(partition, _scores_in(records, unseen))

    async def tick(self, partition: int, now: float) -> None:
        stale = self.index.stale(self.table, partition, now)
        AgreementJoin(stale, self.retention_s).expire(now)
        self.scores.expire(self.table, partition, now)
        if self.scores.due(partition, now):
            await self.fill(partition)
            self.scores.close(self.table, partition)
        await self.reader.close_if_idle()
        buckets, prints = self.scores.sizes()
        self.observer.on_held("agreement_keys", self.index.size(), None)
        self.observer.on_held("agreement_index", buckets, prints)


def _scores_in(records: Iterable[ConsumerRecord], run: tuple[int, int]) -> list[Read]:
    """The scores among ``records`` in ``run``: offset, target id (the record's key), arrival."""
    return [
        (r.offset, r.key or b"", r.timestamp / 1000)
        for r in records
        if run[0] <= r.offset <= run[1] and (r.value or b"")[:1] == SCORE
    ]
