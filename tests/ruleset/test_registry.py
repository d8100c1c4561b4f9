"""The named-entry registry and the marks that decorators leave on functions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from stream.ruleset.registry import MARK, Registry, mark, marked


@dataclass(frozen=True)
class Entry:
    name: str
    value: int = 0


@dataclass(frozen=True)
class OtherEntry:
    name: str


def function() -> Callable[[], None]:
    def registered() -> None:
        return None

    return registered


def test_add_then_get_and_require() -> None:
    registry: Registry[Entry] = Registry("check")
    entry = Entry("length", 3)

    registry.add(entry)

    assert registry.get("length") is entry
    assert registry.require("length") is entry
    assert registry.names() == ["length"]
    assert len(registry) == 1


def test_get_of_an_unknown_name_is_none() -> None:
    registry: Registry[Entry] = Registry("check", [Entry("a")])

    assert registry.get("b") is None


def test_entries_given_up_front_are_added_in_order() -> None:
    registry = Registry("aggregate", [Entry("zeta"), Entry("alpha"), Entry("mid")])

    assert registry.names() == ["zeta", "alpha", "mid"]
    assert len(registry) == 3


def test_require_of_an_unknown_name_names_the_registered_entries_sorted() -> None:
    registry = Registry("aggregate", [Entry("zeta"), Entry("alpha")])

    with pytest.raises(ValueError) as raised:
        registry.require("weighted")

    assert str(raised.value) == "unknown aggregate 'weighted'; registered: ['alpha', 'zeta']"


def test_require_on_an_empty_registry_says_nothing_is_registered() -> None:
    with pytest.raises(ValueError, match=r"unknown check 'x'; registered: \[\]"):
        Registry("check").require("x")


def test_a_name_is_registered_once() -> None:
    registry = Registry("check", [Entry("length", 1)])

    with pytest.raises(ValueError, match="check 'length' registered twice"):
        registry.add(Entry("length", 2))

    assert registry.require("length").value == 1
    assert len(registry) == 1


def test_duplicates_given_up_front_are_rejected() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        Registry("check", [Entry("a"), Entry("a")])


def test_mark_sets_the_entry_on_the_function() -> None:
    func = function()
    entry = Entry("length")

    mark(func, entry)

    assert getattr(func, MARK) is entry


def test_marked_yields_only_entries_of_the_asked_type() -> None:
    first, second, other, plain = function(), function(), function(), function()
    mark(first, Entry("a"))
    mark(second, Entry("b"))
    mark(other, OtherEntry("c"))

    namespace = [first, "not a function", plain, other, 42, second]

    assert list(marked(namespace, Entry)) == [Entry("a"), Entry("b")]
    assert list(marked(namespace, OtherEntry)) == [OtherEntry("c")]


def test_marked_of_an_unmarked_namespace_is_empty() -> None:
    assert list(marked([function(), object(), None], Entry)) == []
