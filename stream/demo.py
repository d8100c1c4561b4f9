"""``scorer demo``: broker, worker, sample traces in, a summary of the scores out."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from .engine.scorer import primary_shape
from .engine.verdicts import NO_JUDGE_REASON
from .errors import ScorerError
from .kafka.broker import EmbeddedBroker, free_port, how_to_use, port_free, user_broker
from .kafka.io import check_cluster, collect_scores, ensure_topics, produce, read_traces
from .models import Trace
from .ruleset.conversations import ConversationRules
from .ruleset.loader import deployment_rules
from .ruleset.schema import RuleSet
from .settings import Settings
from .threads.router import Pairing, ThreadRouter
from .tools.calls import tool_calls
from .tools.view import brief, call_document

SAMPLES = Path(__file__).parent / "samples" / "fretcoach_traces.jsonl"
SESSION_SAMPLES = Path(__file__).parent / "samples" / "fretcoach_sessions.jsonl"
# two answers to one question, the production model's (A) and a canary's (B): one pair
PAIR_SAMPLES = Path(__file__).parent / "samples" / "comparison_pair.jsonl"
EMBEDDED_DROP = ("KAFKA_SECURITY_", "KAFKA_SASL_", "KAFKA_SSL_")
DEMO_GAP_S = 5.0  # the demo closes idle conversations after seconds, not 15 minutes
# the packs the bundled samples are for (SCORER_PACKS overrides): FretCoach's, the critique
# pack's rubric, pleasantries check and response comparison, and the checks of each tool call
DEMO_PACKS = ["fretcoach", "critique", "tools"]


def expected_scores(ruleset: RuleSet, items: list[Any], topic: str) -> int:
    """How many score events the worker must publish for these traces (rules that match and
    are sampled in publish exactly one score each, whatever its status)."""
    total = 0
    conversations = ConversationRules.of(ruleset)
    conversation_rules: dict[str, set[str]] = defaultdict(set)  # thread id -> matched rules
    for item in items:
        if not isinstance(item, dict):
            continue
        try:
            trace = Trace.model_validate(item)
        except ValueError:
            continue
        total += sum(
            1
            for r in ruleset.for_scope("trace")
            if r.filter.matches(trace, topic) and r.sampled(trace.id)
        )
        total += expected_call_scores(ruleset, trace, item, topic)
        if trace.thread_id:
            conversation_rules[trace.thread_id].update(
                r.id for r in conversations.matching(trace, topic)
            )
    for thread_id, matched in conversation_rules.items():
        rule_ids = conversations.judging(matched)
        total += sum(1 for r in ruleset.rules if r.id in rule_ids and r.sampled(thread_id))
    return total + expected_pair_scores(ruleset, items, topic)


def expected_call_scores(ruleset: RuleSet, trace: Trace, item: Any, topic: str) -> int:
    """The tool-call rules' scores of one trace: one per call a rule's filter matches and
    samples in."""
    rules = ruleset.for_scope("tool_call")
    calls = tool_calls(item) if rules else []
    if not calls:
        return 0
    briefs = [brief(call) for call in calls]
    documents = [(call, call_document(call, briefs, trace.view)) for call in calls]
    return sum(
        1
        for call, document in documents
        for rule in rules
        if rule.filter.mismatch(trace, topic, document) is None and rule.sampled(call.call_id)
    )


def expected_pair_scores(ruleset: RuleSet, items: list[Any], topic: str) -> int:
    """A comparison rule decides each pair once (judged, or skipped: no judge, no partner)."""
    router = ThreadRouter(ruleset)
    pairs: dict[str, set[str]] = defaultdict(set)  # comparison key -> matched rules
    for item in items:
        try:
            trace = Trace.model_validate(item)
        except ValueError:
            continue
        pairing = router.pairing(trace, item, topic)
        if isinstance(pairing, Pairing):
            pairs[pairing.key].update(pairing.rules)
    return sum(
        1
        for key, rule_ids in pairs.items()
        for r in ruleset.pair_rules()
        if r.id in rule_ids and r.sampled(key)
    )


def decides(ruleset: RuleSet) -> Callable[[dict[str, Any]], bool]:
    """Whether a score event is the one that stands for its rule's decision (a rubric's
    aggregate, a comparison's preference, a rule's only score): what the demo counts."""
    primary = {rule.id: primary_shape(rule).criterion for rule in ruleset.rules}
    return lambda score: score.get("criterion") == primary.get(score["rule_id"])


def expected_session_scores(ruleset: RuleSet, sessions: list[Any], topic: str) -> int:
    """Score events for the sample sessions: each closes once (they all end)."""
    ids = {s["session_id"] for s in sessions if isinstance(s, dict) and "session_id" in s}
    return sum(
        1
        for session_id in ids
        for r in ruleset.thread_rules("session")
        if r.filter.matches(Trace(id=session_id, project_name="fretcoach"), topic)
        and r.sampled(session_id)
    )


def summary_table(scores: dict[str, dict[str, Any]], ruleset: RuleSet) -> Table:
    by_rule: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for score in scores.values():
        by_rule[score["rule_id"]].append(score)
    table = Table(title="Scores on the scores topic")
    for column in ("rule", "scope", "kind", "count", "mean (0..1)", "statuses"):
        table.add_column(column)
    for rule_id in sorted(by_rule):
        items = by_rule[rule_id]
        values = [s["value"] for s in items if s["status"] == "ok"]
        mean = f"{sum(values) / len(values):.2f}" if values else "-"
        statuses = Counter(s["status"] for s in items)
        rule = next((r for r in ruleset.rules if r.id == rule_id), None)
        kind = "check" if rule is not None and rule.kind == "check" else "judge"
        table.add_row(
            rule_id,
            items[0]["scope"],
            kind,
            str(len(items)),
            mean,
            ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())),
        )
    return table


def check_judge_reachable(base_url: str | None, timeout: float = 3.0) -> None:
    """Fail at once, in one line, when the configured judge cannot be connected to (the demo
    would otherwise wait its whole timeout for scores that never come)."""
    if not base_url:
        return
    url = urllib.parse.urlsplit(base_url)
    if not url.hostname:
        raise ScorerError(f"OPENAI_BASE_URL {base_url!r} is not a URL (http://host:port/v1)")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout).close()
    except OSError as exc:
        raise ScorerError(
            f"the judge at OPENAI_BASE_URL={base_url} cannot be reached ({exc}): start it, or "
            "unset OPENAI_BASE_URL to run the demo without a judge"
        ) from None


def judge_trouble(metrics_text: str) -> str | None:
    """What the worker's metrics say went wrong with the judge, if anything."""
    down = [
        line.split("{", 1)[1].split("}", 1)[0]
        for line in metrics_text.splitlines()
        if line.startswith("scorer_judge_available{") and float(line.rsplit(" ", 1)[1]) == 0
    ]
    if down:
        return f"the judge was unavailable ({', '.join(down)}): see the worker's log above"
    return None


def wait_for_interrupt(console: Console, worker: subprocess.Popen[bytes]) -> None:
    """Keep everything up until Ctrl-C (or SIGTERM), or until the worker stops by itself."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.is_set() and worker.poll() is None:
            stop.wait(0.5)
    except KeyboardInterrupt:  # a terminal's Ctrl-C reaches the worker too: not "by itself"
        stop.set()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not stop.is_set():
        console.print(f"[red]the worker stopped by itself (exit code {worker.returncode})[/]")
    console.print("stopping the worker and the broker")


def run_demo(
    settings: Settings,
    traces_file: Path | None,
    timeout: float,
    console: Console,
    keep_running: bool = False,
) -> int:
    items = (
        read_traces(traces_file)
        if traces_file
        else read_traces(SAMPLES) + read_traces(PAIR_SAMPLES)
    )
    sessions = read_traces(SESSION_SAMPLES) if traces_file is None else []
    packs = settings.packs if settings.packs is not None else DEMO_PACKS
    ruleset = deployment_rules(settings, packs)
    expected = expected_scores(ruleset, items, settings.traces_topic)
    expected += expected_session_scores(ruleset, sessions, settings.sessions_topic)
    broker: EmbeddedBroker | None = None
    bootstrap = settings.kafka_bootstrap_servers
    worker: subprocess.Popen[bytes] | None = None
    scratch: str | None = None
    check_judge_reachable(settings.openai_base_url)
    # kept running, the demo is for looking at: the documented ports; else any free ones
    web_port = settings.web_port if keep_running else free_port()
    if keep_running and not port_free(web_port):
        raise ScorerError(
            f"port {web_port} (SCORER_WEB_PORT, the metrics endpoint) is in use: stop what "
            "uses it, or set SCORER_WEB_PORT to another port"
        )
    try:
        if not bootstrap:
            if keep_running:
                broker = user_broker(settings.embedded_port, fixed=True)
            else:
                broker = EmbeddedBroker().start()
            bootstrap = broker.bootstrap
            console.print(
                how_to_use(bootstrap, settings.traces_topic, settings.scores_topic),
                highlight=False,
                markup=False,
            )
        security = None if broker else settings.kafka
        if broker is None:  # its credentials and advertised brokers, before any topic
            asyncio.run(check_cluster(bootstrap, settings.kafka))
        asyncio.run(
            ensure_topics(
                bootstrap,
                [
                    settings.traces_topic,
                    settings.sessions_topic,
                    settings.scores_topic,
                    settings.decisions_topic,
                    settings.dlq_topic,
                ],
                settings.topic_partitions,
                security,
            )
        )
        env = dict(
            # the embedded broker is plaintext: the cluster's TLS / SASL settings stay out
            {k: v for k, v in os.environ.items() if not (broker and k.startswith(EMBEDDED_DROP))},
            KAFKA_BOOTSTRAP_SERVERS=bootstrap,
            SCORER_BROKER_KIND="tansu" if broker else settings.broker_kind,
            SCORER_WEB_PORT=str(web_port),
            SCORER_SESSION_TIMEOUT_S=str(min(settings.session_timeout(), 10.0)),
            SCORER_PACKS=orjson.dumps(packs).decode(),
        )
        env.setdefault("SCORER_THREAD_INACTIVITY_GAP_S", str(DEMO_GAP_S))
        if broker:  # the tables on disk live as long as the embedded broker's topics do
            scratch = tempfile.mkdtemp(prefix="scorer-demo-data-")
            env["SCORER_DATA_DIR"] = scratch
        worker = subprocess.Popen(
            [sys.executable, "-m", "stream.cli", "worker", "--loglevel", "warn"],
            env=env,
            stdout=subprocess.DEVNULL if not console.is_terminal else None,
        )
        console.print(
            f"worker started (pid {worker.pid}); metrics at http://127.0.0.1:{web_port}/metrics"
        )
        if not settings.judge_configured:
            console.print(f"[yellow]{NO_JUDGE_REASON}[/]")
        n = asyncio.run(produce(bootstrap, settings.traces_topic, items, security=security))
        s = (
            asyncio.run(produce(bootstrap, settings.sessions_topic, sessions, security=security))
            if sessions
            else 0
        )
        console.print(
            f"produced {n} sample traces to '{settings.traces_topic}' and {s} coaching-session "
            f"events to '{settings.sessions_topic}'; conversations idle for "
            f"{env['SCORER_THREAD_INACTIVITY_GAP_S']}s close; waiting for {expected} scores"
        )
        started = time.monotonic()
        counts = decides(ruleset)
        scores = asyncio.run(
            collect_scores(bootstrap, settings.scores_topic, expected, timeout, security, counts)
        )
        decided = sum(1 for score in scores.values() if counts(score))
        console.print(summary_table(scores, ruleset))
        console.print(
            f"{decided}/{expected} scores in {time.monotonic() - started:.1f}s"
            + (
                f" (and {len(scores) - decided} more of rubrics and pairs)"
                if len(scores) > decided
                else ""
            )
        )
        metrics_url = f"http://127.0.0.1:{web_port}/metrics"
        try:
            with urllib.request.urlopen(metrics_url, timeout=5) as resp:
                text = resp.read().decode()
            lines = [ln for ln in text.splitlines() if ln.startswith("scorer_scores_total")]
            console.print(f"metrics: {metrics_url} ({len(lines)} scorer_scores_total series)")
            if decided < expected and (trouble := judge_trouble(text)):
                console.print(f"[red]{trouble}[/]")
        except OSError as exc:
            console.print(f"[red]metrics endpoint not reachable: {exc}[/]")
        if decided < expected:
            console.print(
                f"[red]{expected - decided} scores did not come within {timeout:.0f}s[/] "
                "(--timeout waits longer)"
            )
        if keep_running:
            console.print(
                f"the broker, the worker and {metrics_url} stay up: send more traces, scrape "
                "the metrics, watch the dashboards (docs/operations.md#dashboards); Ctrl-C stops"
            )
            wait_for_interrupt(console, worker)
        return 0 if decided == expected else 1
    finally:
        if worker and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        if broker:
            broker.stop()
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
