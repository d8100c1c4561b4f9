"""The trajectory expected of an agent, as a rule reads it (issue 50, design record 50): a
list of steps, or ``{"calls": [...], "match": "<mode>"}`` naming its own mode.

A step is a tool's name, or ``{"name": ..., "arguments": {...}}`` (``arguments`` an object,
or the JSON text of one, as a recorded call carries it; null or absent: any arguments). Each
given argument is kept as canonical JSON (``checks.call_key``'s reading: key order ignored, 1
and 1.0 the same), so comparing it with a call's costs one string comparison. Anything else
raises ``TrajectoryError`` naming the step (by index, from 0) and what is wrong with it, never
an argument's value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from .checks import canonical_json
from .model import ToolCall

TrajectoryMode = Literal["exact", "in_order", "any_order", "subset", "superset"]
MODES: tuple[str, ...] = get_args(TrajectoryMode)
_SHOWN = 40  # characters of a mode or key a malformed trajectory's error repeats


class TrajectoryError(ValueError):
    """The expected trajectory cannot be read (the message names the step and the flaw)."""


@dataclass(frozen=True, slots=True)
class Step:
    """One expected call: the tool's name and, where given, arguments as canonical JSON per
    key (``None``: any arguments)."""

    name: str
    arguments: Mapping[str, str] | None = None

    def fits(self, call: ToolCall) -> bool:
        """The call is of this step's tool and agrees on every argument the step gives."""
        return call.name == self.name and self.fits_arguments(call)

    def fits_arguments(self, call: ToolCall) -> bool:
        if not self.arguments:
            return True
        parsed = call.parsed
        if not isinstance(parsed, dict):
            return False
        for key, expected in self.arguments.items():
            if key not in parsed or canonical_or_none(parsed[key]) != expected:
                return False
        return True


def canonical_or_none(value: Any) -> str | None:
    """A call's argument value as canonical JSON; None where it is not JSON (or too deep)."""
    try:
        return canonical_json(value)
    except (TypeError, ValueError, RecursionError):
        return None


def expected_trajectory(
    value: Any, default: TrajectoryMode = "in_order"
) -> tuple[list[Step], TrajectoryMode]:
    """The steps and mode of an expected trajectory: a list of steps (compared as ``default``
    says), or ``{"calls": [...], "match": "<mode>"}`` (``match`` optional)."""
    mode = default
    if isinstance(value, dict):
        unknown = sorted(str(k) for k in value if k not in ("calls", "match"))
        if unknown:
            raise TrajectoryError(
                f"unknown key {_shown(unknown[0])!r}: an expected trajectory object holds "
                "calls (a list of steps) and match (a mode)"
            )
        if "match" in value:
            mode = _mode(value["match"])
        if "calls" not in value:
            raise TrajectoryError("an expected trajectory object needs calls (a list of steps)")
        value = value["calls"]
    if not isinstance(value, list):
        raise TrajectoryError(
            f"the expected trajectory is {_kind(value)}, not a list of steps nor an object "
            "with calls and match"
        )
    return [_step(index, entry) for index, entry in enumerate(value)], mode


def _mode(value: Any) -> TrajectoryMode:
    if value not in MODES:
        shown = repr(_shown(value)) if isinstance(value, str) else _kind(value)
        raise TrajectoryError(f"match {shown} is not one of {', '.join(MODES)}")
    return cast(TrajectoryMode, value)


def _step(index: int, entry: Any) -> Step:
    if isinstance(entry, str):
        if not entry:
            raise TrajectoryError(f"step {index}: an empty tool name")
        return Step(entry)
    if not isinstance(entry, dict):
        raise TrajectoryError(
            f"step {index} is {_kind(entry)}: a step is a tool name or an object with name "
            "and arguments"
        )
    unknown = sorted(str(k) for k in entry if k not in ("name", "arguments"))
    if unknown:
        raise TrajectoryError(
            f"step {index}: unknown key {_shown(unknown[0])!r} (a step holds name and arguments)"
        )
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise TrajectoryError(f"step {index}: name must be a tool name (a non-empty string)")
    arguments = entry.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            raise TrajectoryError(f"step {index} ({name}): arguments are not JSON") from None
    if arguments is None:
        return Step(name)
    if not isinstance(arguments, dict):
        raise TrajectoryError(
            f"step {index} ({name}): arguments are {_kind(arguments)}, not an object"
        )
    try:
        canonical = {str(key): canonical_json(value) for key, value in arguments.items()}
    except (TypeError, ValueError, RecursionError):
        raise TrajectoryError(f"step {index} ({name}): arguments are not JSON values") from None
    return Step(name, canonical)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else f"a {type(value).__name__}"


def _shown(value: Any) -> str:
    text = str(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "\u2026"
