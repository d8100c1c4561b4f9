"""Scores as each platform's body: which are posted, under what name, with what value and
type; every body the mapping makes passes the platform's own validation (the doubles')."""

from __future__ import annotations

import orjson
import pytest
from fixtures import score_event, uuid7
from platform_doubles import langfuse_score_problems

from stream.models import ThreadInfo
from stream.sinks.langfuse import LangfusePlatform, score_body
from stream.sinks.opik import THREADS_PATH, TRACES_PATH, OpikPlatform, feedback_score, opik_trace_id
from stream.sinks.platform import Item
from stream.sinks.scores import Unsent

THREAD = ThreadInfo(
    kind="conversation", close_seq=1, close_reason="inactivity", turn_count=3, dropped_turns=0
)


def test_langfuse_trace_score_numeric_normalised_with_its_scales_in_metadata() -> None:
    score = score_event()
    body = score_body(score, "normalised", "categorical")
    assert isinstance(body, dict)
    assert body["id"] == score.score_id  # Langfuse upserts on it: a redelivery replaces
    assert body["traceId"] == score.target_id and "sessionId" not in body
    assert (body["name"], body["value"], body["dataType"]) == ("answer_quality", 0.75, "NUMERIC")
    assert body["comment"] == "clear and correct"
    meta = body["metadata"]
    assert (meta["raw_value"], meta["scale"], meta["value"]) == (4.0, "4 on 1..5", 0.75)
    assert (meta["rule_id"], meta["pack"], meta["rule_version"]) == ("answer_quality", "demo", 1)
    assert meta["project_name"] == "shop" and meta["higher_is_better"] is True
    assert langfuse_score_problems(body) == []


def test_langfuse_raw_value_on_the_rules_own_scale() -> None:
    body = score_body(score_event(), "raw", "categorical")
    assert isinstance(body, dict) and body["value"] == 4.0


@pytest.mark.parametrize(
    ("label", "value", "data_type"),
    [
        ("Excellent", "Excellent", "CATEGORICAL"),
        ("yes", 1, "BOOLEAN"),
        ("No", 0, "BOOLEAN"),
        ("pass", 1, "BOOLEAN"),
        ("fail", 0, "BOOLEAN"),
    ],
)
def test_langfuse_labels_are_categorical_or_boolean(
    label: str, value: object, data_type: str
) -> None:
    body = score_body(score_event(label=label), "normalised", "categorical")
    assert isinstance(body, dict)
    assert (body["value"], body["dataType"]) == (value, data_type)
    assert body["metadata"]["label"] == label and body["metadata"]["value"] == 0.75
    assert langfuse_score_problems(body) == []


def test_langfuse_labels_numeric_when_asked() -> None:
    body = score_body(score_event(label="Excellent"), "normalised", "numeric")
    assert isinstance(body, dict)
    assert (body["value"], body["dataType"]) == (0.75, "NUMERIC")


def test_langfuse_thread_score_goes_to_the_session() -> None:
    score = score_event(scope="thread", target_id="conv-42", thread=THREAD, criterion="overall")
    body = score_body(score, "normalised", "categorical")
    assert isinstance(body, dict)
    assert body["sessionId"] == "conv-42" and "traceId" not in body
    assert body["name"] == "answer_quality.overall"
    assert body["metadata"]["thread_kind"] == "conversation"
    assert langfuse_score_problems(body) == []


@pytest.mark.parametrize("status", ["skipped", "error"])
def test_not_ok_scores_are_not_posted(status: str) -> None:
    score = score_event(status=status, value=None, raw_value=None, status_reason="judge down")
    for unsent in (
        score_body(score, "normalised", "categorical"),
        feedback_score(score, "normalised", None),
    ):
        assert unsent == Unsent("status", f"{status} score: judge down")


def test_pair_scores_have_no_trace_on_either_platform() -> None:
    score = score_event(scope="pair", target_id="cmp-7", raw_value=1.0, scale={"min": -2, "max": 2})
    lf = score_body(score, "normalised", "categorical")
    op = feedback_score(score, "normalised", None)
    assert isinstance(lf, Unsent) and lf.kind == "target" and "cmp-7" in lf.reason
    assert isinstance(op, Unsent) and op.kind == "target"


def test_langfuse_refuses_an_id_langfuse_cannot_store() -> None:
    assert isinstance(score_body(score_event(target_id="a\rb"), "normalised", "x"), Unsent)
    assert isinstance(score_body(score_event(target_id="t" * 801), "normalised", "x"), Unsent)


def test_opik_trace_score_item() -> None:
    score = score_event(label="Good")
    path, item = feedback_score(score, "normalised", None)  # type: ignore[misc]
    assert path == TRACES_PATH
    assert item == {
        "id": score.target_id,
        "project_name": "shop",
        "name": "answer_quality",
        "value": 0.75,
        "source": "sdk",
        "category_name": "Good",
        "reason": "clear and correct (4 on 1..5)",
    }
    _, raw = feedback_score(score, "raw", None)  # type: ignore[misc]
    assert raw["value"] == 4.0 and raw["reason"] == "clear and correct"


def test_opik_thread_score_item_and_the_default_project() -> None:
    score = score_event(scope="thread", target_id="conv-42", project_name="default", thread=THREAD)
    path, item = feedback_score(score, "normalised", None)  # type: ignore[misc]
    assert path == THREADS_PATH
    assert item["thread_id"] == "conv-42" and "project_name" not in item  # Opik's default
    _, named = feedback_score(score, "normalised", "my-app")  # type: ignore[misc]
    assert named["project_name"] == "my-app"  # OPIK_PROJECT_NAME for traces that named none


def test_opik_trace_ids_are_uuid7() -> None:
    v7 = uuid7()
    assert opik_trace_id(v7) == v7 and opik_trace_id(v7.upper()) == v7
    assert opik_trace_id("6f1c8f5e-3b7a-4c1e-9a57-5d1b2f0c9e11") is None  # a v4
    assert opik_trace_id("trace-1") is None
    unsent = feedback_score(score_event(target_id="trace-1"), "normalised", None)
    assert isinstance(unsent, Unsent) and unsent.kind == "target" and "UUIDv7" in unsent.reason


def test_opik_requests_one_per_endpoint_at_most_max_items_each() -> None:
    platform = OpikPlatform(max_items=2)
    scores = [score_event() for _ in range(3)]
    scores += [score_event(scope="thread", target_id=f"c{i}", thread=THREAD) for i in range(2)]
    items = [Item(str(n), s, platform.prepare(s)) for n, s in enumerate(scores)]
    requests = platform.requests(items)
    assert [(r.method, r.path, len(r.items)) for r in requests] == [
        ("PUT", TRACES_PATH, 2),
        ("PUT", TRACES_PATH, 1),
        ("PUT", THREADS_PATH, 2),
    ]
    assert orjson.loads(requests[0].body)["scores"][0]["id"] == scores[0].target_id


def test_langfuse_one_request_a_score_whose_body_is_the_score() -> None:
    platform = LangfusePlatform()
    scores = [score_event() for _ in range(3)]
    items = [Item(str(n), s, platform.prepare(s)) for n, s in enumerate(scores)]
    requests = platform.requests(items)
    assert [(r.method, r.path, list(r.items)) for r in requests] == [
        ("POST", "/api/public/scores", [str(n)]) for n in range(3)
    ]
    assert [orjson.loads(r.body)["id"] for r in requests] == [s.score_id for s in scores]
    assert platform.read(requests[0], b'{"id": "x"}') == {"0": "accepted"}


def test_a_shadow_judges_score_is_posted_beside_the_rules_own_under_its_variant() -> None:
    """A shadow's score (its own score id, ``variant`` set) must not show as the rule's own
    on the platform: it is named ``<rule>[.criterion]@<variant>``."""
    primary = score_event()
    shadow = score_event(variant="mini", score_id="another-id", target_id=primary.target_id)
    bodies = [score_body(s, "normalised", "categorical") for s in (primary, shadow)]
    assert all(isinstance(b, dict) for b in bodies)
    names = [b["name"] for b in bodies if isinstance(b, dict)]
    assert names == ["answer_quality", "answer_quality@mini"]
    rubric = score_body(score_event(variant="mini", criterion="overall"), "raw", "numeric")
    assert isinstance(rubric, dict) and rubric["name"] == "answer_quality.overall@mini"
    assert langfuse_score_problems(rubric) == []


def test_a_tool_calls_score_goes_to_its_trace_on_langfuse_and_nowhere_on_opik() -> None:
    """Langfuse keeps every score of a name on a trace (each its own id), so each call's score
    lands on the call's trace and its comment names the call; Opik keeps one feedback score of
    a name per trace, so the trace's calls would overwrite each other: none is posted."""
    details = {"trace_id": "trace-9", "tool": "get_weather"}
    score = score_event(scope="tool_call", target_id="call_1", details=details)
    body = score_body(score, "normalised", "categorical")
    assert isinstance(body, dict)
    assert body["traceId"] == "trace-9" and "sessionId" not in body
    assert body["comment"] == "tool call call_1 (get_weather): clear and correct"
    assert langfuse_score_problems(body) == []
    unsent = feedback_score(score, "normalised", None)
    assert isinstance(unsent, Unsent) and "tool call" in unsent.reason
    lost = score_body(score_event(scope="tool_call", target_id="call_1"), "normalised", "numeric")
    assert isinstance(lost, Unsent)
