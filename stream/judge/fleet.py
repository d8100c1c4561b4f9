"""One provider account's limits shared by the workers that judge with it (issue 48, design
record 46). Pure: wall times come in as arguments; the topic that carries the records is
``kafka/pace_topic.py``'s.

Every worker publishes, for each model it judges with, a ``PaceRecord`` every ``PUBLISH_S``:
what it wants (``demand``: calls a second sent lately, plus its backlog drained over
``DEMAND_S``), its pace, what it had refused over the last minute and let through before its
last hold, the account's limits as it knows them (announced by the provider, or learned from
429s, in the account's units: the whole account's calls or tokens a second). Each worker reads every
record, and paces at its *share* of the account's limit: its demand over the fleet's. A record
older than ``STALE_S`` is a worker that left; a worker stopping cleanly says so at once (a
tombstone). A limit learned by one worker is taken up by the others (the newest finding
wins); an announced limit is each worker's own to read from its answers' headers.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import orjson

from .pace_share import Source, Unit
from .segments import MINUTE_S

if TYPE_CHECKING:
    from .limiter import AdaptiveLimiter


PUBLISH_S = 1.0  # each worker says where it stands this often
STALE_S = 4.0  # a record this old is a worker that left (or cannot publish)
DEMAND_S = 10.0  # demand: the calls sent over this long, and the backlog drained over it
SHARE_MIN = 0.02  # a worker's share never falls under this (its first call is not starved)
RESHARE_AT = 0.05  # the share moved this far (relative): the paces follow it
PRUNE_AT = 64  # records kept before the stale ones are looked for
HOLD_TOGETHER_S = 10.0  # holds that began this close: the same window closing on the fleet
VERSION = 1


def account_of(base_url: str, api_key: str | None) -> str:
    """The account a judge endpoint and key stand for: a hash, never the key."""
    digest = hashlib.sha256(f"{base_url.rstrip('/')}\0{api_key or ''}".encode())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Limit:
    """An account's limit in one unit as one worker knows it: ``per_s`` of the whole account,
    ``announced`` by the provider or ``measured`` from its 429s, found at ``found_at`` (wall)."""

    source: Source
    per_s: float
    found_at: float


@dataclass(frozen=True)
class PaceRecord:
    """One worker's state for one account and model, as it publishes it."""

    account: str
    model: str
    worker: str
    at: float  # wall time it was made
    demand: float  # calls a second it wants
    pace: float  # calls a second it lets start now (0: no pace of its own)
    share: float  # its share of the account's limit
    answered: int  # calls answered over the last minute (refused ones included)
    refused: int  # ...of which refused for a rate limit
    held: bool  # the provider refuses every call it sends
    held_at: float | None  # when its last hold began (wall)
    held_minute: dict[str, float]  # units it let through in the minute before that hold
    minute: dict[str, float]  # units it let through over the last minute
    limits: dict[str, Limit] = field(default_factory=dict)

    @property
    def key(self) -> bytes:
        return record_key(self.account, self.model, self.worker)

    def to_bytes(self) -> bytes:
        return orjson.dumps({"v": VERSION, **asdict(self)})

    @classmethod
    def from_bytes(cls, value: bytes) -> PaceRecord:
        """A record as published; ValueError for anything else (another version included)."""
        try:
            data = orjson.loads(value)
            if not isinstance(data, dict) or data.pop("v", None) != VERSION:
                raise ValueError("not a version 1 pace record")
            limits = {u: Limit(**v) for u, v in (data.pop("limits", None) or {}).items()}
            record = cls(**data, limits=limits)
            numbers: list[object] = [record.at, record.demand, record.pace, record.share]
            numbers += [x for limit in limits.values() for x in (limit.per_s, limit.found_at)]
            numbers += [*record.minute.values(), *record.held_minute.values()]
            numbers += [record.held_at] if record.held_at is not None else []
            numbers += [record.answered, record.refused]
            names: list[object] = [record.account, record.model, record.worker]
            if not all(map(_finite, numbers)) or not all(isinstance(x, str) for x in names):
                raise ValueError("a pace record with a field that is not a finite number")
        except (orjson.JSONDecodeError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a pace record: {exc}") from exc
        return record


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def record_key(account: str, model: str, worker: str) -> bytes:
    return f"{account}/{model}/{worker}".encode()


@dataclass(frozen=True)
class FleetReading:
    """What ``/metrics`` shows of one model's fleet: the workers sharing the account (this one
    included), this worker's share, the fleet's pace (calls a second, the workers' paces
    summed), the share of the fleet's calls refused for a rate limit over the last minute, and
    whether this worker reads the others (False: it paces alone)."""

    account: str
    workers: int
    share: float
    pace: float
    refused: float
    shared: bool


class PaceBoard:
    """The last record of every worker, by key; this worker's own are not kept."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self.records: dict[bytes, PaceRecord] = {}
        self.reading = False  # the topic is being read: the fleet's records are known
        self.rejected = 0  # records that could not be read
        self.last_heard = -math.inf  # the newest record read (its own included), wall time

    def heard(self, key: bytes, value: bytes | None) -> None:
        """A record (None: a tombstone, the worker stopped) read from the topic."""
        if value is None:
            self.records.pop(key, None)
            return
        try:
            record = PaceRecord.from_bytes(value)
        except ValueError:
            self.rejected += 1
            return
        self.last_heard = max(self.last_heard, record.at)
        if record.worker != self.worker:
            self.records[key] = record
        if len(self.records) > PRUNE_AT:  # workers killed (never tombstoned) are forgotten
            for gone in [k for k, r in self.records.items() if r.at < record.at - MINUTE_S]:
                del self.records[gone]

    def live(self, now: float) -> bool:
        """The topic is read, and lately: this worker's own records come back through it
        every second (a broker gone mid-run answers reads with nothing)."""
        return self.reading and now - self.last_heard <= STALE_S

    def others(self, account: str, model: str, now: float) -> list[PaceRecord]:
        """The fresh records of the other workers judging ``model`` with ``account``."""
        if not self.live(now):
            return []
        return [
            r
            for r in self.records.values()
            if r.account == account and r.model == model and now - r.at <= STALE_S
        ]


class FleetLink:
    """One limiter's place in its fleet: it works out the limiter's share, takes up limits
    the others learned, and makes the record this worker publishes."""

    def __init__(self, board: PaceBoard, account: str, model: str) -> None:
        self.board = board
        self.account = account
        self.model = model
        self.share = 1.0
        self._first = True
        self._rising = 1.0  # the share worked out at the last tick
        self._found_at: dict[str, float] = {}  # the newest finding known, by unit (wall)
        self._findings: dict[str, int] = {}  # the pacer's own findings counted, by unit
        self._starts: deque[float] = deque()  # calls started lately (limiter clock)
        self._answers: deque[tuple[float, bool]] = deque()  # (answered, refused), a minute

    # --- what the limiter tells ---------------------------------------------------------
    def started(self, now: float) -> None:
        self._starts.append(now)
        while self._starts and self._starts[0] <= now - DEMAND_S:
            self._starts.popleft()

    def answered(self, now: float, *, refused: bool) -> None:
        self._answers.append((now, refused))
        self._forget(now)

    def answered_lately(self, now: float) -> tuple[int, int]:
        """Calls answered over the last minute, and how many of them were refused (429)."""
        self._forget(now)
        return len(self._answers), sum(refused for _, refused in self._answers)

    def _forget(self, now: float) -> None:
        while self._answers and self._answers[0][0] <= now - MINUTE_S:
            self._answers.popleft()

    def demand(self, limiter: AdaptiveLimiter) -> float:
        now = limiter.clock()
        while self._starts and self._starts[0] <= now - DEMAND_S:
            self._starts.popleft()
        return (len(self._starts) + limiter.waiting) / DEMAND_S

    def others_held(self, unit: Unit, held_at: float | None, wall: float) -> float:
        """Units the other workers let through in the minute before this one's hold began
        (at ``held_at``): for a worker held within the minute before (or just after), what
        it let through before its own hold (the same window closing on the fleet); for any
        other, its last minute as it last said."""
        if held_at is None:
            return 0.0
        total = 0.0
        for r in self.board.others(self.account, self.model, wall):
            near = r.held_at is not None and -MINUTE_S <= r.held_at - held_at <= HOLD_TOGETHER_S
            total += r.held_minute.get(unit, 0.0) if near else r.minute.get(unit, 0.0)
        return total

    def found_since(self, unit: Unit, since: float | None, wall: float) -> float | None:
        """The account's limit (units a second) another worker found or learned after
        ``since`` (a hold's start): the first to come out of a hold the fleet shared measured
        it for all."""
        found = [
            r.limits[unit]
            for r in self.board.others(self.account, self.model, wall)
            if unit in r.limits and r.limits[unit].source == "measured"
        ]
        newest = max(found, key=lambda limit: limit.found_at, default=None)
        if newest is None or since is None or newest.found_at < since:
            return None
        return newest.per_s

    def resuming(self, unit: Unit, held_at: float | None, wall: float) -> dict[str, float]:
        """What the fleet knows for a pace resuming after a hold that began at ``held_at``:
        the limit a worker that came out of it first found (``found``), else what the others
        let through before it (``others``)."""
        if (found := self.found_since(unit, held_at, wall)) is not None:
            return {"found": found}
        return {"others": self.others_held(unit, held_at, wall)}

    def probed_elsewhere(self, wall: float) -> bool:
        """Another worker of the fleet is held too and probes for all (the first by name):
        the provider is asked once, not once a worker."""
        held = [
            r.worker
            for r in self.board.others(self.account, self.model, wall)
            if r.held and r.demand > 0  # an idle held worker sends no probe
        ]
        return bool(held) and min(held) < self.board.worker

    # --- each tick ----------------------------------------------------------------------
    def tick(self, limiter: AdaptiveLimiter, wall: float) -> PaceRecord:
        """The limiter paced at its share and told of the others' findings; the record this
        worker publishes now."""
        others = self.board.others(self.account, self.model, wall)
        mine = self.demand(limiter)
        wanted = mine + sum(r.demand for r in others)
        share = 1.0 if not others or wanted <= 0 else max(SHARE_MIN, mine / wanted)
        if self._first and others:  # joining, its demand not seen yet: an equal share
            share = self._rising = 1.0 / (len(others) + 1)
            self._first = False
        elif share > self.share:
            # a larger share is taken a tick later, once the others have heard the demand
            # that makes it (and given up theirs): the fleet's shares never sum far over one
            share, self._rising = min(share, self._rising), share
        else:
            self._rising = share
        if abs(share - self.share) > RESHARE_AT * max(share, self.share):
            self.share = share
            limiter.reshare(share)
        now = limiter.clock()
        for unit, pacer in (("requests", limiter.requests), ("tokens", limiter.tokens)):
            if pacer.findings != self._findings.get(unit, 0):
                self._findings[unit] = pacer.findings
                self._found_at[unit] = wall  # found here, now
            limits = [r.limits[unit] for r in others if unit in r.limits]
            told = next((limit for limit in limits if limit.source == "announced"), None)
            if told is not None and pacer.source is None:
                # a worker that joins: the limit the provider told the others, until it is
                # told itself (the headers of its own answers)
                pacer.announce(told.per_s * MINUTE_S)
                continue
            newest = max(
                (limit for limit in limits if limit.source == "measured"),
                key=lambda limit: limit.found_at,
                default=None,
            )
            if (
                newest is not None
                and newest.found_at > self._found_at.get(unit, -math.inf)
                and pacer.source != "announced"
            ):
                pacer.adopt(newest.per_s, now)
                self._findings[unit] = pacer.findings
                self._found_at[unit] = newest.found_at
        return self.record(limiter, wall)

    def record(self, limiter: AdaptiveLimiter, wall: float) -> PaceRecord:
        now = limiter.clock()
        limits: dict[str, Limit] = {}
        for unit, pacer in (("requests", limiter.requests), ("tokens", limiter.tokens)):
            known = pacer.account_limit()
            if known is not None:
                source, per_s = known
                found = wall if source == "announced" else self._found_at.get(unit, wall)
                limits[unit] = Limit(source, per_s, found)
        answered, refused = self.answered_lately(now)
        return PaceRecord(
            account=self.account,
            model=self.model,
            worker=self.board.worker,
            at=wall,
            demand=self.demand(limiter),
            pace=limiter.pace()[0],
            share=self.share,
            answered=answered,
            refused=refused,
            held=limiter.held_for() > 0,
            held_at=limiter.held_at,
            minute={
                "requests": limiter.requests.traffic.minute_let_through(now),
                "tokens": limiter.tokens.traffic.minute_let_through(now),
            },
            held_minute={
                "requests": limiter.requests.held_minute,
                "tokens": limiter.tokens.held_minute,
            },
            limits=limits,
        )

    def reading(self, limiter: AdaptiveLimiter, wall: float) -> FleetReading:
        others = self.board.others(self.account, self.model, wall)
        mine = self.record(limiter, wall)
        everyone = [mine, *others]
        answered = sum(r.answered for r in everyone)
        return FleetReading(
            account=self.account,
            workers=len(everyone),
            share=self.share,
            pace=sum(r.pace for r in everyone),
            refused=sum(r.refused for r in everyone) / answered if answered else 0.0,
            shared=self.board.live(wall),
        )


class Fleet:
    """A judge client's limiters in their fleet: one ``FleetLink`` a model, all on one board
    (the records read from the topic) and one account."""

    def __init__(self, board: PaceBoard, account: str, wall: Callable[[], float] = time.time):
        self.board = board
        self.account = account
        self.wall = wall
        self.links: dict[str, tuple[FleetLink, AdaptiveLimiter]] = {}

    def join(
        self,
        model: str,
        limiter: AdaptiveLimiter,
        watch: Callable[[str, Callable[[], FleetReading]], None],
    ) -> None:
        """``limiter`` of ``model`` paced at its share from its first call; ``watch`` (the
        observer's ``watch_judge_fleet``) given the reader of its fleet."""
        link = FleetLink(self.board, self.account, model)
        limiter.fleet, limiter.wall = link, self.wall
        self.links[model] = (link, limiter)
        watch(model, lambda: link.reading(limiter, self.wall()))
        link.tick(limiter, self.wall())  # its first call paced at its share already

    def tick(self) -> list[PaceRecord]:
        """Every limiter paced at its share; the records to publish."""
        wall = self.wall()
        return [link.tick(limiter, wall) for link, limiter in list(self.links.values())]

    def own_keys(self) -> list[bytes]:
        """The keys this worker publishes under (tombstoned when it stops)."""
        return [record_key(self.account, m, self.board.worker) for m in self.links]
