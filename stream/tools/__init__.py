"""An agent's tool calls as targets of their own (issue 50, design record 49): each call in a
trace, from the trace model's messages or from OpenTelemetry spans (``calls``), and the
deterministic checks of the ``tools`` pack over them (``checks``)."""
