"""Golden tests: the response-comparison rule (seed 001, "Response Comparison Methodology").

The seed's rubric, methodology, workflow and justification rules are in the prompt verbatim
(read from the seed by heading); the preference labels are the seed's Preference Ranking
table; a pair is scored through a real judge server: the preference, and each response's six
ratings and overall quality computed by the seed's table, as the critique rubric publishes
them.
"""

from __future__ import annotations

import asyncio
import functools
import re
from types import SimpleNamespace
from typing import Any

import orjson
from fixtures import RULES_DIR, as_trace, scorer
from scripted_judge import MockJudge
from seed_rubrics import CRITIQUE_SEED, critique_dimensions, section

from stream.delivery.publisher import sends_of
from stream.engine.outcomes import TraceResult
from stream.engine.prompt import render_prompt, resolve_variables
from stream.engine.records import pair_records
from stream.models import ScoreEvent
from stream.ruleset.loader import load_rule_file, load_rules
from stream.ruleset.schema import ComparisonRule, RuleSet
from stream.threads.events import ThreadEvent
from stream.threads.processor import ThreadProcessor
from stream.threads.router import ThreadRouter
from stream.threads.state import ThreadClose, ThreadLimits

WALL = 1_800_000_000.0
LABELS = {1: "Major Issues", 2: "Minor Issues", 3: "No Issues"}
PROMPT = "Write a Python function that reverses a string."
ANSWERS = {
    "t-a": "def reverse(text):\n    return text[::-1]",
    "t-b": "Great question! Here you go: def r(s): return ''.join(reversed(s)). Hope this helps!",
}


@functools.cache
def comparison_rule() -> ComparisonRule:
    rule = load_rule_file(RULES_DIR / "critique" / "response_comparison.yaml")
    assert isinstance(rule, ComparisonRule)
    return rule


@functools.cache
def critique() -> RuleSet:
    return load_rules(RULES_DIR, ["critique"])


def seed_text() -> str:
    return CRITIQUE_SEED.read_text(encoding="utf-8")


def comparison_sections() -> list[str]:
    text = seed_text()
    return [
        section(text, "## Rating Scale", "## Overall Quality Assessment"),
        section(text, "## Response Comparison Methodology", "## Evaluation Workflow"),
        section(text, "## Evaluation Workflow", "## Dimension-Specific Guidelines Summary"),
        section(text, "## Dimension-Specific Guidelines Summary", "## Common Pitfalls to Avoid"),
        section(text, "### When Rating:", "### When Writing Justifications:"),
        section(text, "### When Writing Justifications:", "## Example Evaluation Template"),
    ]


def trace(trace_id: str, variant: str, key: str = "cmp-7") -> dict[str, Any]:
    return {
        "id": trace_id,
        # the canary reports to its own project
        "project_name": "code-assistant-canary" if variant == "B" else "code-assistant",
        "name": "chat",
        "input": {"messages": [{"role": "user", "content": PROMPT}]},
        "output": {"messages": [{"role": "assistant", "content": ANSWERS[trace_id]}]},
        "metadata": {"comparison_id": key, "variant": variant},
    }


def pair_close(*members: tuple[str, str], window: bool = False) -> ThreadClose:
    """The close of a pair made of ``members`` (trace id, variant), as the thread agent
    hands it to be scored; ``window``: closed by its window (partner missing)."""
    processor = ThreadProcessor(
        {},
        gaps={"conversation": 900.0, "session": 900.0, "pair": 600.0},
        limits=ThreadLimits(),
        retention_s=3600.0,
    )
    router = ThreadRouter(critique())
    closes: list[ThreadClose] = []
    for trace_id, variant in members:
        document = trace(trace_id, variant)
        event = router.pair_from_trace(as_trace(document), document, "llm-traces", WALL)
        assert event is not None
        closes += processor.apply(0, event)
    if window:
        closes += processor.apply(0, ThreadEvent(type="tick", arrival=WALL + 600))
    (close,) = closes
    return close


def ratings(values: list[int]) -> dict[str, Any]:
    ids = [c.id for c in comparison_rule().criteria]
    return {
        cid: {"reason": f"{cid}: {LABELS[v].lower()}", "rating": v}
        for cid, v in zip(ids, values, strict=True)
    }


def judge_answer(preference: Any = 1) -> dict[str, Any]:
    return {
        "response_a": ratings([3, 3, 3, 3, 3, 3]),
        "response_b": ratings([3, 3, 2, 3, 1, 3]),
        "preference": preference,
        "justification": "Response A is somewhat better: same algorithm, no pleasantries.",
        "key_differentiators": ["B opens with 'Great question!'", "B uses single-letter names"],
    }


def score_pair(close: ThreadClose, answer: dict[str, Any] | None) -> tuple[TraceResult, list]:
    with MockJudge() as judge:
        if answer is not None:
            judge.script("", orjson.dumps(answer).decode())
        url = judge.base_url if answer is not None else None
        result = asyncio.run(scorer(url, critique()).score_thread(close))
        requests = [r["body"] for r in judge.requests]
    return result, requests


def test_prompt_holds_the_seeds_rubric_and_comparison_methodology_verbatim() -> None:
    rule = comparison_rule()
    for text in comparison_sections():
        assert text in rule.prompt
    assert "### Step 4: Preference Ranking" in rule.prompt
    assert [c.name for c in rule.criteria] == critique_dimensions()
    assert (
        rule.criteria == load_rule_file(RULES_DIR / "critique" / "response_critique.yaml").criteria
    )  # type: ignore[union-attr]
    document = pair_close(("t-a", "A"), ("t-b", "B")).pending.document
    rendered = render_prompt(rule, resolve_variables(rule, document), document)
    assert f"## Prompt\n\n{PROMPT}\n\n" in rendered
    assert f"## Response A\n\n{ANSWERS['t-a']}\n\n## Response B\n\n{ANSWERS['t-b']}\n\n" in rendered


def test_the_preference_labels_are_the_seeds_ranking_table() -> None:
    table = section(
        seed_text(), "### Step 4: Preference Ranking", "### Step 5: Write Justification"
    )
    rows = re.findall(r"^\| \*\*([+-]?\d)\*\* \| (.+?) \|$", table, re.MULTILINE)
    assert len(rows) == 5
    spec = comparison_rule().preference
    for score, meaning in rows:
        assert spec.label_for(float(score)) == meaning.split(" (")[0]
    assert (spec.scale.min, spec.scale.max, spec.normalise(0)) == (-2, 2, 0.5)
    assert (spec.normalise(2), spec.normalise(-2)) == (1.0, 0.0)


def test_a_pair_is_judged_once_into_a_preference_and_each_responses_ratings() -> None:
    close = pair_close(("t-b", "B"), ("t-a", "A"))  # B came first: the variants decide A and B
    result, requests = score_pair(close, judge_answer())
    assert len(requests) == 1
    prompt = requests[0]["messages"][-1]["content"]
    assert prompt.index(ANSWERS["t-a"]) < prompt.index(ANSWERS["t-b"])
    schema = requests[0]["response_format"]["json_schema"]["schema"]
    assert schema["required"] == [
        "response_a",
        "response_b",
        "preference",
        "justification",
        "key_differentiators",
    ]
    assert schema["properties"]["preference"] == {"type": "integer"}
    assert schema["properties"]["response_b"]["required"] == [
        c.id for c in comparison_rule().criteria
    ]

    scores: list[ScoreEvent] = result.scores
    assert len(scores) == 15 and len({s.score_id for s in scores}) == 15
    preference = next(s for s in scores if s.criterion == "preference")
    assert (preference.scope, preference.target_id, preference.project_name) == (
        "pair",
        "cmp-7",
        "code-assistant",
    )
    assert (preference.raw_value, preference.value, preference.label) == (
        1.0,
        0.75,
        "Response A is somewhat better",
    )
    assert preference.reason == judge_answer()["justification"]
    assert preference.details is not None
    assert preference.details["key_differentiators"] == judge_answer()["key_differentiators"]
    assert preference.details["variants"] == {"A": "t-a", "B": "t-b"}
    assert preference.usage is not None and preference.thread is None

    by_target: dict[str, dict[str, ScoreEvent]] = {}
    for score in scores:
        if score is not preference:
            by_target.setdefault(score.target_id, {})[score.criterion or ""] = score
    assert set(by_target) == {"t-a", "t-b"}
    for target in by_target.values():
        assert set(target) == {"overall", *(c.id for c in comparison_rule().criteria)}
        assert all(s.scope == "pair" and s.usage is None for s in target.values())
    overall_a, overall_b = by_target["t-a"]["overall"], by_target["t-b"]["overall"]
    assert (overall_a.label, overall_a.raw_value) == ("Excellent", 5.0)
    # one minor and one major issue: Inadequate, by the seed's table
    assert (overall_b.label, overall_b.raw_value) == ("Inadequate", 2.0)
    clarity = by_target["t-b"]["presentation_clarity"]
    assert (clarity.label, clarity.value, clarity.reason) == (
        "Major Issues",
        0.0,
        "presentation_clarity: major issues",
    )
    assert clarity.details == {"comparison_id": "cmp-7", "variant": "B"}
    # each response's scores are filed under its own trace's project
    assert {s.project_name for s in by_target["t-b"].values()} == {"code-assistant-canary"}
    assert {s.project_name for s in by_target["t-a"].values()} == {"code-assistant"}

    (decision,) = result.decisions
    assert (decision.target_id, decision.outcome, decision.score_id) == (
        "cmp-7",
        "scored",
        preference.score_id,
    )
    again, _ = score_pair(pair_close(("t-a", "A"), ("t-b", "B")), judge_answer())
    assert {s.score_id for s in again.scores} == {s.score_id for s in scores}  # deterministic


def test_a_preference_outside_the_scale_is_an_error_and_the_ratings_still_count() -> None:
    result, _ = score_pair(pair_close(("t-a", "A"), ("t-b", "B")), judge_answer(preference=3))
    preference = next(s for s in result.scores if s.criterion == "preference")
    assert preference.status == "error" and preference.value is None
    assert "outside the scale [-2, 2]" in (preference.status_reason or "")
    assert [d.outcome for d in result.decisions] == ["error"]
    overall = [s for s in result.scores if s.criterion == "overall"]
    assert [s.status for s in overall] == ["ok", "ok"]
    # "+1" as text is the seed's own notation
    result, _ = score_pair(pair_close(("t-a", "A"), ("t-b", "B")), judge_answer(preference="+1"))
    assert next(s for s in result.scores if s.criterion == "preference").raw_value == 1.0


def test_a_pair_whose_partner_missed_the_window_is_skipped_with_why() -> None:
    close = pair_close(("t-a", "A"), window=True)
    result, requests = score_pair(close, judge_answer())
    assert requests == []
    (score,) = result.scores
    assert (score.criterion, score.status, score.target_id) == ("preference", "skipped", "cmp-7")
    assert score.status_reason == (
        "partner missing: comparison 'cmp-7' has variant A (trace t-a) but no variant B "
        "within 600 s"
    )


def test_without_a_judge_a_pair_publishes_one_skipped_score() -> None:
    result, _ = score_pair(pair_close(("t-a", "A"), ("t-b", "B")), None)
    assert [(s.criterion, s.status) for s in result.scores] == [("preference", "skipped")]


def test_each_trace_of_the_pair_gets_its_decision_record() -> None:
    processor = ThreadProcessor({}, gaps={"pair": 600.0}, limits=ThreadLimits(), retention_s=3600.0)
    router = ThreadRouter(critique())
    closes: list[ThreadClose] = []
    for trace_id, variant in (("t-a", "A"), ("t-a2", "A"), ("t-b", "B")):
        document = trace("t-a" if trace_id == "t-a2" else trace_id, variant)
        document["id"] = trace_id
        event = router.pair_from_trace(as_trace(document), document, None, WALL)
        assert event is not None
        closes += processor.apply(0, event)
    (close,) = closes
    result, _ = score_pair(close, judge_answer())
    topics = SimpleNamespace(scores="scores", decisions="decisions")
    sends = sends_of(topics.scores, topics.decisions, pair_records(result, close))  # type: ignore[arg-type]
    keys = [key.decode() for topic, key, _, _ in sends if topic == "decisions"]
    assert sorted(keys) == ["t-a", "t-a2", "t-b"]  # one record per trace
    records = {
        key.decode(): orjson.loads(value) for topic, key, value, _ in sends if topic == "decisions"
    }
    assert records["t-b"]["project_name"] == "code-assistant-canary"
    assert records["t-a2"]["project_name"] == "code-assistant"
    preference = next(s for s in result.scores if s.criterion == "preference")
    for trace_id, variant in (("t-a", "A"), ("t-b", "B")):
        (decision,) = records[trace_id]["decisions"]
        assert (decision["target_id"], decision["outcome"], decision["score_id"]) == (
            trace_id,
            "scored",
            preference.score_id,
        )
        assert decision["detail"] == f"pair 'cmp-7' as variant {variant}"
    (ignored,) = records["t-a2"]["decisions"]
    assert (ignored["outcome"], ignored["score_id"]) == ("filtered", None)
    assert "from a trace that started first" in ignored["detail"]
    keyed = {(topic, key.decode()) for topic, key, _, _ in sends if topic == "scores"}
    assert keyed == {("scores", "cmp-7"), ("scores", "t-a"), ("scores", "t-b")}


def test_a_pair_sampled_out_is_decided_so_with_or_without_its_partner() -> None:
    rule = comparison_rule().model_copy(update={"sampling_rate": 0.0})
    ruleset = RuleSet([rule], "sampled")
    for close in (pair_close(("t-a", "A"), ("t-b", "B")), pair_close(("t-a", "A"), window=True)):
        result = asyncio.run(scorer(None, ruleset).score_thread(close))
        assert result.scores == []
        assert [(d.outcome, d.detail) for d in result.decisions] == [
            ("sampled_out", "sampling rate 0")
        ]


def test_na_when_is_refused_on_a_comparison(tmp_path: Any) -> None:
    import shutil

    import yaml

    from stream.ruleset.loader import check_rules

    target = tmp_path / "rules"
    shutil.copytree(RULES_DIR / "critique", target / "critique")
    path = target / "critique" / "response_comparison.yaml"
    data = yaml.safe_load(path.read_text())
    data["criteria"][0]["na_when"] = "a.metadata.trivial"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10_000))
    _, errors = check_rules(target)
    assert any("na_when" in p for e in errors for p in e.problems)  # refused, not ignored
