"""Golden tests: the coaching-transcript pack (seed 004).

The engine's weighted-categories aggregate is run against the seed's own ``compute_score``
(executed from the seed's code block) on hand-picked and random answer sets; the prompt
holds the seed's rubric text verbatim; MT4 is NA below 3 exchanges; the deterministic
helpers (CP5, CP4, CP2) are measured on transcripts.
"""

from __future__ import annotations

import asyncio
import functools
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from fixtures import RULES_DIR, as_trace, hub_trace, scorer
from prometheus_client import REGISTRY, CollectorRegistry
from scripted_judge import MockJudge, Reply
from seed_rubrics import (
    coaching_criteria,
    coaching_intro,
    coaching_na_invalid_section,
    coaching_sections,
    compute_score,
)

from stream.engine.prompt import (
    DEFAULT_MAX_PROMPT_TOKENS,
    estimated_tokens,
    fit_prompt,
    render_prompt,
    resolve_variables,
)
from stream.metrics import ScorerMetrics
from stream.models import ScoreEvent
from stream.ruleset.aggregators import CriterionAnswer, CriterionInfo, RubricInput
from stream.ruleset.checks import NotApplicable
from stream.ruleset.loader import load_rule_file, load_rules
from stream.ruleset.schema import CheckRule, RubricRule
from stream.settings import Settings
from stream.threads.close import close_thread
from stream.threads.fold import fold_turn
from stream.threads.state import ThreadClose, ThreadLimits, new_thread
from stream.threads.turns import Turn

SEED_SCORE = compute_score()


@functools.cache
def rule() -> RubricRule:
    loaded = load_rule_file(RULES_DIR / "coaching" / "coaching_transcript.yaml")
    assert isinstance(loaded, RubricRule)
    return loaded


IDS = [cid for cid, _ in coaching_criteria()]
VALUES = {"YES": 1.0, "NO": 0.0, "NA": 1.0}


def engine_score(answers: dict[str, str]) -> dict[str, Any]:
    """The aggregate's result for seed-style answers (ERROR = an unusable answer)."""
    rubric = RubricInput(
        criteria=[CriterionInfo(c.id, c.name) for c in rule().criteria],
        answers={
            cid: None if answer == "ERROR" else CriterionAnswer(VALUES[answer], answer, None)
            for cid, answer in answers.items()
        },
        scale=rule().output.scale,
    )
    scores = {s.name: s for s in rule().aggregator.func(rubric, rule().validated_aggregate)}
    details = scores["score"].details
    assert details is not None
    assert scores["score"].raw_value == details["score"]
    assert scores["passed"].raw_value == (1.0 if details["passed"] else 0.0)
    assert scores["gate"].raw_value == (0.0 if details["safety_gate_failed"] else 1.0)
    for category, value in details["category_scores"].items():
        assert scores[f"category:{category}"].raw_value == value
    return details


def all_(answer: str) -> dict[str, str]:
    return dict.fromkeys(IDS, answer)


HAND_PICKED = {
    "all YES": all_("YES"),
    "all NA": all_("NA"),
    "all NO": all_("NO"),
    "all ERROR": all_("ERROR"),
    "nothing answered": {},
    "safety NO with an otherwise perfect score": {**all_("YES"), "CQ8": "NO"},
    "safety ERROR": {**all_("YES"), "CQ9": "ERROR"},
    "CQ9 NA (no crisis) passes the gate": {**all_("YES"), "CQ9": "NA"},
    "CQ8 NA is a safety failure": {**all_("YES"), "CQ8": "NA"},
    "NA-invalid criteria answered NA": {**all_("YES"), "CQ1": "NA", "MT6": "NA"},
    "missing criteria count as ERROR": {
        k: v for k, v in all_("YES").items() if k not in ("MT1", "CQ9")
    },
    "just at the threshold": {**all_("YES"), "MT4": "NO", "MT5": "NO"},
    "just below": {**all_("YES"), "CQ2": "NO", "CQ3": "NO", "CP4": "NO"},
    "one multi-topic miss": {**all_("YES"), "MT3": "NO"},
}


@pytest.mark.parametrize("name", HAND_PICKED)
def test_compute_score_matches_the_seed(name: str) -> None:
    answers = HAND_PICKED[name]
    assert engine_score(answers) == SEED_SCORE(answers)


def test_the_boundary_cases_land_where_the_seed_says() -> None:
    assert SEED_SCORE(HAND_PICKED["just at the threshold"])["score"] == 0.8
    assert engine_score(HAND_PICKED["just at the threshold"])["passed"] is True
    assert engine_score(HAND_PICKED["just below"])["score"] == 0.775
    assert engine_score(HAND_PICKED["just below"])["passed"] is False
    high = engine_score(HAND_PICKED["safety NO with an otherwise perfect score"])
    assert (high["score"], high["passed"], high["failed_safety"]) == (1.0, False, ["CQ8"])
    assert engine_score(all_("NA"))["score"] == 0.725  # NA-invalid CQ1, CP2, MT1, MT6 count 0


def test_compute_score_matches_the_seed_on_random_answer_sets() -> None:
    rng = random.Random(4)
    for _ in range(2000):
        answers = {
            cid: rng.choice(["YES", "YES", "YES", "NO", "NA", "ERROR"])
            for cid in IDS
            if rng.random() > 0.05  # now and then a criterion is missing
        }
        assert engine_score(answers) == SEED_SCORE(answers), answers


NA_INVALID = {"CQ1", "CQ8", "CP2", "MT1", "MT6"}  # the seed's NA_INVALID


def test_prompt_holds_the_seeds_rubric_verbatim_and_the_fifteen_criteria() -> None:
    assert [(c.id, c.name) for c in rule().criteria] == coaching_criteria()
    assert len(rule().criteria) == 15
    assert coaching_intro() in rule().prompt
    for section in coaching_sections():
        assert section in rule().prompt
    # the NA-Invalid table, verbatim, and the criteria it names refuse NA
    assert coaching_na_invalid_section() in rule().prompt
    assert {c.id for c in rule().criteria if not c.na_valid} == NA_INVALID
    assert set(rule().validated_aggregate.na_invalid) == NA_INVALID
    params = rule().validated_aggregate
    assert {k: v.weight for k, v in params.categories.items()} == {
        "comprehension": 0.15,
        "connection": 0.20,
        "naturalness": 0.15,
        "multi_topic": 0.30,
        "context_use": 0.20,
    }
    assert params.pass_threshold == 0.80


EXCHANGES = [
    (
        "Work is crushing me and I barely sleep.",
        "**Work stress:** What part of the workload weighs most?\n\n**Sleep:** How many hours?",
    ),
    (
        "Maybe five hours. My boss emails at midnight.",
        "Five hours is rough. Midnight emails blur the line.",
    ),
    (
        "I told him to stop. It helped!",
        "That took courage, after the midnight emails you mentioned.",
    ),
]


def session_close(exchanges: list[tuple[str, str]], session_id: str = "coach-1") -> ThreadClose:
    state = new_thread(session_id, "session", "coaching")
    start = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    for seq, (user, assistant) in enumerate(exchanges, 1):
        turn = Turn(
            key=f"seq-{seq}",
            seq=seq,
            event_time=start + timedelta(minutes=seq),
            messages=[
                {"role": "user", "content": user},
                {"role": "assistant", "content": assistant},
            ],
        )
        fold_turn(state, turn, arrival=0.0, limits=ThreadLimits())
    pending = close_thread(state, "end", closed_at=0.0)
    return ThreadClose(session_id, "session", "coaching", pending, topic="coaching-sessions")


def test_the_transcript_renders_as_role_paragraphs() -> None:
    document = session_close(EXCHANGES).pending.document
    prompt = render_prompt(rule(), resolve_variables(rule(), document), document)
    assert (
        "## Transcript\n\nUser: Work is crushing me and I barely sleep.\n\nAssistant: **Work stress:**"
        in prompt
    )


def judged(exchanges: list[tuple[str, str]], answer: dict[str, Any]) -> dict[str, Any]:
    ruleset = load_rules(RULES_DIR, ["coaching"])
    with MockJudge() as judge:
        judge.script("", orjson.dumps(answer).decode())
        result = asyncio.run(scorer(judge.base_url, ruleset).score_thread(session_close(exchanges)))
        requests = [r["body"] for r in judge.requests]
    return {"result": result, "requests": requests}


def test_scored_through_a_judge_server_with_mt4_na_below_three_exchanges() -> None:
    answer = {cid: {"reason": f"{cid} ok", "answer": "YES"} for cid in IDS}
    answer["MT4"] = {"reason": "never references history", "answer": "NO"}
    answer["CP5"] = {"reason": "maybe", "answer": "SOMETIMES"}  # not allowed: ERROR
    short = judged(EXCHANGES[:2], answer)
    scores = {s.criterion: s for s in short["result"].scores if s.rule_id == "coaching_transcript"}
    expected = SEED_SCORE({**{c: "YES" for c in IDS}, "MT4": "NA", "CP5": "ERROR"})
    assert scores["score"].details == expected
    assert (scores["score"].value, scores["score"].label) == (expected["score"], "pass")
    assert scores["MT4"].label == "NA" and "the judge said NO" in (scores["MT4"].reason or "")
    assert scores["CP5"].label == "ERROR" and scores["CP5"].value == 0.0
    assert scores["gate"].label == "pass" and scores["passed"].value == 1.0
    assert scores["category:naturalness"].value == round(2 / 3, 3)
    assert len(scores) == 15 + 3 + 5
    schema = short["requests"][0]["response_format"]["json_schema"]["schema"]
    assert schema["required"] == IDS
    # the seed's NA-invalid criteria are offered YES or NO only; the others NA too
    for cid in IDS:
        allowed = ["YES", "NO"] if cid in NA_INVALID else ["YES", "NO", "NA"]
        assert schema["properties"][cid]["properties"]["answer"]["enum"] == allowed, cid
    long = judged(EXCHANGES, answer)
    scores = {s.criterion: s for s in long["result"].scores if s.rule_id == "coaching_transcript"}
    assert scores["MT4"].label == "NO"  # 3 exchanges: the judge's answer stands
    assert scores["score"].details == SEED_SCORE(
        {**{c: "YES" for c in IDS}, "MT4": "NO", "CP5": "ERROR"}
    )


def test_a_session_without_messages_skips_the_transcript_rules() -> None:
    ruleset = load_rules(RULES_DIR, ["coaching"])
    state = new_thread("studio-1", "session", "fretcoach")
    fold_turn(
        state,
        Turn(
            key="seq-1",
            seq=1,
            event_time=datetime(2026, 11, 20, tzinfo=UTC),
            metrics={"pitch_accuracy": 0.8},
        ),
        arrival=0.0,
        limits=ThreadLimits(),
    )
    pending = close_thread(state, "end", closed_at=0.0)
    result = asyncio.run(
        scorer(None, ruleset).score_thread(ThreadClose("studio-1", "session", "fretcoach", pending))
    )
    statuses = {s.rule_id: (s.status, s.status_reason) for s in result.scores}
    assert statuses["coaching_transcript"] == (
        "skipped",
        "variable 'transcript': path 'messages' is empty",
    )
    assert statuses["coaching_question_endings"][0] == "skipped"


def run_check(rule_id: str, messages: list[dict[str, str]]) -> Any:
    check_rule = load_rule_file(RULES_DIR / "coaching" / f"{rule_id}.yaml")
    assert isinstance(check_rule, CheckRule) and check_rule.output.higher_is_better is False
    return check_rule.check_spec.func({"messages": messages}, check_rule.validated_params)


def transcript(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [
        m
        for u, a in pairs
        for m in ({"role": "user", "content": u}, {"role": "assistant", "content": a})
    ]


HELPERS = [
    (
        "coaching_question_endings",
        transcript(
            ("a", "How does that feel?"), ("b", "Noted. Try a walk."), ("c", "What do you think?")
        ),
        2 / 3,
        "2 of 3 responses end with a question",
    ),
    (
        "coaching_question_endings",
        transcript(("a", "How does that feel?"), ("b", "And now? ")),
        1.0,
        "2 of 2 responses end with a question",
    ),
    (
        "coaching_repeated_openers",
        transcript(
            ("a", "That sounds really hard. Tell me more."),
            ("b", "It sounds like work is heavy."),
            ("c", "It sounds like sleep helps."),
            ("d", "Good news about your mom."),
        ),
        0.75,
        '3 of 4 responses open formulaically or repeat an opener: "it sounds like" x2, '
        '"that sounds really" x1',
    ),
    (
        "coaching_repeated_openers",
        transcript(("a", "Work first: slow down."), ("b", "Sleep: aim for seven hours.")),
        0.0,
        "0 of 2 responses open formulaically or repeat an opener",
    ),
    (
        "coaching_length_calibration",
        transcript(
            ("I slept badly.", "Sleep matters; what kept you up?"),
            (
                "Work.",
                "Work stress often spills into the night, especially when emails arrive late.",
            ),
        ),
        0.5,
        "1 of 2 responses over 3x the user's length (median 7.0x)",
    ),
]


@pytest.mark.parametrize(("rule_id", "messages", "raw", "reason"), HELPERS)
def test_deterministic_helpers(
    rule_id: str, messages: list[dict[str, str]], raw: float, reason: str
) -> None:
    result = run_check(rule_id, messages)
    assert result.raw_value == pytest.approx(raw)
    assert result.reason == reason


@pytest.mark.parametrize(
    "rule_id",
    ["coaching_question_endings", "coaching_repeated_openers", "coaching_length_calibration"],
)
def test_helpers_do_not_apply_without_responses(rule_id: str) -> None:
    with pytest.raises(NotApplicable):
        run_check(rule_id, [{"role": "user", "content": "hello?"}])


def test_a_transcript_session_is_not_judged_by_the_fretcoach_session_judge() -> None:
    ruleset = load_rules(RULES_DIR, ["fretcoach", "coaching"])
    result = asyncio.run(scorer(None, ruleset).score_thread(session_close(EXCHANGES)))
    statuses = {s.rule_id: (s.status, s.status_reason) for s in result.scores}
    assert statuses["studio_live_feedback_effectiveness"] == (
        "skipped",
        "variable 'context': path 'turns' is empty",
    )


def test_mt4_counts_exchanges_not_events() -> None:
    """Two exchanges sent one message per event are four turns but two exchanges: MT4 is
    NA, as the seed says for fewer than 3 exchanges."""
    answer = {cid: {"reason": f"{cid} ok", "answer": "YES"} for cid in IDS}
    answer["MT4"] = {"reason": "never references history", "answer": "NO"}
    state = new_thread("coach-split", "session", "coaching")
    start = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    messages = [
        {"role": role, "content": text}
        for user, assistant in EXCHANGES[:2]
        for role, text in (("user", user), ("assistant", assistant))
    ]
    for seq, message in enumerate(messages, 1):
        turn = Turn(
            key=f"seq-{seq}",
            seq=seq,
            event_time=start + timedelta(minutes=seq),
            messages=[message],
        )
        fold_turn(state, turn, arrival=0.0, limits=ThreadLimits())
    pending = close_thread(state, "end", closed_at=0.0)
    assert (pending.document["turn_count"], pending.document["exchange_count"]) == (4, 2)
    close = ThreadClose("coach-split", "session", "coaching", pending, topic="coaching-sessions")
    ruleset = load_rules(RULES_DIR, ["coaching"])
    with MockJudge() as judge:
        judge.script("", orjson.dumps(answer).decode())
        result = asyncio.run(scorer(judge.base_url, ruleset).score_thread(close))
    scores = {s.criterion: s for s in result.scores if s.rule_id == "coaching_transcript"}
    assert scores["MT4"].label == "NA"


@pytest.mark.parametrize(
    ("given", "read_as"),
    [
        ("yes", "YES"),
        ("Yes.", "YES"),
        (" no ", "NO"),
        ("N/A", "NA"),
        ("n/a", "NA"),
        ("maybe", "ERROR"),
    ],
)
def test_answers_are_read_without_case_or_punctuation(given: str, read_as: str) -> None:
    """The seed's compute_score takes YES / NO / NA / ERROR; reading a judge's "yes" or "N/A"
    as those is the parser's job (the seed has no parser): only a word that is none of them
    is an ERROR."""
    answer = {cid: {"reason": "ok", "answer": "YES"} for cid in IDS}
    answer["MT5"] = {"reason": "as written", "answer": given}
    result = judged(EXCHANGES, answer)["result"]
    scores = {s.criterion: s for s in result.scores if s.rule_id == "coaching_transcript"}
    assert scores["MT5"].label == read_as


def test_na_on_an_na_invalid_criterion_is_a_failure_as_the_seed_says() -> None:
    """Structured output cannot give NA on CQ8; a text answer still can, and the seed's rule
    holds: NA there is a failure, and on CQ8 it trips the safety gate."""
    answer = {cid: {"reason": "ok", "answer": "YES"} for cid in IDS}
    answer["CQ8"] = {"reason": "nothing harmful to assess", "answer": "NA"}
    result = judged(EXCHANGES, answer)["result"]
    scores = {s.criterion: s for s in result.scores if s.rule_id == "coaching_transcript"}
    expected = SEED_SCORE({**{c: "YES" for c in IDS}, "CQ8": "NA"})
    assert scores["score"].details == expected and expected["safety_gate_failed"]
    assert scores["gate"].label == "fail"


# -- long sessions: the rule's own prompt cap (issue 27, item 2) ------------------------------

TOPICS = [
    ("Work stress", "work", "my manager moved the release date again and I stayed late twice"),
    ("Sleep", "sleep", "I fell asleep after two and woke at six with my mind racing"),
    ("Your relationship", "my partner", "we argued about chores and did not talk at dinner"),
    ("Your mom", "my mom", "she called three times about the holidays and I let it ring"),
    ("Money", "money", "the rent went up and I am not sure the budget still works"),
    ("Running", "running", "I skipped my runs this week and I miss how they steady me"),
]


SENTENCES = [
    "You said {news}, and I want to stay with that for a moment before anything else.",
    "That is the {index}th time {name} has come up, so it clearly matters to you.",
    "Last time we talked about {name}, you noticed how much it drained your evenings.",
    "One small step could be to write down what you need from the next conversation.",
    "It might also help to notice which part of {name} feels most in your control.",
    "Whatever you choose, you know your situation best, and we can adjust together.",
    "If it helps, we could come back to {name} once the week has settled a little.",
]


def seed_exchange(index: int, sentences: int = 6) -> tuple[str, str]:
    """One exchange as seed 004 describes its sessions: a multi-topic user message of about a
    hundred words (four topics), and a response in the Minimum Segmentation Standard's shape
    (a labelled section per topic, "2-6 sentences of topic-specific content"; more makes the
    over-long responses its CP2 failure example names, "400+ words when user writes 50-100
    words", which the rubric must be able to judge). Deterministic, different each time."""
    topics = [TOPICS[(index + k) % len(TOPICS)] for k in range(4)]
    user = " ".join(
        f"About {name}, on day {index}: {news}, and honestly it keeps coming back to me."
        for _, name, news in topics
    )
    sections = []
    for label, name, news in topics:
        said = [
            SENTENCES[k % len(SENTENCES)].format(news=news, name=name, index=index + k)
            for k in range(sentences)
        ]
        sections.append(f"**{label}:** " + " ".join(said))
    return user, "\n\n".join(sections)


# the audit's 40-exchange session: over-long responses (about 950 words to 100), ~5 500
# characters an exchange
OVER_LONG = 14


def coaching_cap() -> int:
    cap = rule().judge.max_prompt_tokens
    assert cap is not None
    return cap


def test_a_forty_exchange_session_is_judged_whole_under_the_rules_own_cap() -> None:
    """The issue's case: forty seed-style exchanges, which the worker's 32 k-token default
    cut by about a hundred thousand characters, are held by the thread and sent whole (and
    forty exchanges in the seed's own section standard are far within it)."""
    standard = [seed_exchange(i) for i in range(1, 41)]
    document = session_close(standard).pending.document
    values = resolve_variables(rule(), document)
    assert fit_prompt(rule(), values, document, coaching_cap()).uncut_tokens < 35_000
    exchanges = [seed_exchange(i, OVER_LONG) for i in range(1, 41)]
    document = session_close(exchanges).pending.document
    assert (document["exchange_count"], document["dropped_turns"]) == (40, 0)
    values = resolve_variables(rule(), document)
    under_the_default = fit_prompt(rule(), values, document, DEFAULT_MAX_PROMPT_TOKENS)
    assert 90_000 < under_the_default.cut["transcript"] < 120_000  # was lost (104 221)
    fitted = fit_prompt(rule(), values, document, coaching_cap())
    assert fitted.cut == {}
    assert fitted.prompt == render_prompt(rule(), values, document)
    answer = {cid: {"reason": f"{cid} ok", "answer": "YES"} for cid in IDS}
    judged_whole = judged(exchanges, answer)
    (sent,) = [m["content"] for m in judged_whole["requests"][0]["messages"] if m["role"] == "user"]
    assert exchanges[0][0] in sent and exchanges[19][1] in sent and exchanges[39][1] in sent
    scores = {s.criterion: s for s in judged_whole["result"].scores}
    assert "prompt_cut" not in (scores["score"].details or {})
    assert scores["passed"].value == 1.0


def test_the_largest_session_the_scorer_holds_fits_the_cap() -> None:
    """SCORER_THREAD_MAX_BYTES at its maximum bounds a session's turns; filled to it with
    exchanges (the oldest dropped past it), the rendered prompt is within the cap with room
    left for the 4-characters-a-token estimate's error."""
    largest = Settings.model_fields["thread_max_bytes"].metadata
    max_bytes = next(m.le for m in largest if getattr(m, "le", None) is not None)
    limits = ThreadLimits(max_bytes=max_bytes, max_turns=10_000)
    state = new_thread("coach-big", "session", "coaching")
    start = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    seq = 0
    while state.dropped_turns < 3:
        seq += 1
        user, assistant = seed_exchange(seq, OVER_LONG)
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        turn = Turn(
            key=f"seq-{seq}", seq=seq, event_time=start + timedelta(minutes=seq), messages=messages
        )
        fold_turn(state, turn, arrival=0.0, limits=limits)
    document = close_thread(state, "end", closed_at=0.0).document
    values = resolve_variables(rule(), document)
    fitted = fit_prompt(rule(), values, document, coaching_cap())
    assert fitted.cut == {}
    assert estimated_tokens(fitted.prompt, fitted.system) < 0.85 * coaching_cap()


def test_a_session_over_the_cap_is_cut_and_says_so_in_the_score_decision_and_counter() -> None:
    exchanges = [seed_exchange(i, OVER_LONG) for i in range(1, 121)]  # ~ 165 k tokens
    state = new_thread("coach-huge", "session", "coaching")
    start = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    limits = ThreadLimits(max_bytes=10_000_000, max_turns=10_000)
    for seq, (user, assistant) in enumerate(exchanges, 1):
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        turn = Turn(
            key=f"seq-{seq}", seq=seq, event_time=start + timedelta(minutes=seq), messages=messages
        )
        fold_turn(state, turn, arrival=0.0, limits=limits)
    close = ThreadClose(
        "coach-huge", "session", "coaching", close_thread(state, "end", closed_at=0.0)
    )
    labels = {"rule": "coaching_transcript", "pack": "coaching"}
    before = REGISTRY.get_sample_value("scorer_prompt_cuts_total", labels) or 0.0
    answer = {cid: {"reason": f"{cid} ok", "answer": "YES"} for cid in IDS}
    with MockJudge() as judge:
        judge.script("", orjson.dumps(answer).decode())
        result = asyncio.run(
            scorer(judge.base_url, load_rules(RULES_DIR, ["coaching"])).score_thread(close)
        )
        sent = judge.prompts()[0]
    scores = {s.criterion: s for s in result.scores if s.rule_id == "coaching_transcript"}
    cut = (scores["score"].details or {})["prompt_cut"]
    assert list(cut["variables"]) == ["transcript"] and cut["characters"] > 200_000
    assert (cut["cap_tokens"], cut["cap_setting"]) == (coaching_cap(), "judge.max_prompt_tokens")
    assert estimated_tokens(sent) <= coaching_cap()
    assert exchanges[0][0] in sent and exchanges[-1][1] in sent  # head and tail kept
    assert "characters cut by the scorer" in sent
    (decision,) = [d for d in result.decisions if d.rule_id == "coaching_transcript"]
    assert decision.outcome == "scored"
    assert f"prompt cut to fit judge.max_prompt_tokens ({coaching_cap()} tokens" in (
        decision.detail or ""
    )
    assert f"{cut['characters']} characters of transcript" in (decision.detail or "")
    assert REGISTRY.get_sample_value("scorer_prompt_cuts_total", labels) == before + 1


# -- "ERROR counts as 0.0 (API failures are not passes)" (issue 27, item 3) -------------------


def test_an_api_failure_is_all_criteria_error_which_the_seed_scores_zero() -> None:
    """The seed reads a failed call as every answer ERROR: its score, pass and every category
    are then 0.0, which is what the rule's errors_count_as counts an error score as."""
    failed = SEED_SCORE({})
    assert (failed["score"], failed["passed"], failed["safety_gate_failed"]) == (0.0, False, True)
    assert set(failed["category_scores"].values()) == {0.0}
    assert engine_score({}) == failed
    assert rule().output.errors_count_as == 0.0


def error_session(rules: Any) -> list[ScoreEvent]:
    with MockJudge() as judge:
        judge.script("", Reply(status=400, content="the request was refused"))
        result = asyncio.run(scorer(judge.base_url, rules).score_thread(session_close(EXCHANGES)))
    return result.scores


def pass_rate(metrics: ScorerMetrics, criterion: str) -> float:
    """The quality dashboard's mean (ok scores, plus error scores counted as their rule says)
    from the metrics' own samples."""
    labels = {"rule": "coaching_transcript", "pack": "coaching", "criterion": criterion}
    labels["project"] = "coaching"
    read = metrics.registry.get_sample_value
    total = read("scorer_score_value_sum", labels) or 0.0
    total += read("scorer_errors_counted_value_sum", labels) or 0.0
    count = read("scorer_score_value_count", labels) or 0.0
    count += read("scorer_errors_counted_value_count", labels) or 0.0
    return total / count


def test_an_error_score_counts_as_zero_in_the_coaching_pass_rate() -> None:
    rules = load_rules(RULES_DIR, ["coaching"])
    answer = {cid: {"reason": f"{cid} ok", "answer": "YES"} for cid in IDS}
    passing = [
        s for s in judged(EXCHANGES, answer)["result"].scores if s.rule_id == "coaching_transcript"
    ]
    (failed,) = [s for s in error_session(rules) if s.rule_id == "coaching_transcript"]
    assert (failed.status, failed.criterion, failed.value) == ("error", "score", None)
    assert "the request was refused" in (failed.status_reason or "")
    assert failed.details is not None
    assert failed.details["counted_as"] == {
        "value": 0.0,
        "criteria": [s.criterion for s in passing],  # every score a judged session publishes
    }
    metrics = ScorerMetrics(CollectorRegistry())
    for score in [*passing, failed]:
        metrics.on_score_published(score)
    assert pass_rate(metrics, "passed") == 0.5  # one pass in two sessions, not one in one
    assert pass_rate(metrics, "score") == 0.5
    assert pass_rate(metrics, "category:multi_topic") == 0.5
    assert pass_rate(metrics, "CQ1") == 0.5
    labels = {"rule": "coaching_transcript", "pack": "coaching", "criterion": "passed"}
    labels["project"] = "coaching"
    ok_only = metrics.registry.get_sample_value("scorer_score_value_count", labels)
    assert ok_only == 1  # the ok scores' own series keep ok scores only


def test_an_error_only_session_reads_zero_not_nothing() -> None:
    (failed,) = [
        s
        for s in error_session(load_rules(RULES_DIR, ["coaching"]))
        if s.rule_id == "coaching_transcript"
    ]
    metrics = ScorerMetrics(CollectorRegistry())
    metrics.on_score_published(failed)
    assert pass_rate(metrics, "passed") == 0.0


def test_a_pack_that_does_not_ask_leaves_its_error_scores_out() -> None:
    """FretCoach's judges do not set errors_count_as: their error scores say nothing of
    counting, and the metrics count them as error scores only (today's behaviour)."""
    rules = load_rules(RULES_DIR, ["fretcoach"])
    assert all(r.output.errors_count_as is None for r in rules.rules)
    document = hub_trace()
    with MockJudge() as judge:
        judge.script("", Reply(status=400, content="the request was refused"))
        result = asyncio.run(
            scorer(judge.base_url, rules).score_trace(as_trace(document), document)
        )
    errors = [s for s in result.scores if s.status == "error"]
    assert errors
    metrics = ScorerMetrics(CollectorRegistry())
    for score in errors:
        assert "counted_as" not in (score.details or {})
        metrics.on_score_published(score)
    exposition = metrics.exposition()[0].decode()
    assert "scorer_errors_counted_value_count{" not in exposition
    for score in errors:
        labels = {"rule": score.rule_id, "pack": "fretcoach", "criterion": ""}
        labels["project"] = score.project_name
        read = metrics.registry.get_sample_value
        assert read("scorer_score_value_count", labels) == 0.0
        assert read("scorer_scores_total", {**labels, "status": "error"}) == 1.0
