"""A /metrics page read back, for tests and benchmarks that watch a worker."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sample_value(text: str, name: str, **labels: str) -> float:
    """The first sample called ``name`` whose labels include ``labels``, read from a /metrics
    page (0.0 when there is none): for tests and benchmarks that watch a worker."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return 0.0
