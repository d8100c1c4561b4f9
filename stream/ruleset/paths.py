"""Variable mapping: JMESPath paths into a trace or thread document, and looking values up."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, cast

import jmespath
from jmespath.exceptions import JMESPathError
from jmespath.parser import ParsedResult

from ..errors import EmptyVariable, MissingVariable

Getter = Callable[[Any], Any]

EMPTY: tuple[Any, ...] = ("", [], {})  # values that count as nothing (JMESPath's false values)


class _NotSimple(Exception):  # noqa: N818 - internal signal
    pass


def _field(name: str) -> Getter:
    return lambda value: value.get(name) if isinstance(value, dict) else None


def _indexed(left: Getter, indices: list[int]) -> Getter:
    def get(value: Any) -> Any:
        value = left(value)
        for i in indices:
            if not isinstance(value, list):
                return None
            try:
                value = value[i]
            except IndexError:
                return None
        return value

    return get


def _chain(getters: list[Getter]) -> Getter:
    def get(value: Any) -> Any:
        for getter in getters:
            value = getter(value)
            if value is None:
                return None
        return value

    return get


def _simple_getter(node: dict[str, Any]) -> Getter:
    """A plain function for field / index / sub-expression trees (the paths rules use);
    ``_NotSimple`` for anything else, which then runs through the JMESPath interpreter."""
    kind = node["type"]
    if kind == "field":
        return _field(node["value"])
    if kind == "subexpression":
        return _chain([_simple_getter(child) for child in node["children"]])
    if kind == "index_expression":
        left, *rest = node["children"]
        if not rest or any(r["type"] != "index" for r in rest):
            raise _NotSimple
        return _indexed(_simple_getter(left), [r["value"] for r in rest])
    raise _NotSimple


class CompiledPath:
    """A JMESPath expression with JMESPath's semantics; simple paths skip the interpreter."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self._parsed: ParsedResult = jmespath.compile(expression)
        try:
            self._get: Getter | None = _simple_getter(cast(dict[str, Any], self._parsed.parsed))
        except _NotSimple:
            self._get = None

    def search(self, document: Any) -> Any:
        if self._get is not None:
            return self._get(document)
        return self._parsed.search(document)


@lru_cache(maxsize=1024)
def compile_path(path: str) -> CompiledPath:
    """Compile a JMESPath expression; raises ``JMESPathError`` on bad syntax."""
    return CompiledPath(path)


def path_prefixes(path: str) -> list[str]:
    """Split ``a.b[0][1].c`` into ``a``, ``a.b``, ``a.b[0]``, ``a.b[0][1]``, ``a.b[0][1].c``.

    Only used to say *where* a path stopped resolving; quoted identifiers are respected.
    """
    prefixes: list[str] = []
    depth = 0
    quoted = False
    for i, ch in enumerate(path):
        if ch == '"' and (i == 0 or path[i - 1] != "\\"):
            quoted = not quoted
        elif quoted:
            continue
        elif ch == "[":
            if depth == 0 and i > 0:
                prefixes.append(path[:i])
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "." and depth == 0:
            prefixes.append(path[:i])
    prefixes.append(path)
    # "a.b" then "a.b" again can happen with "a.b[0]" -> keep order, drop duplicates
    return list(dict.fromkeys(p for p in prefixes if p))


def lookup(document: Any, variable: str, path: str) -> Any:
    """Evaluate ``path`` against ``document``; a missing or null value raises ``MissingVariable``."""
    value = compile_path(path).search(document)
    if value is not None:
        return value
    missing_at = path
    for prefix in path_prefixes(path):
        try:
            if compile_path(prefix).search(document) is None:
                missing_at = prefix
                break
        except JMESPathError:
            break
    raise MissingVariable(variable, path, missing_at)


def lookup_nonempty(document: Any, variable: str, path: str, reason: str | None = None) -> Any:
    """``lookup``, and an empty string, list or object counts as missing too (``reason``:
    what an empty value means, said before the path)."""
    value = lookup(document, variable, path)
    if value in EMPTY:
        raise EmptyVariable(variable, path, reason)
    return value


def truthy(document: Any, path: str) -> bool:
    """JMESPath truthiness of ``path`` on ``document`` (null, false and empties are false)."""
    return compile_path(path).search(document) not in (None, False, *EMPTY)
