"""An agent's trajectory against the one expected of it: the sequence of a trace's tool calls
compared with expected steps (issue 50, design record 50), pass (1.0) or fail (0.0).

The modes mean what LangChain's agentevals means by its trajectory match modes (MIT licence;
github.com/langchain-ai/agentevals, ``python/agentevals/trajectory/strict.py``,
``unordered.py``, ``subset.py``, ``superset.py`` and ``utils.py``, read at 3bb6a16; no code
taken), over the calls alone:

- ``exact``: the same calls in the same order (agentevals' ``strict``, without its comparison
  of the messages around the calls);
- ``in_order``: every expected step among the calls, in that order, other calls allowed
  before, between and after (agentevals has no such mode: Vertex AI's
  ``trajectory_in_order_match`` means this);
- ``any_order``: the same calls as a multiset, in any order (agentevals' ``unordered``);
- ``subset``: the agent made no call beyond the expected ones: each call is one of the steps,
  a step standing for one call at most (agentevals' ``subset``);
- ``superset``: the agent made at least every expected call: each step is a call of its own
  (agentevals' ``superset``).

A step is a tool's name, or ``{"name": ..., "arguments": {...}}``: the arguments given must
equal the call's parsed arguments on the given keys only (agentevals' ``superset`` argument
mode), compared as canonical JSON (key order ignored, 1 and 1.0 the same; ``call_key``'s
reading); a call whose arguments are not a JSON object fits no step that gives arguments.
How the expected value is written and read: ``expected``.

Where agentevals takes, for each step, the first call that fits (so ``[A, A{x: 1}]`` against
the calls ``A{x: 1}, A{x: 2}`` fails there), ``any_order``, ``subset`` and ``superset`` here
look for the largest matching of steps to calls (``_matching``), so a verdict does not depend
on the order the steps or the calls come in. Only steps that give arguments are searched for
(at most their number x the calls of their tool, per step left over by a first pass); steps
that name a tool alone are counted.

An empty expected list: under ``exact``, ``any_order`` and ``subset`` it means "no tool call",
passed by a trace without calls; under ``in_order`` and ``superset`` it asks for nothing, and
the verdict is skipped (saying so) rather than a pass that checks nothing.

A reason names the first mismatch by tool name, step index and call position (both counted
from 0, as a call's ``position``), never an argument's value: what is scored may be personal
data. A malformed expected trajectory raises ``TrajectoryError`` naming the step and what is
wrong with it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from .checks import FAIL, PASS, SKIPPED, CallVerdict
from .expected import (
    MODES,
    Step,
    TrajectoryError,
    TrajectoryMode,
    canonical_or_none,
    expected_trajectory,
)
from .model import ToolCall

__all__ = [
    "MODES",
    "Step",
    "TrajectoryError",
    "TrajectoryMode",
    "expected_trajectory",
    "match_trajectory",
]
# --- comparing ------------------------------------------------------------------------------


def match_trajectory(
    calls: Sequence[ToolCall], steps: Sequence[Step], mode: TrajectoryMode
) -> CallVerdict:
    """The trace's ``calls`` (in position order) against the expected ``steps`` (see the
    module's docstring for each mode and for an empty list of steps)."""
    if mode not in MODES:
        raise ValueError(f"unknown trajectory mode {mode!r}")
    if not steps and mode in ("in_order", "superset"):
        return CallVerdict(
            None,
            SKIPPED,
            f"no call was expected: {mode} accepts any calls then (exact, any_order or "
            "subset would require none)",
            skipped=True,
        )
    if mode == "exact":
        return _exact(calls, steps)
    if mode == "in_order":
        return _in_order(calls, steps)
    return _matched(calls, steps, mode)


def _pass(reason: str) -> CallVerdict:
    return CallVerdict(1.0, PASS, reason)


def _fail(reason: str) -> CallVerdict:
    return CallVerdict(0.0, FAIL, reason)


def _calls(n: int) -> str:
    return f"{n} call{'' if n == 1 else 's'}"


def _steps(n: int) -> str:
    return f"{n} expected step{'' if n == 1 else 's'}"


def _were(n: int) -> str:
    return "was" if n == 1 else "were"


def _exact(calls: Sequence[ToolCall], steps: Sequence[Step]) -> CallVerdict:
    for index in range(max(len(calls), len(steps))):
        if index >= len(calls):
            step = steps[index]
            return _fail(
                f"step {index} ({step.name}) was not called: the agent made "
                f"{_calls(len(calls))} where {len(steps)} were expected"
            )
        call = calls[index]
        if index >= len(steps):
            return _fail(
                f"the call at position {call.position} ({call.name}) is beyond the "
                f"{_steps(len(steps))}"
            )
        step = steps[index]
        if call.name != step.name:
            return _fail(
                f"at position {call.position} the agent called {call.name}; step {index} "
                f"expects {step.name}"
            )
        if not step.fits_arguments(call):
            return _fail(
                f"at position {call.position} {call.name} was called with other arguments "
                f"than step {index} expects"
            )
    if not steps:
        return _pass("no call was expected and the agent made none")
    return _pass(f"the calls match the expected steps one for one, in order ({len(steps)} of each)")


def _in_order(calls: Sequence[ToolCall], steps: Sequence[Step]) -> CallVerdict:
    # taking each step's earliest fitting call leaves the most calls for the steps after it:
    # if any in-order choice exists, this one succeeds
    index, last = 0, -1
    for at, call in enumerate(calls):
        if index < len(steps) and steps[index].fits(call):
            index, last = index + 1, at
    if index == len(steps):
        return _pass(
            f"the {_steps(len(steps))} {_were(len(steps))} called in order, among "
            f"{_calls(len(calls))}"
        )
    step = steps[index]
    after = calls[last + 1 :]
    where = f" after position {calls[last].position}" if last >= 0 else ""
    named = [c for c in after if c.name == step.name]
    if named:
        return _fail(
            f"step {index} ({step.name}) was not called in order: {step.name} was called"
            f"{where} (first at position {named[0].position}), not with the expected arguments"
        )
    earlier = next((c for c in calls[: last + 1] if c.name == step.name), None)
    if earlier is not None:
        return _fail(
            f"step {index} ({step.name}) was not called in order: not{where}, only before "
            f"(first at position {earlier.position})"
        )
    return _fail(f"step {index} ({step.name}) was never called")


def _matched(calls: Sequence[ToolCall], steps: Sequence[Step], mode: str) -> CallVerdict:
    """any_order, subset and superset: one largest matching of steps to calls answers all
    three (it covers every call where some matching does, and every step likewise)."""
    of_step, of_call = _matching(calls, steps)
    missing = next((i for i, c in enumerate(of_step) if c is None), None)
    extra = next((i for i, s in enumerate(of_call) if s is None), None)
    if mode in ("any_order", "superset") and missing is not None:
        return _fail(_missing(missing, calls, steps))
    if mode in ("any_order", "subset") and extra is not None:
        return _fail(_extra(extra, calls, steps))
    if mode == "any_order":
        if not steps:
            return _pass("no call was expected and the agent made none")
        return _pass(
            f"the calls match the expected steps one for one, in some order ({len(steps)} of each)"
        )
    if mode == "subset":
        return _pass(
            f"every call matches an expected step of its own ({_calls(len(calls))}, "
            f"{_steps(len(steps))})"
        )
    return _pass(
        f"every expected step was called ({_steps(len(steps))}, among {_calls(len(calls))})"
    )


def _matching(
    calls: Sequence[ToolCall], steps: Sequence[Step]
) -> tuple[list[int | None], list[int | None]]:
    """A largest matching of steps to the calls that fit them: the call matched to each step,
    and the step matched to each call (None: unmatched).

    Steps that give arguments are matched first, each to its first free fitting call, then by
    augmenting paths (Kuhn's algorithm); a step without arguments fits every call of its tool,
    so those steps then take the calls left, in position order. Matching the argument steps as
    far as they go never costs the others a call, so the whole is a largest matching; and a
    long list of steps without arguments costs no search."""
    by_name: dict[str, list[int]] = defaultdict(list)
    for at, call in enumerate(calls):
        by_name[call.name].append(at)
    of_step: list[int | None] = [None] * len(steps)
    of_call: list[int | None] = [None] * len(calls)
    given = [index for index, step in enumerate(steps) if step.arguments]
    fitting = _fitting(calls, steps, given)
    for index in given:
        free = next((at for at in fitting[index] if of_call[at] is None), None)
        if free is not None:
            of_step[index], of_call[free] = free, index
    for index in given:
        if of_step[index] is None:
            _augment(index, fitting, of_step, of_call)
    left = {name: iter([at for at in ats if of_call[at] is None]) for name, ats in by_name.items()}
    for index, step in enumerate(steps):
        if not step.arguments and (rest := next(left.get(step.name, iter(())), None)) is not None:
            of_step[index], of_call[rest] = rest, index
    return of_step, of_call


def _fitting(
    calls: Sequence[ToolCall], steps: Sequence[Step], given: list[int]
) -> dict[int, list[int]]:
    """The calls (in position order) each step of ``given`` fits, from an index of the calls by
    tool, key and canonical value of the keys those steps give: each call's values are made
    canonical once, not once per step."""
    keys = {key for index in given for key in steps[index].arguments or {}}
    values: list[dict[str, str | None]] = []
    index_of: dict[tuple[str, str, str | None], list[int]] = defaultdict(list)
    for at, call in enumerate(calls):
        parsed = call.parsed if isinstance(call.parsed, dict) else {}
        canonical = {key: canonical_or_none(parsed[key]) for key in keys if key in parsed}
        values.append(canonical)
        for key, value in canonical.items():
            index_of[(call.name, key, value)].append(at)
    fitting = {}
    for index in given:
        step = steps[index]
        arguments = step.arguments or {}
        candidates = min(
            (index_of.get((step.name, key, value), []) for key, value in arguments.items()), key=len
        )
        fitting[index] = [
            at for at in candidates if all(values[at].get(k) == v for k, v in arguments.items())
        ]
    return fitting


def _augment(
    root: int, fitting: dict[int, list[int]], of_step: list[int | None], of_call: list[int | None]
) -> None:
    """Match step ``root`` along an augmenting path, if one exists: a depth-first search for a
    free call, without recursion (a long path would pass Python's recursion limit)."""
    seen: set[int] = set()
    frames = [(root, iter(fitting[root]))]
    path: list[tuple[int, int]] = []  # (step, call): the edge into each deeper frame
    while frames:
        step, untried = frames[-1]
        for at in untried:
            if at in seen:
                continue
            seen.add(at)
            path.append((step, at))
            holder = of_call[at]
            if holder is None:
                for matched_step, matched_call in path:
                    of_step[matched_step], of_call[matched_call] = matched_call, matched_step
                return
            frames.append((holder, iter(fitting[holder])))
            break
        else:
            frames.pop()
            if path:
                path.pop()


def _missing(index: int, calls: Sequence[ToolCall], steps: Sequence[Step]) -> str:
    step = steps[index]
    named = [c for c in calls if c.name == step.name]
    if not named:
        return f"step {index} ({step.name}) was not called"
    if not any(step.fits_arguments(c) for c in named):
        return (
            f"step {index} ({step.name}) was not called with the expected arguments "
            f"({step.name} was called at position {named[0].position} with others)"
        )
    wanted = sum(1 for s in steps if s.name == step.name)
    return (
        f"step {index} ({step.name}) has no call of its own: {step.name} was called "
        f"{len(named)} time{'' if len(named) == 1 else 's'} for {wanted} step"
        f"{'' if wanted == 1 else 's'}"
    )


def _extra(at: int, calls: Sequence[ToolCall], steps: Sequence[Step]) -> str:
    call = calls[at]
    where = f"the call at position {call.position} ({call.name})"
    named = [s for s in steps if s.name == call.name]
    if not named:
        return f"{where} is not among the expected tools"
    if not any(s.fits_arguments(call) for s in named):
        return f"{where} fits no expected step's arguments"
    made = sum(1 for c in calls if c.name == call.name)
    return (
        f"{where} is one too many: {call.name} was called {made} times for {len(named)} "
        f"expected step{'' if len(named) == 1 else 's'}"
    )
