"""Spread threads: a thread whose turns may come through any partition of their source topic
(a message of it was not keyed by its thread id) holds its events and folds them in
event-time order once no earlier one can still come through another partition (see
``processor.py``)."""

from __future__ import annotations

import heapq

from .events import ThreadEvent
from .fold import fold_turn, hold, mark_end, next_held
from .index import PartitionIndex
from .state import HeldEvent, ThreadClose, ThreadState
from .table import ThreadTable


class SpreadThreads:
    """Holding, folding and closing spread threads, in ``threads``."""

    def __init__(self, threads: ThreadTable) -> None:
        self.threads = threads

    @staticmethod
    def spreads(state: ThreadState, event: ThreadEvent) -> bool:
        """Whether ``state``'s turns may come through any partition of their source topic: a
        message of it was not keyed by its thread id, or its key was not known (a pair waits
        for every source of traces in its own way). A thread whose messages were all keyed by
        its id and still came through two partitions (the topic was given more partitions)
        waits for those, as any thread for its own sources."""
        return state.kind != "pair" and bool(event.source) and (state.spread or event.spread)

    def take(
        self,
        index: PartitionIndex,
        key: bytes,
        state: ThreadState,
        event: ThreadEvent,
        clamped: float,
    ) -> list[ThreadClose]:
        """An event of a spread thread: held, then folded with every held event of the thread
        that its event time has reached, in event-time order (at once when it has reached this
        one); the thread closes if that event time is the gap past its last activity."""
        own = self.threads.sources_of(
            state.kind, [*state.sources, *(h.source for h in state.held), event.source], spread=True
        )
        watermark = self.threads.spread_watermark(index, own)
        moment = event.turn.event_time if event.turn else event.event_time
        assert moment is not None
        ends = event.type == "end" or event.end
        held = HeldEvent(
            source=event.source,
            at=clamped,
            arrival=event.arrival,
            floor=watermark,
            event_time=moment,
            turn=event.turn,
            end_key=(event.end_key or (event.turn.key if event.turn else "end")) if ends else None,
            rules=event.rules,
        )
        if held.turn is not None and any(t.key == held.turn.key for t in state.turns):
            closes = self._fold(state, held)  # a redelivered turn: no activity, nothing to order
        elif held.turn is None and held.end_key in state.end_keys:
            return []  # the same end again
        elif not hold(state, held):
            return []  # held already
        else:
            closes = self.catch_up(
                state, self.threads.spread_watermark(index, own, ahead=True), watermark
            )
            # bounded: past the thread's caps its earliest held events are folded at once
            size = sum(h.size for h in state.held)
            while (
                len(state.held) > self.threads.limits.max_turns
                or size > self.threads.limits.max_bytes
            ):
                earliest = next_held(state, None)
                assert earliest is not None
                size -= earliest.size
                closes.extend(self._fold(state, earliest))
        self.threads.store(index, key, state)
        return closes

    def catch_up(
        self, state: ThreadState, horizon: float | None, watermark: float | None
    ) -> list[ThreadClose]:
        """Fold the held events of ``state`` that no earlier event can come before (up to
        ``horizon``; None: every one, the wall clock says so), in event-time order; then close
        it if its event time (``watermark``) is the gap past its last activity."""
        closes = []
        while (event := next_held(state, horizon)) is not None:
            closes.extend(self._fold(state, event))
        if (
            watermark is not None
            and state.last_event_time is not None
            and (close := self.threads.close_if_due(state, watermark=watermark)) is not None
        ):
            closes.append(close)
        return closes

    def _fold(self, state: ThreadState, event: HeldEvent) -> list[ThreadClose]:
        """Fold one event of a spread thread, as ``apply`` folds any thread's: at the thread's
        event time when it is folded (its own, or the thread's when it arrived if that was
        later), so a thread quiet for the gap before it closes first."""
        moment = max(event.at, event.floor)
        closes = []
        if state.last_event_time is not None:  # it has had activity
            close = self.threads.close_if_due(
                state,
                wall_now=event.arrival,
                watermark=moment if state.sources else None,
                idle_only=True,
            )
            if close is not None:
                closes.append(close)
        changed = False
        if event.turn is not None:
            changed = fold_turn(
                state,
                event.turn,
                arrival=event.arrival,
                watermark=moment,
                limits=self.threads.limits,
            )
            if missing := [r for r in event.rules if r not in state.rules]:
                state.rules.extend(missing)
                changed = True
        if event.end_key is not None:
            changed = (
                mark_end(
                    state,
                    event.end_key,
                    event_time=event.event_time,
                    arrival=event.arrival,
                    watermark=moment,
                )
                or changed
            )
        if changed and event.at > state.sources.get(event.source, 0.0):
            state.sources[event.source] = event.at
        if changed and state.is_open and state.ended:
            closes.append(self.threads.ended(state, event.arrival))
        return closes

    def settle(self, index: PartitionIndex, topic: str) -> list[ThreadClose]:
        """The spread threads whose slowest topic is ``topic``: those whose first held events
        no earlier event can come before any more are folded, and those whose event-time
        deadline its progress has passed close; one still waiting for another of its topics
        moves to that topic's heap."""
        return [
            *self._settle_heap(index, topic, index.held_at, index.held_due, ahead=True),
            *self._settle_heap(index, topic, index.spread_at, index.spread_due, ahead=False),
        ]

    def _settle_heap(
        self,
        index: PartitionIndex,
        topic: str,
        at: dict[bytes, float],
        due: dict[str, list[tuple[float, bytes]]],
        *,
        ahead: bool,
    ) -> list[ThreadClose]:
        closes: list[ThreadClose] = []
        heap = due.get(topic)
        if not heap:
            return closes  # no spread thread waits on the topic: its watermark is not needed
        bound = index.topic_watermark(topic, ahead=ahead)
        while heap and heap[0][0] <= bound:
            moment, key = heapq.heappop(heap)
            entry = index.open.get(key)
            if entry is None or at.get(key) != moment:
                continue  # stale: the thread moved on
            if self.threads.spread_watermark(index, entry[2], ahead=ahead) < moment:
                topics = self.threads.topics_of(entry[2])
                slowest = min(topics, key=lambda t: index.topic_watermark(t, ahead=ahead))
                heapq.heappush(due.setdefault(slowest, []), (moment, key))
                continue
            state = ThreadState.from_bytes(self.threads.table[key])
            del at[key]  # indexed afresh
            horizon = self.threads.spread_watermark(index, entry[2], ahead=True)
            closes.extend(
                self.catch_up(state, horizon, self.threads.spread_watermark(index, entry[2]))
            )
            self.threads.store(index, key, state)
        return closes
