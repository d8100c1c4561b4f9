"""A rule filter's ``when``: one JMESPath expression over the whole trace, compiled and checked
once at load time, true when its result is truthy in JMESPath's sense.

JMESPath has ``contains``, ``starts_with``, ``ends_with`` and comparisons, but no regular
expressions: ``matches(subject, pattern)`` adds them (Python's ``re.search``: a match anywhere
in the subject; a null subject, a field the trace lacks, does not match). The trace is read
as ``Trace.view`` (its fields as sent, with ``latency_s``, ``cost`` and ``error`` computed).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, cast

import jmespath
import orjson
from jmespath import functions
from jmespath.exceptions import (
    IncompleteExpressionError,
    JMESPathError,
    LexerError,
    ParseError,
)
from jmespath.lexer import Lexer

ORDERING = {"lt", "lte", "gt", "gte"}
COMPARATORS = ORDERING | {"eq", "ne"}
PATH_TOKENS = {"dot", "lbracket", "flatten", "filter"}  # a quoted name inside a path
SHOWN = 80  # characters of a result a mismatch shows


class WhenError(JMESPathError):
    """A ``matches`` pattern that is not a regular expression (found at run time)."""


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise WhenError(f"matches(): {pattern!r} is not a regular expression: {exc}") from exc


class WhenFunctions(functions.Functions):
    """JMESPath's functions and ``matches``."""

    @functions.signature({"types": ["string", "null"]}, {"types": ["string"]})
    def _func_matches(self, subject: str | None, pattern: str) -> bool:
        return subject is not None and _regex(pattern).search(subject) is not None


OPTIONS = jmespath.Options(custom_functions=WhenFunctions())
_TABLE: dict[str, Any] = WhenFunctions.FUNCTION_TABLE


def truthy(value: Any) -> bool:
    """JMESPath's truth: false, null, and an empty string, array or object are false (0 is
    true)."""
    return not (value is None or value is False or value in ("", [], {}))


def _describe_parse_error(exc: JMESPathError) -> str:
    if isinstance(exc, IncompleteExpressionError):
        return "incomplete expression"
    if isinstance(exc, LexerError):
        return f"{exc.message} at column {exc.lexer_position}"
    if isinstance(exc, ParseError) and exc.token_value is not None:
        why = f"unexpected {exc.token_value!r} at column {exc.lex_position}"
        if exc.token_type == "NUMBER":
            why += " (a number is written in backticks: `0.5`)"
        return why
    return " ".join(str(exc).split())


def _quoted_operands(expression: str) -> list[str]:
    """Double-quoted names compared with something: ``name == "chat"`` compares ``name`` with
    a field called ``chat`` (null), so it would silently never match."""
    tokens = list(Lexer().tokenize(expression))
    found = []
    for i, token in enumerate(tokens):
        if token["type"] != "quoted_identifier":
            continue
        before = tokens[i - 1]["type"] if i else ""
        after = tokens[i + 1]["type"] if i + 1 < len(tokens) else ""
        if (before in COMPARATORS and after not in PATH_TOKENS) or (
            after in COMPARATORS and before not in PATH_TOKENS
        ):
            found.append(
                f'"{token["value"]}" is a field name in JMESPath; a string is written '
                f"'{token['value']}' (single quotes)"
            )
    return found


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("children", []):
        if isinstance(child, dict):
            found.extend(_nodes(child))
    return found


def _check_calls(tree: dict[str, Any]) -> list[str]:
    """What the interpreter would only find on a trace: unknown functions, wrong argument
    counts, literal patterns that are not regular expressions."""
    problems = []
    for node in _nodes(tree):
        if node["type"] != "function_expression":
            continue
        name, args = node["value"], node["children"]
        spec = _TABLE.get(name)
        if spec is None:
            problems.append(f"unknown function {name}() (known: {', '.join(sorted(_TABLE))})")
            continue
        signature = spec["signature"]
        variadic = bool(signature) and signature[-1].get("variadic", False)
        if len(args) < len(signature) or (not variadic and len(args) > len(signature)):
            wanted = f"{'at least ' if variadic else ''}{len(signature)}"
            problems.append(f"{name}() takes {wanted} arguments, given {len(args)}")
            continue
        if name == "matches" and args[1]["type"] == "literal":
            try:
                _regex(args[1]["value"])
            except WhenError as exc:
                problems.append(str(exc))
    return problems


class WhenExpression:
    """A compiled ``filter.when``."""

    def __init__(self, expression: str) -> None:
        """Compile and check ``expression``; ``ValueError`` says what is wrong with it."""
        self.expression = expression
        try:
            self._parsed = jmespath.compile(expression)
        except JMESPathError as exc:
            raise ValueError(f"not a JMESPath expression: {_describe_parse_error(exc)}") from exc
        tree = cast(dict[str, Any], self._parsed.parsed)
        if problems := _quoted_operands(expression) + _check_calls(tree):
            raise ValueError("; ".join(problems))
        self._orders = any(
            node["type"] == "comparator" and node["value"] in ORDERING for node in _nodes(tree)
        )

    def mismatch(self, view: dict[str, Any]) -> str | None:
        """None when the expression holds for ``view`` (a trace's ``Trace.view``), else why
        not: the result it had, or why it could not be evaluated on this trace (a function
        given a value of the wrong type, a string compared with a number): a trace it cannot
        be evaluated on does not match, and the worker goes on."""
        try:
            result = self._parsed.search(view, options=OPTIONS)
        except Exception as exc:  # a user's expression over any data never stops the worker
            problem = _cut(" ".join(str(exc).split()), 2 * SHOWN)
            if isinstance(exc, TypeError) and self._orders:  # jmespath: "a" < 1 raises
                problem += " (<, <=, > and >= compare two numbers or two strings)"
            return f"filter.when {self.expression!r}: cannot be evaluated on this trace: {problem}"
        if truthy(result):
            return None
        shown = _cut(orjson.dumps(result, default=str).decode(), SHOWN)
        why = f"filter.when {self.expression!r}: it is {shown}"
        if result is None and self._orders:
            why += " (<, <=, > and >= are null when a side is missing, or not a number or a string)"
        return why


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


@lru_cache(maxsize=1024)
def compile_when(expression: str) -> WhenExpression:
    """A ``filter.when`` compiled once; ``ValueError`` on a bad one."""
    return WhenExpression(expression)
