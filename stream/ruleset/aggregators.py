"""Rubric aggregators: how a rubric's per-criterion answers become scores.

A rubric rule asks the judge for every criterion in one call (structured output keyed by
criterion id). The engine validates each answer against the rule's output spec; an
aggregator, registered with ``@aggregate`` in the rule pack's own Python module and
referenced from the rule file, turns the answers into the scores to publish: one per
criterion plus its own (an overall rating, a weighted score with a pass/fail gate).
Aggregators are pure functions of the answers and their params, so golden tests can run
them against the seeds' own scoring code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..models import Scale
from .registry import mark


@dataclass(frozen=True, slots=True)
class CriterionAnswer:
    """The judge's answer for one criterion, validated against the rule's output spec."""

    raw_value: float
    label: str | None
    reason: str | None
    forced: str | None = None  # why the engine set the answer itself (a criterion's na_when)


@dataclass(frozen=True, slots=True)
class CriterionInfo:
    id: str
    name: str


@dataclass(frozen=True)
class RubricInput:
    """What an aggregator sees. ``answers`` holds the criteria the judge answered, in criterion
    order; None marks an answer that was there but unusable (the seeds' ERROR). A criterion
    the judge left out is absent."""

    criteria: Sequence[CriterionInfo]
    answers: Mapping[str, CriterionAnswer | None]
    scale: Scale  # the rule's per-criterion answer scale


@dataclass(frozen=True)
class RubricScore:
    """One score an aggregator publishes; ``name`` is the score event's ``criterion``."""

    name: str
    raw_value: float | None
    scale: Scale
    label: str | None = None
    reason: str | None = None
    higher_is_better: bool = True
    details: dict[str, Any] | None = None
    error: str | None = None  # set: published with status error and this reason

    @property
    def value(self) -> float | None:
        if self.raw_value is None or self.error is not None:
            return None
        return self.scale.normalise(self.raw_value)


class AggregateParams(BaseModel):
    """An aggregator's own parameters (``aggregate.params`` in the rule file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def check_criteria(self, ids: Sequence[str]) -> None:
        """Raise ``ValueError`` when the params name criteria the rubric does not have."""

    def primary_scale(self) -> Scale | None:
        """The scale of the primary score (None: the rule's answer scale)."""
        return None

    def primary_labels(self) -> list[str] | None:
        """The labels the primary score can have, best first (None: not a closed set); what
        a rule's ``stated_aggregate`` offers the judge."""
        return None


AggregateFunc = Callable[[RubricInput, Any], list[RubricScore]]


@dataclass(frozen=True)
class AggregatorSpec:
    """A registered aggregator: its function, params model and primary score."""

    name: str
    func: AggregateFunc
    params_model: type[AggregateParams]
    primary: str  # the score that stands for the rule (its id in decisions, error scores)

    def validate_params(
        self, params: Mapping[str, Any], criteria: Sequence[str]
    ) -> AggregateParams:
        model = self.params_model.model_validate(params)
        model.check_criteria(criteria)
        return model


def aggregate(
    name: str, *, params: type[AggregateParams], primary: str
) -> Callable[[AggregateFunc], AggregateFunc]:
    """Register ``func`` as the rubric aggregator ``name`` of the pack that defines it."""

    def register(func: AggregateFunc) -> AggregateFunc:
        mark(func, AggregatorSpec(name, func, params, primary))
        return func

    return register


def unknown_criteria(named: Sequence[str], ids: Sequence[str]) -> list[str]:
    """The names in ``named`` that are not criterion ids of the rubric."""
    return sorted(set(named) - set(ids))
