"""Metric helpers: reading a /metrics page back, low scores, estimated cost."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from stream.metrics import is_low, sample_value
from stream.settings import ModelPrice, Settings


def test_sample_value_matches_name_and_a_subset_of_labels() -> None:
    registry = CollectorRegistry()
    closes = Counter("t_closes", "closes", ["kind", "reason"], registry=registry)
    closes.labels(kind="session", reason="end").inc(3)
    closes.labels(kind="conversation", reason="end").inc(1)
    Histogram("t_value", "value", ["rule"], registry=registry).labels(rule="r").observe(0.5)
    text = generate_latest(registry).decode()
    assert sample_value(text, "t_closes_total", kind="session") == 3
    assert sample_value(text, "t_closes_total", reason="end", kind="conversation") == 1
    assert sample_value(text, "t_value_count", rule="r") == 1
    assert sample_value(text, "t_closes_total", kind="none") == 0.0
    assert sample_value("", "t_closes_total") == 0.0  # the page is not up yet


def test_low_is_the_bad_side_of_the_middle_for_either_direction() -> None:
    assert [is_low(v, higher_is_better=True) for v in (0.0, 0.25, 0.5, 1.0)] == [
        True,
        True,
        False,
        False,
    ]
    assert [is_low(v, higher_is_better=False) for v in (0.0, 0.5, 0.75, 1.0)] == [
        False,
        False,
        True,
        True,
    ]


def test_estimated_cost_is_per_million_tokens() -> None:
    price = ModelPrice(input=0.15, output=0.60)
    assert price.cost(1_000_000, 0) == 0.15
    assert round(price.cost(2_000, 500), 9) == round((2_000 * 0.15 + 500 * 0.60) / 1e6, 9)


def test_prices_come_from_the_environment(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SCORER_JUDGE_PRICES", '{"llama3.1:8b": {"input": 0, "output": 0}}')
    assert Settings().judge_prices == {"llama3.1:8b": ModelPrice(input=0, output=0)}
