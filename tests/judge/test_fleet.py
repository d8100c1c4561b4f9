"""Issue 48: the workers judging with one provider account share its limits (``fleet.py``).

The records and the board on their own, then whole fleets of judge clients on the virtual
clock against the provider simulator (``tests/fleet_cases.py``): three workers against a
silent sliding window, as a burst and as a steady stream, and an announced token limit,
each at the issue's target for one worker alone (under 2 % refused, at least 0.95 of a
request limit and 0.9 of a token limit used)."""

from __future__ import annotations

from dataclasses import asdict

import orjson
import pytest
from fleet_cases import run_fleet
from pacing_cases import Case, announced_request_cases, silent_window_cases, token_cases

from stream.judge.fleet import (
    STALE_S,
    Fleet,
    FleetLink,
    Limit,
    PaceBoard,
    PaceRecord,
    account_of,
)
from stream.judge.headers import number
from stream.judge.limiter import AdaptiveLimiter
from stream.observer import Observer


def record(worker: str = "w2", **changes: object) -> PaceRecord:
    fields: dict[str, object] = {
        "account": "acct",
        "model": "m",
        "worker": worker,
        "at": 100.0,
        "demand": 5.0,
        "pace": 2.0,
        "share": 0.5,
        "answered": 60,
        "refused": 3,
        "held": False,
        "held_at": None,
        "held_minute": {"requests": 0.0, "tokens": 0.0},
        "minute": {"requests": 57.0, "tokens": 9000.0},
        "limits": {"requests": Limit("measured", 10.0, 90.0)},
    }
    fields.update(changes)
    return PaceRecord(**fields)  # type: ignore[arg-type]


def test_an_account_is_a_hash_of_the_endpoint_and_key_never_the_key() -> None:
    one = account_of("https://api.openai.com/v1", "sk-secret-1")
    assert "sk-secret" not in one and len(one) == 16
    assert one == account_of("https://api.openai.com/v1/", "sk-secret-1")  # the same endpoint
    assert one != account_of("https://api.openai.com/v1", "sk-secret-2")
    assert one != account_of("https://example.com/v1", "sk-secret-1")


def test_a_record_reads_back_as_it_was_written_and_anything_else_is_refused() -> None:
    sent = record()
    assert PaceRecord.from_bytes(sent.to_bytes()) == sent
    assert sent.key == b"acct/m/w2"
    for bad in (b"not json", b"[]", b'{"v": 2}', b'{"v": 1, "account": "a"}'):
        with pytest.raises(ValueError):
            PaceRecord.from_bytes(bad)
    # what a worker told "x-ratelimit-limit-requests: inf" once wrote (orjson: inf -> null),
    # limits not a mapping, a limit without a number: refused, never raised past the board
    for bad_fields in ({"pace": None}, {"limits": ["x"]}, {"held_at": "soon"}):
        data = {"v": 1, **asdict(sent), **bad_fields}
        with pytest.raises(ValueError):
            PaceRecord.from_bytes(orjson.dumps(data))
    board = PaceBoard("w1")
    board.heard(b"k", orjson.dumps({"v": 1, **asdict(sent), "limits": {"requests": {"x": 1}}}))
    assert board.rejected == 1
    assert number("inf") is None and number("nan") is None and number("600") == 600.0


def test_the_board_keeps_the_others_fresh_records_and_forgets_on_a_tombstone() -> None:
    board = PaceBoard("w1")
    board.reading = True
    board.heard(b"acct/m/w1", record("w1").to_bytes())  # its own: not kept
    board.heard(b"acct/m/w2", record("w2").to_bytes())
    board.heard(b"acct/m/w3", b"garbage")
    assert [r.worker for r in board.others("acct", "m", 100.0 + STALE_S)] == ["w2"]
    assert board.rejected == 1
    assert board.others("acct", "m", 100.0 + STALE_S + 0.1) == []  # stale: it left
    assert board.others("acct", "other-model", 100.0) == []
    board.heard(b"acct/m/w2", None)
    assert board.others("acct", "m", 100.0) == []
    board.heard(b"acct/m/w2", record("w2").to_bytes())
    board.reading = False  # the topic cannot be read: the worker paces alone
    assert board.others("acct", "m", 100.0) == []


def limiter_at(clock: list[float]) -> AdaptiveLimiter:
    limiter = AdaptiveLimiter(32, clock=lambda: clock[0])
    limiter.wall = lambda: clock[0]
    return limiter


def linked(clock: list[float]) -> tuple[PaceBoard, FleetLink, AdaptiveLimiter]:
    """Worker w1's board (reading the topic), and a limiter linked to its fleet."""
    board = PaceBoard("w1")
    board.reading = True
    link = FleetLink(board, "acct", "m")
    limiter = limiter_at(clock)
    limiter.fleet = link
    return board, link, limiter


def test_a_worker_paces_at_its_share_of_the_demand_and_takes_up_a_leavers_share() -> None:
    """Two workers with the same demand under an announced limit of 600 a minute: each
    paces at half of it; the other's records stop (killed): within STALE_S and a tick, this
    one paces at the whole."""
    clock = [100.0]
    board = PaceBoard("w1")
    board.reading = True
    fleet = Fleet(board, "acct", wall=lambda: clock[0])
    limiter = limiter_at(clock)
    fleet.join("m", limiter, Observer().watch_judge_fleet)
    limiter.requests.announce(600)
    for n in range(50):  # 5 calls a second over the last 10 s
        fleet.links["m"][0].started(clock[0] - n / 5)
    board.heard(b"acct/m/w2", record("w2", at=clock[0], demand=5.0, limits={}).to_bytes())
    fleet.tick()
    assert fleet.links["m"][0].share == pytest.approx(0.5)
    assert limiter.requests.rate == pytest.approx(10 * 0.985 * 0.5)
    clock[0] += STALE_S + 1.0
    fleet.tick()  # a larger share is taken a tick later (the others hear the demand first)
    assert fleet.links["m"][0].share == pytest.approx(0.5)
    clock[0] += 1.0
    fleet.tick()
    assert fleet.links["m"][0].share == 1.0
    assert limiter.requests.rate == pytest.approx(10 * 0.985)


def test_an_idle_worker_holds_no_capacity_a_busy_one_needs() -> None:
    clock = [100.0]
    board, link, limiter = linked(clock)
    limiter.requests.announce(600)
    board.heard(b"acct/m/w2", record("w2", at=clock[0], demand=30.0, limits={}).to_bytes())
    link.tick(limiter, clock[0])  # joining: its demand not seen yet, an equal share
    assert link.share == pytest.approx(0.5)
    link.tick(limiter, clock[0])  # w1 wants nothing: the floor, not half
    assert link.share == pytest.approx(0.02)


def test_a_worker_that_joins_starts_at_its_share_of_what_the_provider_told_the_others() -> None:
    """Its first call is paced before any answer of its own told it the limit."""
    clock = [100.0]
    board = PaceBoard("w3")
    board.reading = True
    for other in ("w1", "w2"):
        told = record(other, at=clock[0], limits={"requests": Limit("announced", 10.0, 100.0)})
        board.heard(told.key, told.to_bytes())
    fleet = Fleet(board, "acct", wall=lambda: clock[0])
    limiter = limiter_at(clock)
    fleet.join("m", limiter, Observer().watch_judge_fleet)
    assert limiter.requests.source == "announced"
    assert limiter.requests.rate == pytest.approx(10 * 0.985 / 3)


def test_a_limit_one_worker_learned_is_taken_up_by_the_others_at_their_share() -> None:
    clock = [100.0]
    board, link, limiter = linked(clock)
    limiter.waiting = 50  # as busy as the other
    other = record(
        "w2", at=clock[0], demand=5.0, limits={"requests": Limit("measured", 10.0, 99.0)}
    )
    board.heard(other.key, other.to_bytes())
    mine = link.tick(limiter, clock[0])
    assert limiter.requests.source == "measured"
    assert limiter.requests.ceiling == pytest.approx(10.0 * link.share)
    # what it publishes is the account's limit, found when the other found it
    assert mine.limits["requests"] == Limit("measured", pytest.approx(10.0), 99.0)  # type: ignore[arg-type]


def test_the_board_is_not_live_when_its_own_records_stop_coming_back() -> None:
    """A broker gone mid-run answers reads with nothing: the worker paces alone, and says so."""
    board = PaceBoard("w1")
    board.reading = True
    board.heard(b"acct/m/w1", record("w1", at=100.0).to_bytes())
    board.heard(b"acct/m/w2", record("w2", at=100.0).to_bytes())
    assert board.live(101.0) and len(board.others("acct", "m", 101.0)) == 1
    assert not board.live(100.0 + STALE_S + 1) and board.others("acct", "m", 105.0) == []


def test_workers_that_left_without_a_tombstone_are_forgotten() -> None:
    board = PaceBoard("w1")
    board.reading = True
    for n in range(200):  # a worker killed and restarted under a new name, again and again
        board.heard(f"acct/m/w{n + 2}".encode(), record(f"w{n + 2}", at=100.0 + n).to_bytes())
    assert len(board.records) <= 64 + 61


def test_an_idle_held_worker_does_not_stop_the_others_probing() -> None:
    board = PaceBoard("w2")
    board.reading = True
    link = FleetLink(board, "acct", "m")
    idle = record("w1", at=100.0, held=True, held_at=90.0, demand=0.0)
    board.heard(idle.key, idle.to_bytes())
    assert not link.probed_elsewhere(100.0)


def test_one_held_worker_probes_for_the_fleet() -> None:
    clock = [100.0]
    board = PaceBoard("w2")
    board.reading = True
    link = FleetLink(board, "acct", "m")
    held = record("w1", at=clock[0], held=True, held_at=99.0)
    board.heard(held.key, held.to_bytes())
    assert link.probed_elsewhere(clock[0])  # w1 comes first by name: it probes
    board_first = PaceBoard("w0")
    board_first.reading = True
    board_first.heard(held.key, held.to_bytes())
    assert not FleetLink(board_first, "acct", "m").probed_elsewhere(clock[0])


FLEET = [
    c
    for c in silent_window_cases()
    if c.name.endswith("refusals counted")
    or "answers in 0.1 s" in c.name
    or ("arriving" in c.name and "refusals counted" in c.name)
]


@pytest.mark.parametrize("case", FLEET, ids=[c.name for c in FLEET])
def test_three_workers_find_a_silent_window_together_with_few_429s(case: Case) -> None:
    got = run_fleet(case, workers=3)
    assert got.errors == 0
    assert got.share_429 < 0.02
    assert got.requests_used >= 0.95


def test_three_workers_share_an_announced_token_limit() -> None:
    case = next(c for c in token_cases(announced=True) if "window" in c.name)
    got = run_fleet(case, workers=3)
    assert got.errors == 0
    assert got.share_429 < 0.02
    assert got.tokens_used >= 0.9


def test_three_workers_share_an_announced_request_limit() -> None:
    """Each told the account's 600 a minute by its answers' headers, each paces at its share
    of it: the refusals are the first moment's, before any header was read."""
    got = run_fleet(next(announced_request_cases()), workers=3)
    assert got.errors == 0
    assert got.share_429 < 0.02
    assert got.requests_used >= 0.95
