"""Factories shared by the tests: sample traces, settings, rule sets, a scorer."""

from __future__ import annotations

import copy
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from stream.engine.scorer import Scorer
from stream.judge.client import JudgeClient
from stream.metrics import ScorerMetrics
from stream.models import Scale, ScoreEvent, Trace, score_id
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import ComparisonRule, RuleSet
from stream.settings import Settings
from stream.threads.processor import ThreadProcessor
from stream.threads.router import ThreadRouter
from stream.threads.state import ThreadClose, ThreadLimits

ROOT = Path(__file__).resolve().parent.parent
RULES_DIR = ROOT / "rules"
SAMPLES = ROOT / "stream" / "samples" / "fretcoach_traces.jsonl"


def sample_traces() -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in SAMPLES.read_bytes().splitlines() if line.strip()]


def sample(name: str, index: int = 0) -> dict[str, Any]:
    """A deep copy of the ``index``-th bundled sample trace with this trace name."""
    found = [t for t in sample_traces() if t["name"] == name]
    return copy.deepcopy(found[index])


def hub_trace(index: int = 1) -> dict[str, Any]:
    return sample("hub-coach-chat", index)


def studio_trace(index: int = 0) -> dict[str, Any]:
    return sample("studio-ai-recommendation", index)


def live_trace(index: int = 0) -> dict[str, Any]:
    return sample("studio-live-coach", index)


def fretcoach_rules() -> RuleSet:
    return load_rules(RULES_DIR, ["fretcoach"])


def critique_rules(order: str = "fixed", audit: float = 0.0) -> RuleSet:
    """The critique pack with its comparison's ``comparison.order`` and ``audit`` set
    (``fixed``: variant A read as Response A, the seed's own order, as tests that script a
    judge's answer by slot expect it; the shipped default, ``alternate``, swaps half of the
    pairs; ``audit`` 0: no pair judged in the other order too, one call a pair)."""
    folder = Path(tempfile.mkdtemp(prefix=f"critique-{order}-")) / "critique"
    shutil.copytree(RULES_DIR / "critique", folder)
    rule_file = folder / "response_comparison.yaml"
    setting = f"comparison: {{order: {order}, audit: {audit}}}\n"
    rule_file.write_text(rule_file.read_text() + setting)
    return load_rules(folder.parent, ["critique"])


def comparison_rule(rules: RuleSet) -> ComparisonRule:
    """The one comparison rule of ``rules``."""
    (rule,) = [r for r in rules.rules if isinstance(r, ComparisonRule)]
    return rule


def comparison_answer(
    rule: ComparisonRule, preference: int, rated_a: int = 3, rated_b: int = 3
) -> str:
    """Seed 001's answer to ``rule``, about slots: ``preference`` favours Response A when
    positive; each response rated ``rated_a`` / ``rated_b`` (3 Excellent, 2 Good, 1 Poor) on
    every criterion."""

    def rated(rating: int) -> dict[str, Any]:
        overall = {3: "Excellent", 2: "Good", 1: "Poor"}[rating]
        criteria = {c.id: {"reason": "as scripted", "rating": rating} for c in rule.criteria}
        return {**criteria, "overall_quality": overall}

    return orjson.dumps(
        {
            "prompt_summary": "reverse a string",
            "response_a": rated(rated_a),
            "response_b": rated(rated_b),
            "preference": preference,
            "justification": "as scripted",
            "key_differentiators": ["none"],
        }
    ).decode()


PAIR_WALL = 1_800_000_000.0  # the Kafka time a pair's traces arrive at


def pair_closes(
    rules: RuleSet,
    keys: list[str],
    *,
    project: str = "code-assistant",
    question: str = "Reverse a string in Python.",
    answer: Callable[[str, str], str] = lambda key, variant: f"answer of {variant}",
) -> list[ThreadClose]:
    """Each key's pair close, as the thread agent hands it to the scorer: the comparison's
    two traces (its variants, response A's in ``project``; ``answer(key, variant)`` each
    answer) through the router and one thread processor."""
    (rule,) = [r for r in rules.rules if isinstance(r, ComparisonRule)]
    processor = ThreadProcessor(
        {}, gaps={"conversation": 900.0, "session": 900.0, "pair": 600.0},
        limits=ThreadLimits(), retention_s=3600.0,
    )  # fmt: skip
    router = ThreadRouter(rules)
    closes: list[ThreadClose] = []
    for key in keys:
        for variant in rule.pair.variants:
            document = {
                "id": f"{key}-{variant}",
                "project_name": project,
                "name": "chat",
                "input": {"messages": [{"role": "user", "content": question}]},
                "output": {"messages": [{"role": "assistant", "content": answer(key, variant)}]},
                "metadata": {"comparison_id": key, "variant": variant},
            }
            event = router.pair_from_trace(as_trace(document), document, "llm-traces", PAIR_WALL)
            assert event is not None
            closes += processor.apply(0, event)
    assert len(closes) == len(keys)
    return closes


def settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "judge_backoff_base_s": 0.01,
        "judge_backoff_max_s": 0.2,
        "judge_timeout_s": 5.0,
        "judge_max_attempts": 4,
        "judge_outage_max_s": 1.0,  # a judge down for a second fails the calls waiting on it
    }
    base.update(overrides)
    return Settings(**base)


def scorer(
    judge_url: str | None = None, ruleset: RuleSet | None = None, **overrides: Any
) -> Scorer:
    cfg = settings(
        openai_base_url=judge_url,
        openai_api_key="sk-test-secret" if judge_url else None,
        **overrides,
    )
    metrics = ScorerMetrics.default()
    judge = JudgeClient(cfg.judge_config(), metrics) if judge_url else None
    return Scorer(
        ruleset or fretcoach_rules(),
        judge,
        default_model=cfg.judge_model,
        observer=metrics,
        max_prompt_tokens=cfg.judge_max_prompt_tokens,
    )


def as_trace(document: dict[str, Any]) -> Trace:
    return Trace.model_validate(document)


def uuid7() -> str:
    """A version 7 UUID, as Opik gives its traces (random, with 7 in the version nibble)."""
    raw = bytearray(uuid.uuid4().bytes)
    raw[6] = (raw[6] & 0x0F) | 0x70
    return str(uuid.UUID(bytes=bytes(raw)))


def score_event(**overrides: Any) -> ScoreEvent:
    """An ok trace score of a 1..5 judge rule (raw 4, value 0.75); ``overrides`` any field.
    The score id is derived from rule, scope and target as the engine derives it."""
    fields: dict[str, Any] = {
        "rule_id": "answer_quality",
        "pack": "demo",
        "rule_version": 1,
        "scope": "trace",
        "target_id": uuid7(),
        "project_name": "shop",
        "value": 0.75,
        "raw_value": 4.0,
        "scale": Scale(min=1, max=5),
        "reason": "clear and correct",
        "higher_is_better": True,
        "status": "ok",
        "judge_model": "gpt-4o-mini",
        **overrides,
    }
    fields.setdefault(
        "score_id",
        score_id(fields["rule_id"], fields["rule_version"], fields["scope"], fields["target_id"]),
    )
    return ScoreEvent(**fields)
