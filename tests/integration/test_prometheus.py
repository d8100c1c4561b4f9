"""A real Prometheus scrapes a real worker that scores the sample traces, loads the scorer's
rule file, and answers every PromQL expression the dashboards and alerts use: each must parse
and return data (the alerts' conditions are proven by promtool's unit tests; here each alert
must parse and every series it reads must exist)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from batch_double import BatchDouble
from conftest import require_tool
from scripted_judge import MockJudge, Reply

from stream.kafka.broker import EmbeddedBroker, free_port
from stream.kafka.io import produce, read_traces

from .harness import Names, Worker
from .test_packs import DIMENSIONS

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "grafana"
SAMPLES = REPO / "stream" / "samples"
LIVE_PROMPT = "evaluating live guitar coach feedback quality"
# Grafana's variables, as a person looking at every rule over the last ten minutes sets them
VARIABLES = {
    "$__rate_interval": "5m",  # Grafana: at least four scrapes; wider on longer ranges
    "$__range": "10m",
    "$pack": ".*",
    "$rule": ".*",
    "$project": ".*",
    "$model": ".*",
    "$tool": ".*",
}
SELECTOR = re.compile(r"\b(?:scorer[A-Za-z0-9_:]*|process_[a-z_]+|up|ALERTS)\b(?:\{[^}]*\})?")


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and template variable of every dashboard."""
    queries = []
    for path in sorted((GRAFANA / "dashboards").glob("*.json")):
        dashboard = json.loads(path.read_text())
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                queries.append((f"{path.name}: {panel['title']}", target["expr"]))
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                # label_values(<selector>, label) is Grafana's; its selector must find series
                selector = re.fullmatch(r"label_values\((.*), *\w+\)", variable["definition"])
                assert selector, variable["definition"]
                queries.append((f"{path.name}: ${variable['name']}", selector.group(1)))
    return queries


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((GRAFANA / "alerts" / "scorer.rules.yml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def substitute(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


class Prometheus:
    def __init__(self, tmp: Path, target_port: int) -> None:
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(GRAFANA / "alerts" / "scorer.rules.yml")],
            "scrape_configs": [
                {
                    "job_name": "scorer",
                    "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}],
                }
            ],
        }
        self.config = tmp / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))
        self.log_path = tmp / "prometheus.log"
        self.args = [
            require_tool("prometheus"),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Prometheus:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                    return self
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"prometheus not ready:\n{self.log_path.read_text()[-2000:]}")

    def query(self, expr: str) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return dict(json.load(response))
        except urllib.error.HTTPError as exc:  # 400: the expression does not parse
            return dict(json.load(exc))

    def rule_health(self) -> dict[str, str]:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.port}/api/v1/rules", timeout=10
        ) as response:
            groups = json.load(response)["data"]["groups"]
        return {rule["name"]: rule["health"] for group in groups for rule in group["rules"]}

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator[Any]:
    started: list[Prometheus] = []

    def start(port: int) -> Prometheus:
        started.append(Prometheus(tmp_path, port).start())
        return started[-1]

    yield start
    for server in started:
        server.stop()


def renamed(items: list[Any], suffix: str) -> list[Any]:
    """The samples again as new traces, threads and sessions (ids suffixed)."""
    out = []
    for item in items:
        document = dict(item)
        for key in ("id", "thread_id", "session_id"):
            if document.get(key):
                document[key] = f"{document[key]}{suffix}"
        metadata = document.get("metadata")
        if isinstance(metadata, dict) and metadata.get("comparison_id"):
            document["metadata"] = {**metadata, "comparison_id": metadata["comparison_id"] + suffix}
        out.append(document)
    return out


COACHING_PROMPT = "assessing the full transcript of a multi-topic therapeutic coaching"
COACHING_CRITERIA = ["CQ1", "CQ2", "CQ3", "CQ6", "CQ8", "CQ9", "CP2", "CP4", "CP5"]
COACHING_CRITERIA += ["MT1", "MT2", "MT3", "MT6", "MT4", "MT5"]


def coaching_sessions() -> list[dict[str, Any]]:
    """Two coaching transcript sessions (seed 004): one the scripted judge passes, one whose
    call it refuses (a 400: an error score the coaching rubric counts as 0.0)."""
    events: list[dict[str, Any]] = []
    for session, word in (("coach-pass", "PASSING"), ("coach-fail", "FAILING")):
        for seq in range(3):
            events.append(
                {
                    "session_id": session,
                    "type": "turn",
                    "seq": seq,
                    "timestamp": f"2026-11-20T19:20:0{seq}+00:00",  # within the gap
                    "project_name": "coaching",
                    "user": f"{word} session, day {seq}: work is heavy and I sleep badly.",
                    "assistant": f"**Work:** what weighs most? **Sleep:** since when, {seq}?",
                }
            )
        events.append(
            {
                "session_id": session,
                "type": "end",
                "seq": 3,
                "timestamp": "2026-11-20T19:20:03+00:00",
                "project_name": "coaching",
            }
        )
    return events


def ratings(value: int) -> dict[str, Any]:
    """A rating of the six critique dimensions, all ``value``."""
    return {d: {"reason": "scripted", "rating": value} for d in DIMENSIONS}


def otlp_batch(round_: str) -> dict[str, Any]:
    """One OTLP/JSON export batch: a coaching chat's root span and its model call."""
    trace = hashlib.md5(round_.encode(), usedforsecurity=False).hexdigest()  # an id
    now = time.time_ns()
    messages = [{"role": "user", "parts": [{"type": "text", "content": "Why do I rush?"}]}]
    answer = [{"role": "assistant", "parts": [{"type": "text", "content": "Use a click."}]}]

    def span(span_id: str, name: str, parent: str = "", **attributes: str) -> dict[str, Any]:
        return {
            "traceId": trace,
            "spanId": span_id,
            "parentSpanId": parent,
            "name": name,
            "startTimeUnixNano": str(now - 1_000_000_000),
            "endTimeUnixNano": str(now),
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
        }

    llm = {
        "gen_ai.input.messages": json.dumps(messages),
        "gen_ai.output.messages": json.dumps(answer),
    }
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "fretcoach"}}]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            span("00000000000000a1", "hub-coach-chat"),
                            span("00000000000000a2", "chat", "00000000000000a1", **llm),
                        ]
                    }
                ],
            }
        ]
    }


@pytest.fixture
def batches() -> Iterator[BatchDouble]:
    """The Batch API the worker's one batch rule is judged through."""
    with BatchDouble() as api:
        yield api


def with_a_batch_rule(rules: Path) -> Path:
    """The shipped packs, with one FretCoach rule judged in batches submitted after a second
    (judge.mode: batch), one held to human labels and judged in a cascade, and the comparison
    audited on every pair, so the batch, agreement, cascade and position panels and alerts
    have series."""
    shutil.copytree(REPO / "rules", rules, ignore=shutil.ignore_patterns("__pycache__"))
    path = rules / "fretcoach" / "hub_answer_correctness.yaml"
    text = path.read_text()
    judge = "judge:\n  temperature: 0.0\n"
    assert judge in text
    batched = judge + "  mode: batch\n  batch: {max_jobs: 1000, max_wait_s: 1}\n"
    path.write_text(text.replace(judge, batched))
    # the live coach rule's judge is held to human labels (the agreement panel and alert),
    # and a small chat model read through its log-probabilities is its cascade's first tier,
    # every target audited (the cascade panels and alert: verdicts, cost by tier, the first
    # tier's agreement with the judge)
    path = rules / "fretcoach" / "studio_live_coach_feedback_quality.yaml"
    text = path.read_text()
    assert judge in text
    bound = "agreement: {measure: mae, threshold: 1.5, min_labels: 1, window: 1d}\n"
    cascade = (
        "  cascade: {first: {api: chat, model: gpt-4.1-nano}, accept: {min_confidence: 0.9}, "
        "audit_rate: 1.0}\n"
    )
    path.write_text(text.replace(judge, bound + judge + cascade))
    # and another rule's to a bound from below (its labels are yet to come: no alert)
    path = rules / "fretcoach" / "hub_response_clarity.yaml"
    text = path.read_text()
    assert judge in text
    bound = "agreement: {measure: spearman, threshold: 0.5, min_labels: 50}\n"
    path.write_text(text.replace(judge, bound + judge))
    # the comparison judges every pair in the other order too (its audit share: the judge's
    # position-preference series), each round's pair asked again (a verdict from the cache
    # was counted when it was made)
    path = rules / "critique" / "response_comparison.yaml"
    text = path.read_text()
    assert judge in text
    text = text.replace(judge, judge + "  cache: false\n")
    path.write_text(text + "comparison: {order: alternate, audit: 1.0}\n")
    return rules


def live_coach_labels(round_: str) -> list[dict[str, Any]]:
    """A human's grade of each live-coach sample trace of a round (the scripted judge says 2)."""
    return [
        {
            "trace_id": f"0193f0a0-0000-7000-8000-0000000000{n}{round_}",
            "rule_id": "studio_live_coach_feedback_quality",
            "value": grade,
            "annotator": "coach-reviewer",
            "labelled_at": "2026-11-27T20:00:00Z",
        }
        for n, grade in (("11", 2), ("12", 3), ("13", 4))
    ]


# What cannot hold data in this test's minute, and is run for its syntax and joins only: the
# score-drop test, whose baseline is the day before the last 6 hours (its arithmetic is
# unit-tested with promtool, grafana/alerts/scorer.rules.test.yml), and the judge canary,
# which no rule of this run names (tests/canary).
LATER = re.compile(r"scorer:(?:score_\w+:baseline|score_drop\w*|judge_canary\w*|judge_drift)\b")
LATER_RAW = re.compile(r"\bscorer_canary_\w+")


def problems(prometheus: Prometheus) -> list[str]:
    """Every expression that does not parse or returns nothing, with where it is used (for
    those ``LATER`` names: that does not run)."""
    found = []
    checks = [(where, expr, "whole") for where, expr in dashboard_queries()]
    for rule in rules():
        if "record" in rule:
            checks.append((f"record {rule['record']}", rule["expr"], "whole"))
        else:
            checks.append((f"alert {rule['alert']}", rule["expr"], "parse"))
            for selector in SELECTOR.findall(rule["expr"]):
                checks.append((f"alert {rule['alert']} reads", selector, "whole"))
    assert len(checks) > 80  # every panel, variable, recording rule, alert and selector
    for where, expr, mode in checks:
        if LATER.search(f"{where} {expr}") or LATER_RAW.search(expr):
            mode = "parse"
        answer = prometheus.query(substitute(expr))
        if answer.get("status") != "success":
            found.append(f"{where}: does not run: {answer.get('error')}\n  {expr}")
        elif mode == "whole" and not answer["data"]["result"]:
            found.append(f"{where}: no data\n  {expr}")
    return found


async def test_every_dashboard_and_alert_query_runs_on_a_real_prometheus(
    broker: EmbeddedBroker,
    names: Names,
    judge: MockJudge,
    workers: list[Worker],
    tmp_path: Path,
    prometheus_for: Any,
    batches: BatchDouble,
) -> None:
    # one server error (a retry), then good answers; the judge's default answer fits some
    # scales and not others (unusable answers, error scores): a realistic mix
    judge.script(LIVE_PROMPT, Reply(status=500), '{"score": 2, "reason": "so-so"}')
    # the critique pack: its rubric on every trace, and a comparison of the sample pair
    judge.script("rating one AI-generated response", orjson.dumps(ratings(3)).decode())
    comparison = {"response_a": ratings(3), "response_b": ratings(2), "preference": 1}
    comparison |= {"justification": "A is direct.", "key_differentiators": ["B wanders"]}
    judge.script("comparing two AI-generated responses", orjson.dumps(comparison).decode())
    # the coaching rubric: one session passes, the other's call is refused (counted 0.0)
    yes = {c: {"reason": "scripted", "answer": "YES"} for c in COACHING_CRITERIA}
    judge.script(COACHING_PROMPT, orjson.dumps(yes).decode())
    judge.script("FAILING session", Reply(status=400, content="refused"))  # newest first
    # the provider serves part of each prompt from its prompt cache, as OpenAI's reports it
    judge.cached_prompt_tokens = 16
    labels_topic = f"labels-{names.suffix}"
    worker = Worker(
        broker.bootstrap,
        names,
        tmp_path,
        OPENAI_BASE_URL=judge.base_url,
        SCORER_THREAD_INACTIVITY_GAP_S="2",
        SCORER_LAG_INTERVAL_S="1",
        SCORER_JUDGE_MAX_ATTEMPTS="2",
        # a budget with room: its gauge exists for the budget alert to read
        SCORER_JUDGE_BUDGETS='[{"model": "gpt-4o-mini", "usd": 100, "window": "day"}]',
        # tools: its checks score the samples' tool calls (the quality dashboard's tool row)
        SCORER_PACKS='["fretcoach", "critique", "coaching", "tools"]',
        # the edited copy in place of the shipped packs (a pack name is found once)
        SCORER_RULES_DIR=f"{with_a_batch_rule(tmp_path / 'rules')}{os.pathsep}no-shipped-packs",
        SCORER_BATCH_BASE_URL=batches.base_url,
        SCORER_BATCH_POLL_S="1",
        SCORER_LABELS_TOPIC=labels_topic,
        SCORER_AGREEMENT_TOPIC=f"agreement-{names.suffix}",
        # a reference topic (made by the worker, empty): the references alert has its series
        SCORER_REFERENCES_TOPIC=f"references-{names.suffix}",
    ).start()
    workers.append(worker)
    prometheus = prometheus_for(worker.port)
    traces = read_traces(SAMPLES / "fretcoach_traces.jsonl")
    traces += read_traces(SAMPLES / "comparison_pair.jsonl")  # one pair a round
    sessions = read_traces(SAMPLES / "fretcoach_sessions.jsonl") + coaching_sessions()
    # Two rounds, so every counter the first round creates is seen to increase in the second
    # (Prometheus counts no increase for a series' first sample).
    for round_ in ("-r1", "-r2"):
        await produce(broker.bootstrap, names.traces, renamed(traces, round_))
        await produce(broker.bootstrap, names.sessions, renamed(sessions, round_))
        await produce(broker.bootstrap, names.traces, [b'{"id": "not json'])
        await produce(broker.bootstrap, names.otlp, [otlp_batch(round_)])  # OpenTelemetry in
        await produce(broker.bootstrap, labels_topic, live_coach_labels(round_))  # human labels
        await asyncio.sleep(12)  # scored, threads closed after the 2 s gap, scraped

    deadline = time.monotonic() + 90
    found = problems(prometheus)
    while found and time.monotonic() < deadline:
        await asyncio.sleep(3)
        found = problems(prometheus)
    assert not found, "\n".join(found)

    # the rule file is Prometheus's own: loaded, evaluated, healthy
    health = prometheus.rule_health()
    assert len(health) == len(rules())
    assert set(health.values()) == {"ok"}, health
    direction = prometheus.query('scorer:rule_direction{rule="hub_user_frustration_score"}')
    assert [r["value"][1] for r in direction["data"]["result"]] == ["-1"]
    # the coaching pass rate counts the refused session as a fail: 1 pass in 2, not 1 in 1
    pass_rate = next(
        e for w, e in dashboard_queries() if w == "quality.json: Pass rate over the range"
    )
    answer = prometheus.query(
        substitute(pass_rate).replace('rule=~".*"', 'rule="coaching_transcript"')
    )
    # increase() extrapolates each series over the range from its own samples: under load
    # the two series' samples start apart and the ratio is near 0.5, not at it (0.66 was
    # seen on a loaded machine); the refused session left out would make it 1
    (rate,) = [float(r["value"][1]) for r in answer["data"]["result"]]
    assert 0.25 <= rate <= 0.75, rate
    refused = prometheus.query(
        'scorer_errors_counted_value_count{rule="coaching_transcript", criterion="passed"}'
    )
    assert [r["value"][1] for r in refused["data"]["result"]] == ["2"]  # one a round
    # the scripted comparison prefers A (+1) every round: B's win rate is 0, its interval
    # [0, high] with high > 0 (a pair or two cannot show that A always wins)
    win = prometheus.query('scorer:pair_win_rate_b:1d{rule="response_comparison"}')
    assert [
        (r["metric"]["variant_a"], r["metric"]["variant_b"]) for r in win["data"]["result"]
    ] == [("A", "B")]
    assert [r["value"][1] for r in win["data"]["result"]] == ["0"]
    high = prometheus.query('scorer:pair_win_rate_b_high:1d{rule="response_comparison"}')
    assert 0 < float(high["data"]["result"][0]["value"][1]) < 1
