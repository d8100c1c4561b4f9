"""Judge jobs deferred to a batch, below the worker (design record 25): a ``judge.mode: batch``
rule's plan ends with a ``deferred`` decision and no score, its job kept with the prompts as
rendered; a job whose calls are all held, or that the queue refuses, is judged now; a spent
``defer`` budget defers (or, with no queue, skips saying so); a deferred job kept as JSON reads
back the same; and finished from its batch's answers, every judged kind publishes the score a
live call publishes (same id, same shape), with a decision record for the same target."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from fixtures import RULES_DIR, as_trace, live_trace, settings
from prometheus_client import CollectorRegistry
from scripted_judge import MockJudge

from stream.engine.deferred import Deferred, call_id, deferred_key, finish_deferred
from stream.engine.outcomes import RuleOutcome, Target, TraceResult
from stream.engine.plan import JudgedRule, JudgeJob, Plan
from stream.engine.scorer import Scorer
from stream.engine.spend import Budget, SpendLedger
from stream.judge.batch import ItemAnswered
from stream.judge.batch_answers import BatchAnswers
from stream.judge.client import JudgeClient
from stream.metrics import ScorerMetrics
from stream.models import ScoreEvent, ThreadDecisions, TokenUsage, TraceDecisions
from stream.ruleset.judge_specs import BatchSpec
from stream.ruleset.loader import load_rule_file, load_rules
from stream.ruleset.schema import AnyRule, ComparisonRule, RuleSet
from stream.threads.close import close_thread
from stream.threads.fold import fold_turn
from stream.threads.processor import ThreadProcessor
from stream.threads.router import ThreadRouter
from stream.threads.state import ThreadClose, ThreadLimits, new_thread

LIVE_RULE = "studio_live_coach_feedback_quality"  # a fretcoach rule, judged online
BOUNDS = BatchSpec(max_jobs=10, max_wait_s=60)
WALL = 1_800_000_000.0


class FakeDeferrer:
    """A batch queue that keeps what it is given (``kept``), says whether a job's calls are
    all held (``holds``), or refuses to keep anything (``refuse``: why)."""

    def __init__(self, holds: bool = False, refuse: str | None = None) -> None:
        self.held = holds
        self.refuse = refuse
        self.asked: list[JudgeJob] = []
        self.offered: list[Deferred] = []
        self.kept: list[Deferred] = []

    def holds(self, job: JudgeJob) -> bool:
        self.asked.append(job)
        return self.held

    def defer(self, deferred: Deferred) -> str | None:
        self.offered.append(deferred)
        if self.refuse is not None:
            return self.refuse
        self.kept.append(deferred)
        return None


def batched(rule: AnyRule) -> Any:
    """``rule`` in ``judge.mode: batch`` (submitted at 10 requests or after 60 s)."""
    judge = rule.judge.model_copy(update={"mode": "batch", "batch": BOUNDS})  # type: ignore[union-attr]
    return rule.model_copy(update={"judge": judge})


@pytest.fixture
def server() -> Iterator[MockJudge]:
    with MockJudge() as judge:
        yield judge


def client_of(server: MockJudge) -> JudgeClient:
    cfg = settings(openai_base_url=server.base_url, openai_api_key="sk-test")
    return JudgeClient(cfg.judge_config(), ScorerMetrics(CollectorRegistry()))


def scorer_of(
    ruleset: RuleSet, judge: JudgeClient | None, deferrer: FakeDeferrer | None = None
) -> Scorer:
    scorer = Scorer(
        ruleset,
        judge,
        default_model="gpt-4o-mini",
        observer=ScorerMetrics(CollectorRegistry()),
    )
    scorer.context.deferrer = deferrer
    return scorer


# -- the rules and targets of each judged kind ----------------------------------------------

JUDGED = {
    "id": "answer_quality",
    "pack": "demo",
    "version": 1,
    "scope": "trace",
    "kind": "llm_judge",
    "variables": {"question": "input.question", "answer": "output.answer"},
    "output": {"min": 0, "max": 1},
    "prompt": "Rate the answer.\nQuestion: {{question}}\nAnswer: {{answer}}",
    "judge": {"mode": "batch", "batch": {"max_jobs": 10, "max_wait_s": 60}},
}
FANNED = {
    "id": "doc_relevance",
    "pack": "demo",
    "version": 1,
    "scope": "trace",
    "kind": "llm_judge",
    "variables": {"question": "input.question", "doc": "metadata.documents"},
    "fan_out": {"variable": "doc", "max_items": 5},
    "output": {"min": 0, "max": 1},
    "prompt": "Is this document relevant?\nQuestion: {{question}}\nDocument: {{doc}}",
    "judge": {"mode": "batch", "batch": {"max_jobs": 10, "max_wait_s": 60}},
}
DOCUMENTS = ["doc one: parcels ship daily", "doc two: refunds take a week", "doc three: hours"]


def demo_rules(tmp_path: Path, *rules: dict[str, Any]) -> RuleSet:
    pack = tmp_path / "demo"
    pack.mkdir(exist_ok=True)
    for rule in rules:
        (pack / f"{rule['id']}.yaml").write_text(yaml.safe_dump(rule))
    return load_rules(tmp_path)


def parcel_trace(trace_id: str = "t-1") -> dict[str, Any]:
    return {
        "id": trace_id,
        "project_name": "shop",
        "name": "reply",
        "input": {"question": "Where is my parcel?"},
        "output": {"answer": "It ships tomorrow."},
        "metadata": {"documents": DOCUMENTS},
    }


def code_trace() -> dict[str, Any]:
    return {
        "id": "trace-critique-1",
        "project_name": "code-assistant",
        "name": "chat",
        "input": {
            "messages": [
                {"role": "user", "content": "Write a Python function that reverses a string."}
            ]
        },
        "output": {
            "messages": [{"role": "assistant", "content": "def rev(s):\n    return s[::-1]"}]
        },
    }


def critique_answer() -> dict[str, Any]:
    rule = load_rule_file(RULES_DIR / "critique" / "response_critique.yaml")
    answer: dict[str, Any] = {
        c.id: {"reason": f"{c.id} fine", "rating": 3}
        for c in rule.criteria  # type: ignore[union-attr]
    }
    answer["code_quality"] = {"reason": "single-letter names", "rating": 2}
    return {**answer, "key_strengths": ["Correct"], "key_weaknesses": ["Terse names"]}


def pair_trace(trace_id: str, variant: str) -> dict[str, Any]:
    answers = {"t-a": "def reverse(text):\n    return text[::-1]", "t-b": "Great question! r(s)"}
    return {
        "id": trace_id,
        "project_name": "code-assistant-canary" if variant == "B" else "code-assistant",
        "name": "chat",
        "input": {"messages": [{"role": "user", "content": "Reverse a string in Python."}]},
        "output": {"messages": [{"role": "assistant", "content": answers[trace_id]}]},
        "metadata": {"comparison_id": "cmp-7", "variant": variant},
    }


def pair_close() -> ThreadClose:
    """The close of pair ``cmp-7`` (t-a as A, t-b as B), as the thread agent hands it over."""
    processor = ThreadProcessor({}, gaps={"pair": 600.0}, limits=ThreadLimits(), retention_s=3600.0)
    router = ThreadRouter(load_rules(RULES_DIR, ["critique"]))
    closes: list[ThreadClose] = []
    for trace_id, variant in (("t-a", "A"), ("t-b", "B")):
        document = pair_trace(trace_id, variant)
        event = router.pair_from_trace(as_trace(document), document, "llm-traces", WALL)
        assert event is not None
        closes += processor.apply(0, event)
    (close,) = closes
    return close


def comparison_answer(rule: ComparisonRule) -> dict[str, Any]:
    def rated(values: list[int], overall: str) -> dict[str, Any]:
        ids = [c.id for c in rule.criteria]
        said: dict[str, Any] = {
            cid: {"reason": f"{cid} rated {v}", "rating": v}
            for cid, v in zip(ids, values, strict=True)
        }
        return {**said, "overall_quality": overall}

    return {
        "prompt_summary": "Reverse a string.",
        "response_a": rated([3, 3, 3, 3, 3, 3], "Excellent"),
        "response_b": rated([3, 3, 2, 3, 1, 3], "Inadequate"),
        "preference": 1,
        "justification": "A is somewhat better.",
        "key_differentiators": ["B opens with a pleasantry"],
    }


def chat_trace(n: int, user: str, assistant: str) -> dict[str, Any]:
    return {
        "id": f"support-{n}",
        "name": "support-bot-reply",
        "project_name": "acme-support",
        "thread_id": "ticket-981",
        "input": {"messages": [{"role": "user", "content": user}]},
        "output": {"messages": [{"role": "assistant", "content": assistant}]},
    }


def conversation_close() -> ThreadClose:
    """Two turns of thread ticket-981 routed and folded as the worker does, then closed."""
    router = ThreadRouter(load_rules(RULES_DIR, ["conversation"]))
    state = new_thread("ticket-981", "conversation", "acme-support")
    exchanges = [("My order never arrived.", "Sorry; its number?"), ("4411.", "Redelivering.")]
    for n, (user, assistant) in enumerate(exchanges):
        document = chat_trace(n, user, assistant)
        event = router.from_trace(as_trace(document), document, "llm-traces", 0.0)
        assert event is not None and event.turn is not None
        state.rules.extend(r for r in event.rules if r not in state.rules)
        fold_turn(state, event.turn, arrival=0.0, limits=ThreadLimits())
    pending = close_thread(state, "inactivity", closed_at=0.0)
    return ThreadClose("ticket-981", "conversation", "acme-support", pending, topic="llm-traces")


# -- the plan ends with a deferred decision ------------------------------------------------


async def score(scorer: Scorer, target: dict[str, Any] | ThreadClose) -> TraceResult:
    if isinstance(target, ThreadClose):
        return await scorer.score_thread(target)
    return await scorer.score_trace(as_trace(target), target)


async def test_a_batch_rule_is_deferred_with_its_prompt_and_no_score(
    tmp_path: Path, server: MockJudge
) -> None:
    deferrer = FakeDeferrer()
    client = client_of(server)
    result = await score(scorer_of(demo_rules(tmp_path, JUDGED), client, deferrer), parcel_trace())
    await client.close()
    assert result.scores == []
    (decision,) = result.decisions
    assert (decision.outcome, decision.score_id) == ("deferred", None)
    assert decision.detail == (
        "judge.mode: batch: judged in a batch, submitted at 10 requests or after 60 s "
        "(judge.batch); the score follows when the batch completes"
    )
    (kept,) = deferrer.kept
    (prompt,) = kept.prompts()
    assert (
        prompt[0] == "Rate the answer.\nQuestion: Where is my parcel?\nAnswer: It ships tomorrow."
    )
    assert (kept.rule_id, kept.pack, kept.version, kept.model) == (
        "answer_quality",
        "demo",
        1,
        "gpt-4o-mini",
    )
    assert kept.why == "judge.mode: batch" and kept.close is None
    assert kept.target["id"] == "t-1" and kept.state == "waiting"
    assert server.requests == []  # nothing asked online


async def test_a_job_whose_calls_are_all_held_is_judged_now(
    tmp_path: Path, server: MockJudge
) -> None:
    server.script("Rate the answer", '{"score": 0.5, "reason": "from the cache"}')
    deferrer = FakeDeferrer(holds=True)
    client = client_of(server)
    result = await score(scorer_of(demo_rules(tmp_path, JUDGED), client, deferrer), parcel_trace())
    await client.close()
    (scored,) = result.scores
    assert (scored.status, scored.value) == ("ok", 0.5)
    assert [d.outcome for d in result.decisions] == ["scored"]
    assert len(deferrer.asked) == 1 and deferrer.offered == []


async def test_a_queue_that_refuses_has_a_batch_rule_judged_online(
    tmp_path: Path, server: MockJudge
) -> None:
    server.script("Rate the answer", '{"score": 0.25, "reason": "online"}')
    deferrer = FakeDeferrer(refuse="the topic is not co-partitioned with the batch table")
    client = client_of(server)
    result = await score(scorer_of(demo_rules(tmp_path, JUDGED), client, deferrer), parcel_trace())
    await client.close()
    (scored,) = result.scores
    assert (scored.status, scored.value, scored.reason) == ("ok", 0.25, "online")
    assert [d.outcome for d in result.decisions] == ["scored"]
    assert len(deferrer.offered) == 1 and deferrer.kept == []
    assert len(server.requests) == 1


def spent_ledger() -> SpendLedger:
    """A one-token defer budget on the live coach rule, spent by one call already."""
    ledger = SpendLedger([Budget(rule=LIVE_RULE, tokens=1, mode="defer")])
    ledger.record(LIVE_RULE, "gpt-4o-mini", TokenUsage(prompt_tokens=9, completion_tokens=1))
    return ledger


async def test_a_spent_defer_budget_without_a_queue_is_skipped_saying_budget_exhausted(
    server: MockJudge,
) -> None:
    client = client_of(server)
    scorer = scorer_of(load_rules(RULES_DIR, ["fretcoach"]), client)
    scorer.ledger = spent_ledger()
    result = await score(scorer, live_trace())
    await client.close()
    skipped = next(s for s in result.scores if s.rule_id == LIVE_RULE)
    assert skipped.status == "skipped" and skipped.status_reason is not None
    assert skipped.status_reason.startswith(f"budget exhausted: rule {LIVE_RULE}")
    assert "batch judging is unavailable: this worker has no batch queue" in (skipped.status_reason)
    decision = next(d for d in result.decisions if d.rule_id == LIVE_RULE)
    assert (decision.outcome, decision.detail) == ("skipped", skipped.status_reason)
    assert not any("evaluating live guitar coach" in p for p in server.prompts())


async def test_a_spent_defer_budget_with_a_queue_defers_saying_why(server: MockJudge) -> None:
    deferrer = FakeDeferrer()
    client = client_of(server)
    scorer = scorer_of(load_rules(RULES_DIR, ["fretcoach"]), client, deferrer)
    scorer.ledger = spent_ledger()
    result = await score(scorer, live_trace())
    await client.close()
    assert not any(s.rule_id == LIVE_RULE for s in result.scores)
    decision = next(d for d in result.decisions if d.rule_id == LIVE_RULE)
    assert decision.outcome == "deferred" and decision.detail is not None
    why = f"rule {LIVE_RULE}: 1 tokens per day is spent; it resets at "
    assert decision.detail.startswith(why)
    assert ": judged in a batch: judged in a batch, submitted at 1000 requests" in decision.detail
    (kept,) = [d for d in deferrer.kept if d.rule_id == LIVE_RULE]
    assert kept.why.startswith(why) and kept.why.endswith("judged in a batch")
    assert kept.job["admission"]["budget"] == {
        "mode": "defer",
        "budget": f"rule {LIVE_RULE}: 1 tokens per day",
    }
    assert not any("evaluating live guitar coach" in p for p in server.prompts())


# -- the kept entry -------------------------------------------------------------------------


async def deferred_one(tmp_path: Path, server: MockJudge) -> Deferred:
    deferrer = FakeDeferrer()
    client = client_of(server)
    await score(scorer_of(demo_rules(tmp_path, JUDGED), client, deferrer), parcel_trace())
    await client.close()
    (kept,) = deferrer.kept
    return kept


async def test_an_entry_reads_back_as_it_was_kept(tmp_path: Path, server: MockJudge) -> None:
    kept = await deferred_one(tmp_path, server)
    kept.state, kept.batch_key, kept.batch_id, kept.partition = "submitted", "k", "batch_1", 3
    assert Deferred.decode(kept.encode()) == kept


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (b"not json", "an unreadable deferred job"),
        (b"[1, 2]", "an unreadable deferred job"),
        (b'{"format": 1, "key": "k"}', "an unreadable deferred job"),  # fields missing
        (b'{"format": 2}', "format 2, this worker reads 1"),
        (b"{}", "format None, this worker reads 1"),
    ],
)
def test_an_entry_that_is_not_one_is_a_value_error(value: bytes, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        Deferred.decode(value)


async def test_an_entry_of_another_format_is_refused(tmp_path: Path, server: MockJudge) -> None:
    kept = await deferred_one(tmp_path, server)
    data = orjson.loads(kept.encode())
    with pytest.raises(ValueError, match="format 2"):
        Deferred.decode(orjson.dumps({**data, "format": 2}))


def test_keys_and_call_ids_are_deterministic_and_distinct(tmp_path: Path) -> None:
    (rule,) = demo_rules(tmp_path, JUDGED).rules
    assert isinstance(rule, JudgedRule)

    def plan(target: str) -> Plan:
        return Plan(Target(target, "shop", target))

    key = deferred_key(plan("t-1"), rule)
    assert key == deferred_key(plan("t-1"), rule)  # a redelivered trace: the same entry
    others = [
        deferred_key(plan("t-2"), rule),
        deferred_key(plan("t-1"), rule.model_copy(update={"version": 2})),
        deferred_key(plan("t-1"), rule.model_copy(update={"id": "other_rule"})),
        deferred_key(plan("t-1"), rule.model_copy(update={"pack": "other"})),
    ]
    assert len({key, *others}) == 5
    ids = [call_id(key, i) for i in range(3)]
    assert ids == [call_id(key, i) for i in range(3)]
    assert len({*ids, *(call_id(other, 0) for other in others)}) == 7
    assert all(i.startswith("judge-") for i in ids)


# -- a deferred job finished from its batch is the score a live call publishes --------------


def completion(content: str, prompt: str, model: str) -> dict[str, Any]:
    """A chat completion body as the Batch API's output file carries it (the tokens counted
    as the scripted online judge counts them)."""
    return {
        "id": "chatcmpl-batch-1",
        "object": "chat.completion",
        "created": 1_800_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content},
            }
        ],
        "usage": {
            "prompt_tokens": len(prompt) // 4,
            "completion_tokens": len(content) // 4,
            "total_tokens": len(prompt) // 4 + len(content) // 4,
        },
    }


def answers_for(deferred: Deferred, client: JudgeClient, answer: dict[str, str]) -> BatchAnswers:
    """The batch's answers to ``deferred``: each call answered with the content ``answer``
    gives the first of its keys found in the call's prompt (as the scripted judge does)."""
    calls, items = {}, {}
    for custom_id, (prompt, system, _) in zip(deferred.calls, deferred.prompts(), strict=True):
        content = next(text for match, text in answer.items() if match in prompt)
        calls[(prompt, system)] = custom_id
        items[custom_id] = ItemAnswered(custom_id, completion(content, prompt, deferred.model))
    return BatchAnswers(client, client, calls, items)


def comparable(score: ScoreEvent) -> dict[str, Any]:
    """A score as a reader compares two of them: not when, how long or at which rate."""
    return score.model_dump(mode="json", exclude={"latency_ms", "created_at", "usage"})


def same_usage(live: TokenUsage | None, batched: TokenUsage | None) -> None:
    assert (live is None) == (batched is None)
    if live is not None and batched is not None:
        assert batched.batch is True
        assert batched.model_copy(update={"batch": live.batch}) == live


def judged_outcome(result: TraceResult, rule_id: str) -> tuple[list[ScoreEvent], Any]:
    scores = [s for s in result.scores if s.rule_id == rule_id]
    (decision,) = [d for d in result.decisions if d.rule_id == rule_id]
    return scores, decision


async def live_and_batched(
    server: MockJudge,
    ruleset: RuleSet,
    rule_id: str,
    target: dict[str, Any] | ThreadClose,
    answer: dict[str, str],
) -> tuple[TraceResult, RuleOutcome, Deferred]:
    """``target`` scored live (no queue: a batch rule is judged online) and, separately,
    deferred then finished from a batch answering the same contents."""
    for match, content in answer.items():
        server.script(match, content)
    client = client_of(server)
    try:
        live = await score(scorer_of(ruleset, client), target)
        asked = len(server.requests)
        deferrer = FakeDeferrer()
        deferring = scorer_of(ruleset, client, deferrer)
        later = await score(deferring, target)
        _, decision = judged_outcome(later, rule_id)
        assert decision.outcome == "deferred"
        assert not [s for s in later.scores if s.rule_id == rule_id]
        (deferred,) = [d for d in deferrer.kept if d.rule_id == rule_id]
        rule = next(r for r in ruleset.rules if r.id == rule_id)
        assert isinstance(rule, JudgedRule)
        kept = Deferred.decode(deferred.encode())  # as the table keeps it
        answers = answers_for(kept, client, answer)
        outcome = await finish_deferred(deferring.context, kept, rule, answers)
        assert len(server.requests) == asked  # answered by the batch alone
        assert answers.fallbacks == []
    finally:
        await client.close()
    return live, outcome, kept


def assert_same_as_live(live: TraceResult, outcome: RuleOutcome, rule_id: str) -> None:
    live_scores, live_decision = judged_outcome(live, rule_id)
    batched = [s for s in [outcome.score, *outcome.extra] if s is not None]
    assert live_scores and all(s.status == "ok" for s in live_scores)
    assert [s.score_id for s in batched] == [s.score_id for s in live_scores]
    assert [comparable(s) for s in batched] == [comparable(s) for s in live_scores]
    for was, now in zip(live_scores, batched, strict=True):
        same_usage(was.usage, now.usage)
    decision = outcome.decision
    assert (decision.outcome, decision.detail, decision.score_id, decision.target_id) == (
        live_decision.outcome,
        live_decision.detail,
        live_decision.score_id,
        live_decision.target_id,
    )


async def test_an_llm_judge_rule_finished_from_its_batch_scores_as_live(
    tmp_path: Path, server: MockJudge
) -> None:
    answer = {"Rate the answer": '{"score": 0.75, "reason": "clear"}'}
    live, outcome, deferred = await live_and_batched(
        server, demo_rules(tmp_path, JUDGED), "answer_quality", parcel_trace(), answer
    )
    assert_same_as_live(live, outcome, "answer_quality")
    assert outcome.score is not None and outcome.score.value == 0.75
    records = deferred.records(outcome)
    assert [(k, s.score_id) for k, s in records.scores] == [(b"t-1", outcome.score.score_id)]
    ((key, record),) = records.decisions
    assert key == b"t-1" and isinstance(record, TraceDecisions)
    assert (record.trace_id, record.project_name, record.decisions) == (
        "t-1",
        "shop",
        [outcome.decision],
    )


async def test_a_fan_out_rule_finished_from_its_batch_scores_as_live(
    tmp_path: Path, server: MockJudge
) -> None:
    answer = {
        "doc one": '{"score": 1, "reason": "about parcels"}',
        "doc two": '{"score": 0, "reason": "about refunds"}',
        "doc three": '{"score": 0.5, "reason": "loosely"}',
    }
    live, outcome, deferred = await live_and_batched(
        server, demo_rules(tmp_path, FANNED), "doc_relevance", parcel_trace(), answer
    )
    assert len(deferred.calls) == 3 == len(set(deferred.calls))
    assert [p[0].rsplit("Document: ", 1)[1] for p in deferred.prompts()] == DOCUMENTS
    assert_same_as_live(live, outcome, "doc_relevance")
    assert outcome.score is not None and outcome.score.value == pytest.approx(0.5)
    assert isinstance(deferred.records(outcome).decisions[0][1], TraceDecisions)


async def test_a_rubric_finished_from_its_batch_scores_as_live(server: MockJudge) -> None:
    rules = load_rules(RULES_DIR, ["critique"])
    ruleset = replace(
        rules, rules=[batched(r) if r.id == "response_critique" else r for r in rules.rules]
    )
    answer = {"": orjson.dumps(critique_answer()).decode()}
    live, outcome, deferred = await live_and_batched(
        server, ruleset, "response_critique", code_trace(), answer
    )
    assert len(outcome.extra) == 6  # the overall quality and each of the six criteria
    assert_same_as_live(live, outcome, "response_critique")
    records = deferred.records(outcome)
    assert len(records.scores) == 7
    ((key, record),) = records.decisions
    assert key == b"trace-critique-1" and isinstance(record, TraceDecisions)


async def test_a_pair_comparison_finished_from_its_batch_scores_as_live(
    server: MockJudge,
) -> None:
    rule = load_rule_file(RULES_DIR / "critique" / "response_comparison.yaml")
    assert isinstance(rule, ComparisonRule)
    ruleset = RuleSet([batched(rule)], "batched-comparison")
    close = pair_close()
    answer = {"": orjson.dumps(comparison_answer(rule)).decode()}
    live, outcome, deferred = await live_and_batched(server, ruleset, rule.id, close, answer)
    assert_same_as_live(live, outcome, rule.id)
    assert deferred.close is not None and deferred.close["kind"] == "pair"
    records = deferred.records(outcome)
    said = {key.decode(): record for key, record in records.decisions}
    assert sorted(said) == ["t-a", "t-b"]  # each trace of the pair
    for trace_id, variant in (("t-a", "A"), ("t-b", "B")):
        record = said[trace_id]
        assert isinstance(record, TraceDecisions)
        (decision,) = record.decisions
        assert (decision.target_id, decision.outcome) == (trace_id, "scored")
        assert decision.detail is not None
        assert decision.detail.startswith(f"pair 'cmp-7' as variant {variant}")
    assert said["t-b"].project_name == "code-assistant-canary"
    keyed = {key.decode() for key, _ in records.scores}
    assert keyed == {"cmp-7", "t-a", "t-b"}


async def test_a_conversation_close_finished_from_its_batch_scores_as_live(
    server: MockJudge,
) -> None:
    rules = load_rules(RULES_DIR, ["conversation"])
    ruleset = replace(rules, rules=[batched(r) for r in rules.rules])
    close = conversation_close()
    answer = {"": '{"score": 4, "reason": "follows the thread"}'}
    live, outcome, deferred = await live_and_batched(
        server, ruleset, "conversation_coherence", close, answer
    )
    assert_same_as_live(live, outcome, "conversation_coherence")
    assert outcome.score is not None and outcome.score.thread is not None
    assert outcome.score.thread == close.info
    assert outcome.score.thread.close_seq == 1
    ((key, record),) = deferred.records(outcome).decisions
    assert key == b"ticket-981" and isinstance(record, ThreadDecisions)
    assert (record.thread_id, record.kind, record.close_seq, record.project_name) == (
        "ticket-981",
        "conversation",
        close.pending.close_seq,
        "acme-support",
    )
    assert record.decisions == [outcome.decision]


async def test_a_fallback_budgets_model_survives_the_deferral(server: MockJudge) -> None:
    server.script("evaluating live guitar coach", '{"score": 3, "reason": "fine"}')
    rules = load_rules(RULES_DIR, ["fretcoach"])
    ruleset = replace(rules, rules=[batched(r) if r.id == LIVE_RULE else r for r in rules.rules])
    ledger = SpendLedger([Budget(rule=LIVE_RULE, tokens=1, fallback="gpt-4.1-nano")])
    ledger.record(LIVE_RULE, "gpt-4o-mini", TokenUsage(prompt_tokens=9, completion_tokens=1))
    deferrer = FakeDeferrer()
    client = client_of(server)
    scorer = scorer_of(ruleset, client, deferrer)
    scorer.ledger = ledger
    try:
        await score(scorer, live_trace())
        (deferred,) = [d for d in deferrer.kept if d.rule_id == LIVE_RULE]
        assert deferred.model == "gpt-4.1-nano"
        kept = Deferred.decode(deferred.encode())
        rule = next(r for r in ruleset.rules if r.id == LIVE_RULE)
        assert isinstance(rule, JudgedRule) and rule.judge.model is None
        asked = len(server.requests)
        outcome = await finish_deferred(scorer.context, kept, rule, client)
    finally:
        await client.close()
    (request,) = server.requests[asked:]
    assert request["body"]["model"] == "gpt-4.1-nano"
    assert outcome.score is not None and outcome.score.status == "ok"
    assert outcome.score.judge_model == "gpt-4.1-nano"
    assert outcome.score.details is not None
    assert outcome.score.details["budget"]["model"] == "gpt-4.1-nano"


async def test_a_spent_defer_budget_skips_a_rule_that_reads_the_trace_through_tools(
    server: MockJudge,
) -> None:
    """A batch answers each request once: the tool loop of a ``judge.tools: trace`` rule
    cannot run in it, so its spent defer budget skips it, saying budget exhausted and why."""
    ruleset = load_rules(RULES_DIR, ["mlflow"])
    ruleset.rules = [r for r in ruleset.rules if r.id == "instructions_trace"]
    ledger = SpendLedger([Budget(rule="instructions_trace", tokens=1, mode="defer")])
    ledger.record("instructions_trace", "gpt-4o-mini", TokenUsage(prompt_tokens=2))
    deferrer = FakeDeferrer()
    client = client_of(server)
    scorer = scorer_of(ruleset, client, deferrer)
    scorer.ledger = ledger
    document = {
        "id": "t-tools",
        "project_name": "agent",
        "input": {"messages": [{"role": "user", "content": "hi"}]},
        "output": {"messages": [{"role": "assistant", "content": "hello"}]},
    }
    result = await score(scorer, document)
    await client.close()
    (skipped,) = result.scores
    assert skipped.status == "skipped" and skipped.status_reason is not None
    assert skipped.status_reason.startswith("budget exhausted: rule instructions_trace")
    assert skipped.status_reason.endswith("cannot be judged in a batch")
    assert deferrer.offered == [] and server.requests == []


async def test_a_close_defers_its_job_in_the_partition_its_thread_is_in(
    server: MockJudge, tmp_path: Path
) -> None:
    """A close is scored by a task the thread agent's event may not outlive (it waits its
    turn behind other closes): its job carries the partition of its thread's state, not
    whatever record is current when the task runs."""
    ruleset = load_rules(RULES_DIR, ["conversation"])
    ruleset.rules = [batched(r) for r in ruleset.rules]
    deferrer = FakeDeferrer()
    client = client_of(server)
    result = await scorer_of(ruleset, client, deferrer).score_thread(conversation_close(), 3)
    await client.close()
    assert {d.outcome for d in result.decisions} == {"deferred"}
    assert deferrer.kept and {d.partition for d in deferrer.kept} == {3}
    assert server.requests == []
    # a trace's job leaves it to the record being scored (-1: the deferrer's current event)
    trace_deferrer = FakeDeferrer()
    client = client_of(server)
    await score(scorer_of(demo_rules(tmp_path, JUDGED), client, trace_deferrer), parcel_trace())
    await client.close()
    assert [d.partition for d in trace_deferrer.kept] == [-1]


async def test_a_deferred_trace_from_spans_keeps_the_span_its_scores_evaluate(
    tmp_path: Path, server: MockJudge
) -> None:
    deferrer = FakeDeferrer()
    client = client_of(server)
    scorer = scorer_of(demo_rules(tmp_path, JUDGED), client, deferrer)
    await score(scorer, {**parcel_trace(), "root_span_id": "eee19b7ec3c1b174"})
    await score(scorer, parcel_trace("t-2"))
    await client.close()
    spanned, plain = (Deferred.decode(kept.encode()) for kept in deferrer.kept)
    assert spanned.plan().target.span_id == "eee19b7ec3c1b174"  # its scores' otel_span_id
    assert "span_id" not in plain.target and plain.plan().target.span_id is None


async def test_a_masked_fan_out_rule_is_kept_for_its_batch_and_scores_as_live(
    tmp_path: Path, server: MockJudge
) -> None:
    """A fan-out rule whose prompts had values masked (issue 47) is kept for its batch (its
    items' counts stored as JSON) and its score says what was masked, as the live one does."""
    answer = {"doc one": '{"score": 1, "reason": "r"}', "doc two": '{"score": 0, "reason": "r"}'}
    answer["doc three"] = '{"score": 0.5, "reason": "r"}'
    trace = parcel_trace()
    trace["input"]["question"] = "Where is my parcel? Write to ana@example.org"
    live, outcome, deferred = await live_and_batched(
        server, demo_rules(tmp_path, FANNED), "doc_relevance", trace, answer
    )
    assert all("<EMAIL_1>" in p[0] and "ana@" not in p[0] for p in deferred.prompts())
    assert_same_as_live(live, outcome, "doc_relevance")
    assert outcome.score is not None and outcome.score.details is not None
    assert outcome.score.details["redacted"] == {"EMAIL": 3}  # once in each item's prompt
