"""A user's own conversations are scored out of the box: a worker with every pack loaded
(SCORER_PACKS all; unset, the conversation pack is loaded whole too: design record 39), the
embedded broker and the scripted judge."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from fixtures import hub_trace
from scripted_judge import MockJudge, script_frustration

from stream.kafka.broker import EmbeddedBroker

from .harness import Names, Worker, produce, read_scores, trace_bytes
from .test_threads import COHERENCE, by_target
from .test_worker import SECRET

GENERIC = {
    # rule: (a phrase only its prompt has, the scripted answer, the score's value)
    "conversation_coherence": ("read in order, hang together", 4, 0.75),
    "conversation_user_frustration": ("frustrated the user became", 2, 0.25),
    "conversation_goal_completion": ("whether the user got what they came for", 5, 1.0),
}
T0 = datetime.now(UTC) - timedelta(minutes=1)


def own_trace(n: int, user: str, assistant: str) -> dict:
    """A trace of the user's own application: a name and project no pack has heard of."""
    return {
        "id": f"acme-trace-{n}",
        "name": "kb-assistant-turn",
        "project_name": "acme-help",
        "thread_id": "acme-conv-1",
        "start_time": (T0 + timedelta(seconds=n)).isoformat(),
        "input": {"messages": [{"role": "user", "content": user}]},
        "output": {"messages": [{"role": "assistant", "content": assistant}]},
        "metadata": {"model": "gpt-4o-mini"},
    }


async def test_a_users_own_two_traces_sharing_a_thread_id_get_the_three_thread_scores(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    for phrase, score, _ in GENERIC.values():
        judge.script(phrase, f'{{"score": {score}, "reason": "scripted for {phrase}"}}')
    judge.script(COHERENCE, '{"score": 0.9, "reason": "coherent"}')
    script_frustration(judge, 0.1, "calm")
    worker = Worker(
        broker.bootstrap,
        names,
        tmp_path,
        OPENAI_BASE_URL=judge.base_url,
        OPENAI_API_KEY=SECRET,
        SCORER_THREAD_INACTIVITY_GAP_S="4",
        SCORER_THREAD_TICK_S="0.3",
    )
    # every pack (FretCoach's judge rules too: its conversation stays its own, asserted below)
    worker.env["SCORER_PACKS"] = "all"
    workers.append(worker.start())
    hub = hub_trace(1)
    hub.update(id="hub-trace-1", thread_id="hub-conv-1", start_time=T0.isoformat())
    await produce(
        broker.bootstrap,
        names.traces,
        [
            trace_bytes(own_trace(0, "How do I reset my password?", "Use 'Forgot password'.")),
            trace_bytes(own_trace(1, "The link never arrives.", "Check spam; I resent it.")),
            trace_bytes(hub),
        ],
    )
    targets = {"acme-conv-1", "hub-conv-1"}
    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: (
            {t for t, found in by_target(rs).items() if len(found) >= 2} >= targets
            and len(by_target(rs).get("acme-conv-1", [])) >= 3
        ),
        timeout=120,
    )
    grouped = by_target(scores)
    own = {s["rule_id"]: s for s in grouped["acme-conv-1"]}
    assert set(own) == set(GENERIC), worker.log()[-3000:]
    for rule_id, (_, raw, value) in GENERIC.items():
        score = own[rule_id]
        assert (score["status"], score["pack"], score["scope"]) == ("ok", "conversation", "thread")
        assert (score["raw_value"], score["value"]) == (raw, value)
        assert score["project_name"] == "acme-help"
        assert score["higher_is_better"] is (rule_id != "conversation_user_frustration")
        assert (score["thread"]["turn_count"], score["thread"]["close_reason"]) == (
            2,
            "inactivity",
        )
    # the judge saw the whole conversation, in order, as a transcript
    (prompt,) = [p for p in judge.prompts() if "read in order, hang together" in p]
    assert (
        "User: How do I reset my password?\n\nAssistant: Use 'Forgot password'.\n\n"
        "User: The link never arrives.\n\nAssistant: Check spam; I resent it."
    ) in prompt
    # FretCoach's conversation beside it is FretCoach's alone
    assert sorted(s["rule_id"] for s in grouped["hub-conv-1"]) == [
        "hub_conversational_coherence",
        "hub_user_frustration_score",
    ]
