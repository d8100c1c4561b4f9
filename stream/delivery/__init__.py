"""Getting results out at least once: what a scored target sends (``outbox``), publishing
with retry, the one dead-letter builder, and ordered delivery (an offset is acked once
everything it produced is on the broker and every earlier offset of its partition is
acked)."""
