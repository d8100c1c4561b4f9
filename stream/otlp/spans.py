"""One OpenTelemetry span as the scorer keeps it: ``Span``, read from an export batch
(``decode.py``), carried between workers while its trace is gathered (``assembler.py``), and
read with the rest of its trace as the trace model (``document.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start: datetime | None
    end: datetime | None
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    status: str | None = None
    # the parent is in another process (context propagated to this service): a local root
    remote_parent: bool = False

    @property
    def is_root(self) -> bool:
        """No parent, or a parent in another process (this service's part of the trace)."""
        return self.parent_span_id is None or self.remote_parent

    def as_dict(self) -> dict[str, Any]:
        extra = {"remote_parent": True} if self.remote_parent else {}
        return {
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "name": self.name,
            "start_time": self.start.isoformat() if self.start else None,
            "end_time": self.end.isoformat() if self.end else None,
            "attributes": self.attributes,
            "status": self.status,
            **extra,
        }

    def stored(self) -> dict[str, Any]:
        """The span as it travels and is kept while its trace is gathered."""
        return {**self.as_dict(), "resource": self.resource}

    @classmethod
    def from_stored(cls, trace_id: str, stored: dict[str, Any]) -> Span:
        def moment(text: str | None) -> datetime | None:
            return datetime.fromisoformat(text) if text else None

        return cls(
            trace_id=trace_id,
            span_id=stored["span_id"],
            parent_span_id=stored.get("parent_span_id"),
            name=stored.get("name", ""),
            start=moment(stored.get("start_time")),
            end=moment(stored.get("end_time")),
            attributes=stored.get("attributes") or {},
            resource=stored.get("resource") or {},
            status=stored.get("status"),
            remote_parent=bool(stored.get("remote_parent")),
        )
