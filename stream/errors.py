"""One root exception with a few meaningful subclasses."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .models import TokenUsage


class ScorerError(Exception):
    """Root of every error this package raises on purpose."""


class RuleFileError(ScorerError):
    """A rule file (or rule set) is invalid; raised at load time, never at run time."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: " + "; ".join(problems))


class ConfigError(ScorerError):
    """The deployment's settings are wrong: one problem per item, each naming the setting as
    the user sets it (an environment variable) and never a secret's value."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class JudgeError(ScorerError):
    """The judge could not produce a valid verdict (after retries, where retried)."""

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        attempts: int = 1,
        usage: TokenUsage | None = None,
        param: str | None = None,
    ) -> None:
        # a closed set: timeout, connection, rate_limited, server_error, unavailable,
        # client_error, structured_output, unsupported_parameter, quota_exhausted,
        # invalid_answer, answer_cut, refused, tool_budget
        self.kind = kind
        self.attempts = attempts
        self.usage = usage  # tokens the answered attempts used (unusable answers cost too)
        self.param = param  # the request parameter an unsupported_parameter refusal names
        super().__init__(message)


class MissingVariable(ScorerError):  # noqa: N818 - named as the skipped score reads
    """A mapped variable path does not exist in the trace."""

    def __init__(self, variable: str, path: str, missing_at: str) -> None:
        self.variable = variable
        self.path = path
        self.missing_at = missing_at
        super().__init__(
            f"variable {variable!r}: path {path!r} is missing (no value at {missing_at!r})"
        )


class EmptyVariable(MissingVariable):
    """A mapped variable that must not be empty resolved to an empty string, list or object;
    ``reason`` (the variable's ``empty_reason``) says what that means, before the path."""

    def __init__(self, variable: str, path: str, reason: str | None = None) -> None:
        self.variable = variable
        self.path = path
        self.missing_at = path
        where = f"variable {variable!r}: path {path!r} is empty"
        ScorerError.__init__(self, f"{reason} ({where})" if reason else where)
