"""Rules that never fire say so: one report per rule, naming what came instead."""

from __future__ import annotations

import asyncio
import logging

import pytest
from fixtures import as_trace, fretcoach_rules, hub_trace
from prometheus_client import CollectorRegistry

from stream.engine.scorer import Scorer
from stream.engine.silence import Silence, SilenceWatch
from stream.metrics import ScorerMetrics, sample_value
from stream.models import Trace
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
