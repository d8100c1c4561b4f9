"""Rubric aggregator building blocks: score values, criteria checks, the @aggregate mark."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from pydantic import ValidationError

from stream.models import Scale
from stream.ruleset.aggregators import (
    AggregateFunc,
    AggregateParams,
    AggregatorSpec,
    RubricInput,
    RubricScore,
    aggregate,
    unknown_criteria,
)
from stream.ruleset.base import PackCode
from stream.ruleset.checks import CheckSpec
from stream.ruleset.registry import MARK, marked

ONE_TO_FIVE = Scale(min=1, max=5)


class PickParams(AggregateParams):
    pick: list[str]

    def check_criteria(self, ids: Sequence[str]) -> None:
        if unknown := unknown_criteria(self.pick, ids):
            raise ValueError(f"criteria not in the rubric: {unknown}")


def first_picked(rubric: RubricInput, params: PickParams) -> list[RubricScore]:
    answer = rubric.answers.get(params.pick[0])
    return [RubricScore("picked", answer.raw_value if answer else None, rubric.scale)]


def fresh_aggregator() -> AggregateFunc:
    """A new, unmarked aggregator function (decorating it changes nothing shared)."""

    def picked(rubric: RubricInput, params: PickParams) -> list[RubricScore]:
        return first_picked(rubric, params)

    return picked


def test_value_is_the_raw_value_normalised_to_the_scale() -> None:
    assert RubricScore("overall", 4.0, ONE_TO_FIVE).value == 0.75
    assert RubricScore("overall", 1.0, ONE_TO_FIVE).value == 0.0
    assert RubricScore("overall", 5.0, ONE_TO_FIVE).value == 1.0


def test_value_on_a_one_point_scale_is_one() -> None:
    assert RubricScore("gate", 3.0, Scale(min=3, max=3)).value == 1.0


def test_value_is_none_without_a_raw_value_or_on_error() -> None:
    assert RubricScore("overall", None, ONE_TO_FIVE).value is None
    assert RubricScore("overall", 4.0, ONE_TO_FIVE, error="judge said nothing").value is None


def test_unknown_criteria_are_the_sorted_names_not_in_the_rubric() -> None:
    assert unknown_criteria(["zeta", "a", "alpha", "zeta"], ["a", "b"]) == ["alpha", "zeta"]
    assert unknown_criteria(["a"], ["a", "b"]) == []
    assert unknown_criteria([], []) == []


def test_aggregate_marks_the_function_with_its_spec() -> None:
    func = fresh_aggregator()
    decorated = aggregate("first_picked", params=PickParams, primary="picked")(func)

    assert decorated is func
    spec = getattr(decorated, MARK)
    assert spec == AggregatorSpec("first_picked", func, PickParams, "picked")
    assert list(marked([decorated], AggregatorSpec)) == [spec]
    # an aggregator is not a check
    assert list(marked([decorated], CheckSpec)) == []


def test_aggregate_registers_nothing_globally() -> None:
    local, other = fresh_aggregator(), fresh_aggregator()

    # the same name twice is fine: nothing is registered until a pack's registry collects it
    aggregate("same_name", params=PickParams, primary="picked")(local)
    aggregate("same_name", params=PickParams, primary="picked")(other)

    assert [s.func for s in marked([local, other], AggregatorSpec)] == [local, other]
    assert PackCode().aggregators.get("same_name") is None
    assert len(PackCode().aggregators) == 0


def test_validate_params_returns_the_params_model() -> None:
    spec = AggregatorSpec("first_picked", first_picked, PickParams, "picked")

    params = spec.validate_params({"pick": ["b"]}, ["a", "b"])

    assert isinstance(params, PickParams)
    assert params.pick == ["b"]
    rubric = RubricInput([], {}, ONE_TO_FIVE)
    assert spec.func(rubric, params) == [RubricScore("picked", None, ONE_TO_FIVE)]


def test_validate_params_calls_check_criteria() -> None:
    spec = AggregatorSpec("first_picked", first_picked, PickParams, "picked")

    with pytest.raises(ValueError, match=r"criteria not in the rubric: \['c'\]"):
        spec.validate_params({"pick": ["a", "c"]}, ["a", "b"])


def test_validate_params_rejects_unknown_params() -> None:
    spec = AggregatorSpec("first_picked", first_picked, PickParams, "picked")

    with pytest.raises(ValidationError):
        spec.validate_params({"pick": ["a"], "weights": {}}, ["a"])


def test_base_params_accept_any_criteria_and_have_no_primary_scale() -> None:
    params = AggregateParams()

    params.check_criteria(["anything"])
    assert params.primary_scale() is None
