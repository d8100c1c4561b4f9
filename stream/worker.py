"""Wire settings, rules, judge, app and agents together and run a worker."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import secrets
import shutil
import signal
import socket
import tempfile
from functools import partial
from pathlib import Path

import faust
import mode

from . import rules_summary
from .agents.agreement import register_agreement_agents
from .agents.batch_jobs import BatchJobs
from .agents.canary import JudgeCanary
from .agents.otel_events import register_otel_events_agent
from .agents.otlp import register_otlp_agents
from .agents.sessions import co_partitioned_sessions, register_session_agent
from .agents.threads import register_thread_agent
from .agents.traces import register_trace_agent
from .app import Topics, create_app
from .config_errors import env_name
from .engine.scorer import Scorer
from .engine.silence import Silence, SilenceWatch, UnjudgedThreads
from .engine.spend import SpendLedger
from .engine.verdicts import NO_JUDGE_REASON, Judge
from .errors import ConfigError
from .judge.batch import BatchAPI
from .judge.cache import CachingJudge
from .judge.client import JudgeClient
from .judge.fleet import Fleet, PaceBoard, account_of
from .judging import caches_verdicts, judge_of, verdict_table
from .kafka.broker import EmbeddedBroker, how_to_use, user_broker
from .kafka.data_dir import lock_data_dir
from .kafka.io import check_cluster
from .kafka.mends import rocksdb_store
from .kafka.mends.faust_worker import MendedWorker
from .kafka.mends.lag import LagMeter
from .kafka.mends.library_versions import check_libraries
from .kafka.mends.snapshot_store import write_snapshots
from .kafka.mends.stale_state import settle_stale_state
from .kafka.pace_topic import PaceTopic
from .kafka.reference_topic import ReferenceTopic
from .kafka.security import KafkaSecurity
from .live_rules import LiveRules, export_rule_set
from .metrics import ProjectLabels, ScorerMetrics, ToolLabels
from .metrics.references import watch_references
from .observer import Observer
from .references import ReferenceStore
from .ruleset.loader import deployment_rules
from .ruleset.schema import PromptedRule, RuleSet
from .settings import Settings
from .sources.log import SourceLog
from .threads.router import ThreadRouter

log = logging.getLogger(__name__)


def build_worker(settings: Settings, bootstrap: str, loglevel: str = "info") -> faust.Worker:
    """A Faust worker with the trace agent and the configured rule set (fails fast on bad rules)."""
    metrics = ScorerMetrics.default()
    ruleset = deployment_rules(settings)
    metrics.label_projects(
        ProjectLabels(settings.metric_projects, ruleset.projects, settings.metric_project_limit)
    )
    metrics.tool_calls.label_tools(ToolLabels(settings.metric_tool_limit))
    app, topics = create_app(settings, bootstrap, metrics)
    # the verdict cache's store: the verdicts table (made only where a cache will use it)
    caching = settings.judge_cache_table and caches_verdicts(settings)
    judge = judge_of(settings, metrics, verdict_table(app, settings, metrics) if caching else None)
    ledger = spend_ledger(settings, metrics)
    redaction = settings.redaction_policy()
    prompted = [r for r in ruleset.rules if isinstance(r, PromptedRule)]
    if problems := settings.redaction_problems((r.id, r.judge.redact) for r in prompted):
        raise ConfigError(problems)
    scorer = Scorer(
        ruleset,
        judge,
        default_model=settings.judge_model,
        observer=metrics,
        max_prompt_tokens=settings.judge_max_prompt_tokens,
        max_tool_calls=settings.tool_calls_max,
        ledger=ledger,
        silence=silence_watch(ruleset, settings.silent_after_traces, metrics),
        holds=judge.holds if isinstance(judge, CachingJudge) else None,
    )
    scorer.context.redaction = redaction
    if judge is not None:
        register_batch_jobs(app, settings, scorer, judge, topics, metrics)
        JudgeCanary(app, scorer, settings, metrics).register()  # the leader's rounds
    router = ThreadRouter(ruleset, settings.turn_max_bytes, metrics)
    sources = SourceLog()
    references = ReferenceStore(settings.references_max_bytes)  # read only with a topic
    register_trace_agent(
        app,
        topics,
        scorer,
        max_in_flight=settings.max_in_flight,
        batch_max=settings.trace_batch_max,
        batch_wait_s=settings.trace_batch_wait_ms / 1000,
        router=router,
        sources=sources,
        observer=metrics,
        references=references if settings.references_topic else None,
    )
    # session events folded where they are read (co-partitioned topics), else forwarded
    here = co_partitioned_sessions(settings, bootstrap) if router.session_rules else None
    if router.session_rules and here is None:
        register_session_agent(
            app,
            topics,
            router,
            max_in_flight=settings.max_in_flight,
            sources=sources,
            observer=metrics,
        )
    processor = None
    if ruleset.for_scope("thread") or ruleset.pair_rules():
        sessions = (router, here) if here is not None else None
        processor = register_thread_agent(app, topics, scorer, settings, metrics, sources, sessions)
    live = LiveRules(
        settings,
        ruleset,
        scorer,
        router,
        metrics,
        partial(silence_watch, after=settings.silent_after_traces, observer=metrics),
        processor,
    )
    if topics.otlp is not None:
        register_otlp_agents(app, topics, settings, metrics)
    if topics.labels is not None:
        register_agreement_agents(app, topics, scorer, settings, metrics, bootstrap)
    if settings.otel_events_topic:  # "" (the default): no evaluation events
        register_otel_events_agent(app, topics, settings, metrics)
    register_rule_reloads(app, live, settings.rules_reload_s)
    export_rule_set(metrics, ruleset)
    usage = rocksdb_store.memory_usage if settings.store == "rocksdb" else None
    metrics.watch_memory(settings.memory_share(1.0), usage)
    if judge is None:
        log.warning("LLM rules will publish skipped scores: %s", NO_JUDGE_REASON)
    log.info(
        "loaded %d rules (%s) from %s, rule set %s",
        len(ruleset.rules),
        ", ".join(ruleset.packs),
        settings.rules_dir,
        ruleset.digest,
    )
    for line in rules_summary.summary(ruleset):  # packs, cost a target, what is not run
        print(line, flush=True)
    lag_meter = LagMeter(
        app,
        [
            settings.traces_topic,
            settings.sessions_topic,
            settings.thread_events_topic_name,
            *(
                [settings.otlp_topic, settings.otlp_assembly_topic, settings.otlp_traces_topic]
                if settings.otlp_topic
                else []
            ),
            *(
                [settings.labels_topic, settings.agreement_events_topic]
                if settings.labels_topic
                else []
            ),
        ],
        bootstrap,
        settings.lag_interval_s,
        observer=metrics,
        security=settings.kafka,
    )
    services: list[mode.Service] = [lag_meter]
    if settings.references_topic:  # "" (the default): no reference topic
        watch_references(metrics.registry, references)
        services.append(
            ReferenceTopic(references, settings.references_topic, bootstrap, settings.kafka)
        )
    if judge is not None and settings.judge_pace_share:
        services.append(pace_sharing(judge, settings, bootstrap))
    return ScorerWorker(app, *services, loglevel=loglevel, quiet=True, redirect_stdouts=False)


def pace_sharing(judge: Judge, settings: Settings, bootstrap: str) -> PaceTopic:
    """The judge clients' limiters paced at this worker's share of their account's limits,
    shared with the other workers through the judge-pace topic (design record 46)."""
    client = judge.inner if isinstance(judge, CachingJudge) else judge
    assert isinstance(client, JudgeClient)
    board = PaceBoard(f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}")
    config = settings.judge_config()
    key = config.api_key.get_secret_value() if config.api_key else None
    account = account_of(config.base_url or "", key)
    fleets = [Fleet(board, account)]
    client.fleet = fleets[0]
    if client.decisions is not None:  # the Decisions API's limits: an account of their own
        client.decisions.fleet = Fleet(board, account_of(f"{config.base_url}#decisions", key))
        fleets.append(client.decisions.fleet)
    return PaceTopic(fleets, board, settings.judge_pace_topic, bootstrap, settings.kafka)


def register_batch_jobs(
    app: faust.App,
    settings: Settings,
    scorer: Scorer,
    judge: Judge,
    topics: Topics,
    observer: ScorerMetrics,
) -> BatchJobs:
    """The batch queue of ``judge.mode: batch`` rules and ``defer`` budgets: a table and a
    timer (idle while no rule defers), on the judge's endpoint's Batch API."""
    client = judge.inner if isinstance(judge, CachingJudge) else judge
    assert isinstance(client, JudgeClient)
    config = settings.judge_config()
    api = BatchAPI(
        base_url=settings.batch_base_url or config.base_url,
        api_key=config.api_key.get_secret_value() if config.api_key else None,
        timeout_s=config.timeout_s,
    )
    return BatchJobs(
        app,
        partitions=settings.topic_partitions,
        scorer=scorer,
        client=client,
        online=judge,
        api=api,
        topics=topics,
        observer=observer,
        poll_s=settings.batch_poll_s,
        give_up_s=settings.batch_give_up_s,
    )


def register_rule_reloads(app: faust.App, live: LiveRules, every_s: float) -> None:
    """Rule files looked at every ``every_s`` (0: only on SIGHUP), and on SIGHUP."""

    @app.task
    async def reload_on_sighup() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, live.reload, "SIGHUP")

    if every_s > 0:

        @app.timer(every_s, name="rules.reload")
        async def reload_changed_rules() -> None:
            live.check()


def spend_ledger(settings: Settings, metrics: ScorerMetrics) -> SpendLedger:
    """The worker's spend budgets, priced from SCORER_JUDGE_PRICES and watched by metrics."""

    ledger = SpendLedger(settings.judge_budgets, settings.judge_cost)
    for index, budget in enumerate(settings.judge_budgets):
        metrics.watch_budget(
            budget.rule or "",
            budget.model or "",
            budget.window,
            partial(ledger.share, index),
        )
    return ledger


def run_worker(settings: Settings, loglevel: str = "info") -> None:
    """Run until stopped; with no broker configured, start the embedded one first."""
    check_libraries(settings.allow_untested_libraries)  # the versions the mends were read at
    broker: EmbeddedBroker | None = None
    bootstrap = settings.kafka_bootstrap_servers
    if not bootstrap:
        broker = user_broker(settings.embedded_port)
        bootstrap = broker.bootstrap
        plaintext = KafkaSecurity.model_construct()  # the embedded broker has no TLS or SASL
        settings = settings.model_copy(update={"broker_kind": "tansu", "kafka": plaintext})
        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
        print("no KAFKA_BOOTSTRAP_SERVERS: ", end="")
        print(how_to_use(bootstrap, settings.traces_topic, settings.scores_topic), flush=True)
    else:  # a wrong password or an untrusted certificate fails here, not in a retry loop
        asyncio.run(check_cluster(bootstrap, settings.kafka))
        log.info("Kafka at %s: %s", bootstrap, settings.kafka.describe())
    scratch = None
    try:
        if broker:  # its topics live as long as it does: so do the tables kept on disk
            scratch = tempfile.mkdtemp(prefix="scorer-data-")
            settings = settings.model_copy(update={"data_dir": Path(scratch)})
        data_dir_setting = env_name(Settings, "data_dir", os.environ)
        lock_data_dir(settings.data_dir, data_dir_setting)
        log.info("%s", store_line(settings))
        log.info("%s", settings.membership())
        print(f"metrics at http://{settings.web_host}:{settings.web_port}/metrics", flush=True)
        worker = build_worker(settings, bootstrap, loglevel)
        if not scratch:  # tables from another broker: one line, or rebuilt (record 38)
            stale = env_name(Settings, "stale_state", os.environ)
            settle_stale_state(
                worker.app, bootstrap, settings.kafka, settings.stale_state, data_dir_setting, stale
            )
        worker.execute_from_commandline()
    finally:
        if broker:
            broker.stop()
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def store_line(settings: Settings) -> str:
    """The one start-up line that says where the tables are kept, and why there."""
    if "store" in settings.model_fields_set:
        why = "SCORER_STORE"
    else:
        why = "the default: rocksdict " + (
            "imports" if settings.store == "rocksdb" else "does not import"
        )
    where = (
        f"RocksDB under {settings.data_dir}"
        if settings.store == "rocksdb"
        else f"memory, with a snapshot under {settings.data_dir} at a clean stop"
    )
    return f"tables kept in {where} ({why})"


def silence_watch(ruleset: RuleSet, after: int, observer: Observer) -> SilenceWatch | None:
    """Reports trace rules that match no traffic: one warning each, and scorer_rule_silent;
    and traces with a thread id that no conversation rule matches: a warning naming them."""
    if not after:
        return None

    def report(silence: Silence) -> None:
        rule = silence.rule
        observer.on_rule_silent(rule.id, rule.pack, silence.silent)
        if silence.silent:
            log.warning("%s", silence.describe())
        else:
            log.info("rule %s/%s matches traces again", rule.pack, rule.id)

    def report_threads(unjudged: UnjudgedThreads) -> None:
        log.warning("%s", unjudged.describe())

    return SilenceWatch(
        ruleset.for_scope("trace"),
        after,
        report,
        ruleset.thread_rules("conversation"),
        report_threads,
    )


class ScorerWorker(MendedWorker):
    """Faust's worker as a scorer worker runs it (``MendedWorker``): the memory store's
    snapshots written once the app has stopped, and the metrics endpoint's failure to
    listen named."""

    async def on_shutdown(self) -> None:
        """The app has stopped (its producer flushed and closed): the memory store's
        snapshots, so that the next start replays only what follows them."""
        await super().on_shutdown()
        write_snapshots(self.app)

    def start_failure(self, exc: OSError) -> ConfigError | None:
        """The metrics endpoint (Faust's web server, the only thing a worker listens on)
        could not listen where the settings say."""
        host, port = self.app.conf.web_bind, self.app.conf.web_port
        if f"{(host, port)}" not in str(exc):
            return None
        names = {n: env_name(Settings, n, os.environ) for n in ("web_host", "web_port")}
        if exc.errno == errno.EADDRINUSE:
            return ConfigError(
                [
                    f"{names['web_port']}: {host}:{port} is in use (another worker on this "
                    f"host?): set {names['web_port']} to a free port for this worker's metrics"
                ]
            )
        if exc.errno == errno.EADDRNOTAVAIL:
            return ConfigError(
                [
                    f"{names['web_host']}: {host} is not an address of this host: set it to "
                    "one that is (0.0.0.0 for every interface)"
                ]
            )
        if exc.errno == errno.EACCES:
            return ConfigError(
                [
                    f"{names['web_port']}: not allowed to listen on port {port} (ports under "
                    f"1024 need privileges): set {names['web_port']} to a higher one"
                ]
            )
        return None
