"""A judged rule's canary (design record 47): reference items, each an input the rule reads
and the verdict recorded when the rule was set up, re-judged on a schedule to tell a judge
that changed from an application that did.

``canary:`` in a rule file names a JSONL file of items (relative to the rule file's folder)
and the period; the file is read and checked when the rule loads, so a bad line stops a
start with the file and the line. Strict models (unknown keys rejected, frozen)."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, model_validator

from .specs import Strict

DEFAULT_EVERY_S = 3600.0  # one hour
DEFAULT_TOLERANCE = 0.05  # of the normalised 0..1 scale
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def seconds_of(value: Any) -> float:
    """A period as seconds: a number (seconds) or a text such as ``90s``, ``30m``, ``1h``,
    ``1d``."""
    if isinstance(value, bool):
        raise ValueError("a period: seconds, or a number with s, m, h or d (e.g. 1h)")
    if isinstance(value, int | float):
        return float(value)
    found = _DURATION.match(value) if isinstance(value, str) else None
    if found is None:
        raise ValueError(f"{value!r} is not a period: seconds, or a number with s, m, h or d")
    return float(found[1]) * _UNITS[found[2] or "s"]


class RecordedVerdict(Strict):
    """What the judge answered an item when the rule was set up: the normalised value (0..1,
    the score's ``value``), the raw value and/or label, the model that answered, and when."""

    value: float = Field(ge=0.0, le=1.0, description="The normalised value (0..1)")
    raw_value: float | None = None
    label: str | None = None
    model: str = Field(min_length=1)
    at: datetime | None = None


class CanaryItem(Strict):
    """One reference item: ``input`` is what the rule reads (a trace as its variables read
    it, a thread or pair document for a thread or comparison rule), ``recorded`` its verdict
    then. ``id`` names it in listings (default: its line)."""

    id: str | None = Field(default=None, min_length=1, max_length=200)
    input: dict[str, Any]
    recorded: RecordedVerdict


def read_items(path: Path) -> list[CanaryItem]:
    """Every item of a JSONL file (blank lines skipped); ``ValueError`` naming the file, the
    line and the problem, for the first bad line (a canary with a bad item measures
    nothing)."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise ValueError(f"canary items {path}: cannot be read: {exc.strerror or exc}") from None
    items: list[CanaryItem] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"canary items {path} line {number}"
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{where}: not JSON: {exc}") from None
        try:
            item = CanaryItem.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "(line)"
            raise ValueError(f"{where}: field {field}: {first['msg']}") from None
        items.append(
            item if item.id is not None else item.model_copy(update={"id": f"line {number}"})
        )
    if not items:
        raise ValueError(f"canary items {path}: no items (one JSON object a line)")
    ids = [item.id for item in items]
    if twice := sorted({i for i in ids if i is not None and ids.count(i) > 1}):
        raise ValueError(f"canary items {path}: item ids repeat: {twice}")
    return items


class CanarySpec(Strict):
    """A judged rule's canary: its reference ``items`` (a JSONL file, relative to the rule
    file's folder), re-judged ``every`` period by one worker of the group with the verdict
    cache bypassed; a new verdict counts as changed when its label differs from the recorded
    one, or its normalised value is more than ``tolerance`` away."""

    items: str = Field(min_length=1, description="A JSONL file of items, relative to the rule file")
    every: float = Field(
        default=DEFAULT_EVERY_S,
        ge=1.0,
        le=7 * 86_400.0,
        description="How often the items are judged again (seconds, or 90s, 30m, 1h, 1d)",
    )
    tolerance: float = Field(
        default=DEFAULT_TOLERANCE,
        ge=0.0,
        le=1.0,
        description="How far (on the normalised 0..1 scale) a new value may be from the "
        "recorded one and not count as changed",
    )
    _items: list[CanaryItem] = PrivateAttr(default_factory=list)
    _path: Path | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _period(cls, data: Any) -> Any:
        if isinstance(data, dict) and "every" in data:
            return {**data, "every": seconds_of(data["every"])}
        return data

    @model_validator(mode="after")
    def _read_items(self, info: ValidationInfo) -> CanarySpec:
        context = info.context if isinstance(info.context, dict) else {}
        folder = context.get("rule_dir")
        if not isinstance(folder, Path):
            raise ValueError("canary.items is read from a rule file's folder (load the rule file)")
        path = (folder / self.items).resolve()
        if Path(self.items).is_absolute() or not path.is_relative_to(folder.resolve()):
            raise ValueError(f"canary.items {self.items!r}: a path inside the rule file's folder")
        if path.suffix in (".yaml", ".yml"):
            raise ValueError(f"canary.items {self.items!r}: a .yaml file of a pack is a rule")
        self._items = read_items(path)
        self._path = path
        return self

    @property
    def reference(self) -> list[CanaryItem]:
        """The items, as read when the rule loaded."""
        return list(self._items)

    @property
    def path(self) -> Path | None:
        """Where the items were read from."""
        return self._path
