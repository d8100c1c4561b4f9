"""Deterministic checks: plain functions registered by name and referenced from rule YAML."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What a check found: a raw value on the rule's scale, a label and a reason."""

    raw_value: float
    reason: str
    label: str | None = None


class NotApplicable(Exception):  # noqa: N818 - it is a signal, not an error
    """The check cannot judge this input (published as a ``skipped`` score with the reason)."""


class CheckParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


CheckFunc = Callable[[Mapping[str, Any], Any], CheckResult]


@dataclass(frozen=True)
class CheckSpec:
    name: str
    func: CheckFunc
    variables: tuple[str, ...]
    params_model: type[CheckParams]

    def validate_params(self, params: Mapping[str, Any]) -> CheckParams:
        return self.params_model.model_validate(params)

    def run(self, values: Mapping[str, Any], params: Mapping[str, Any]) -> CheckResult:
        return self.func(values, self.validate_params(params))


_REGISTRY: dict[str, CheckSpec] = {}


def check(
    name: str, *, variables: tuple[str, ...], params: type[CheckParams] = CheckParams
) -> Callable[[CheckFunc], CheckFunc]:
    """Register ``func`` as the deterministic check ``name``."""

    def register(func: CheckFunc) -> CheckFunc:
        if name in _REGISTRY:
            raise ValueError(f"check {name!r} registered twice")
        _REGISTRY[name] = CheckSpec(name, func, variables, params)
        return func

    return register


def get(name: str) -> CheckSpec | None:
    return _REGISTRY.get(name)


def names() -> list[str]:
    return list(_REGISTRY)


# Built-in checks register themselves on import.
from . import coaching, critique, fretcoach, sessions  # noqa: E402,F401
