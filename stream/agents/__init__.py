"""The Faust agents, kept thin: parse, hand to the engine or the thread processor, publish,
ack in order. ``traces``: score each trace; ``sessions``: forward coaching-session events to
the thread-events topic; ``threads``: fold thread events, score each close; ``otlp``: spans
in, gathered per trace, whole traces out to the trace agent; ``forward``: the in-order
forwarding loop the session and spans agents share."""
