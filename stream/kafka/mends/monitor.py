"""Faust's monitor without its bookkeeping for every record.

Faust gives every app a ``Monitor`` (faust-streaming 0.15, ``sensors/monitor.py``), a sensor
that, for each record, counts it by topic, stamps the message, keeps the offset read,
builds a dict of state for the stream's event and times it, and counts every table read and
write; about 7 µs a record in the thread agent with 100 000 open threads. Only Faust's own
statistics pages read these (and its check for stalled streams the time a stream last took
a record, which is kept); the worker exports its metrics itself (``stream/metrics``), and its
web server serves those. ``QuietMonitor`` keeps the Monitor (its commit, send, rebalance and
web figures) and drops the per-record and per-table-access hooks.
"""

from __future__ import annotations

from time import monotonic
from typing import Any

from faust.sensors import Monitor


class QuietMonitor(Monitor):
    """Faust's Monitor, silent for each record and each table access."""

    def on_message_in(self, tp: Any, offset: int, message: Any) -> None:
        pass

    def on_stream_event_in(self, tp: Any, offset: int, stream: Any, event: Any) -> None:
        # kept: Faust's check for stalled streams reads it (``verify_event_path``)
        self.stream_inbound_time[tp] = monotonic()

    def on_stream_event_out(
        self, tp: Any, offset: int, stream: Any, event: Any, state: Any = None
    ) -> None:
        pass

    def on_message_out(self, tp: Any, offset: int, message: Any) -> None:
        pass

    def on_table_get(self, table: Any, key: Any) -> None:
        pass

    def on_table_set(self, table: Any, key: Any, value: Any) -> None:
        pass

    def on_table_del(self, table: Any, key: Any) -> None:
        pass
