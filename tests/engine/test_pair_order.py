"""Which response of a pair the judge reads first (issue 51, ``comparison.order``): the shipped
comparison rule (seed 001's prompt, unchanged) with each order, judged by the scripted judge
over real pair closes. A content judge (it prefers variant B's answer wherever it reads it)
and a position judge (it prefers whatever it reads first) tell the orders apart."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fixtures import (
    comparison_answer,
    comparison_rule,
    critique_rules,
    pair_closes,
    scorer,
)
from scripted_judge import MockJudge

from stream.models import ScoreEvent
from stream.ruleset.schema import ComparisonRule, RuleSet

B_FIRST = "## Response A\n\nanswer of B"  # the prompt with variant B read as Response A
A_FIRST = "## Response A\n\nanswer of A"


def answer(rules: RuleSet, preference: int, rated_a: int = 3, rated_b: int = 3) -> str:
    """An answer about slots: ``preference`` favours Response A when positive."""
    return comparison_answer(comparison_rule(rules), preference, rated_a, rated_b)


def judged(rules: RuleSet, keys: list[str], judge: str) -> tuple[dict[str, ScoreEvent], int]:
    """Each pair's preference score, and how many judge calls were made. ``content``: B's
    answer is preferred (+2 when read as Response A, -2 as B); ``position``: Response A is,
    whatever it holds."""
    with MockJudge() as server:
        if judge == "content":
            server.script(B_FIRST, answer(rules, 2, rated_a=3, rated_b=2))
            server.script(A_FIRST, answer(rules, -2, rated_a=2, rated_b=3))
        else:
            server.script("", answer(rules, 2))
        worker = scorer(server.base_url, rules)

        async def all_pairs() -> list[ScoreEvent]:
            results = [await worker.score_thread(c) for c in pair_closes(rules, keys)]
            return [s for r in results for s in r.scores]

        scores = asyncio.run(all_pairs())
        calls = len(server.requests)
    preferences = {s.target_id: s for s in scores if s.criterion == "preference"}
    return preferences, calls


KEYS = [f"cmp-{n}" for n in range(40)]


def test_fixed_reads_the_first_variant_first_as_the_seed_does() -> None:
    rules = critique_rules("fixed")
    found, calls = judged(rules, KEYS[:6], "content")
    assert calls == 6
    assert {s.details["shown_first"] for s in found.values()} == {"A"}  # type: ignore[index]
    assert {s.raw_value for s in found.values()} == {-2}


def test_alternate_shows_each_variant_first_in_half_the_pairs_and_states_the_variants() -> None:
    rules = critique_rules("alternate")
    found, calls = judged(rules, KEYS, "content")
    assert calls == len(KEYS)  # one call a pair
    first = [s.details["shown_first"] for s in found.values()]  # type: ignore[index]
    assert 12 <= first.count("B") <= 28 and set(first) == {"A", "B"}
    for score in found.values():
        # B preferred whichever slot it filled: the published preference is the variants'
        assert (score.raw_value, score.label) == (-2, "Response B is significantly better")
        assert list(score.details["variants"]) == ["A", "B"]  # type: ignore[index]
        assert score.details["ranking_contradicts_ratings"] is False  # type: ignore[index]
    # the same pair is shown the same way on every delivery
    again, _ = judged(rules, KEYS[:8], "content")
    assert [again[k].details["shown_first"] for k in KEYS[:8]] == first[:8]  # type: ignore[index]


def test_alternate_turns_a_position_judges_habit_into_a_coin_flip() -> None:
    """A judge that prefers Response A whatever it holds: fixed reads it as A always winning;
    alternate publishes A for the pairs shown A first and B for the others."""
    fixed, _ = judged(critique_rules("fixed"), KEYS, "position")
    assert {s.raw_value for s in fixed.values()} == {2}
    alternate, _ = judged(critique_rules("alternate"), KEYS, "position")
    for score in alternate.values():
        shown = score.details["shown_first"]  # type: ignore[index]
        assert score.raw_value == (2 if shown == "A" else -2)


def test_a_variants_ratings_keep_their_target_and_ids_whichever_slot_it_filled() -> None:
    def ratings(order: str) -> dict[str, ScoreEvent]:
        rules = critique_rules(order)
        with MockJudge() as server:
            server.script(B_FIRST, answer(rules, 2, rated_a=3, rated_b=2))
            server.script(A_FIRST, answer(rules, -2, rated_a=2, rated_b=3))
            worker = scorer(server.base_url, rules)

            async def all_pairs() -> list[ScoreEvent]:
                results = [await worker.score_thread(c) for c in pair_closes(rules, KEYS[:10])]
                return [s for r in results for s in r.scores]

            scores = asyncio.run(all_pairs())
        return {f"{s.target_id}/{s.criterion}": s for s in scores if s.criterion != "preference"}

    fixed, alternate = ratings("fixed"), ratings("alternate")
    assert fixed.keys() == alternate.keys()
    for name, score in alternate.items():
        assert score.score_id == fixed[name].score_id  # the same ids, read in either slot
        assert score.raw_value == fixed[name].raw_value  # B's answer rated 3, A's 2
        assert score.details["variant"] == name.split("/")[0][-1]  # type: ignore[index]


def test_both_publishes_a_preference_that_survives_the_swap() -> None:
    rules = critique_rules("both")
    found, calls = judged(rules, KEYS[:5], "content")
    assert calls == 10  # two calls a pair
    for score in found.values():
        assert score.raw_value == -2
        assert score.details["position_inconsistent"] is False  # type: ignore[index]
        assert score.details["orders"] == {"A_first": -2, "B_first": -2}  # type: ignore[index]
        assert score.usage is not None and score.usage.prompt_tokens > 0


def test_both_publishes_a_tie_when_the_preference_flips_with_the_order() -> None:
    rules = critique_rules("both")
    found, _ = judged(rules, KEYS[:5], "position")
    for score in found.values():
        assert (score.raw_value, score.status) == (0, "ok")
        assert score.label == "Responses are roughly equivalent (no meaningful difference)"
        assert score.details["position_inconsistent"] is True  # type: ignore[index]
        assert score.details["orders"] == {"A_first": 2, "B_first": -2}  # type: ignore[index]
        assert "flipped with the order" in (score.reason or "")


@pytest.mark.parametrize("order", ["alternate", "both", "fixed"])
def test_the_order_is_a_rule_setting_and_alternate_its_default(order: str) -> None:
    assert comparison_rule(critique_rules(order)).comparison.order == order
    from fixtures import RULES_DIR

    from stream.ruleset.loader import load_rules

    shipped = comparison_rule(load_rules(RULES_DIR, ["critique"]))
    assert (shipped.comparison.order, shipped.comparison.audit) == ("alternate", 0.1)


@pytest.mark.parametrize("order", ["alternate", "both"])
def test_a_pair_deferred_to_a_batch_keeps_its_order(order: str) -> None:
    """A comparison in ``judge.mode: batch``: its job is kept with the order it was planned in
    (and both prompts with ``both``), and the batch's answers conclude it as a live call."""
    from test_deferred import FakeDeferrer, batched, client_of

    from stream.engine.batch_entry import Deferred
    from stream.engine.deferred import finish_deferred
    from stream.engine.plan import JudgedRule

    rule = batched(comparison_rule(critique_rules(order)))
    rules = RuleSet([rule], f"batched-{order}")
    key = next(k for k in KEYS if order == "both" or (order == "alternate" and _b_first(rule, k)))
    with MockJudge() as server:
        server.script(B_FIRST, answer(rules, 2))
        server.script(A_FIRST, answer(rules, -2))
        client = client_of(server)

        async def run() -> Any:
            worker = scorer(server.base_url, rules)
            deferrer = FakeDeferrer()
            worker.context.deferrer = deferrer
            [close] = pair_closes(rules, [key])
            result = await worker.score_thread(close)
            assert [s for s in result.scores if s.criterion == "preference"] == []
            kept = Deferred.decode(deferrer.kept[0].encode())
            assert len(kept.prompts()) == (2 if order == "both" else 1)
            assert isinstance(rule, JudgedRule)
            try:
                return await finish_deferred(worker.context, kept, rule, client)
            finally:
                await client.close()

        outcome = asyncio.run(run())
    assert outcome.score is not None and outcome.score.raw_value == -2
    shown = outcome.score.details["shown_first"]  # type: ignore[index]
    assert shown == ("A" if order == "both" else "B")


def _b_first(rule: ComparisonRule, key: str) -> bool:
    from stream.engine.kinds.pair_order import SECOND, order_of

    return order_of(rule, key) == SECOND


def test_a_preference_that_flipped_is_counted_apart_and_left_out_of_the_win_rate() -> None:
    """Both orders, a judge whose habit is the first slot: every pair a tie that says so. The
    metric counts it as ``inconsistent`` (0 ties), and ``scorer agreement``'s win rate has
    no pair to rate; the content judge's pairs rate B's wins as they are."""
    from prometheus_client import CollectorRegistry

    from stream.agreement.preferences import pair_preference
    from stream.agreement.report import build
    from stream.metrics import ScorerMetrics

    rules = critique_rules("both")
    flipped, _ = judged(rules, KEYS[:4], "position")
    agreed, _ = judged(rules, KEYS[4:10], "content")
    metrics = ScorerMetrics(CollectorRegistry())
    for score in [*flipped.values(), *agreed.values()]:
        metrics.on_score_published(score)
    labels = {"rule": "response_comparison", "pack": "critique", "project": "code-assistant",
              "variant_a": "A", "variant_b": "B"}  # fmt: skip

    def counted(preferred: str) -> float | None:
        return metrics.registry.get_sample_value(
            "scorer_pair_preferences_total", {**labels, "preferred": preferred}
        )

    assert (counted("inconsistent"), counted("tie"), counted("b"), counted("a")) == (4, 0, 6, 0)
    preferences = [pair_preference(s) for s in [*flipped.values(), *agreed.values()]]
    [rate] = build([], [p for p in preferences if p is not None]).win_rates
    assert (rate.b_wins, rate.ties, rate.inconsistent) == (6, 0, 4)
    assert rate.estimate.count == 6 and rate.estimate.value == 1.0


def test_an_audited_pair_publishes_its_own_order_and_measures_the_other() -> None:
    """``comparison.audit`` 1: every pair is also judged the other way round. The published
    preference is the order's own (a position judge's habit stays in it), ``details.audit``
    holds both orders', and the metrics count each pair's flip and each call's slot."""
    from prometheus_client import CollectorRegistry

    from stream.metrics import ScorerMetrics

    rules = critique_rules("alternate", audit=1.0)
    with MockJudge() as server:
        server.script("", answer(rules, 2))  # Response A, whatever it holds
        metrics = ScorerMetrics(CollectorRegistry())
        worker = scorer(server.base_url, rules)
        worker.context.observer = metrics

        async def all_pairs() -> list[ScoreEvent]:
            results = [await worker.score_thread(c) for c in pair_closes(rules, KEYS[:10])]
            return [s for r in results for s in r.scores]

        scores = asyncio.run(all_pairs())
        calls = len(server.requests)
    assert calls == 20  # two a pair
    for score in (s for s in scores if s.criterion == "preference"):
        shown = score.details["shown_first"]  # type: ignore[index]
        assert score.raw_value == (2 if shown == "A" else -2)  # its own order's
        assert score.details["audit"] == {  # type: ignore[index]
            "orders": {"A_first": 2, "B_first": -2},
            "position_inconsistent": True,
        }
    labels = {"rule": "response_comparison", "pack": "critique", "model": "gpt-4o-mini"}

    def sample(name: str, **more: str) -> float | None:
        return metrics.registry.get_sample_value(name, {**labels, **more})

    assert sample("scorer_pair_order_audits_total", outcome="flipped") == 10
    assert sample("scorer_pair_order_audits_total", outcome="consistent") == 0
    assert sample("scorer_pair_slot_verdicts_total", slot="first") == 20
    assert sample("scorer_pair_slot_verdicts_total", slot="second") == 0


def test_the_audit_share_is_a_hashed_share_of_the_pairs() -> None:
    from stream.engine.kinds.pair_order import AUDITED, order_of

    rule = comparison_rule(critique_rules("alternate", audit=0.25))
    orders = [order_of(rule, f"cmp-{n}") for n in range(400)]
    audited = sum(order.endswith(AUDITED) for order in orders)
    assert 70 <= audited <= 130
    assert orders == [order_of(rule, f"cmp-{n}") for n in range(400)]  # the same every time
    shipped = comparison_rule(critique_rules("fixed", audit=0.1)).comparison
    assert (shipped.order, shipped.audit) == ("fixed", 0.1)


def test_scorer_agreement_reports_the_judges_position_preference_from_the_scores() -> None:
    """From the published preferences alone (the scores topic): an audited position judge's
    pairs all flipped and all its verdicts favoured the first slot; a content judge judged in
    both orders flipped none and favoured each slot alike."""
    from stream.agreement.position import position_audits

    audited, _ = judged(critique_rules("alternate", audit=1.0), KEYS[:10], "position")
    both, _ = judged(critique_rules("both"), KEYS[10:18], "content")
    [position] = position_audits(audited.values())
    assert (position.pairs, position.flipped, position.first, position.second) == (10, 10, 20, 0)
    assert position.flip_rate.value == 1.0 and position.first_slot.low > 0.8  # type: ignore[operator]
    [content] = position_audits(both.values())
    assert (content.pairs, content.flipped, content.first, content.second) == (8, 0, 8, 8)
    assert content.first_slot.value == 0.5
    assert "8 pairs, 0 flipped with the order" in content.line()
    assert (
        position_audits(judged(critique_rules("alternate"), KEYS[:3], "content")[0].values()) == []
    )


def test_the_published_scores_carry_what_the_order_balanced_rate_needs() -> None:
    """From the scores topic alone: an audited pair's two sides in the variants' terms and the
    rule's order. A position judge's audited pairs all flip, so no verdict survives the swap
    (the balanced rate is undefined where the plain one says 0.5); a content judge's all
    survive."""
    from stream.agreement.preferences import pair_preference
    from stream.agreement.report import build

    rules = critique_rules("alternate", audit=0.5)
    position, _ = judged(rules, KEYS, "position")
    preferences = [p for p in map(pair_preference, position.values()) if p is not None]
    audited = [p for p in preferences if p.orders is not None]
    assert 10 <= len(audited) <= 30 and {p.order for p in preferences} == {"alternate"}
    assert {p.orders for p in audited} == {("a", "b"), ("b", "a")}
    assert all(p.orders[0] == p.preferred for p in audited)  # type: ignore[index]
    [rate] = build([], preferences).win_rates
    assert rate.estimate.low < 0.5 < rate.estimate.high  # type: ignore[operator]
    assert rate.balanced is not None and rate.balanced.value is None
    content, _ = judged(rules, KEYS, "content")
    [rate] = build([], filter(None, map(pair_preference, content.values()))).win_rates
    assert rate.balanced is not None and rate.balanced.value == 1.0
