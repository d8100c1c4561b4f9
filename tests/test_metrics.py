"""Reading a /metrics page back (what tests and benchmarks watch)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from stream.metrics import sample_value


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
