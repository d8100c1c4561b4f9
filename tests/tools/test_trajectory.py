"""A trace's tool calls against an expected trajectory (``stream.tools.trajectory``): worked
cases of each mode, the expected value read and refused, and properties that tie the modes
together (exact implies every other mode; any_order is subset and superset at once; in_order
implies superset; a verdict of the matching modes does not depend on the order of the steps
or of the calls; on names alone the modes are multiset relations) and keep argument values out
of every reason."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream.tools.calls import tool_calls
from stream.tools.model import ToolCall
from stream.tools.trajectory import (
    MODES,
    Step,
    TrajectoryError,
    TrajectoryMode,
    expected_trajectory,
    match_trajectory,
)

SECRET = "SECRET-9f2"  # an argument value no reason may repeat


def call(name: str, position: int, arguments: Any = None, text: str | None = None) -> ToolCall:
    """A call as ``tool_calls`` reads one: ``arguments`` its JSON value (``text`` raw text)."""
    raw = text if text is not None else json.dumps(arguments if arguments is not None else {})
    try:
        parsed, parses = json.loads(raw) if raw.strip() else {}, True
    except ValueError:
        parsed, parses = None, False
    return ToolCall(
        trace_id="t1",
        call_id=f"c{position}",
        name=name,
        arguments=raw,
        parsed=parsed,
        parses=parses,
        position=position,
    )


def calls(*specs: str | tuple[str, Any]) -> list[ToolCall]:
    """``"a"`` a call of a without arguments, ``("a", {...})`` one with them."""
    made = []
    for position, spec in enumerate(specs):
        name, arguments = (spec, {}) if isinstance(spec, str) else spec
        made.append(call(name, position, arguments))
    return made


def verdict(actual: list[ToolCall], expected: Any, mode: TrajectoryMode) -> tuple[Any, str]:
    steps, mode = expected_trajectory(expected, mode)
    found = match_trajectory(actual, steps, mode)
    return found.value, found.reason


# --- worked cases ---------------------------------------------------------------------------

WEATHER = ("get_weather", {"city": "Paris", "units": "C"})
SEARCH = ("search", {"q": "museums"})
BOOK = ("book", {"id": 7})

CASES: list[tuple[str, list[ToolCall], Any, TrajectoryMode, float, str]] = [
    # exact
    ("exact, same calls", calls(WEATHER, SEARCH), ["get_weather", "search"], "exact", 1.0,
     "one for one, in order (2 of each)"),
    ("exact, swapped", calls(SEARCH, WEATHER), ["get_weather", "search"], "exact", 0.0,
     "at position 0 the agent called search; step 0 expects get_weather"),
    ("exact, one short", calls(WEATHER), ["get_weather", "search"], "exact", 0.0,
     "step 1 (search) was not called: the agent made 1 call where 2 were expected"),
    ("exact, one more", calls(WEATHER, SEARCH, BOOK), ["get_weather", "search"], "exact", 0.0,
     "the call at position 2 (book) is beyond the 2 expected steps"),
    ("exact, other arguments", calls(WEATHER),
     [{"name": "get_weather", "arguments": {"city": "Lyon"}}], "exact", 0.0,
     "at position 0 get_weather was called with other arguments than step 0 expects"),
    # in_order
    ("in_order, calls between", calls(WEATHER, BOOK, SEARCH), ["get_weather", "search"],
     "in_order", 1.0, "the 2 expected steps were called in order, among 3 calls"),
    ("in_order, wrong order", calls(SEARCH, WEATHER), ["get_weather", "search"], "in_order", 0.0,
     "step 1 (search) was not called in order: not after position 1, only before (first at "
     "position 0)"),
    ("in_order, never", calls(WEATHER), ["get_weather", "book"], "in_order", 0.0,
     "step 1 (book) was never called"),
    ("in_order, arguments", calls(WEATHER, ("book", {"id": 8})),
     ["get_weather", {"name": "book", "arguments": {"id": 7}}], "in_order", 0.0,
     "step 1 (book) was not called in order: book was called after position 0 (first at "
     "position 1), not with the expected arguments"),
    # any_order
    ("any_order, swapped", calls(SEARCH, WEATHER), ["get_weather", "search"], "any_order", 1.0,
     "in some order (2 of each)"),
    ("any_order, repeated", calls(SEARCH, SEARCH), ["search"], "any_order", 0.0,
     "the call at position 1 (search) is one too many: search was called 2 times for 1 "
     "expected step"),
    ("any_order, missing", calls(SEARCH), ["search", "book"], "any_order", 0.0,
     "step 1 (book) was not called"),
    # subset
    ("subset, fewer", calls(SEARCH), ["get_weather", "search"], "subset", 1.0,
     "every call matches an expected step of its own (1 call, 2 expected steps)"),
    ("subset, none", calls(), ["get_weather"], "subset", 1.0, "(0 calls, 1 expected step)"),
    ("subset, a tool beyond", calls(SEARCH, BOOK), ["search"], "subset", 0.0,
     "the call at position 1 (book) is not among the expected tools"),
    ("subset, other arguments", calls(("search", {"q": SECRET})),
     [{"name": "search", "arguments": {"q": "museums"}}], "subset", 0.0,
     "the call at position 0 (search) fits no expected step's arguments"),
    # superset
    ("superset, more", calls(BOOK, WEATHER, SEARCH), ["search", "get_weather"], "superset", 1.0,
     "every expected step was called (2 expected steps, among 3 calls)"),
    ("superset, too few of one", calls(SEARCH), ["search", "search"], "superset", 0.0,
     "step 1 (search) has no call of its own: search was called 1 time for 2 steps"),
    ("superset, arguments", calls(("search", {"q": SECRET})),
     [{"name": "search", "arguments": {"q": "museums"}}], "superset", 0.0,
     "step 0 (search) was not called with the expected arguments (search was called at "
     "position 0 with others)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("actual", "expected", "mode", "value", "reason"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_worked_cases(
    actual: list[ToolCall], expected: Any, mode: TrajectoryMode, value: float, reason: str
) -> None:
    found, why = verdict(actual, expected, mode)
    assert found == value
    assert reason in why
    assert SECRET not in why and "museums" not in why


def test_given_arguments_are_compared_on_their_keys_only_as_canonical_json() -> None:
    actual = calls(
        ("get_weather", {"units": "C", "city": "Paris", "days": 3.0, "at": {"b": 1, "a": [1.0]}})
    )
    for given_arguments, fits in [
        ({"city": "Paris"}, True),  # other keys of the call are not compared
        ({"days": 3}, True),  # 3 == 3.0
        ({"at": {"a": [1], "b": 1.0}}, True),  # key order and integral floats, nested
        ({}, True),
        ({"city": "paris"}, False),
        ({"wind": None}, False),  # a key the call does not have
        ({"days": "3"}, False),
    ]:
        step = {"name": "get_weather", "arguments": given_arguments}
        assert verdict(actual, [step], "exact")[0] == (1.0 if fits else 0.0), given_arguments
    # the arguments given as JSON text, as a recorded call carries them
    as_text = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert verdict(actual, [as_text], "exact")[0] == 1.0


def test_a_call_whose_arguments_are_not_an_object_fits_only_a_step_without_arguments() -> None:
    broken = [call("search", 0, text='{"q": "unterminated')]
    listed = [call("search", 0, text="[1, 2]")]
    for actual in (broken, listed):
        assert verdict(actual, [{"name": "search", "arguments": {"q": "x"}}], "exact")[0] == 0.0
        assert verdict(actual, ["search"], "exact")[0] == 1.0
        assert verdict(actual, [{"name": "search", "arguments": {}}], "exact")[0] == 1.0


def test_the_largest_matching_is_found_where_the_first_fitting_call_would_miss() -> None:
    """agentevals gives each step the first call that fits: step 0 (any search) would take
    the call with q=1, and step 1 (q=1) find none. A largest matching pairs them crosswise."""
    actual = calls(("search", {"q": 1}), ("search", {"q": 2}))
    expected = ["search", {"name": "search", "arguments": {"q": 1}}]
    for mode in ("any_order", "superset", "subset"):
        assert verdict(actual, expected, mode)[0] == 1.0, mode


def test_an_object_names_its_own_mode_over_the_default() -> None:
    actual = calls(SEARCH, WEATHER)
    expected = {"calls": ["get_weather", "search"], "match": "any_order"}
    assert expected_trajectory(expected, "exact")[1] == "any_order"
    assert verdict(actual, expected, "exact")[0] == 1.0
    assert verdict(actual, {"calls": ["get_weather", "search"]}, "exact")[0] == 0.0


@pytest.mark.parametrize("mode", ["exact", "any_order", "subset"])
def test_an_empty_expected_list_means_no_call_where_the_mode_can_say_so(
    mode: TrajectoryMode,
) -> None:
    assert verdict([], [], mode)[0] == 1.0
    value, reason = verdict(calls(SEARCH), [], mode)
    assert value == 0.0 and "search" in reason


@pytest.mark.parametrize("mode", ["in_order", "superset"])
def test_an_empty_expected_list_is_skipped_where_the_mode_asks_for_nothing(
    mode: TrajectoryMode,
) -> None:
    for actual in ([], calls(SEARCH)):
        found = match_trajectory(actual, [], mode)
        assert found.skipped and found.value is None and found.label == "skipped"
        assert mode in found.reason and "exact" in found.reason


@pytest.mark.parametrize(
    ("expected", "says"),
    [
        ("search", "the expected trajectory is a string, not a list of steps"),
        (None, "the expected trajectory is null"),
        ([1], "step 0 is a number: a step is a tool name or an object with name and arguments"),
        (["a", ""], "step 1: an empty tool name"),
        ([{"tool": "a"}], "step 0: unknown key 'tool'"),
        ([{"arguments": {}}], "step 0: name must be a tool name"),
        ([{"name": "a", "arguments": [SECRET]}], "step 0 (a): arguments are a list, not an object"),
        ([{"name": "a", "arguments": f'{{"q": "{SECRET}'}], "step 0 (a): arguments are not JSON"),
        ({"calls": ["a"], "match": "inorder"}, "match 'inorder' is not one of exact, in_order"),
        ({"calls": ["a"], "match": 2}, "match a number is not one of"),
        ({"match": "exact"}, "needs calls"),
        ({"calls": [], "mode": "exact"}, "unknown key 'mode'"),
    ],
)
def test_a_malformed_expected_trajectory_is_refused_naming_the_step(
    expected: Any, says: str
) -> None:
    with pytest.raises(TrajectoryError) as raised:
        expected_trajectory(expected)
    assert says in str(raised.value)
    assert SECRET not in str(raised.value)


def test_steps_read_from_the_calls_of_a_trace_in_the_trace_model() -> None:
    document = {
        "id": "t1",
        "output": {
            "messages": [
                {"role": "assistant", "tool_calls": [
                    {"id": "a", "function": {"name": "lookup", "arguments": '{"order": 42}'}},
                    {"id": "b", "function": {"name": "refund", "arguments": '{"order": 42, "amount": 9.5}'}},
                ]},
            ]
        },
    }  # fmt: skip
    expected = [
        {"name": "lookup", "arguments": {"order": 42.0}},
        {"name": "refund", "arguments": {"order": 42}},
    ]
    assert verdict(tool_calls(document), expected, "exact")[0] == 1.0


def test_a_long_augmenting_path_needs_no_recursion() -> None:
    """Step i (i < n) fits calls i and i + 1 alone, the last step call n alone; the calls come
    in reverse, so each step first takes call i + 1, and the last step's call is won back along
    a path through every step: longer than Python's recursion limit allows."""
    n = 1500

    def values(j: int) -> dict[str, int]:  # call j: x shared with step j or j - 1, y likewise
        return {"x": j if j % 2 == 0 else j - 1, "y": j - 1 if j % 2 == 0 else j}

    actual = [call("search", n - j, values(j)) for j in range(n, -1, -1)]
    expected: list[Any] = [
        {"name": "search", "arguments": {"x" if i % 2 == 0 else "y": i}} for i in range(n)
    ]
    expected.append({"name": "search", "arguments": values(n)})
    assert verdict(actual, expected, "any_order")[0] == 1.0
    assert verdict(actual, expected[1:], "any_order")[0] == 0.0


# --- properties -----------------------------------------------------------------------------

NAMES = ("a", "b", "c")
ARGUMENT_VALUES = st.sampled_from([0, 1, 1.0, SECRET, [SECRET], {"k": SECRET}])
arguments = st.dictionaries(st.sampled_from(["x", "y"]), ARGUMENT_VALUES, max_size=2)
call_specs = st.lists(st.tuples(st.sampled_from(NAMES), arguments), max_size=6)
step_specs = st.lists(
    st.one_of(
        st.sampled_from(NAMES),
        st.builds(lambda n, a: {"name": n, "arguments": a}, st.sampled_from(NAMES), arguments),
    ),
    min_size=1,
    max_size=6,
)


def made(specs: list[tuple[str, dict[str, Any]]]) -> list[ToolCall]:
    return [call(name, position, args) for position, (name, args) in enumerate(specs)]


def all_modes(actual: list[ToolCall], expected: list[Any]) -> dict[str, float | None]:
    steps, _ = expected_trajectory(expected)
    return {mode: match_trajectory(actual, steps, mode).value for mode in MODES}


@given(call_specs, step_specs)
def test_exact_implies_every_other_mode(specs: Any, expected: list[Any]) -> None:
    found = all_modes(made(specs), expected)
    if found["exact"] == 1.0:
        assert found == dict.fromkeys(MODES, 1.0)


@given(call_specs, step_specs)
def test_any_order_is_subset_and_superset_at_once(specs: Any, expected: list[Any]) -> None:
    found = all_modes(made(specs), expected)
    both = found["subset"] == 1.0 and found["superset"] == 1.0
    assert (found["any_order"] == 1.0) == both


@given(call_specs, step_specs)
def test_in_order_implies_superset_and_with_as_many_calls_is_exact(
    specs: Any, expected: list[Any]
) -> None:
    actual = made(specs)
    found = all_modes(actual, expected)
    if found["in_order"] == 1.0:
        assert found["superset"] == 1.0
        assert (found["exact"] == 1.0) == (len(actual) == len(expected))


@given(call_specs, step_specs, st.randoms(use_true_random=False))
def test_the_matching_modes_ignore_the_order_of_steps_and_of_calls(
    specs: Any, expected: list[Any], rng: random.Random
) -> None:
    actual = made(specs)
    shuffled_steps = rng.sample(expected, len(expected))
    shuffled_calls = made(rng.sample(specs, len(specs)))
    for mode in ("any_order", "subset", "superset"):
        steps = expected_trajectory(expected)[0]
        value = match_trajectory(actual, steps, mode).value
        assert match_trajectory(actual, expected_trajectory(shuffled_steps)[0], mode).value == value
        assert match_trajectory(shuffled_calls, steps, mode).value == value


@given(
    st.lists(st.sampled_from(NAMES), max_size=6),
    st.lists(st.sampled_from(NAMES), min_size=1, max_size=6),
)
def test_on_names_alone_the_modes_are_multiset_relations(
    names: list[str], expected: list[str]
) -> None:
    found = all_modes(made([(n, {}) for n in names]), expected)
    have, want = Counter(names), Counter(expected)
    assert (found["any_order"] == 1.0) == (have == want)
    assert (found["subset"] == 1.0) == all(have[n] <= want[n] for n in have)
    assert (found["superset"] == 1.0) == all(want[n] <= have[n] for n in want)
    assert (found["exact"] == 1.0) == (names == expected)


@given(call_specs, st.randoms(use_true_random=False))
def test_steps_taken_from_the_calls_themselves_match(specs: Any, rng: random.Random) -> None:
    actual = made(specs)
    steps = [{"name": name, "arguments": args} for name, args in specs]
    found = all_modes(actual, steps)
    required = MODES if steps else ("exact", "any_order", "subset")  # the others skip []
    assert all(found[mode] == 1.0 for mode in required)
    if not steps:
        return
    kept = sorted(rng.sample(range(len(steps)), rng.randint(1, len(steps))))
    fewer = [steps[i] for i in kept]  # a subsequence: in order, and a superset of it was made
    assert match_trajectory(actual, expected_trajectory(fewer)[0], "in_order").value == 1.0
    assert match_trajectory(actual, expected_trajectory(fewer)[0], "superset").value == 1.0
    shuffled = rng.sample(steps, len(steps))
    assert match_trajectory(actual, expected_trajectory(shuffled)[0], "any_order").value == 1.0


@given(call_specs, step_specs)
def test_no_reason_repeats_an_argument_value(specs: Any, expected: list[Any]) -> None:
    actual = made(specs)
    steps, _ = expected_trajectory(expected)
    for mode in MODES:
        assert SECRET not in match_trajectory(actual, steps, mode).reason


def test_a_step_is_a_name_and_canonical_arguments() -> None:
    assert expected_trajectory(["a", {"name": "b", "arguments": {"x": 1.0}}])[0] == [
        Step("a"),
        Step("b", {"x": "1"}),
    ]
