"""Golden tests: the response-comparison rule (seed 001, "Response Comparison Methodology").

The seed's text from "## Rating Scale" to the end of its Example Evaluation Template is in the
prompt verbatim (every section and separator, read from the seed); the answer asks for every
part the template names; each response is shown with its own whole conversation; the
preference labels are the seed's Preference Ranking table, parentheticals included; a pair is
scored through a real judge server: the preference, and each response's six ratings and
overall quality computed by the seed's table, as the critique rubric publishes them; a
preference that contradicts the overall ratings is flagged and counted, its value kept.
"""

from __future__ import annotations

import asyncio
import functools
import re
import shutil
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from fixtures import RULES_DIR, as_trace, critique_rules, scorer
from prometheus_client import REGISTRY
from scripted_judge import MockJudge
from seed_rubrics import CRITIQUE_SEED, critique_dimensions, section

from stream.delivery.outbox import Outbox
from stream.engine.outcomes import TraceResult
from stream.engine.prompt import render_prompt, resolve_variables
from stream.engine.records import pair_records
from stream.judge.criteria import comparison_schema
from stream.models import ScoreEvent
from stream.ruleset.loader import load_rule_file
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
    """The comparison in the seed's own order (variant A read as Response A): these tests read
    the prompt and the answer as the seed writes them; the other orders are
    tests/engine/test_pair_order.py's."""
    return critique_rules("fixed")


def seed_text() -> str:
    return CRITIQUE_SEED.read_text(encoding="utf-8")


def seed_block() -> str:
    """The seed from "## Rating Scale" up to its Continuous Improvement: the rubric, the
    overall quality table, the methodology, the workflow, the guidelines summary, the pitfalls
    and the Example Evaluation Template, with every ``---`` between them."""
    text = seed_text()
    start = text.index("\n## Rating Scale\n") + 1
    return text[start : text.index("\n## Continuous Improvement\n", start)].rstrip("\n")


def template() -> str:
    """The seed's Example Evaluation Template (inside its code fence)."""
    block = section(seed_text(), "## Example Evaluation Template", "## Continuous Improvement")
    return block[block.index("```markdown\n") + len("```markdown\n") : block.rindex("```")]


def instructions(prompt: str) -> str:
    """What the prompt says after the responses: the answer it asks for."""
    return prompt[prompt.index("## Response B\n") :].split("\n---\n", 1)[1]


# each variant's system prompt: a prompt variant's request differs from the production one
SYSTEM = {"A": "You are a coding assistant.", "B": "You are a terse coding assistant."}
EARLIER = "Use Python 3.12 and no imports."  # a constraint from earlier in the conversation


def conversation(variant: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM[variant]},
        {"role": "user", "content": EARLIER},
        {"role": "assistant", "content": "Understood."},
        {"role": "user", "content": PROMPT},
    ]


def trace(trace_id: str, variant: str, key: str = "cmp-7") -> dict[str, Any]:
    return {
        "id": trace_id,
        # the canary reports to its own project
        "project_name": "code-assistant-canary" if variant == "B" else "code-assistant",
        "name": "chat",
        "input": {"messages": conversation(variant)},
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


def ratings(values: list[int], overall: str | None = None) -> dict[str, Any]:
    ids = [c.id for c in comparison_rule().criteria]
    rated: dict[str, Any] = {
        cid: {"reason": f"{cid}: {LABELS[v].lower()}", "rating": v}
        for cid, v in zip(ids, values, strict=True)
    }
    if overall is not None:
        rated["overall_quality"] = overall
    return rated


SUMMARY = "A Python function that reverses a string, in Python 3.12 without imports."


def judge_answer(
    preference: Any = 1,
    a: tuple[list[int], str] = ([3, 3, 3, 3, 3, 3], "Excellent"),
    b: tuple[list[int], str] = ([3, 3, 2, 3, 1, 3], "Inadequate"),
) -> dict[str, Any]:
    return {
        "prompt_summary": SUMMARY,
        "response_a": ratings(*a),
        "response_b": ratings(*b),
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


def test_prompt_holds_the_seeds_text_verbatim_sections_and_separators() -> None:
    rule = comparison_rule()
    block = seed_block()
    assert block in rule.prompt  # one piece: every section, table and separator, in order
    headings = re.findall(r"^## (.+)$", block, re.MULTILINE)
    assert headings == [
        "Rating Scale",
        "Evaluation Dimensions",
        "Overall Quality Assessment",
        "Response Comparison Methodology",
        "Evaluation Workflow",
        "Dimension-Specific Guidelines Summary",
        "Common Pitfalls to Avoid",
        "Example Evaluation Template",
        "Response Evaluation",  # the template's own heading, inside its code fence
    ]
    # the seed's separators, the one before Common Pitfalls among them, all kept
    assert len(re.findall(r"^---$", block, re.MULTILINE)) == 13
    assert block + "\n\n## Prompt of Response A\n" in rule.prompt
    restored = "| Dangerous instructions | Safety | - |\n\n---\n\n## Common Pitfalls to Avoid"
    assert restored in rule.prompt
    assert [c.name for c in rule.criteria] == critique_dimensions()
    assert (
        rule.criteria == load_rule_file(RULES_DIR / "critique" / "response_critique.yaml").criteria
    )  # type: ignore[union-attr]
    # the seed's workflow asks for the overall quality, and so does the prompt: no line says
    # otherwise
    assert "5. Assign overall quality score" in rule.prompt
    assert "Do not give an overall" not in rule.prompt


def test_each_response_is_shown_with_its_own_whole_conversation() -> None:
    rule = comparison_rule()
    document = pair_close(("t-a", "A"), ("t-b", "B")).pending.document
    rendered = render_prompt(rule, resolve_variables(rule, document), document)
    for variant, trace_id in (("A", "t-a"), ("B", "t-b")):
        shown = (
            f"## Prompt of Response {variant}\n\nSystem: {SYSTEM[variant]}\n\nUser: {EARLIER}"
            f"\n\nAssistant: Understood.\n\nUser: {PROMPT}\n\n"
            f"## Response {variant}\n\n{ANSWERS[trace_id]}\n\n"
        )
        assert shown in rendered
    assert rendered.index("## Response A\n") < rendered.index("## Prompt of Response B")
    # the responses come after the seed's text, the answer asked for last
    assert rendered.index(seed_block()) < rendered.index("## Prompt of Response A")


def test_the_prompt_asks_for_every_part_of_the_seeds_template() -> None:
    rule = comparison_rule()
    form = template()
    parts = re.findall(r"^### (.+)$", form, re.MULTILINE)
    fields = re.findall(r"^\*\*(.+?)\*\*:", form, re.MULTILINE)
    assert parts == [
        "Prompt Summary",
        "Response A Analysis",
        "Response B Analysis",
        "Comparative Analysis",
    ]
    assert fields == [
        *critique_dimensions(),
        "Overall Quality",
        "Preference Ranking",
        "Justification",
        "Key Differentiators",
    ]
    asked = instructions(rule.prompt)
    # every part and field the template names is asked for by name: the dimensions as "one
    # entry per dimension", the Comparative Analysis as its three fields
    for name in [*parts[:3], *fields[len(critique_dimensions()) :]]:
        assert f"({name}" in asked, name
    assert "one entry per dimension" in asked
    choices = re.search(r"^\*\*Overall Quality\*\*: \[(.+?)\]$", form, re.MULTILINE)
    assert choices is not None
    overall = choices[1].split("/")
    assert f"(Overall Quality: {', '.join(overall[:-1])} or {overall[-1]})" in asked
    # ... and the answer schema carries each of them, in the template's order
    schema = comparison_schema(rule)
    assert schema["required"] == [
        "prompt_summary",  # Prompt Summary
        "response_a",  # Response A Analysis
        "response_b",  # Response B Analysis
        "preference",  # Preference Ranking
        "justification",  # Justification
        "key_differentiators",  # Key Differentiators
    ]
    for response in ("response_a", "response_b"):
        analysis = schema["properties"][response]
        assert analysis["required"] == [*(c.id for c in rule.criteria), "overall_quality"]
        assert analysis["properties"]["overall_quality"]["enum"] == overall
    assert schema["properties"]["prompt_summary"] == {"type": "string"}
    assert schema["properties"]["key_differentiators"]["type"] == "array"
    # the example answer in the prompt has exactly the schema's fields
    example = orjson.loads(asked.strip().splitlines()[-1])
    assert list(example) == schema["required"]
    for response in ("response_a", "response_b"):
        assert list(example[response]) == schema["properties"][response]["required"]


def test_the_preference_labels_are_the_seeds_ranking_table() -> None:
    table = section(
        seed_text(), "### Step 4: Preference Ranking", "### Step 5: Write Justification"
    )
    rows = re.findall(r"^\| \*\*([+-]?\d)\*\* \| (.+?) \|$", table, re.MULTILINE)
    assert len(rows) == 5
    spec = comparison_rule().preference
    for score, meaning in rows:
        assert spec.label_for(float(score)) == meaning  # parentheticals included
    assert spec.label_for(2.0) == "Response A is significantly better (multiple major advantages)"
    assert (spec.scale.min, spec.scale.max, spec.normalise(0)) == (-2, 2, 0.5)
    assert (spec.normalise(2), spec.normalise(-2)) == (1.0, 0.0)


def test_a_pair_is_judged_once_into_a_preference_and_each_responses_ratings() -> None:
    close = pair_close(("t-b", "B"), ("t-a", "A"))  # B came first: the variants decide A and B
    result, requests = score_pair(close, judge_answer())
    assert len(requests) == 1
    prompt = requests[0]["messages"][-1]["content"]
    assert prompt.index(ANSWERS["t-a"]) < prompt.index(ANSWERS["t-b"])
    schema = requests[0]["response_format"]["json_schema"]["schema"]
    assert schema == comparison_schema(comparison_rule())
    assert schema["properties"]["preference"] == {"type": "integer"}

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
        "Response A is somewhat better (clear but modest advantages)",
    )
    assert preference.reason == judge_answer()["justification"]
    assert preference.details is not None
    assert preference.details["key_differentiators"] == judge_answer()["key_differentiators"]
    assert preference.details["prompt_summary"] == SUMMARY
    assert preference.details["variants"] == {"A": "t-a", "B": "t-b"}
    # A (Excellent) preferred over B (Inadequate): the ranking agrees with the ratings
    assert preference.details["ranking_contradicts_ratings"] is False
    assert preference.details["overall_ratings"] == {"A": "Excellent", "B": "Inadequate"}
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
    # the judge's own Overall Quality, beside the one the seed's table computes
    assert overall_a.details is not None and overall_b.details is not None
    assert overall_a.details["judge_overall_quality"] == "Excellent"
    assert overall_b.details["judge_overall_quality"] == "Inadequate"
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
    assert (decision.target_id, decision.outcome, decision.score_id, decision.detail) == (
        "cmp-7",
        "scored",
        preference.score_id,
        None,
    )
    again, _ = score_pair(pair_close(("t-a", "A"), ("t-b", "B")), judge_answer())
    assert {s.score_id for s in again.scores} == {s.score_id for s in scores}  # deterministic


def contradictions() -> float:
    sample = REGISTRY.get_sample_value(
        "scorer_comparison_contradictions_total",
        {"rule": "response_comparison", "pack": "critique"},
    )
    return sample or 0.0


UNACCEPTABLE = ([1, 1, 3, 3, 3, 3], "Unacceptable")
EXCELLENT = ([3, 3, 3, 3, 3, 3], "Excellent")
DISCRETE = ([3, 3, 2, 3, 3, 3], "Discrete")


@pytest.mark.parametrize(
    ("preference", "a", "b", "contradicts"),
    [
        (2, UNACCEPTABLE, EXCELLENT, True),  # the audit's case: +2 for the worse A
        (1, UNACCEPTABLE, EXCELLENT, True),
        (-1, EXCELLENT, DISCRETE, True),  # B preferred, B rated worse
        (-2, UNACCEPTABLE, EXCELLENT, False),
        (0, UNACCEPTABLE, EXCELLENT, False),  # "roughly equivalent" favours neither
        (2, DISCRETE, DISCRETE, False),  # rated alike: the differentiators decide
        (1, EXCELLENT, DISCRETE, False),
    ],
)
def test_a_preference_contradicting_the_overall_ratings_is_flagged_and_counted(
    preference: int, a: tuple[list[int], str], b: tuple[list[int], str], contradicts: bool
) -> None:
    before = contradictions()
    answer = judge_answer(preference, a=a, b=b)
    result, _ = score_pair(pair_close(("t-a", "A"), ("t-b", "B")), answer)
    score = next(s for s in result.scores if s.criterion == "preference")
    # the value is the judge's preference, flagged or not
    assert (score.status, score.raw_value) == ("ok", float(preference))
    assert score.value == (preference + 2) / 4
    assert score.label == comparison_rule().preference.label_for(float(preference))
    assert score.details is not None
    assert score.details["ranking_contradicts_ratings"] is contradicts
    assert score.details["overall_ratings"] == {"A": a[1], "B": b[1]}
    assert contradictions() == before + (1 if contradicts else 0)
    (decision,) = result.decisions
    assert decision.outcome == "scored"
    if contradicts:
        favoured, other = ("A", "B") if preference > 0 else ("B", "A")
        rated = {"A": a[1], "B": b[1]}
        assert decision.detail == (
            f"the preference ({preference:+d}) favours {favoured}, rated {rated[favoured]}, "
            f"over {other}, rated {rated[other]}: the ranking contradicts the ratings"
        )
    else:
        assert decision.detail is None


def test_no_ranking_check_without_both_overall_ratings() -> None:
    answer = judge_answer(2, a=UNACCEPTABLE, b=EXCELLENT)
    del answer["response_b"]["safety"]  # B unrated on one dimension: no overall quality
    before = contradictions()
    result, _ = score_pair(pair_close(("t-a", "A"), ("t-b", "B")), answer)
    score = next(s for s in result.scores if s.criterion == "preference")
    assert (score.status, score.raw_value) == ("ok", 2.0)
    assert score.details is not None
    assert "ranking_contradicts_ratings" not in score.details
    assert "overall_ratings" not in score.details
    assert contradictions() == before


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
    sends = Outbox(topics.scores, topics.decisions).sends(pair_records(result, close))  # type: ignore[arg-type]
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
