"""A function remembered for its last argument, by identity (``last_read``): a trace's calls
are checked one rule and one call at a time against the same objects (a call's document, the
trace's list of calls), so what is read from each is read once, not once a rule or a call.
The argument is held, so its identity is never another object's; the engine does not change a
document once made, and one worker thread reads them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")

_NOTHING = object()


class last_read(Generic[T]):  # noqa: N801 - used as a decorator, named as one
    """``read`` remembered for the last argument it was given (``is``, not ``==``), or for
    the last ``key(argument)`` (``last_read.by``: a part of the argument that stands for it)."""

    def __init__(self, read: Callable[[Any], T], key: Callable[[Any], Any] | None = None) -> None:
        self.read = read
        self.key = key
        self.__doc__ = read.__doc__
        self._held: Any = _NOTHING
        self._value: Any = None

    @staticmethod
    def by(key: Callable[[Any], Any]) -> Callable[[Callable[[Any], U]], last_read[U]]:
        """``read`` remembered for the last ``key(argument)``."""

        def remembered(read: Callable[[Any], U]) -> last_read[U]:
            return last_read(read, key)

        return remembered

    def __call__(self, argument: Any) -> T:
        held = argument if self.key is None else self.key(argument)
        if held is not self._held or held is None:
            self._value = self.read(argument)  # raises: nothing is remembered
            self._held = held
        return self._value  # type: ignore[no-any-return]
