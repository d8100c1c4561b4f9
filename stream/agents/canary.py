"""The judge canary's schedule (design record 47): one worker of the group, the leader,
judges every canary rule's reference items again each rule's period, through the scorer's
judge with the verdict cache bypassed, sets the canary gauges and publishes the round on the
canary topic (``<app id>-canary``) for ``scorer agreement``.

Who leads is Faust's choice: ``app.is_leader()``, the check ``app.timer(on_leader=True)``
makes (the worker assigned the one partition of ``<app id>-__assignor-__leader``). The timer
here runs on every worker and asks it itself, so that a worker that stops leading clears its
gauges (a series is one worker's, never two). When a rule's last round ran is kept in the
leader's memory: a new leader runs every canary at its first tick, one round early at most.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import faust
from faust.types import TopicT

from ..canary import CanaryRound, canary_topic, judge_items, summarise
from ..canary.compare import Rejudged
from ..delivery.publisher import Publisher
from ..engine.kinds import primary_shape
from ..engine.plan import JudgedRule
from ..engine.scorer import Scorer
from ..observer import Observer
from ..ruleset.kinds import CriteriaRule, LLMJudgeRule
from ..settings import Settings

log = logging.getLogger(__name__)

MAX_TICK_S = 30.0  # how often a worker asks whether it leads and a canary is due
MIN_TICK_S = 0.5


def canary_rules(scorer: Scorer) -> list[JudgedRule]:
    """The rules of the running set with a canary."""
    judged = (r for r in scorer.ruleset.rules if isinstance(r, LLMJudgeRule | CriteriaRule))
    return [r for r in judged if r.canary is not None]


def tick_every(rules: list[JudgedRule]) -> float:
    """How often to look: a quarter of the shortest period, within 0.5 s and 30 s."""
    periods = [r.canary.every for r in rules if r.canary is not None]
    return max(MIN_TICK_S, min([MAX_TICK_S, *(p / 4 for p in periods)]))


class JudgeCanary:
    """The canary rounds of the running rule set (``scorer.ruleset``: a reload's rules from
    the next tick), run where ``is_leader()`` (default: Faust's ``app.is_leader``)."""

    def __init__(
        self,
        app: faust.App,
        scorer: Scorer,
        settings: Settings,
        observer: Observer,
        *,
        publisher: Any = None,
        is_leader: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self.scorer = scorer
        self.observer = observer
        self.price = settings.judge_cost
        self.topic: TopicT = app.topic(
            canary_topic(settings.app_id),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=1,
            internal=True,
        )
        self.publisher = publisher if publisher is not None else Publisher(app)
        self.is_leader = is_leader if is_leader is not None else app.is_leader
        self.clock = clock
        self.leading = False
        self.declared = False
        # (rule id, version, model) -> when its last round ended (this worker's clock)
        self.last: dict[tuple[str, int, str], float] = {}

    def register(self) -> None:
        """The timer, on every worker (only the leader's rounds run)."""
        every = tick_every(canary_rules(self.scorer))
        self.app.timer(every, name="judge-canary")(self.tick)

    def _key(self, rule: JudgedRule) -> tuple[str, int, str]:
        return (rule.id, rule.version, self.scorer.context.model_of(rule))

    def due(self, now: float) -> list[JudgedRule]:
        """The canary rules whose period has passed since their last round here."""
        return [
            rule
            for rule in canary_rules(self.scorer)
            if rule.canary is not None
            and now - self.last.get(self._key(rule), float("-inf")) >= rule.canary.every
        ]

    async def tick(self) -> list[CanaryRound]:
        """The rounds due, where this worker leads; a worker that stopped leading clears its
        gauges. A failure is logged: an exception out of a Faust timer stops the worker."""
        try:
            if not self.is_leader():
                if self.leading:
                    self.observer.on_canary_stopped()
                    self.last.clear()
                    self.leading = False
                return []
            self.leading = True
            self.forget_gone()
            return [await self.run_round(rule) for rule in self.due(self.clock())]
        except Exception:
            log.exception("a judge canary round failed: tried again at the next tick")
            return []

    def forget_gone(self) -> None:
        """A reload dropped a canary (or changed a rule's version or model): no gauge of it
        stays. The gauges are cleared together, so every canary runs again at once."""
        running = {self._key(rule) for rule in canary_rules(self.scorer)}
        if set(self.last) - running:
            self.observer.on_canary_stopped()
            self.last.clear()

    async def run_round(self, rule: JudgedRule) -> CanaryRound:
        """One round of ``rule``'s items: judged, summed up, its gauges set, published."""
        spec = rule.canary
        assert spec is not None
        context = self.scorer.context
        model = context.model_of(rule)
        judged = await judge_items(
            rule,
            spec.reference,
            context.judge,
            default_model=context.default_model,
            max_prompt_tokens=context.max_prompt_tokens,
            redaction=context.redaction,
        )
        self.last[self._key(rule)] = self.clock()
        found = summarise(
            rule.id,
            rule.pack,
            model,
            judged,
            higher_is_better=primary_shape(rule).higher_is_better,
            tolerance=spec.tolerance,
            every_s=spec.every,
            at=datetime.fromtimestamp(self.clock(), UTC),
        )
        self.observer.on_canary_round(found, self.cost(model, judged))
        if found.changed:
            log.warning(
                "judge canary %s/%s (%s): %d of %d verdicts changed, mean shift %+.3f",
                rule.pack,
                rule.id,
                model,
                found.changed,
                found.items,
                found.mean_shift or 0.0,
            )
        await self.publish(found)
        return found

    def cost(self, model: str, judged: list[Rejudged]) -> float | None:
        """What the round's calls cost (None: the model has no price)."""
        costs = [self.price(model, r.usage) for r in judged if r.usage is not None]
        return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)

    async def publish(self, found: CanaryRound) -> None:
        if not self.declared:
            await self.publisher.declare([self.topic])
            self.declared = True
        record = found.model_dump_json().encode()
        await self.publisher.send_until_delivered([(self.topic, found.rule.encode(), record, None)])
