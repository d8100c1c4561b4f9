"""The bundled example of a rule with a canary (``examples/rules/helpdesk/``): its items load,
and the scripted judge they were recorded from (the command line's judge, answers varied by
the prompt) answers them as recorded: a round finds nothing changed."""

from __future__ import annotations

from datetime import UTC, datetime

from fixtures import ROOT
from scripted_judge import MockJudge

from stream.canary import judge_items, summarise
from stream.judge.decision_client import judge_client
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import LLMJudgeRule
from stream.settings import Settings

EXAMPLE = ROOT / "examples" / "rules"


async def test_the_examples_items_are_what_the_scripted_judge_answers() -> None:
    (rule,) = load_rules(EXAMPLE, ["helpdesk"]).rules
    assert isinstance(rule, LLMJudgeRule) and rule.canary is not None
    spec = rule.canary
    assert (spec.every, len(spec.reference)) == (3600.0, 6)
    assert len({i.recorded.value for i in spec.reference}) > 1  # the verdicts differ
    with MockJudge(vary_answers=True) as judge:
        config = Settings(openai_base_url=judge.base_url, judge_model="scripted-judge")
        client = judge_client(config.judge_config())
        try:
            again = await judge_items(
                rule, spec.reference, client, default_model="scripted-judge", max_prompt_tokens=8000
            )
        finally:
            await client.close()
    found = summarise(
        rule.id,
        rule.pack,
        "scripted-judge",
        again,
        higher_is_better=True,
        tolerance=spec.tolerance,
        every_s=spec.every,
        at=datetime.now(UTC),
    )
    assert (found.items, found.changed, found.mean_shift) == (6, 0, 0.0)
