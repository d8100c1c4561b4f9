"""How traces and coaching-session events become thread events, as the rule set asks.

Traces are keyed by trace id (or anything), coaching-session events by whatever their
producer chose; the turns of one thread must meet in one partition. The router builds the
event that the trace and session agents send to the thread-events topic, keyed by
``<kind>/<thread id>``. Given the source message's key, it says whether the message was
keyed by its thread (then the thread's turns all come through one source partition); a
message whose key it is not given counts as not keyed by thread (``ThreadEvent.spread``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from ..models import Trace
from ..observer import Observer
from ..ruleset.conversations import ConversationRules
from ..ruleset.paths import CompiledPath, compile_path
from ..ruleset.schema import RuleSet
from ..ruleset.specs import ThreadSpec
from .events import SessionEvent, ThreadEvent
from .turns import PairMember, Turn, capped_document

# a turn's text past this is cut in the middle (SCORER_TURN_MAX_BYTES): one turn can neither
# fill its thread's byte cap nor make a message the producer may not send
DEFAULT_TURN_MAX_BYTES = 64_000


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _moment(trace: Trace, arrival: float) -> datetime:
    """A trace's event time: when it started (or ended), else when it reached Kafka."""
    return _aware(trace.start_time or trace.end_time or datetime.fromtimestamp(arrival, UTC))


def _spread(key: bytes | None, thread_id: str) -> bool:
    """Whether a thread's other turns may come through another partition than this one's: its
    message is not keyed by the thread id, or its key is not known."""
    return key is None or key != thread_id.encode()


def _messages(user: Any, assistant: Any) -> list[dict[str, Any]]:
    pair = (("user", user), ("assistant", assistant))
    return [{"role": role, "content": content} for role, content in pair if content is not None]


class Pairing(NamedTuple):
    """Which side of which pair a trace is: its comparison key, its variant, and the
    comparison rules whose filter matches it."""

    key: str
    variant: str
    rules: list[str]


@dataclass(frozen=True)
class NotPaired:
    """Why a trace is no side of a pair (``unknown_variant``: it has a comparison key and a
    variant, but neither of the two labels: counted, a labelling mistake would be silent)."""

    why: str
    unknown_variant: bool = False


class TurnPaths(NamedTuple):
    """Where a trace's turn is read: its user and assistant messages, and its end mark."""

    user: CompiledPath | None
    assistant: CompiledPath | None
    end: CompiledPath | None

    @classmethod
    def of(cls, spec: ThreadSpec | None) -> TurnPaths:
        def compiled(path: str | None) -> CompiledPath | None:
            return compile_path(path) if path else None

        if spec is None:
            return cls(None, None, None)
        return cls(compiled(spec.user), compiled(spec.assistant), compiled(spec.end))

    def read(self, document: Any) -> tuple[list[dict[str, Any]], bool]:
        """The turn's messages and whether it marks its conversation finished."""
        user = self.user.search(document) if self.user else None
        assistant = self.assistant.search(document) if self.assistant else None
        return _messages(user, assistant), bool(self.end and self.end.search(document))


class ThreadRouter:
    """Turns traces and session events into thread events, as the rule set asks."""

    def __init__(
        self,
        ruleset: RuleSet,
        turn_max_bytes: int = DEFAULT_TURN_MAX_BYTES,
        observer: Observer | None = None,
    ) -> None:
        self.turn_max_bytes = turn_max_bytes
        self.observer = observer or Observer()
        self.use(ruleset)

    def use(self, ruleset: RuleSet) -> None:
        """Route for ``ruleset`` from now on (a live reload)."""
        self.conversations = ConversationRules.of(ruleset)
        self.conversation_rules = self.conversations.rules
        self.session_rules = ruleset.thread_rules("session")
        # each group of conversation rules reads turns with its own paths
        self._turn_paths = {
            fallback: TurnPaths.of(self.conversations.spec(fallback)) for fallback in (False, True)
        }
        self.pair_rules = ruleset.pair_rules()
        self.pair = ruleset.pair_spec()
        self._pair_key = compile_path(self.pair.key) if self.pair else None
        self._pair_variant = compile_path(self.pair.variant) if self.pair else None

    @property
    def wants_conversations(self) -> bool:
        return bool(self.conversation_rules)

    @property
    def wants_traces(self) -> bool:
        """Whether any trace may become a thread event: a conversation turn, or one side of a
        pair."""
        return bool(self.conversation_rules or self.pair_rules)

    def from_trace(
        self,
        trace: Trace,
        document: Any,
        topic: str | None,
        arrival: float,
        source: str = "",
        key: bytes | None = None,
    ) -> ThreadEvent | None:
        """The turn a trace adds to its conversation, or None (no thread id, or no rule wants
        it); ``key``: its message's key, if known."""
        if trace.thread_id is None or not self.conversation_rules:
            return None
        matched = self.conversations.matching(trace, topic)
        if not matched:
            return None
        rules = [r.id for r in matched]
        fallback = matched[0].thread is not None and matched[0].thread.fallback
        messages, end = self._turn_paths[fallback].read(document)
        turn = Turn(key=trace.id, event_time=_moment(trace, arrival), messages=messages)
        return ThreadEvent(
            type="turn",
            kind="conversation",
            thread_id=trace.thread_id,
            project_name=trace.project_name,
            arrival=arrival,
            source=source,
            spread=_spread(key, trace.thread_id),
            turn=turn.capped(self.turn_max_bytes),
            end=end,
            rules=rules,
        )

    def events_for_trace(
        self,
        trace: Trace,
        document: Any,
        topic: str | None,
        arrival: float,
        source: str = "",
        key: bytes | None = None,
    ) -> list[ThreadEvent]:
        """Every thread event a trace makes: its conversation turn and its side of a pair."""
        routed = (
            self.from_trace(trace, document, topic, arrival, source, key),
            self.pair_from_trace(trace, document, topic, arrival, source),
        )
        return [event for event in routed if event is not None]

    def pairing(self, trace: Trace, document: Any, topic: str | None) -> Pairing | NotPaired:
        """A trace's comparison key, variant and the comparison rules that match it; or why
        it is not one side of a pair."""
        if not self.pair_rules or self._pair_key is None or self._pair_variant is None:
            return NotPaired("no comparison rule is loaded")
        assert self.pair is not None
        key, variant = self._pair_key.search(document), self._pair_variant.search(document)
        if not isinstance(key, str | int) or isinstance(key, bool) or key == "":
            return NotPaired(f"no comparison key at {self.pair.key}")
        if variant is None:
            return NotPaired(f"no variant at {self.pair.variant}")
        if str(variant) not in self.pair.variants:
            first, second = self.pair.variants
            why = f"its variant {variant!r} ({self.pair.variant}) is neither {first} nor {second}"
            return NotPaired(why, unknown_variant=True)
        rules = [r.id for r in self.pair_rules if r.filter.matches(trace, topic)]
        if not rules:
            return NotPaired("no comparison rule's filter matches it")
        return Pairing(str(key), str(variant), rules)

    def pair_from_trace(
        self, trace: Trace, document: Any, topic: str | None, arrival: float, source: str = ""
    ) -> ThreadEvent | None:
        """The side of a pair a trace is, or None (``pairing`` says why). A variant that is
        neither of the two labels is counted (``unknown_variant``): a producer that labels
        its variants otherwise than the rule would be silent otherwise."""
        pairing = self.pairing(trace, document, topic)
        if isinstance(pairing, NotPaired):
            if pairing.unknown_variant:
                self.observer.on_pair_trace("unknown_variant")
            return None
        assert self.pair is not None
        key, variant, rules = pairing
        slot: Literal["a", "b"] = "a" if variant == self.pair.variants[0] else "b"
        kept, cut = capped_document(document, self.turn_max_bytes)
        turn = Turn(
            key=trace.id,
            event_time=_moment(trace, arrival),
            member=PairMember(slot=slot, variant=variant, document=kept),
            cut_bytes=cut,
        )
        return ThreadEvent(
            type="turn",
            kind="pair",
            thread_id=key,
            project_name=trace.project_name,
            arrival=arrival,
            source=source,
            turn=turn,
            rules=rules,
        )

    def from_session(
        self, event: SessionEvent, arrival: float, source: str = "", key: bytes | None = None
    ) -> ThreadEvent:
        """The turn or end a coaching-session event brings to its session; ``key``: its
        message's key, if known."""
        moment = _aware(event.timestamp or datetime.fromtimestamp(arrival, UTC))
        common: dict[str, Any] = {
            "kind": "session",
            "thread_id": event.session_id,
            "project_name": event.project_name,
            "arrival": arrival,
            "source": source,
            "spread": _spread(key, event.session_id),
        }
        if event.type == "end":
            end_key = f"end-{event.seq}" if event.seq is not None else f"end-{moment.isoformat()}"
            return ThreadEvent(type="end", event_time=moment, end_key=end_key, **common)
        turn = Turn(
            key=f"seq-{event.seq}",
            seq=event.seq,
            event_time=moment,
            messages=_messages(event.user, event.assistant),
            metrics=event.metrics,
            feedback=event.feedback,
        )
        return ThreadEvent(type="turn", turn=turn.capped(self.turn_max_bytes), **common)
