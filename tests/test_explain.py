"""``scorer explain``: every rule's decision for a trace, offline, from the worker's engine."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from fixtures import RULES_DIR, as_trace, hub_trace, scorer
from scripted_judge import MockJudge
from typer.testing import CliRunner

from stream.cli import app
from stream.engine.outcomes import TraceResult
from stream.explain import (
    DISABLED,
    PAIRS,
    WOULD_JUDGE,
    ExplainedClose,
    ExplainedTrace,
    FileOptions,
    FileThreads,
    Invalid,
    Note,
    Record,
    explain_file,
    explain_trace,
)
from stream.ruleset.judge_specs import ShadowSpec
from stream.ruleset.loader import load_rules
from stream.threads.events import parse_session

SHAPES = Path(__file__).parent / "data" / "shapes"
PACKS = ["fretcoach", "mlflow", "critique"]
CONVERSATION_RULES = [
    "conversation_coherence",
    "conversation_goal_completion",
    "conversation_user_frustration",
]


@pytest.mark.parametrize("name", sorted(p.stem for p in SHAPES.glob("*.json")))
def test_explain_agrees_with_what_the_engine_decides(name: str) -> None:
    ruleset = load_rules(RULES_DIR, PACKS)
    raw = (SHAPES / f"{name}.json").read_bytes()
    trace_id, explained = explain_trace(ruleset, raw, "llm-traces", "gpt-4o-mini")
    pairs = {r.id for r in ruleset.pair_rules()}  # not decided per trace (test below)
    explained = [e for e in explained if e.rule_id not in pairs]
    document = orjson.loads(raw)
    with MockJudge() as judge:
        judge.script("", '{"score": 0.5, "reason": "fine"}')
        s = scorer(judge.base_url, ruleset)
        result = asyncio.run(s.score_trace(as_trace(document), document, "llm-traces"))
    decided = {d.rule_id: d.outcome for d in result.decisions}
    assert trace_id == document["id"]
    assert {e.rule_id for e in explained} == set(decided)
    judged = {s.rule_id for s in result.scores if s.judge_model is not None}
    for e in explained:
        if e.outcome == WOULD_JUDGE:  # a call the worker made (scored, or its answer unusable)
            assert e.rule_id in judged and e.prompt, e
        else:
            assert e.outcome == decided[e.rule_id] and e.rule_id not in judged, e


def test_explain_says_why_a_rule_did_not_fire() -> None:
    ruleset = load_rules(RULES_DIR, ["fretcoach"])
    document = hub_trace()
    document["name"] = "hub-chat-v2"  # a name the seed does not define
    _, explained = explain_trace(ruleset, orjson.dumps(document), None, "gpt-4o-mini")
    by_rule = {e.rule_id: e for e in explained}
    assert by_rule["hub_answer_correctness"].outcome == "filtered"
    assert by_rule["hub_answer_correctness"].detail == (
        "filter.trace_names ['hub-coach-chat']: name is 'hub-chat-v2'"
    )


def test_the_command_prints_decisions_and_prompts_without_a_broker_or_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCORER_PACKS", '["fretcoach"]')
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    bad = b'{"project_name": "fretcoach"}'  # no id: the worker dead-letters it
    path = tmp_path / "traces.jsonl"
    path.write_bytes(orjson.dumps(hub_trace()) + b"\n" + bad + b"\n")
    result = CliRunner().invoke(app, ["explain", str(path), "--prompt"])
    assert result.exit_code == 0, result.output
    assert "judge       fretcoach/hub_answer_correctness: would be judged" in result.output
    assert (
        "--- prompt ---\nYou are an impartial AI judge evaluating an assistant's" in result.output
    )
    assert "invalid trace (the worker dead-letters it)" in result.output and "id" in result.output
    assert "no judge is configured" in result.output

    as_json = CliRunner().invoke(app, ["explain", str(path), "--json"])
    records = [json.loads(line) for line in as_json.output.splitlines()]  # JSON lines only
    (record,) = [r for r in records if r["scope"] == "trace"]
    assert record["trace_id"] == hub_trace()["id"]
    (invalid,) = [r for r in records if r["scope"] == "invalid"]
    assert invalid["what"] == "trace" and "id" in invalid["error"]
    assert {r["outcome"] for r in record["rules"]} >= {"judge", "filtered"}

    missing = CliRunner().invoke(app, ["explain", str(path), "--trace-id", "nope"])
    assert missing.exit_code == 1 and "no trace found with id 'nope'" in missing.output


def test_explain_says_a_fanned_out_rule_makes_a_call_per_item() -> None:
    ruleset = load_rules(RULES_DIR, ["mlflow"])
    document = hub_trace()
    document["metadata"] = {"retrieval_context": ["Loop the bar.", "Use a click.", "Rest."]}
    _, explained = explain_trace(ruleset, orjson.dumps(document), None, "gpt-4o-mini")
    (relevance,) = [e for e in explained if e.rule_id == "retrieval_relevance"]
    assert relevance.outcome == WOULD_JUDGE
    assert "3 calls, one per item of 3 documents, the first" in relevance.detail
    assert "fan_out.max_items" not in relevance.detail  # nothing left out
    assert relevance.prompt and "<document>Loop the bar.</document>" in relevance.prompt

    # past the bound: the explanation names it as the score and decision will
    document["metadata"] = {"retrieval_context": [f"Passage {n}." for n in range(25)]}
    _, explained = explain_trace(ruleset, orjson.dumps(document), None, "gpt-4o-mini")
    (relevance,) = [e for e in explained if e.rule_id == "retrieval_relevance"]
    assert "20 calls, one per item of 25 documents (the first 20 of 25 documents were " in (
        relevance.detail or ""
    )
    assert "(fan_out.max_items: 20)" in (relevance.detail or "")


def test_explain_says_a_prompt_would_be_cut_as_the_decision_will() -> None:
    ruleset = load_rules(RULES_DIR, ["fretcoach"])
    document = hub_trace()
    document["input"]["messages"][-1]["content"] = "Why? " * 40_000  # ~50 k tokens
    _, explained = explain_trace(
        ruleset, orjson.dumps(document), None, "gpt-4o-mini", max_prompt_tokens=8_000
    )
    judged = [e for e in explained if e.outcome == WOULD_JUDGE]
    assert judged
    for e in judged:
        assert "prompt cut to fit SCORER_JUDGE_MAX_PROMPT_TOKENS (8000 tokens, about " in (
            e.detail or ""
        ), e.detail
        assert "characters of input cut from the middle" in (e.detail or "")


def test_explain_says_which_side_of_which_pair_a_trace_is_or_why_none() -> None:
    ruleset = load_rules(RULES_DIR, ["critique"])
    trace = {
        "id": "t-b",
        "project_name": "code-assistant",
        "input": {"messages": [{"role": "user", "content": "Reverse a string."}]},
        "output": {"messages": [{"role": "assistant", "content": "s[::-1]"}]},
        "metadata": {"comparison_id": "cmp-7", "variant": "B"},
    }

    def said(document: dict[str, object]) -> tuple[str, str | None]:
        _, explained = explain_trace(ruleset, orjson.dumps(document), None, "gpt-4o-mini")
        (pair,) = [e for e in explained if e.rule_id == "response_comparison"]
        return pair.outcome, pair.detail

    assert said(trace) == (
        PAIRS,
        "pairs as variant B of comparison 'cmp-7': judged once variant A comes, within 600 s",
    )
    assert said({**trace, "metadata": {"variant": "B"}}) == (
        "filtered",
        "not paired: no comparison key at metadata.comparison_id",
    )
    assert said({**trace, "metadata": {"comparison_id": "cmp-7", "variant": "canary"}}) == (
        "filtered",
        "not paired: its variant 'canary' (metadata.variant) is neither A nor B",
    )


# -- threads, sessions and pairs: what the file's events form, closed where the worker would

SAMPLES = Path(__file__).parent.parent / "stream" / "samples"
START = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


def options(**changes: Any) -> FileOptions:
    return FileOptions(default_model="gpt-4o-mini", **changes)


def explained_file(
    packs: list[str], messages: list[bytes], topic: str | None = None
) -> tuple[list[ExplainedTrace], dict[tuple[str, int], ExplainedClose], list[Record]]:
    """The file's trace records, its closes by (thread id, close seq), and every record."""
    records = explain_file(load_rules(RULES_DIR, packs), messages, options(), topic)
    traces = [r for r in records if isinstance(r, ExplainedTrace)]
    closes = {(r.thread_id, r.close_seq): r for r in records if isinstance(r, ExplainedClose)}
    # one record per trace first, then one per close
    kinds = [isinstance(r, ExplainedClose) for r in records if not isinstance(r, Invalid | Note)]
    assert kinds == sorted(kinds)
    return traces, closes, records


def lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.strip()]


def decisions(close: ExplainedClose) -> dict[str, tuple[str, str | None]]:
    return {e.rule_id: (e.outcome, e.detail) for e in close.rules}


def own_trace(n: int, user: str, assistant: str, thread: str = "ticket-981") -> dict[str, Any]:
    """A trace of a name no application pack knows, as an OpenAI-style application logs it."""
    return {
        "id": f"support-{thread}-{n}",
        "name": "support-bot-reply",
        "project_name": "acme-support",
        "thread_id": thread,
        "start_time": (START + timedelta(minutes=n)).isoformat(),
        "input": {"messages": [{"role": "user", "content": user}]},
        "output": {"messages": [{"role": "assistant", "content": assistant}]},
    }


def test_the_fretcoach_conversations_close_where_the_worker_closes_them() -> None:
    """Sample conversations with FretCoach's and the conversation pack: each hub thread closes
    once (on its end marker, or when the file goes past its gap), FretCoach's rules would
    judge it on its turns, the conversation pack stands back saying why."""
    traces, closes, _ = explained_file(
        ["fretcoach", "conversation"], lines(SAMPLES / "fretcoach_traces.jsonl")
    )
    assert len(traces) == 13
    assert sorted(closes) == [(f"thread-hub-00{n}", 1) for n in range(1, 5)]
    first = closes["thread-hub-001", 1]
    assert (first.scope, first.kind, first.closes, first.turn_count) == (
        "thread",
        "conversation",
        "end",
        3,
    )
    assert first.how == "closes on its end marker (a trace marking it finished)"
    samples = [orjson.loads(line) for line in lines(SAMPLES / "fretcoach_traces.jsonl")]
    hub = [d for d in samples if d.get("thread_id") == "thread-hub-001"]
    assert first.traces == [d["id"] for d in hub]
    assert first.matched == ["hub_conversational_coherence", "hub_user_frustration_score"]
    decided = decisions(first)
    fallback = ("filtered", "a fallback rule: other conversation rules judge this thread")
    assert {rule: decided[rule] for rule in CONVERSATION_RULES} == dict.fromkeys(
        CONVERSATION_RULES, fallback
    )
    (coherence,) = [e for e in first.rules if e.rule_id == "hub_conversational_coherence"]
    assert coherence.outcome == WOULD_JUDGE and coherence.prompt is not None
    for document in hub:  # every turn of the thread, in order
        for text in (
            document["input"]["messages"][-1]["content"],
            document["output"]["messages"][-1]["content"],
        ):
            assert text in coherence.prompt
    # thread-hub-002 went quiet for the 900 s gap while the file went on
    assert closes["thread-hub-002", 1].closes == "inactivity"
    assert closes["thread-hub-002", 1].how == (
        "closes after 900 s without a new turn (the file goes on past that)"
    )


def test_a_thread_open_at_the_end_of_the_file_closes_there_and_a_gap_reopens_it() -> None:
    later = own_trace(20, "Still nothing.", "I have chased the depot again.")
    messages = [
        orjson.dumps(own_trace(0, "My order 4411 never arrived.", "Which order number?")),
        orjson.dumps(own_trace(1, "I just did: 4411.", "It is held at the depot.")),
        orjson.dumps(later),  # 19 minutes on: past the 15-minute gap
    ]
    _, closes, _ = explained_file(["conversation"], messages)
    assert sorted(closes) == [("ticket-981", 1), ("ticket-981", 2)]
    first, second = closes["ticket-981", 1], closes["ticket-981", 2]
    assert (first.closes, first.turn_count, len(first.traces)) == ("inactivity", 2, 2)
    assert (second.closes, second.turn_count) == ("end_of_file", 3)  # the whole conversation
    assert second.how == (
        "open at the end of the file: the worker would close it after 900 s without a new "
        "turn, or on its end marker"
    )
    assert second.traces[-1] == later["id"]


def test_a_users_own_thread_is_judged_by_the_conversation_pack() -> None:
    """Traces of names no pack knows, sharing a thread id: the conversation pack's rules would
    judge the transcript in order; FretCoach's say no trace of the thread matched. A thread
    mixing a FretCoach trace in is FretCoach's: the conversation pack stands back."""
    exchanges = [
        ("My order 4411 never arrived.", "Sorry about that. Could you give me the order number?"),
        ("I just did: 4411.", "Thanks. Order 4411 is held at the depot."),
    ]
    own = [own_trace(n, *pair) for n, pair in enumerate(exchanges)]
    hub = hub_trace()
    hub["thread_id"] = "mixed-1"
    hub["start_time"] = (START + timedelta(minutes=5)).isoformat()  # within the gap
    mixed = [own_trace(0, *exchanges[0], thread="mixed-1"), hub]
    _, closes, _ = explained_file(
        ["fretcoach", "conversation"], [orjson.dumps(d) for d in [*own, *mixed]]
    )
    thread = closes["ticket-981", 1]
    assert thread.matched == CONVERSATION_RULES
    decided = decisions(thread)
    for rule in CONVERSATION_RULES:
        assert decided[rule][0] == WOULD_JUDGE
    for rule in ("hub_conversational_coherence", "hub_user_frustration_score"):
        assert decided[rule] == ("filtered", "no trace of the thread matched")
    transcript = "\n\n".join(f"User: {u}\n\nAssistant: {a}" for u, a in exchanges)
    for e in thread.rules:
        if e.outcome == WOULD_JUDGE:
            assert e.prompt is not None and transcript in e.prompt, e.rule_id
    decided = decisions(closes["mixed-1", 1])
    for rule in CONVERSATION_RULES:
        assert decided[rule] == (
            "filtered",
            "a fallback rule: other conversation rules judge this thread",
        )
    assert decided["hub_conversational_coherence"][0] == WOULD_JUDGE


def test_closes_explained_agree_with_what_the_thread_agent_scores() -> None:
    """Each close the file makes, scored by the worker's scorer against a scripted judge:
    the same decision for every rule, a judge call where explain says one would be made."""
    ruleset = load_rules(RULES_DIR, ["fretcoach", "conversation", "coaching", "critique"])
    messages = [
        *lines(SAMPLES / "fretcoach_traces.jsonl"),
        *lines(SAMPLES / "fretcoach_sessions.jsonl"),
        *lines(SAMPLES / "comparison_pair.jsonl"),
    ]
    records = explain_file(ruleset, messages, options())
    explained = {
        (r.kind, r.thread_id, r.close_seq): r for r in records if isinstance(r, ExplainedClose)
    }
    assert {kind for kind, _, _ in explained} == {"conversation", "session", "pair"}
    threads = FileThreads(ruleset, options(), start=0.0)
    for raw in messages:
        document = orjson.loads(raw)
        if "session_id" in document:
            threads.add_session(parse_session(raw))
        else:
            threads.add_trace(as_trace(document), document, "llm-traces")
    closes = threads.finish()
    assert {(c.close.kind, c.close.thread_id, c.close.pending.close_seq) for c in closes} == set(
        explained
    )
    with MockJudge() as judge:
        judge.script("", '{"score": 0.5, "reason": "fine"}')
        s = scorer(judge.base_url, ruleset)

        async def score_all() -> list[TraceResult]:
            return [await s.score_thread(close.close) for close in closes]

        for close, result in zip(closes, asyncio.run(score_all()), strict=True):
            key = (close.close.kind, close.close.thread_id, close.close.pending.close_seq)
            decided = {d.rule_id: d.outcome for d in result.decisions}
            judged = {x.rule_id for x in result.scores if x.judge_model is not None}
            shown = [e for e in explained[key].rules if e.outcome != DISABLED]
            assert {e.rule_id for e in shown} == set(decided), key
            for e in shown:
                if e.outcome == WOULD_JUDGE:
                    assert e.rule_id in judged and e.prompt, (key, e)
                else:
                    assert e.outcome == decided[e.rule_id] and e.rule_id not in judged, (key, e)


def test_a_coaching_session_file_is_explained_session_by_session() -> None:
    """The sample sessions with FretCoach's and the coaching pack: each closes on its end
    event; FretCoach's check gives its value, its judged rule would see every turn's metrics
    and feedback; the coaching transcript rubric skips a session of metrics only."""
    _, closes, records = explained_file(
        ["fretcoach", "coaching"], lines(SAMPLES / "fretcoach_sessions.jsonl")
    )
    assert not [r for r in records if isinstance(r, ExplainedTrace | Invalid | Note)]
    assert sorted(closes) == [("sess-77", 1), ("sess-78", 1)]
    session = closes["sess-77", 1]
    assert (session.scope, session.kind, session.closes, session.turn_count) == (
        "thread",
        "session",
        "end",
        6,
    )
    assert session.how == "closes on its end marker (its end event)"
    decided = decisions(session)
    outcome, detail = decided["studio_live_feedback_improvement"]
    assert outcome == "scored" and detail and "Timing Stability" in detail
    (improvement,) = [e for e in session.rules if e.rule_id == "studio_live_feedback_improvement"]
    assert improvement.value == 1.0
    assert decided["coaching_transcript"] == (
        "skipped",
        "variable 'transcript': path 'messages' is empty",
    )
    (effectiveness,) = [
        e for e in session.rules if e.rule_id == "studio_live_feedback_effectiveness"
    ]
    assert effectiveness.outcome == WOULD_JUDGE and effectiveness.prompt is not None
    events = [orjson.loads(line) for line in lines(SAMPLES / "fretcoach_sessions.jsonl")]
    for event in events:
        if event["session_id"] == "sess-77" and event["type"] == "turn":
            assert event["feedback"] in effectiveness.prompt
            assert event["timestamp"] in effectiveness.prompt
    assert closes["sess-78", 1].turn_count == 2
    assert decisions(closes["sess-78", 1])["studio_live_feedback_improvement"][0] == "scored"


def test_a_coaching_transcript_would_be_judged_on_the_whole_transcript() -> None:
    """A conversational coaching session (user/assistant turns) read from the sessions topic:
    the rubric would be judged on the transcript, the pack's checks give their values."""
    exchanges = [
        ("I keep rushing the chorus.", "What tempo are you practising it at?"),
        ("About 120 bpm.", "Try 90 with a click, then step up by 5 bpm once it feels easy."),
    ]
    events = [
        {
            "session_id": "coach-1",
            "type": "turn",
            "seq": n,
            "timestamp": (START + timedelta(seconds=30 * n)).isoformat(),
            "project_name": "coaching",
            "user": user,
            "assistant": assistant,
        }
        for n, (user, assistant) in enumerate(exchanges)
    ]
    messages = [orjson.dumps(e) for e in events]
    for topic in (None, "coaching-sessions"):  # recognised by shape, or by the topic
        _, closes, _ = explained_file(["coaching"], messages, topic)
        (session,) = closes.values()
        assert (session.thread_id, session.closes, session.turn_count) == (
            "coach-1",
            "end_of_file",
            2,
        )
        (rubric,) = [e for e in session.rules if e.rule_id == "coaching_transcript"]
        assert rubric.outcome == WOULD_JUDGE and rubric.prompt is not None
        for user, assistant in exchanges:
            assert user in rubric.prompt and assistant in rubric.prompt
        assert {e.outcome for e in session.rules if e.rule_id != "coaching_transcript"} <= {
            "scored",
            "skipped",
        }


def test_session_events_the_worker_would_refuse_or_not_read_say_so() -> None:
    no_seq = b'{"session_id": "s-1", "type": "turn", "timestamp": "2026-11-20T09:00:00Z"}'
    records = explain_file(load_rules(RULES_DIR, ["coaching"]), [no_seq], options())
    (invalid,) = records
    assert isinstance(invalid, Invalid) and invalid.what == "session event"
    assert "a turn needs seq" in invalid.error
    sessions = lines(SAMPLES / "fretcoach_sessions.jsonl")
    records = explain_file(load_rules(RULES_DIR, ["critique"]), sessions, options())
    (note,) = records
    assert isinstance(note, Note)
    assert note.text == (
        "10 session events not read: no session rule is loaded, so the worker does not read "
        "coaching-sessions"
    )


def test_a_pair_forms_and_would_be_judged_on_both_responses() -> None:
    pair_file = lines(SAMPLES / "comparison_pair.jsonl")
    traces, closes, _ = explained_file(["critique"], pair_file)
    a, b = (orjson.loads(line) for line in pair_file)
    assert [t.trace_id for t in traces] == [a["id"], b["id"]]
    (pair,) = closes.values()
    assert (pair.scope, pair.kind, pair.thread_id, pair.closes) == (
        "pair",
        "pair",
        "hub-weakest-area-canary-1",
        "end",
    )
    assert pair.variants == {"A": a["id"], "B": b["id"]} and pair.waiting_for is None
    assert pair.how == "both variants came: the pair is judged at once"
    (comparison,) = pair.rules
    assert (comparison.rule_id, comparison.outcome) == ("response_comparison", WOULD_JUDGE)
    assert comparison.prompt is not None
    for document in (a, b):
        assert document["output"]["messages"][-1]["content"] in comparison.prompt
    record = pair.as_dict()
    assert record["scope"] == "pair" and record["comparison_id"] == "hub-weakest-area-canary-1"
    assert record["variants"] == {"A": a["id"], "B": b["id"]} and "waiting_for" not in record


def test_a_pair_missing_its_partner_waits_its_window_then_is_skipped() -> None:
    a, b = (orjson.loads(line) for line in lines(SAMPLES / "comparison_pair.jsonl"))
    second_a = {**a, "id": "0193f0a0-0000-7000-8000-000000000199"}  # a variant it has
    _, closes, _ = explained_file(["critique"], [orjson.dumps(a), orjson.dumps(second_a)])
    (pair,) = closes.values()
    assert (pair.closes, pair.waiting_for, pair.variants) == ("end_of_file", "B", {"A": a["id"]})
    assert pair.ignored == [second_a["id"]]
    assert pair.how == (
        "the file ends without variant B: the worker waits 600 s for it, then skips the pair"
    )
    assert decisions(pair)["response_comparison"] == (
        "skipped",
        "partner missing: comparison 'hub-weakest-area-canary-1' has variant A (trace "
        f"{a['id']}) but no variant B within 600 s",
    )
    # the partner comes after the window: the pair was skipped then, and B is no side of it
    late = {**b, "start_time": "2026-11-20T18:45:00+00:00"}
    _, closes, _ = explained_file(["critique"], [orjson.dumps(a), orjson.dumps(late)])
    (pair,) = closes.values()
    assert (pair.closes, pair.waiting_for) == ("inactivity", "B")
    assert pair.how == "variant B did not come within 600 s: skipped"
    assert decisions(pair)["response_comparison"][0] == "skipped"


def test_the_command_explains_threads_sessions_and_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCORER_PACKS", '["fretcoach", "critique"]')
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(
        b"\n".join(
            [
                *lines(SAMPLES / "fretcoach_traces.jsonl")[:3],
                *lines(SAMPLES / "comparison_pair.jsonl"),
                *lines(SAMPLES / "fretcoach_sessions.jsonl")[-3:],  # sess-78
            ]
        )
    )
    result = CliRunner().invoke(app, ["explain", str(path), "--prompt"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert (
        "conversation thread-hub-001 (fretcoach), 3 turns: closes on its end marker "
        "(a trace marking it finished)"
    ) in out
    assert "  rules its traces matched: hub_conversational_coherence, " in out
    assert "  judge       fretcoach/hub_conversational_coherence: would be judged" in out
    assert "session sess-78 (fretcoach), 2 turns: closes on its end marker" in out
    assert "  scored      fretcoach/studio_live_feedback_improvement 0.5: 2 turns" in out
    a, b = (orjson.loads(line) for line in lines(SAMPLES / "comparison_pair.jsonl"))
    assert (
        f"pair hub-weakest-area-canary-1 (fretcoach): variant A (trace {a['id']}), "
        f"B (trace {b['id']}): both variants came: the pair is judged at once"
    ) in out
    assert b["output"]["messages"][-1]["content"] in out.split("pair hub-weakest")[1]

    as_json = CliRunner().invoke(app, ["explain", str(path), "--json"])
    records = [json.loads(line) for line in as_json.output.splitlines()]
    assert [r["scope"] for r in records] == ["trace"] * 5 + ["thread", "pair", "thread"]
    thread, pair, session = records[5:]
    assert thread["thread_id"] == "thread-hub-001" and thread["kind"] == "conversation"
    assert thread["closes"] == "end" and thread["turn_count"] == 3 and len(thread["traces"]) == 3
    assert pair["comparison_id"] == "hub-weakest-area-canary-1" and pair["closes"] == "end"
    assert session["thread_id"] == "sess-78" and session["kind"] == "session"
    assert {"rule_id", "pack", "outcome", "detail"} <= set(session["rules"][0])
    judged = [r for r in thread["rules"] if r["outcome"] == "judge"]
    assert judged and all("prompt" in r for r in judged)

    one = CliRunner().invoke(app, ["explain", str(path), "--json", "--thread-id", "sess-78"])
    assert [json.loads(line)["scope"] for line in one.output.splitlines()] == ["thread"]
    mine = CliRunner().invoke(app, ["explain", str(path), "--json", "--trace-id", b["id"]])
    assert [json.loads(line)["scope"] for line in mine.output.splitlines()] == ["trace", "pair"]
    both = CliRunner().invoke(
        app, ["explain", str(path), "--json", "--trace-id", b["id"], "--thread-id", "sess-78"]
    )
    assert [json.loads(line)["scope"] for line in both.output.splitlines()] == [
        "trace",
        "pair",
        "thread",
    ]
    none = CliRunner().invoke(app, ["explain", str(path), "--thread-id", "nope"])
    assert none.exit_code == 1 and "no thread, session or pair found with id 'nope'" in none.output


def test_a_batch_rule_is_explained_as_judged_in_a_batch() -> None:
    """The worker defers a ``judge.mode: batch`` rule's call (its decision says deferred, the
    score follows the batch): explain says so instead of "would be judged" alone."""
    ruleset = load_rules(RULES_DIR, ["fretcoach"])
    ruleset.rules = [
        rule.model_copy(update={"judge": rule.judge.model_copy(update={"mode": "batch"})})
        if rule.id == "hub_answer_correctness"
        else rule
        for rule in ruleset.rules
    ]
    _, explained = explain_trace(ruleset, orjson.dumps(hub_trace()), None, "gpt-4o-mini")
    by_rule = {e.rule_id: e for e in explained}
    batched = by_rule["hub_answer_correctness"]
    assert batched.outcome == WOULD_JUDGE
    assert batched.detail.startswith("would be judged in a batch (judge.mode: batch;")


def test_explain_names_the_shadows_a_trace_would_get() -> None:
    """A shadow whose hashed sample takes the trace is a judge call of its own, named by its
    variant and model; one whose sample leaves the trace out is not shown."""
    ruleset = load_rules(RULES_DIR, ["fretcoach"])
    shadows = [
        ShadowSpec(name="mini", model="gpt-mini", sampling_rate=1.0),
        ShadowSpec(name="rare", model="gpt-rare", sampling_rate=1e-9),
    ]
    ruleset.rules = [
        rule.model_copy(update={"shadow": shadows}) if rule.id == "hub_answer_correctness" else rule
        for rule in ruleset.rules
    ]
    _, explained = explain_trace(ruleset, orjson.dumps(hub_trace()), None, "gpt-4o-mini")
    primary, shadow = [e for e in explained if e.rule_id == "hub_answer_correctness"]
    assert (primary.outcome, primary.variant, primary.detail) == (
        WOULD_JUDGE,
        None,
        "would be judged",
    )
    assert (shadow.outcome, shadow.variant) == (WOULD_JUDGE, "mini")
    assert shadow.detail is not None
    assert shadow.detail.startswith("shadow mini (judged by gpt-mini; its score carries variant")
    assert shadow.prompt == primary.prompt  # a model-only shadow asks the rule's prompt
    assert shadow.as_dict()["variant"] == "mini" and "variant" not in primary.as_dict()


def test_rules_the_default_selection_leaves_out_are_one_line_a_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A default start leaves dozens of shipped judge rules out: explain says so in one line
    per trace (naming their packs and how to load them), and --json still lists each."""
    for name in ("SCORER_PACKS", "SCORER_RULES_DIR", "SCORER_DISABLED_RULES"):
        monkeypatch.delenv(name, raising=False)
    path = Path(__file__).parent.parent / "stream" / "samples" / "comparison_pair.jsonl"
    result = CliRunner().invoke(app, ["explain", str(path)])
    assert result.exit_code == 0, result.output
    grouped = [line for line in result.output.splitlines() if " rules of " in line]
    assert len(grouped) == 2  # the file's two traces
    assert "mlflow" in grouped[0] and "SCORER_PACKS" in grouped[0]
    assert "disabled    mlflow/safety" not in result.output
    listed = CliRunner().invoke(app, ["explain", str(path), "--json"])
    first = orjson.loads(listed.output.splitlines()[0])
    assert any(r["rule_id"] == "safety" and r["outcome"] == "disabled" for r in first["rules"])


def test_explain_prompt_shows_what_the_judge_would_receive_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``scorer explain --prompt``: the prompt as the judge would get it, personal data and
    the deployment's own words masked (issue 47, item 4)."""
    monkeypatch.setenv("SCORER_PACKS", '["fretcoach"]')
    monkeypatch.setenv("SCORER_REDACT_WORDS", '{"CUSTOMER": ["Ana Lopez"]}')
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    trace = hub_trace()
    trace["input"]["messages"][-1]["content"] = "I am Ana Lopez, ana@example.org. Help?"
    path = tmp_path / "traces.jsonl"
    path.write_bytes(orjson.dumps(trace) + b"\n")
    result = CliRunner().invoke(app, ["explain", str(path), "--prompt"])
    assert result.exit_code == 0, result.output
    assert "I am <CUSTOMER_1>, <EMAIL_1>. Help?" in result.output
    assert "ana@example.org" not in result.output and "Ana Lopez" not in result.output
