"""Rules that never fire say so: one report per rule, naming what came instead."""

from __future__ import annotations

import asyncio
import logging

import pytest
from fixtures import RULES_DIR, as_trace, fretcoach_rules, hub_trace
from prometheus_client import CollectorRegistry

from stream.engine.scorer import Scorer
from stream.engine.silence import Silence, SilenceWatch, UnjudgedThreads
from stream.metrics import ScorerMetrics, sample_value
from stream.models import Trace
from stream.ruleset.loader import load_rules
from stream.worker import silence_watch


def watch(after: int = 5) -> tuple[SilenceWatch, list[Silence]]:
    reports: list[Silence] = []
    rules = fretcoach_rules().for_scope("trace")
    return SilenceWatch(rules, after, reports.append), reports


def test_a_rule_that_matches_none_of_the_last_traces_is_reported_once() -> None:
    w, reports = watch(after=5)
    other = Trace(id="t", name="hub-chat-v2", project_name="fretcoach")
    for _ in range(12):
        w.saw(other, ["studio_live_coach_feedback_quality"])
    silent = {r.rule.id for r in reports if r.silent}
    assert "hub_answer_correctness" in silent and "studio_live_coach_feedback_quality" not in silent
    assert len(reports) == len(silent)  # once each, not once per trace
    report = next(r for r in reports if r.rule.id == "hub_answer_correctness")
    assert report.describe() == (
        "rule fretcoach/hub_answer_correctness matched none of the last 5 traces; its filter: "
        "{'trace_names': ['hub-coach-chat']}; the traces were mostly: name 'hub-chat-v2' in "
        "project 'fretcoach' (5) (SCORER_PACK_FILTERS maps a pack's trace names and projects "
        "to yours)"
    )


def test_a_silent_rule_that_matches_again_is_heard() -> None:
    w, reports = watch(after=3)
    other = Trace(id="t", name="other", project_name="p")
    for _ in range(3):
        w.saw(other, [])
    w.saw(other, ["hub_answer_correctness"])
    heard = [r for r in reports if r.rule.id == "hub_answer_correctness"]
    assert [r.silent for r in heard] == [True, False]
    assert "hub_answer_correctness" not in w.silent


def test_the_names_seen_are_those_of_the_last_traces() -> None:
    w, reports = watch(after=4)
    for name in ["a", "a", "a", "b", "b", "b", "b"]:
        w.saw(Trace(id="t", name=name, project_name="p"), [])
    assert {r.seen[0][0][0] for r in reports} == {"a"}  # at the 4th trace, "a" came most
    assert w._counts == {("b", "p"): 4}  # the window moves on: only the last 4 are kept


def test_the_worker_logs_a_warning_and_sets_the_gauge(caplog: pytest.LogCaptureFixture) -> None:
    ruleset = fretcoach_rules()
    metrics = ScorerMetrics(CollectorRegistry())
    metrics.on_rules_loaded(
        "test", ruleset.digest, [(r.id, r.pack, r.scope, 1) for r in ruleset.rules]
    )
    silence = silence_watch(ruleset, 3, metrics)
    assert silence is not None
    scorer = Scorer(ruleset, None, default_model="m", silence=silence)
    document = hub_trace()
    document["name"] = "hub-chat-v2"
    with caplog.at_level(logging.WARNING, logger="stream.worker"):
        for _ in range(3):
            asyncio.run(scorer.score_trace(as_trace(document), document))
    page = metrics.exposition()[0].decode()
    assert sample_value(page, "scorer_rule_silent", rule="hub_answer_correctness") == 1.0
    assert any("fretcoach/hub_answer_correctness matched none" in r.message for r in caplog.records)
    assert silence_watch(ruleset, 0, metrics) is None  # SCORER_SILENT_AFTER_TRACES=0: off


# --- traces with a thread id that no conversation rule matches ----------------------------


def thread_watch(packs: list[str], after: int = 3) -> tuple[SilenceWatch, list[UnjudgedThreads]]:
    reports: list[UnjudgedThreads] = []
    ruleset = load_rules(RULES_DIR, packs)
    watch = SilenceWatch(
        ruleset.for_scope("trace"),
        after,
        lambda _: None,
        ruleset.thread_rules("conversation"),
        reports.append,
    )
    return watch, reports


def threaded(name: str | None, thread_id: str | None = "th-1") -> Trace:
    return Trace(id="t", name=name, project_name="acme", thread_id=thread_id)


def test_traces_with_a_thread_id_no_conversation_rule_matches_are_reported() -> None:
    w, reports = thread_watch(["fretcoach"])
    for _ in range(2):
        w.saw(threaded("support-bot-reply"), [])
        w.saw(threaded("support-bot-reply", thread_id=None), [])  # no thread: not counted
        w.saw(Trace(id="h", name="hub-coach-chat", project_name="fretcoach", thread_id="x"), [])
    assert reports == []
    w.saw(threaded("support-bot-reply"), [])
    assert len(reports) == 1
    assert reports[0].describe() == (
        "3 traces carried a thread_id but matched no thread rule, so their threads get no "
        "thread score: no conversation rule's filter matches them (loaded: "
        "fretcoach/hub_conversational_coherence {'trace_names': ['hub-coach-chat']}; "
        "fretcoach/hub_user_frustration_score {'trace_names': ['hub-coach-chat']}); those "
        "traces were mostly: name 'support-bot-reply' in project 'acme' (3) "
        "(SCORER_PACK_FILTERS maps a pack's trace names and projects to yours)"
    )


def test_each_name_is_reported_once() -> None:
    w, reports = thread_watch(["fretcoach"], after=2)
    for _ in range(6):
        w.saw(threaded("support-bot-reply"), [])
    assert len(reports) == 1  # said once, not every 2 traces
    for _ in range(2):
        w.saw(threaded("billing-bot"), [])
    assert [r.seen for r in reports[1:]] == [[(("billing-bot", "acme"), 2)]]


def test_without_conversation_rules_the_report_says_none_is_loaded() -> None:
    w, reports = thread_watch(["mlflow"], after=1)
    w.saw(threaded(None), [])
    assert "no conversation rule is loaded (SCORER_PACKS leaves out the conversation pack" in (
        reports[0].describe()
    )
    assert "name None in project 'acme' (1)" in reports[0].describe()


def test_the_conversation_pack_matches_every_thread() -> None:
    w, reports = thread_watch(["fretcoach", "conversation"], after=1)
    for name in ("support-bot-reply", "hub-coach-chat", None):
        w.saw(threaded(name), [])
    assert reports == []


def test_the_worker_warns_of_threads_no_rule_judges(caplog: pytest.LogCaptureFixture) -> None:
    ruleset = load_rules(RULES_DIR, ["fretcoach"])
    silence = silence_watch(ruleset, 2, ScorerMetrics(CollectorRegistry()))
    scorer = Scorer(ruleset, None, default_model="m", silence=silence)
    with caplog.at_level(logging.WARNING, logger="stream.worker"):
        for n in range(2):
            document = {
                "id": f"mine-{n}",
                "name": "my-assistant",
                "project_name": "mine",
                "thread_id": "conv-7",
                "input": {"messages": [{"role": "user", "content": "hi"}]},
                "output": {"messages": [{"role": "assistant", "content": "hello"}]},
            }
            asyncio.run(scorer.score_trace(as_trace(document), document, "llm-traces"))
    warnings = [r.message for r in caplog.records if "carried a thread_id" in r.message]
    assert len(warnings) == 1
    assert "name 'my-assistant' in project 'mine' (2)" in warnings[0]
