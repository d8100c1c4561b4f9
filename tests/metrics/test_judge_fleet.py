"""The judge's fleet on /metrics (issue 48, item 3): per model and account (a hash, never the
key), the workers sharing the account, this worker's share, the fleet's pace and refusals,
and whether this worker reads the others; read when the page is scraped, as the pace is."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from stream.judge.fleet import Fleet, FleetReading, PaceBoard, PaceRecord, account_of
from stream.judge.limiter import AdaptiveLimiter
from stream.metrics import ScorerMetrics, sample_value

ACCOUNT = account_of("https://api.openai.com/v1", "sk-secret")
FLEET = ("workers", "share", "pace_rps", "refused_ratio", "shared")


@pytest.fixture
def metrics() -> ScorerMetrics:
    return ScorerMetrics(CollectorRegistry())


def page(metrics: ScorerMetrics) -> str:
    return metrics.exposition()[0].decode()


def fleet_figures(text: str, model: str) -> dict[str, float]:
    return {
        name: sample_value(text, f"scorer_judge_fleet_{name}", model=model, account=ACCOUNT)
        for name in FLEET
    }


def test_a_fleet_reading_is_one_gauge_series_per_model_and_account_read_at_scrape(
    metrics: ScorerMetrics,
) -> None:
    reading = [FleetReading(ACCOUNT, 3, 0.25, 9.5, 0.015, True)]
    metrics.watch_judge_fleet("gpt-4o-mini", lambda: reading[0])
    text = page(metrics)
    assert fleet_figures(text, "gpt-4o-mini") == {
        "workers": 3,
        "share": 0.25,
        "pace_rps": 9.5,
        "refused_ratio": 0.015,
        "shared": 1,
    }
    for name in FLEET:
        assert f"# TYPE scorer_judge_fleet_{name} gauge" in text
        assert f"# HELP scorer_judge_fleet_{name} " in text
    line = f'scorer_judge_fleet_workers{{account="{ACCOUNT}",model="gpt-4o-mini"}} 3.0'
    assert line in text
    assert "sk-secret" not in text
    # the topic cannot be read: the next scrape says this worker paces alone
    reading[0] = FleetReading(ACCOUNT, 1, 1.0, 4.0, 0.0, False)
    assert fleet_figures(page(metrics), "gpt-4o-mini") == {
        "workers": 1,
        "share": 1.0,
        "pace_rps": 4.0,
        "refused_ratio": 0.0,
        "shared": 0,
    }


def test_no_fleet_no_series_and_the_refusal_count_starts_at_zero(metrics: ScorerMetrics) -> None:
    """A worker that does not share its pace (SCORER_JUDGE_PACE_SHARE=false) exports no fleet
    series; every model paced opens its 429 count at 0, so the fleet's refusal alert sees the
    first refusals."""
    metrics.watch_judge_pacing("m", lambda: (0.0, "none"), lambda: float("nan"))
    text = page(metrics)
    assert "scorer_judge_fleet_workers{" not in text
    assert 'scorer_judge_calls_total{model="m",outcome="rate_limited"} 0.0' in text


def test_a_worker_in_a_fleet_of_two_exports_the_fleet_as_it_paces(metrics: ScorerMetrics) -> None:
    """Through ``Fleet.join``: w1 and w2 want as much under an announced 600 a minute, so w1
    paces at half (4.925 a second, headroom taken); w2 says it paces at 2 and had 3 of 60
    calls refused, w1 none of 40: 3 in 100 of the fleet's calls refused."""
    clock = [100.0]
    board = PaceBoard("w1")
    board.reading = True
    fleet = Fleet(board, ACCOUNT, wall=lambda: clock[0])
    limiter = AdaptiveLimiter(32, clock=lambda: clock[0])
    fleet.join("m", limiter, metrics.watch_judge_fleet)
    limiter.requests.announce(600)
    link = fleet.links["m"][0]
    for n in range(50):  # 5 calls a second over the last 10 s, answered
        link.started(clock[0] - n / 5)
    for n in range(40):
        link.answered(clock[0] - n, refused=False)
    other = PaceRecord(
        account=ACCOUNT,
        model="m",
        worker="w2",
        at=clock[0],
        demand=5.0,
        pace=2.0,
        share=0.5,
        answered=60,
        refused=3,
        held=False,
        held_at=None,
        held_minute={},
        minute={},
    )
    board.heard(other.key, other.to_bytes())
    fleet.tick()
    figures = fleet_figures(page(metrics), "m")
    assert figures == {
        "workers": 2,
        "share": pytest.approx(0.5),
        "pace_rps": pytest.approx(10 * 0.985 * 0.5 + 2.0),
        "refused_ratio": pytest.approx(0.03),
        "shared": 1,
    }
    board.reading = False  # the topic cannot be read: alone, and it says so
    figures = fleet_figures(page(metrics), "m")
    assert (figures["workers"], figures["shared"]) == (1, 0)
