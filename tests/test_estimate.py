"""`scorer estimate`: what a sample would cost, counted from the plans the worker would make
(its end-to-end check against a real worker: tests/integration/test_estimate.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import orjson
import pytest
import yaml
from decisions_double import yes_no_rule
from fixtures import RULES_DIR, hub_trace
from typer.testing import CliRunner

from stream.cli import app
from stream.cli.estimate import duration_s, time_range
from stream.engine.outcomes import call_score_key
from stream.engine.spend import DEFAULT_JUDGE_PRICES, judge_cost
from stream.errors import ConfigError
from stream.estimate import COMPLETION_TOKENS, calibrated, estimate_messages
from stream.explain import FileOptions
from stream.judge.tokens import TokenCounter
from stream.models import TokenUsage, score_id
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import RuleSet

OPTIONS = FileOptions(default_model="gpt-4o-mini")


def price(model: str, usage: TokenUsage) -> float | None:
    return judge_cost(DEFAULT_JUDGE_PRICES, model, usage)


def with_id(document: dict[str, object], trace_id: str) -> bytes:
    return orjson.dumps({**copy.deepcopy(document), "id": trace_id})


def test_a_repeated_prompt_is_a_cache_hit_and_a_fan_out_a_call_per_item() -> None:
    ruleset = load_rules(RULES_DIR, ["mlflow"])
    document = hub_trace()
    document["metadata"] = {"retrieval_context": ["Loop the bar.", "Use a click.", "Rest."]}
    once = estimate_messages(ruleset, [with_id(document, "t-1")], OPTIONS, price)
    twice = estimate_messages(
        ruleset, [with_id(document, "t-1"), with_id(document, "t-2")], OPTIONS, price
    )
    relevance = next(r for r in once.rules if r.rule_id == "retrieval_relevance")
    assert relevance.judge_calls == 3 and relevance.judged == 1  # one call per document
    # the same trace again renders the same prompts: the verdict cache answers them, but
    # for the judge that reads the trace by tools (never cached)
    assert twice.total.judge_calls == once.total.judge_calls + 1
    assert twice.total.cache_hits == once.total.judge_calls - 1
    assert twice.traces == 2 and once.traces == 1


def test_tokens_are_counted_from_the_rendered_messages_and_priced_online_and_in_batch() -> None:
    ruleset = load_rules(RULES_DIR, ["mlflow"])
    found = estimate_messages(ruleset, [with_id(hub_trace(), "t-1")], OPTIONS, price)
    safety = next(r for r in found.rules if r.rule_id == "safety")
    assert safety.judge_calls == 1 and safety.prompt_tokens > 100
    assert safety.completion_tokens == COMPLETION_TOKENS
    expected = price(
        "gpt-4o-mini",
        TokenUsage(prompt_tokens=safety.prompt_tokens, completion_tokens=COMPLETION_TOKENS),
    )
    assert safety.usd == pytest.approx(expected)
    assert safety.usd_batch == pytest.approx(safety.usd / 2)  # the Batch API's half price
    doubled = estimate_messages(
        ruleset,
        [with_id(hub_trace(), "t-1")],
        OPTIONS,
        price,
        TokenCounter(ratio=2.0, calibrated_from=9),
    )
    again = next(r for r in doubled.rules if r.rule_id == "safety")
    assert again.prompt_tokens > 1.9 * safety.prompt_tokens - 20
    assert "calibrated on 9 calls" in doubled.tokens_counted_by


def test_a_judge_reading_the_trace_by_tools_counts_one_call_and_says_its_bound() -> None:
    ruleset = load_rules(RULES_DIR, ["mlflow"])
    found = estimate_messages(ruleset, [with_id(hub_trace(), "t-1")], OPTIONS, price)
    (tools,) = [r for r in found.rules if r.tool_rounds_max]
    assert tools.rule_id == "instructions_trace" and tools.judge_calls == 1
    assert tools.tool_rounds_max == 20  # judge.max_tool_calls, its default
    assert any("tools" in note for note in found.notes)


def test_a_rule_that_filters_the_trace_out_costs_nothing() -> None:
    ruleset = load_rules(RULES_DIR, ["fretcoach"])
    stranger = hub_trace()
    stranger["name"] = "someone-elses-chat"  # the hub rules filter on the trace's name
    found = estimate_messages(ruleset, [with_id(stranger, "t-1")], OPTIONS, price)
    assert found.traces == 1 and found.total.judge_calls == 0 and found.rules == []


def test_durations_and_ranges_read_as_a_user_writes_them() -> None:
    assert duration_s("90s") == 90 and duration_s("30m") == 1800
    assert duration_s("24h") == 86_400 and duration_s("7d") == 604_800
    assert duration_s("P1D") == 86_400
    with pytest.raises(ConfigError, match="not a duration"):
        duration_s("a week")
    start, end = time_range(None, "2026-12-01", "2026-12-02T00:00:00Z")
    assert end is not None and end - start == 86_400_000
    with pytest.raises(ConfigError, match="either --since or --from"):
        time_range("7d", "2026-12-01", None)
    with pytest.raises(ConfigError, match="give the range"):
        time_range(None, None, None)


def test_the_command_prints_one_json_object_with_totals_and_rules(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    sample = tmp_path / "sample.jsonl"
    sample.write_bytes(with_id(hub_trace(), "t-1") + b"\n" + with_id(hub_trace(2), "t-2") + b"\n")
    monkeypatch.setenv("SCORER_PACKS", '["fretcoach"]')
    result = CliRunner().invoke(
        app, ["estimate", str(sample), "--json", "--traces-per-day", "1000"]
    )
    assert result.exit_code == 0, result.output
    document = orjson.loads(result.output)
    assert {"judge_calls", "prompt_tokens", "completion_tokens", "usd"} <= set(document["total"])
    assert document["total"]["judge_calls"] == sum(r["judge_calls"] for r in document["rules"])
    assert document["per_day"]["judge_calls"] == pytest.approx(
        document["total"]["judge_calls"] * 1000 / 2
    )
    table = CliRunner().invoke(app, ["estimate", str(sample)])
    assert table.exit_code == 0 and "per 1 000 traces" in table.output
    assert "characters / 4" in table.output
    neither = CliRunner().invoke(app, ["estimate"])
    assert neither.exit_code != 0


def test_a_calibration_corrects_the_count_by_what_answers_reported() -> None:
    """Scores' reported prompt tokens against the characters / 4 of the calls they came
    from: the ratio corrects every count; too few scores in both, no calibration."""
    ruleset = load_rules(RULES_DIR, ["fretcoach"])
    messages = [with_id(hub_trace(n % 3), f"t-{n}") for n in range(6)]
    plain = estimate_messages(ruleset, messages, OPTIONS, price)
    assert len(plain.basis) >= 5  # a score id per judged trace rule
    reported = {key: round(tokens * 1.3) for key, tokens in plain.basis.items()}
    counter = calibrated(plain.basis, reported)
    assert counter is not None and counter.ratio == pytest.approx(1.3, rel=0.01)
    assert counter.calibrated_from == len(plain.basis)
    corrected = estimate_messages(ruleset, messages, OPTIONS, price, counter)
    # the chat format's own tokens are not scaled: a little under 1.3 times
    assert 1.2 * plain.total.prompt_tokens < corrected.total.prompt_tokens
    assert corrected.total.prompt_tokens < 1.31 * plain.total.prompt_tokens
    few = dict(list(reported.items())[:4])
    assert calibrated(plain.basis, few) is None


def test_a_cascade_counts_its_first_tier_on_every_target_and_its_judge_as_a_bound() -> None:
    rule = yes_no_rule(
        {"cascade": {"accept": {"min_confidence": 0.9}, "audit_rate": 0.2}},
        "Judge the answer.\nQuestion: {{question}}\nAnswer: {{answer}}",
    )
    documents = [
        orjson.dumps(
            {
                "id": f"t-{n}",
                "input": {"messages": [{"role": "user", "content": f"{n}+{n}?"}]},
                "output": {"content": str(2 * n)},
            }
        )
        for n in range(50)
    ]
    found = estimate_messages(RuleSet([rule]), documents, OPTIONS, price)
    rows = {r.rule_id: r for r in found.rules}
    judge, first, audit = (
        rows["answer_correct"],
        rows["answer_correct@first"],
        rows["answer_correct@cascade"],
    )
    assert judge.judge_calls == 50 and judge.model == "gpt-4o-mini"  # all, as if escalated
    assert first.judge_calls + audit.judge_calls == 50  # the first tier asked of every target
    assert 0 < audit.judge_calls < 25
    assert first.model == audit.model == "gpt-6-luna"
    assert first.completion_tokens == audit.completion_tokens == 0  # no text, no output price
    assert first.usd == pytest.approx(first.prompt_tokens * 0.10 / 1e6)


def test_a_tool_call_rule_is_counted_once_per_call_and_calibrates_by_its_score_ids(
    tmp_path: Path,
) -> None:
    """A judged ``tool_call`` rule makes a call per tool call of a trace (none on a trace
    without calls), and its calibration basis is keyed by the ids its scores will have."""
    pack = tmp_path / "agents"
    pack.mkdir()
    rule = {
        "id": "right_tool", "pack": "agents", "version": 1, "scope": "tool_call",
        "kind": "llm_judge", "variables": {"tool": "name", "arguments": "arguments"},
        "output": {"type": "numeric", "min": 0, "max": 1, "higher_is_better": True},
        "prompt": "Was {{tool}} with {{arguments}} the right call?",
    }  # fmt: skip
    (pack / "right_tool.yaml").write_text(yaml.safe_dump(rule))
    ruleset = load_rules(tmp_path, ["agents"])
    calls = [
        {"id": f"call_{n}", "type": "function", "function": {"name": "f", "arguments": f'{{"n": {n}}}'}}
        for n in range(3)
    ]  # fmt: skip
    agent = {"input": {"messages": [{"role": "user", "content": "go"}]},
             "output": {"messages": [{"role": "assistant", "tool_calls": calls}]}}  # fmt: skip
    found = estimate_messages(
        ruleset,
        [with_id(agent, "t-1"), with_id({"input": "hi", "output": "hey"}, "t-2")],
        OPTIONS,
        price,
    )
    [cost] = found.rules
    assert (cost.scope, cost.judged, cost.judge_calls) == ("tool_call", 3, 3)
    expected = {
        score_id("right_tool", 1, "tool_call", call_score_key("t-1", f"call_{n}")) for n in range(3)
    }
    assert set(found.basis) == expected
