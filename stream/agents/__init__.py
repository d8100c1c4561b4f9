"""The Faust agents, kept thin: parse, hand to the engine or the thread processor, publish,
ack in order. ``traces``: score each trace; ``sessions``: forward coaching-session events to
the thread-events topic; ``threads``: fold thread events, score each close."""
