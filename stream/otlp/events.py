"""Events on the internal assembly topic (``<app id>-otlp-assembly``), keyed by trace id.

- ``spans``: spans of one trace from one export record (``Span.stored``), with the record's
  Kafka time (``arrival``), so redelivery cannot make a trace look younger;
- ``progress``: how far each worker has read each spans partition it owns, in Kafka time
  (the present when caught up), sent to every partition on its timer;
- ``tick``: the wall clock, sent by each worker to the partitions it owns, behind what is
  queued there, so traces are assembled when nothing else arrives.

They are internal, written and read by this package only: plain JSON, no schema of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import TypeAdapter

from .assembler import cut

AssemblyType = Literal["spans", "progress", "tick"]
CHUNK_BYTES = 256_000  # spans of one trace per event, well under Kafka's 1 MB message size


@dataclass
class AssemblyEvent:
    type: AssemblyType
    arrival: float = 0.0
    trace_id: str = ""
    spans: list[dict[str, Any]] = field(default_factory=list)
    positions: dict[str, float] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.__dict__)

    @classmethod
    def from_bytes(cls, raw: bytes) -> AssemblyEvent:
        """Decode one event: ``ValueError`` when the bytes are not one (pydantic's
        ``ValidationError`` is one), so that no record can stop the assembly agent."""
        document = orjson.loads(raw)
        if not isinstance(document, dict):
            raise ValueError(f"an assembly event is a JSON object, not {type(document).__name__}")
        return _ASSEMBLY_EVENT.validate_python(document)


_ASSEMBLY_EVENT = TypeAdapter(AssemblyEvent)  # the dataclass's fields, their types checked


def spans_events(trace_id: str, spans: list[dict[str, Any]], arrival: float) -> Iterator[bytes]:
    """The ``spans`` events that carry ``spans`` of one trace: a chunk per event, each well
    under the message size; a span larger than a chunk loses its long attribute values."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for span in spans:
        length = len(orjson.dumps(span))
        if length > CHUNK_BYTES:
            span, length = cut(span)
        if chunk and size + length > CHUNK_BYTES:
            yield AssemblyEvent("spans", arrival, trace_id, chunk).to_bytes()
            chunk, size = [], 0
        chunk.append(span)
        size += length
    if chunk:
        yield AssemblyEvent("spans", arrival, trace_id, chunk).to_bytes()


def progress(now: float, positions: dict[str, float]) -> bytes:
    return AssemblyEvent("progress", now, positions=positions).to_bytes()


def tick(now: float) -> bytes:
    return AssemblyEvent("tick", now).to_bytes()
