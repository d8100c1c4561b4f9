"""The Faust agents, kept thin: parse, hand to the engine or the thread processor, publish,
ack in order. ``traces``: score each trace; ``sessions``: forward coaching-session events to
the thread-events topic; ``threads``: fold thread events (a co-partitioned session event
taken in place: ``session_intake``), score each close; ``otlp``: spans
in, gathered per trace, whole traces out to the trace agent; ``forward``: the in-order
forwarding loop the session and spans agents share. Beside them, the tables the agents keep:
``verdict_table`` (the verdict cache's entries), ``batch_jobs`` (the judge jobs deferred to a
batch: ``batch_table``, submitted and polled by ``batch_rounds``, concluded by
``batch_finish``), ``keyed_table`` (the skeleton of the keyed tables); the agreement join
(``agreement``, ``agreement_join``, ``agreement_table``); and ``otel_events``, scores out as
OpenTelemetry evaluation events."""
