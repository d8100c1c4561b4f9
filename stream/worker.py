"""Wire settings, rules, judge, app and agents together and run a worker."""

from __future__ import annotations

import logging
import os

import faust

from . import __version__, metrics
from .agents import register_session_agent, register_trace_agent
from .app import create_app
from .broker import EmbeddedBroker
from .judge import NO_JUDGE_REASON, JudgeClient
from .lag import LagMeter
from .rules import load_rules
from .scoring import Scorer
from .settings import Settings
from .thread_agent import register_thread_agent
from .thread_events import ThreadRouter

log = logging.getLogger(__name__)


def build_worker(settings: Settings, bootstrap: str, loglevel: str = "info") -> faust.Worker:
    """A Faust worker with the trace agent and the configured rule set (fails fast on bad rules)."""
    ruleset = load_rules(settings.rules_dir, settings.packs)
    judge = JudgeClient(settings) if settings.judge_configured else None
    app, topics = create_app(settings, bootstrap)
    scorer = Scorer(ruleset, judge, default_model=settings.judge_model)
    router = ThreadRouter(ruleset)
    register_trace_agent(app, topics, scorer, max_in_flight=settings.max_in_flight, router=router)
    if router.session_rules:
        register_session_agent(app, topics, scorer, router, max_in_flight=settings.max_in_flight)
    if ruleset.for_scope("thread"):
        register_thread_agent(app, topics, scorer, settings)
    metrics.WORKER_INFO.clear()
    metrics.WORKER_INFO.labels(version=__version__, ruleset=ruleset.digest).set(1)
    metrics.RULE_DIRECTION.clear()
    for rule in ruleset.rules:
        direction = 1 if rule.output.higher_is_better else -1
        metrics.RULE_DIRECTION.labels(rule=rule.id, pack=rule.pack, scope=rule.scope).set(direction)
    if judge is None:
        log.warning("LLM rules will publish skipped scores: %s", NO_JUDGE_REASON)
    log.info(
        "loaded %d rules (%s) from %s, rule set %s",
        len(ruleset.rules),
        ", ".join(ruleset.packs),
        settings.rules_dir,
        ruleset.digest,
    )
    lag_meter = LagMeter(
        app,
        [settings.traces_topic, settings.sessions_topic, settings.thread_events_topic_name],
        bootstrap,
        settings.lag_interval_s,
    )
    worker = faust.Worker(app, lag_meter, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    # Faust's terminal spinner sets the root logger to DEBUG when the level is WARN or above,
    # so every library builds a debug record per message (aiokafka logs one per send).
    worker.spinner = None
    return worker


def run_worker(settings: Settings, loglevel: str = "info") -> None:
    """Run until stopped; with no broker configured, start the embedded one first."""
    broker: EmbeddedBroker | None = None
    bootstrap = settings.kafka_bootstrap_servers
    if not bootstrap:
        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap
        settings = settings.model_copy(update={"broker_kind": "tansu"})
        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
        print(f"no KAFKA_BOOTSTRAP_SERVERS: started the embedded broker on {bootstrap}", flush=True)
    try:
        build_worker(settings, bootstrap, loglevel).execute_from_commandline()
    finally:
        if broker:
            broker.stop()
