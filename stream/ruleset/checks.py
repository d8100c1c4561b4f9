"""Deterministic checks: plain functions, registered by name with ``@check`` in a rule pack's
own Python module (``rules/<pack>/*.py``) and referenced from the pack's rule files."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from .registry import mark


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What a check found: a raw value on the rule's scale, a label and a reason."""

    raw_value: float
    reason: str
    label: str | None = None


class NotApplicable(Exception):  # noqa: N818 - it is a signal, not an error
    """The check cannot judge this input (published as a ``skipped`` score with the reason)."""


class CheckParams(BaseModel):
    """A check's own parameters (``params:`` in the rule file); subclass to declare them."""

    model_config = ConfigDict(extra="forbid")


CheckFunc = Callable[[Mapping[str, Any], Any], CheckResult]


@dataclass(frozen=True)
class CheckSpec:
    """A registered check: its function, the variables it reads and its params model."""

    name: str
    func: CheckFunc
    variables: tuple[str, ...]
    params_model: type[CheckParams]

    def validate_params(self, params: Mapping[str, Any]) -> CheckParams:
        return self.params_model.model_validate(params)


def check(
    name: str, *, variables: tuple[str, ...], params: type[CheckParams] = CheckParams
) -> Callable[[CheckFunc], CheckFunc]:
    """Register ``func`` as the deterministic check ``name`` of the pack that defines it."""

    def register(func: CheckFunc) -> CheckFunc:
        mark(func, CheckSpec(name, func, variables, params))
        return func

    return register
