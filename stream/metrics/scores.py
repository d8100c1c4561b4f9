"""The score metrics of published scores (``scorer_scores_total``, ``scorer_score_value``,
``scorer_score_moments_total``, ``scorer_low_scores_total``, the shadow judges' and the tool-call
ones): the observer's ``on_score_published`` and ``on_scores_published``.

Counted per call, not per score: a call's whole-number increments of one series (a status's
count, an ok score's power 0, a low score, the powers of a 0 or 1 while every amount the series
was given is a whole number) are added up and given in one ``inc``, which leaves each counter
at the value one ``inc`` a score gives (whole numbers add up exactly in a float below 2**53, in
any order). Every other amount is given as it comes, in order, and every value is observed
once; adding 0 is left out (it changes nothing).
"""

from __future__ import annotations

from collections import Counter as TallyCounter
from collections.abc import Iterable
from typing import Any, TypeVar

from prometheus_client import Counter, Histogram
from prometheus_client.metrics import MetricWrapperBase

from ..agreement.preferences import pair_preference
from ..models import ScoreEvent
from ..observer import Observer
from .families import MetricFamilies
from .low import is_low
from .projects import ProjectLabels

M = TypeVar("M", bound=MetricWrapperBase)
TALLY_FROM = 16  # 1s given in one call from which they are added up before ``inc`` (cheaper)


class Series:
    """One (rule, pack, criterion, project)'s children, resolved once."""

    __slots__ = ("by_status", "count", "low", "powers", "value", "whole")

    def __init__(self, metrics: MetricFamilies, labels: tuple[str, str, str, str]) -> None:
        self.by_status: dict[str, Counter] = {}
        self.value: Histogram = metrics.score_value.labels(*labels)
        self.low: Counter = metrics.low_scores.labels(*labels)
        moments = [metrics.score_moments.labels(*labels, str(k)) for k in range(4)]
        self.count, self.powers = moments[0], moments[1:]  # power 0; powers 1 to 3
        self.whole = True  # every amount the powers were given so far is a whole number


class ScoreCallbacks(MetricFamilies, Observer):
    """The score metrics' observer callbacks (``ScorerMetrics`` has them), and the label
    children every callback resolves once (``labels()`` on every trace shows on the hot path)."""

    projects: ProjectLabels

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._children: dict[tuple[int | str, ...], MetricWrapperBase] = {}
        self._series: dict[tuple[str, str, str, str], Series] = {}

    def _child(self, metric: M, *labels: str) -> M:
        key: tuple[int | str, ...] = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child  # type: ignore[return-value]  # the same metric type, by its key

    def on_score_published(self, score: ScoreEvent) -> None:
        ones: list[Counter] = []
        try:
            self._published(score, ones)
        finally:
            for child in ones:
                child.inc()

    def on_scores_published(self, scores: Iterable[ScoreEvent]) -> None:
        ones: list[Counter] = []  # a child for each 1 it is given, its 1s added up at the end
        try:
            for score in scores:
                self._published(score, ones)
        finally:
            if len(ones) < TALLY_FROM:  # a trace's few: as they come
                for child in ones:
                    child.inc()
            else:
                for child, amount in TallyCounter(ones).items():
                    child.inc(amount)

    def _published(self, score: ScoreEvent, ones: list[Counter]) -> None:
        """Count ``score``: each child it adds 1 to in ``ones``, every other amount given now."""
        if score.variant is not None:  # a shadow judge's: out of the quality metrics
            shadow = (score.rule_id, score.pack, score.variant, score.status)
            ones.append(self._child(self.shadow_scores, *shadow))
            return
        if score.scope == "tool_call":
            self.tool_calls.published(score)  # by tool too
        # every score: the series of one (rule, pack, criterion, project) resolved together;
        # the project bounded (a kept project's name, or "other")
        project = self.projects.label(score.project_name)
        labels = (score.rule_id, score.pack, score.criterion or "", project)
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = Series(self, labels)
        status = score.status
        counted = series.by_status.get(status)
        if counted is None:
            counted = series.by_status[status] = self.scores.labels(*labels, status)
        ones.append(counted)
        value = score.value
        if status == "ok" and value is not None:
            series.value.observe(value)
            ones.append(series.count)
            if value == 1.0 and series.whole:  # every power is 1
                ones.extend(series.powers)
            elif value != 0.0:  # (a 0's powers add nothing)
                if series.whole:  # from now on, in order: first the 1s given so far
                    series.whole = False
                    for moment in series.powers:
                        if given := ones.count(moment):
                            moment.inc(given)
                    ones[:] = [child for child in ones if child not in series.powers]
                for k, moment in enumerate(series.powers, 1):
                    moment.inc(value**k)
            # the low-score series exists from a rule's first score, so its share reads 0,
            # not nothing, until a low score comes
            if is_low(value, score.higher_is_better):
                ones.append(series.low)
        elif status == "error" and score.details and "counted_as" in score.details:
            self._count_error(score, project, score.details["counted_as"])
        if score.scope == "pair":
            pair = pair_preference(score)
            if pair is not None:
                self.on_pair_preference(
                    pair.rule, pair.pack, project, pair.variant_a, pair.variant_b, pair.preferred
                )

    def _count_error(self, score: ScoreEvent, project: str, counted: Any) -> None:
        """An error score whose rule counts errors as a value: that value once per score the
        rule would have published (``details.counted_as``, the engine's ``settle``; no other)."""
        if not isinstance(counted, dict) or not isinstance(counted.get("criteria"), list):
            return
        value = counted.get("value")
        if not isinstance(value, int | float) or isinstance(value, bool):
            return
        for criterion in counted["criteria"]:
            labels = (score.rule_id, score.pack, str(criterion or ""), project)
            self._child(self.errors_counted, *labels).observe(value)
            # the ok series too, at 0 if none came yet: a pass rate adds the two
            self._child(self.score_value, *labels)
