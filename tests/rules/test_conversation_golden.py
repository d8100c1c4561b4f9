"""Golden tests for the conversation pack: any thread, read from the shapes the design names,
folded and rendered into each rule's prompt; scales, labels and answers to scores.

The expected transcript is written out by hand from the sample traces, not computed through
the engine's path lookup or value rendering.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fixtures import RULES_DIR, as_trace, hub_trace, scorer
from scripted_judge import MockJudge, Reply

from stream.engine.prompt import render_prompt, resolve_variables
from stream.judge.answers import parse_answer, response_schema
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import LLMJudgeRule
from stream.text.template import placeholders
from stream.threads.close import close_thread
from stream.threads.fold import fold_turn
from stream.threads.router import ThreadRouter
from stream.threads.state import ThreadClose, ThreadLimits, new_thread

RULE_IDS = [
    "conversation_coherence",
    "conversation_goal_completion",
    "conversation_user_frustration",
]
LABELS = {
    "conversation_coherence": [
        "Incoherent",
        "Often loses the thread",
        "Partly coherent",
        "Mostly coherent",
        "Coherent",
    ],
    "conversation_user_frustration": ["None", "Slight", "Moderate", "High", "Severe"],
    "conversation_goal_completion": [
        "Not achieved",
        "Mostly not achieved",
        "Partly achieved",
        "Mostly achieved",
        "Achieved",
    ],
}
START = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


def pack() -> dict[str, LLMJudgeRule]:
    rules = {}
    for rule in load_rules(RULES_DIR, ["conversation"]).rules:
        assert isinstance(rule, LLMJudgeRule)
        rules[rule.id] = rule
    return rules


def chat_trace(n: int, user: str, assistant: str, **changes: Any) -> dict[str, Any]:
    """A trace of the chat shape, as an OpenAI-style application logs it."""
    document = {
        "id": f"support-{n}",
        "name": "support-bot-reply",  # a name no pack filters on
        "project_name": "acme-support",
        "thread_id": "ticket-981",
        "start_time": (START + timedelta(minutes=n)).isoformat(),
        "input": {
            "messages": [
                {"role": "system", "content": "You are Acme's support assistant."},
                {"role": "user", "content": user},
            ]
        },
        "output": {"messages": [{"role": "assistant", "content": assistant}]},
    }
    document.update(changes)
    return document


EXCHANGES = [
    ("My order 4411 never arrived.", "Sorry about that. Could you give me the order number?"),
    ("I just did: 4411.", "Thanks. Order 4411 is held at the depot; I have asked for redelivery."),
]
TRANSCRIPT = (
    "User: My order 4411 never arrived.\n\n"
    "Assistant: Sorry about that. Could you give me the order number?\n\n"
    "User: I just did: 4411.\n\n"
    "Assistant: Thanks. Order 4411 is held at the depot; I have asked for redelivery."
)


def folded(documents: list[dict[str, Any]], packs: list[str] | None = None) -> ThreadClose:
    """The documents routed and folded as the worker does, then closed."""
    router = ThreadRouter(load_rules(RULES_DIR, packs or ["conversation"]))
    state = new_thread("ticket-981", "conversation", "acme-support")
    for document in documents:
        event = router.from_trace(as_trace(document), document, "llm-traces", 0.0)
        assert event is not None and event.turn is not None
        state.rules.extend(r for r in event.rules if r not in state.rules)
        fold_turn(state, event.turn, arrival=0.0, limits=ThreadLimits())
    pending = close_thread(state, "inactivity", closed_at=0.0)
    return ThreadClose("ticket-981", "conversation", "acme-support", pending, topic="llm-traces")


def test_the_pack_ships_three_fallback_conversation_rules_on_any_trace() -> None:
    rules = pack()
    assert sorted(rules) == RULE_IDS
    for rule in rules.values():
        assert rule.scope == "thread" and rule.thread is not None
        assert (rule.thread.kind, rule.thread.fallback) == ("conversation", True)
        assert rule.filter.model_dump(exclude_none=True) == {}  # any trace name, any project
        assert rule.thread.end == "metadata.conversation_finished"
        assert rule.thread.inactivity_gap_s is None  # the deployment's gap, as FretCoach's
    assert len({r.thread.folding() for r in rules.values() if r.thread}) == 1


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_each_variable_is_mapped_and_used(rule_id: str) -> None:
    rule = pack()[rule_id]
    assert placeholders(rule.prompt) == {"conversation"} == set(rule.variables)
    spec = rule.variable_specs["conversation"]
    assert (spec.path, spec.format, spec.allow_empty) == ("messages", "transcript", False)


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_the_prompt_renders_a_chat_thread_as_a_transcript(rule_id: str) -> None:
    rule = pack()[rule_id]
    documents = [chat_trace(n, u, a) for n, (u, a) in enumerate(EXCHANGES)]
    document = folded(documents).pending.document
    prompt = render_prompt(rule, resolve_variables(rule, document))
    assert f"<conversation>\n{TRANSCRIPT}\n</conversation>" in prompt
    assert "You are Acme's support assistant." not in prompt  # a turn is its last messages
    assert prompt.count("{{") == 0


SHAPES = [
    # input, output of one trace: the shapes the design names, and the fallbacks
    pytest.param(
        {"input": [{"role": "user", "content": "Hi"}]},
        {"output": "Hello! How can I help?"},
        ("Hi", "Hello! How can I help?"),
        id="agent-executor",
    ),
    pytest.param(
        {"messages": [[{"type": "system", "content": "Be brief."}, {"content": "Hi"}]]},
        {"generations": [[{"text": "Hello! How can I help?"}]]},
        ("Hi", "Hello! How can I help?"),
        id="langchain-llm-run",
    ),
    pytest.param(
        {"messages": [{"role": "user", "content": "Hi"}]},
        {"choices": [{"message": {"role": "assistant", "content": "Hello! How can I help?"}}]},
        ("Hi", "Hello! How can I help?"),
        id="openai-completion",
    ),
    pytest.param(
        {"question": "Hi"},
        {"answer": "Hello!"},
        ({"question": "Hi"}, {"answer": "Hello!"}),
        id="anything-else-whole",
    ),
]


@pytest.mark.parametrize(("trace_input", "trace_output", "expected"), SHAPES)
def test_a_turn_is_read_from_each_shape(
    trace_input: Any, trace_output: Any, expected: tuple[Any, Any]
) -> None:
    document = chat_trace(0, "", "", input=trace_input, output=trace_output)
    messages = folded([document]).pending.document["messages"]
    assert messages == [
        {"role": "user", "content": expected[0]},
        {"role": "assistant", "content": expected[1]},
    ]


def test_a_finished_mark_closes_the_thread_at_once() -> None:
    router = ThreadRouter(load_rules(RULES_DIR, ["conversation"]))
    document = chat_trace(0, "Thanks, bye", "Bye!", metadata={"conversation_finished": True})
    event = router.from_trace(as_trace(document), document, "llm-traces", 0.0)
    assert event is not None and event.end is True


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_scale_labels_and_direction(rule_id: str) -> None:
    output = pack()[rule_id].output
    assert (output.type, output.min, output.max, output.integer) == ("numeric", 1, 5, True)
    assert output.labels is not None
    assert [output.labels[n] for n in range(1, 6)] == LABELS[rule_id]
    assert output.higher_is_better is (rule_id != "conversation_user_frustration")
    assert response_schema(output) == {
        "type": "object",
        "properties": {"score": {"type": "integer"}, "reason": {"type": "string"}},
        "required": ["score", "reason"],
        "additionalProperties": False,
    }


GOLDEN_ANSWERS = [
    # rule, judge answer, raw value, normalised value, label
    ("conversation_coherence", '{"score": 5, "reason": "Each reply follows."}', 5, 1.0, "Coherent"),
    (
        "conversation_coherence",
        'Reasoning: asked for the number twice.\n{"score": 3, "reason": "asks again"}',
        3,
        0.5,
        "Partly coherent",
    ),
    ("conversation_user_frustration", '{"score": 2, "reason": "I just did"}', 2, 0.25, "Slight"),
    (
        "conversation_goal_completion",
        "score: 4\nreason: redelivery asked",
        4,
        0.75,
        "Mostly achieved",
    ),
    # the scripted test judge's default answer: a 1, no error
    ("conversation_goal_completion", Reply().content, 1, 0.0, "Not achieved"),
]


@pytest.mark.parametrize(("rule_id", "answer", "raw", "value", "label"), GOLDEN_ANSWERS)
def test_golden_answer_to_score(
    rule_id: str, answer: str, raw: float, value: float, label: str
) -> None:
    output = pack()[rule_id].output
    parsed = parse_answer(output, answer)
    assert (parsed.raw_value, parsed.label) == (raw, label)
    assert output.normalise(parsed.raw_value) == pytest.approx(value)


@pytest.mark.parametrize("answer", ['{"score": 0, "reason": "x"}', '{"score": 4.5, "reason": "x"}'])
def test_answers_off_the_scale_are_refused(answer: str) -> None:
    from stream.judge.answers import InvalidAnswer

    with pytest.raises(InvalidAnswer):
        parse_answer(pack()["conversation_coherence"].output, answer)


def test_a_thread_is_scored_by_the_three_rules_through_a_judge_server() -> None:
    documents = [chat_trace(n, u, a) for n, (u, a) in enumerate(EXCHANGES)]
    close = folded(documents)
    with MockJudge() as judge:
        judge.script(
            "read in order, hang together", '{"score": 4, "reason": "asks for the number again"}'
        )
        judge.script("frustrated the user became", '{"score": 2, "reason": "\\"I just did\\""}')
        judge.script(
            "whether the user got what they came for", '{"score": 5, "reason": "redelivery"}'
        )
        ruleset = load_rules(RULES_DIR, ["conversation"])
        result = asyncio.run(scorer(judge.base_url, ruleset).score_thread(close))
        prompts = judge.prompts()
    scores = {s.rule_id: s for s in result.scores}
    assert {r: (s.status, s.raw_value, s.label) for r, s in scores.items()} == {
        "conversation_coherence": ("ok", 4.0, "Mostly coherent"),
        "conversation_user_frustration": ("ok", 2.0, "Slight"),
        "conversation_goal_completion": ("ok", 5.0, "Achieved"),
    }
    assert scores["conversation_user_frustration"].higher_is_better is False
    assert len(prompts) == 3 and all(TRANSCRIPT in p for p in prompts)


def test_a_thread_whose_turns_hold_no_message_is_skipped_not_judged() -> None:
    document = chat_trace(0, "", "", input=None, output=None)
    close = folded([document])
    with MockJudge() as judge:
        ruleset = load_rules(RULES_DIR, ["conversation"])
        result = asyncio.run(scorer(judge.base_url, ruleset).score_thread(close))
        assert judge.requests == []
    assert {(s.status, s.status_reason) for s in result.scores} == {
        ("skipped", "variable 'conversation': path 'messages' is empty")
    }


def test_fretcoach_conversations_stay_fretcoachs() -> None:
    """Loaded together, FretCoach's hub conversation goes to its own rules only: read with its
    paths, judged by its rules, the conversation pack's filtered saying why (they stand back,
    although no trace of the thread reached them: FretCoach's rules claimed every one)."""
    document = hub_trace()
    document["thread_id"] = "ticket-981"
    close = folded([document], ["fretcoach", "conversation"])
    assert close.pending.rules == ["hub_conversational_coherence", "hub_user_frustration_score"]
    ruleset = load_rules(RULES_DIR, ["fretcoach", "conversation"])
    plan = scorer(None, ruleset).plan_thread(close)
    decided = {o.decision.rule_id: (o.decision.outcome, o.decision.detail) for o in plan.outcomes}
    for rule_id in RULE_IDS:
        assert decided[rule_id] == (
            "filtered",
            "a fallback rule: other conversation rules judge this thread",
        )


def test_a_thread_mixing_a_fretcoach_trace_and_others_is_judged_by_fretcoach_alone() -> None:
    """Each trace is read with its own group's paths; the conversation pack stands back."""
    hub = hub_trace()
    hub["thread_id"] = "ticket-981"
    hub["start_time"] = (START + timedelta(minutes=5)).isoformat()
    close = folded([chat_trace(0, *EXCHANGES[0]), hub], ["fretcoach", "conversation"])
    assert sorted(close.pending.rules) == sorted(
        [*RULE_IDS, "hub_conversational_coherence", "hub_user_frustration_score"]
    )
    messages = close.pending.document["messages"]
    assert [m["content"] for m in messages] == [
        *EXCHANGES[0],
        hub["input"]["messages"][-1]["content"],
        hub["output"]["messages"][-1]["content"],
    ]
    ruleset = load_rules(RULES_DIR, ["fretcoach", "conversation"])
    plan = scorer(None, ruleset).plan_thread(close)
    decided = {o.decision.rule_id: (o.decision.outcome, o.decision.detail) for o in plan.outcomes}
    for rule_id in RULE_IDS:
        assert decided[rule_id] == (
            "filtered",
            "a fallback rule: other conversation rules judge this thread",
        )
    assert {o.decision.rule_id for o in plan.outcomes if o.score is not None} == {
        "hub_conversational_coherence",
        "hub_user_frustration_score",
    }  # skipped without a judge, but decided and published
