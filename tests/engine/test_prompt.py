"""A rule's prompt for one document: variables resolved, formatted and substituted."""

from __future__ import annotations

from typing import Any

import pytest
from fixtures import RULES_DIR, hub_trace, scorer

from stream.engine.prompt import (
    PromptTooLarge,
    estimated_tokens,
    fit_prompt,
    render_prompt,
    render_system,
    resolve_variables,
)
from stream.errors import EmptyVariable, MissingVariable
from stream.ruleset.loader import load_rule_file
from stream.ruleset.schema import RULE_ADAPTER, LLMJudgeRule, PromptedRule


def rule(**changes: Any) -> LLMJudgeRule:
    data: dict[str, Any] = {
        "id": "r",
        "pack": "demo",
        "version": 1,
        "scope": "trace",
        "kind": "llm_judge",
        "output": {"min": 0, "max": 1},
        "variables": {
            "question": "input.question",
            "facts": {"path": "metadata.facts", "format": "bullets", "allow_empty": False},
        },
        "options": {"style-guide": "Be terse."},
        "prompt": "Q: {{question}}\nFacts:{{facts}}\n{{ style-guide }}",
        "suffixes": [
            {"when": "metadata.strict", "text": "\nStrict about: {{question}}"},
            {"when": "metadata.lenient", "text": "\nBe kind."},
        ],
    }
    data.update(changes)
    parsed = RULE_ADAPTER.validate_python(data)
    assert isinstance(parsed, LLMJudgeRule)
    return parsed


DOC = {"input": {"question": "Which fret?"}, "metadata": {"facts": ["5th", "7th"], "strict": 1}}


def test_resolve_variables_maps_every_variable_to_its_value() -> None:
    assert resolve_variables(rule(), DOC) == {"question": "Which fret?", "facts": ["5th", "7th"]}


def test_a_missing_path_raises_missing_variable_naming_where() -> None:
    with pytest.raises(MissingVariable) as caught:
        resolve_variables(rule(), {"metadata": {"facts": ["x"]}})
    assert type(caught.value) is MissingVariable
    assert (caught.value.variable, caught.value.missing_at) == ("question", "input")


@pytest.mark.parametrize("empty", ["", [], {}])
def test_empty_values_raise_only_when_allow_empty_is_false(empty: Any) -> None:
    document = {"input": {"question": empty}, "metadata": {"facts": ["x"]}}
    assert resolve_variables(rule(), document)["question"] == empty  # allow_empty by default
    with pytest.raises(EmptyVariable, match="'facts'"):
        resolve_variables(rule(), {"input": {"question": "q"}, "metadata": {"facts": empty}})


def test_an_empty_reason_is_said_before_the_path() -> None:
    facts = {"path": "metadata.facts", "allow_empty": False, "empty_reason": "no facts were given"}
    r = rule(variables={"question": "input.question", "facts": facts})
    with pytest.raises(EmptyVariable) as caught:
        resolve_variables(r, {"input": {"question": "q"}, "metadata": {"facts": []}})
    assert str(caught.value) == (
        "no facts were given (variable 'facts': path 'metadata.facts' is empty)"
    )
    with pytest.raises(MissingVariable) as absent:  # absent is not empty: the path is the reason
        resolve_variables(r, {"input": {"question": "q"}, "metadata": {}})
    assert type(absent.value) is MissingVariable and "no facts" not in str(absent.value)


def test_an_empty_reason_needs_allow_empty_false() -> None:
    facts = {"path": "metadata.facts", "empty_reason": "no facts were given"}
    with pytest.raises(ValueError, match=r"empty_reason .* set allow_empty: false"):
        rule(variables={"question": "input.question", "facts": facts})


def test_render_prompt_formats_values_fills_options_and_adds_suffixes_that_hold() -> None:
    r = rule()
    prompt = render_prompt(r, resolve_variables(r, DOC), DOC)
    assert prompt == "Q: Which fret?\nFacts:\n- 5th\n- 7th\nBe terse.\nStrict about: Which fret?"
    without_document = render_prompt(r, resolve_variables(r, DOC))  # no suffix condition holds
    assert without_document == "Q: Which fret?\nFacts:\n- 5th\n- 7th\nBe terse."


def test_render_system_is_none_without_a_system_prompt() -> None:
    values = resolve_variables(rule(), DOC)
    assert render_system(rule(), values) is None
    system = rule(system_prompt="You judge {{question}}. {{style-guide}}")
    assert render_system(system, values) == "You judge Which fret?. Be terse."


def test_shipped_correctness_rule_adds_its_suffix_only_for_expected_facts() -> None:
    correctness = load_rule_file(RULES_DIR / "mlflow" / "correctness.yaml")
    assert isinstance(correctness, PromptedRule)
    facts = {"input": "q", "output": "a", "metadata": {"expectations": {"expected_facts": ["f"]}}}
    response = {
        "input": "q",
        "output": "a",
        "metadata": {"expectations": {"expected_response": "r"}},
    }
    with_facts = render_prompt(correctness, resolve_variables(correctness, facts), facts)
    with_response = render_prompt(correctness, resolve_variables(correctness, response), response)
    assert "<claim>\n- f</claim>" in with_facts and "<claim>r</claim>" in with_response
    assert with_facts.endswith('you must say "The response is not correct".')
    assert "must say" not in with_response


def test_shipped_guidelines_rule_rejects_empty_guidelines() -> None:
    guidelines = load_rule_file(RULES_DIR / "mlflow" / "guidelines.yaml")
    document = {"input": "q", "output": "a", "metadata": {"expectations": {"guidelines": []}}}
    with pytest.raises(EmptyVariable, match="guidelines"):
        resolve_variables(guidelines, document)


def test_a_prompt_over_its_cap_has_its_largest_variable_cut_in_the_middle() -> None:
    rule = load_rule_file(RULES_DIR / "mlflow" / "correctness.yaml")
    assert isinstance(rule, PromptedRule)
    huge = "HEAD " + "x" * 400_000 + " TAIL"
    values = {name: "short" for name in rule.variable_specs}
    largest = next(iter(values))
    values[largest] = huge
    fitted = fit_prompt(rule, values, {}, cap=2_000)
    assert estimated_tokens(fitted.prompt, fitted.system) <= 2_000
    assert "HEAD" in fitted.prompt and "TAIL" in fitted.prompt  # both ends are kept
    assert "characters cut by the scorer: the prompt was over 2000 tokens" in fitted.prompt
    assert list(fitted.cut) == [largest] and fitted.cut[largest] > 390_000
    assert fitted.quoted[0] != huge and fitted.quoted[0].startswith("HEAD")


def test_a_prompt_within_its_cap_is_untouched() -> None:
    rule = load_rule_file(RULES_DIR / "mlflow" / "correctness.yaml")
    assert isinstance(rule, PromptedRule)
    values = {name: "a short value" for name in rule.variable_specs}
    fitted = fit_prompt(rule, values, {}, cap=32_000)
    assert fitted.cut == {} and fitted.prompt == render_prompt(rule, values, {})


def test_a_rule_that_says_skip_is_not_cut() -> None:
    rule = load_rule_file(RULES_DIR / "mlflow" / "correctness.yaml")
    assert isinstance(rule, PromptedRule)
    skipping = rule.model_copy(update={"judge": rule.judge.model_copy(update={"oversize": "skip"})})
    values = {name: "y" * 50_000 for name in rule.variable_specs}
    with pytest.raises(PromptTooLarge, match="over the cap of 1000"):
        fit_prompt(skipping, values, {}, cap=1_000)


async def test_an_oversize_trace_is_judged_on_a_cut_prompt_and_its_score_says_so() -> None:
    from scripted_judge import MockJudge

    from stream.models import Trace

    with MockJudge() as server:
        server.script("evaluating an assistant", '{"score": 0.5, "reason": "ok"}')
        s = scorer(server.base_url, judge_max_prompt_tokens=3_000)
        document = hub_trace()
        document["output"]["messages"][-1]["content"] = "word " * 1_000_000  # 5 MB
        result = await s.score_trace(Trace.model_validate(document), document)
        score = next(x for x in result.scores if x.rule_id == "hub_answer_correctness")
        assert score.status == "ok" and score.details is not None
        cut = score.details["prompt_cut"]
        assert set(cut["variables"]) == {"output"} and cut["characters"] > 4_900_000
        assert (cut["cap_tokens"], cut["cap_setting"]) == (3_000, "SCORER_JUDGE_MAX_PROMPT_TOKENS")
        assert cut["prompt_tokens"] > 1_250_000 and cut["tokens"] == -(-cut["characters"] // 4)
        assert max(len(str(r["body"])) for r in server.requests) < 3_000 * 4 * 2
        assert s.judge is not None
        await s.judge.close()
