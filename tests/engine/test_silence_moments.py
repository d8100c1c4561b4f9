"""When the silence watch speaks: a rule silent at exactly its ``after``-th trace unmatched, heard
again at its next match (naming the traces it missed), the reports of one trace in rule order,
and the names it saw ranked as a running count ranks them."""

from __future__ import annotations

from fixtures import fretcoach_rules

from stream.engine.silence import Silence, SilenceWatch
from stream.models import Trace

A, B, C = "hub_answer_correctness", "studio_live_coach_feedback_format", "hub_response_clarity"


def watch(after: int) -> tuple[SilenceWatch, list[tuple[int, str, bool, int]], list[Silence]]:
    """A watch over three rules (in the order A, B, C), and its reports as (trace, rule, silent,
    traces) with the trace count at which each came."""
    by_id = {rule.id: rule for rule in fretcoach_rules().for_scope("trace")}
    said: list[tuple[int, str, bool, int]] = []
    reports: list[Silence] = []

    def report(silence: Silence) -> None:
        said.append((w.traces_seen, silence.rule.id, silence.silent, silence.traces))
        reports.append(silence)

    w = Counted([by_id[A], by_id[B], by_id[C]], after, report)
    return w, said, reports


class Counted(SilenceWatch):
    """A watch that counts the traces it was given (to date each report)."""

    traces_seen = 0

    def saw(self, trace: Trace, matched: object, topic: str | None = None) -> None:  # type: ignore[override]
        self.traces_seen += 1
        super().saw(trace, matched, topic)  # type: ignore[arg-type]


def trace(name: str = "n") -> Trace:
    return Trace(id="t", name=name, project_name="p")


def test_a_rule_falls_silent_at_its_after_th_trace_unmatched_and_not_before() -> None:
    w, said, _ = watch(after=4)
    for matched in ([A, B, C], [B, C], [B, C], [B, C]):
        w.saw(trace(), matched)
    assert said == []  # A missed 3 traces: not yet
    assert w.since == {A: 3, B: 0, C: 0} and w.silent == set()
    w.saw(trace(), [B, C])
    assert said == [(5, A, True, 4)]
    assert w.since == {A: 4, B: 0, C: 0} and w.silent == {A}
    for _ in range(10):
        w.saw(trace(), [B, C])
    assert said == [(5, A, True, 4)]  # once, however long it stays silent


def test_a_silent_rule_is_heard_at_its_next_match_naming_the_traces_it_missed() -> None:
    w, said, reports = watch(after=2)
    for _ in range(5):
        w.saw(trace(), [B, C])
    w.saw(trace(), [A, B, C])
    assert said == [(2, A, True, 2), (6, A, False, 5)]
    assert reports[-1].seen == [] and w.silent == set() and w.since[A] == 0
    w.saw(trace(), [B, C])
    assert said[2:] == []  # counted from its match again: silent only after 2 more misses
    w.saw(trace(), [B, C])
    assert said[2:] == [(8, A, True, 2)]


def test_the_reports_of_one_trace_come_in_the_rules_order() -> None:
    w, said, _ = watch(after=3)
    w.saw(trace(), [A, B])  # C misses from the start, A and B from here
    w.saw(trace(), [])
    w.saw(trace(), [])  # C's third miss
    w.saw(trace(), [C])  # A and B fall silent, C is heard again: in the order A, B, C
    assert said == [(3, C, True, 3), (4, A, True, 3), (4, B, True, 3), (4, C, False, 3)]
    assert w.silent == {A, B}


def test_the_names_seen_rank_ties_as_a_running_count_does() -> None:
    """Among pairs seen as often, the one that has stayed in the window longest comes first,
    not the one whose first trace in the window is earliest."""
    w, _, reports = watch(after=3)
    w.saw(trace("a"), [A, B])
    w.saw(trace("b"), [B])
    w.saw(trace("a"), [B])  # C falls silent: a twice, b once
    w.saw(trace("c"), [B])  # A falls silent: the window is b, a, c, with an a in it all along
    assert [(r.rule.id, r.seen) for r in reports] == [
        (C, [(("a", "p"), 2), (("b", "p"), 1)]),
        (A, [(("a", "p"), 1), (("b", "p"), 1), (("c", "p"), 1)]),
    ]


def test_pairs_gone_from_the_window_are_forgotten_and_ranked_anew_when_they_come_back() -> None:
    w, _, reports = watch(after=2)
    names = [f"n{i}" for i in range(200)]  # more pairs than the watch keeps
    for i, name in enumerate(names):
        w.saw(trace(name), [A, B, C])
        assert list(w._counts.items()) == [((n, "p"), 1) for n in names[max(i - 1, 0) : i + 1]]
    w.saw(trace("n0"), [B, C])
    w.saw(trace("n1"), [B, C])  # A falls silent: n0 and n1 back in the window, n0 first
    assert reports[-1].seen == [(("n0", "p"), 1), (("n1", "p"), 1)]
    assert w._counts == {("n0", "p"): 1, ("n1", "p"): 1}
