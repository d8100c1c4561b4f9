"""The reference topic's figures (design record 50), read from the worker's ``ReferenceStore``
when metrics are collected: whether its first read is done, what it holds, what it dropped and
how traces found their references. Registered by a worker that reads a reference topic
(``watch_references``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .pacing import PREFIX

if TYPE_CHECKING:
    from ..references import ReferenceStore

LOADED = f"{PREFIX}_references_loaded"
ENTRIES = f"{PREFIX}_references_entries"
BYTES = f"{PREFIX}_references_bytes"
DROPPED = f"{PREFIX}_references_dropped"
LOOKUPS = f"{PREFIX}_references_lookups"


class ReferenceMetrics(Collector):
    """The figures of one store (the latest given to ``watch``)."""

    def __init__(self) -> None:
        self.store: ReferenceStore | None = None

    def collect(self) -> Iterator[Metric]:
        store = self.store
        if store is None:
            return
        yield GaugeMetricFamily(
            LOADED,
            "1 once the reference topic was read to the end it had when the worker started "
            "(traces are scored from then on), 0 before",
            value=1.0 if store.loaded else 0.0,
        )
        yield GaugeMetricFamily(ENTRIES, "References held in memory", value=len(store))
        yield GaugeMetricFamily(
            BYTES,
            "Bytes the references held count against SCORER_REFERENCES_MAX_BYTES (keys, JSON "
            "values and a fixed overhead each)",
            value=store.bytes,
        )
        dropped = CounterMetricFamily(
            DROPPED,
            "Reference records not held: bound (dropped to stay within "
            "SCORER_REFERENCES_MAX_BYTES, or larger than it), invalid (no key, or a value that "
            "is not a JSON object)",
            labels=("reason",),
        )
        dropped.add_metric(["bound"], store.dropped)
        dropped.add_metric(["invalid"], store.invalid)
        yield dropped
        lookups = CounterMetricFamily(
            LOOKUPS,
            "Traces that looked up their reference (metadata.reference_id, else their id), by "
            "outcome: found or missing",
            labels=("outcome",),
        )
        lookups.add_metric(["found"], store.found)
        lookups.add_metric(["missing"], store.missing)
        yield lookups

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(LOADED, "")
        yield GaugeMetricFamily(ENTRIES, "")
        yield GaugeMetricFamily(BYTES, "")
        yield CounterMetricFamily(DROPPED, "", labels=("reason",))
        yield CounterMetricFamily(LOOKUPS, "", labels=("outcome",))


_WATCHING: WeakKeyDictionary[CollectorRegistry, ReferenceMetrics] = WeakKeyDictionary()


def watch_references(registry: CollectorRegistry, store: ReferenceStore) -> ReferenceMetrics:
    """``store``'s figures on ``registry`` (one collector per registry: a worker built again
    in the same process, as the tests do, exports its new store's)."""
    collector = _WATCHING.get(registry)
    if collector is None:
        collector = _WATCHING[registry] = ReferenceMetrics()
        registry.register(collector)
    collector.store = store
    return collector
