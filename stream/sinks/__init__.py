"""Score sinks: the scores topic posted to where traces are browsed (Langfuse, Opik).

``scorer sink langfuse`` and ``scorer sink opik`` each read the scores topic as a consumer
group of their own and post every ``ok`` score to the platform's public API, in batches, at
least once (design record 17). Pure: ``scores`` (which scores, what name and value),
``langfuse`` and ``opik`` (the platforms' bodies and answers), ``platform`` (what a sink asks of
one), ``settings``. I/O: ``delivery`` (HTTP and its retry policy), ``runner`` (the Kafka loop),
``build`` (wiring)."""

from .build import langfuse_sink, opik_sink
from .delivery import Delivery, SinkError, Tally
from .runner import ScoreSink
from .settings import LangfuseSinkSettings, OpikSinkSettings

__all__ = [
    "Delivery",
    "LangfuseSinkSettings",
    "OpikSinkSettings",
    "ScoreSink",
    "SinkError",
    "Tally",
    "langfuse_sink",
    "opik_sink",
]
