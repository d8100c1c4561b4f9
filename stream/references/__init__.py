"""Reference documents joined to the traces they are for (issue 50, design record 50): the
store of the reference topic's latest values (``store``), when its reader has caught up
(``catch_up``), and a trace with its reference (``join``). Pure: the topic is read by
``stream.kafka.reference_topic``."""

from .catch_up import ReferenceCatchUp
from .join import reference_id, with_reference
from .store import ReferenceStore

__all__ = ["ReferenceCatchUp", "ReferenceStore", "reference_id", "with_reference"]
