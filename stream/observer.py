"""How domain code reports what it did: one observer object with a callback per event.

Engine, thread and judge code call these callbacks and never touch a metrics library (the
pattern of Faust's sensors). The base class does nothing, so pure code and unit tests need no
registry; ``stream.metrics.ScorerMetrics`` turns the callbacks into Prometheus metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .models import ScoreEvent, TokenUsage

if TYPE_CHECKING:
    from .canary.compare import CanaryRound
    from .judge.fleet import FleetReading


class Observer:
    """Callbacks for everything the worker measures; every one is a no-op here."""

    # -- input and delivery ----------------------------------------------------------

    def on_trace_consumed(self, topic: str, count: int = 1) -> None:
        """``count`` trace messages were consumed from ``topic`` (valid or not)."""

    def on_dead_letter(self, topic: str, reason: str) -> None:
        """A message of ``topic`` went to the dead-letter topic for ``reason``."""

    def on_scoring_overhead(self, seconds: float) -> None:
        """Engine time spent on one trace, beyond its judge calls."""

    def on_publish_latency(self, seconds: float) -> None:
        """From handing a trace's messages to the producer to the broker having them all."""

    def on_trace_batch(self, size: int) -> None:
        """``size`` traces were taken from the stream and scored together."""

    def on_score_published(self, score: ScoreEvent) -> None:
        """``score`` is on the scores topic (a shadow judge's, with its ``variant``, is counted
        apart from the rule's own scores)."""

    def on_scores_published(self, scores: Iterable[ScoreEvent]) -> None:
        """Each of ``scores`` is on the scores topic: ``on_score_published`` of each, in order
        (a batch's at once, where counting them together costs less)."""
        for score in scores:
            self.on_score_published(score)

    def on_offset_gap(self, topic: str, outcome: str) -> None:
        """A fetch of ``topic`` skipped offsets: ``detected`` (fetched again), then ``filled``
        (they came) or ``persistent`` (still missing after the patience: delivered past)."""

    def on_commit_held(self, reason: str) -> None:
        """An offset commit was put off (``producer_not_drained``) or refused for good
        (``changelog_write_failed``: the worker stops)."""

    def on_membership_unconfirmed(self, outcome: str) -> None:
        """A record came while this worker's membership lease had lapsed (a long pause): the
        coordinator ``confirmed`` the membership and the record was processed, or the record
        was ``left`` to its partition's next owner."""

    def on_consumer_lag(self, topic: str, lag: int) -> None:
        """Messages of ``topic`` in this worker's partitions not yet committed."""

    def watch_in_flight(self, read: Callable[[], float]) -> None:
        """``read()`` says how many traces are in flight (read when metrics are collected)."""

    # -- engine ----------------------------------------------------------------------

    def on_decision(self, rule: str, pack: str, outcome: str) -> None:
        """A rule decided ``outcome`` for one target (filtered, sampled_out, skipped, ...)."""

    def on_prompt_cut(self, rule: str, pack: str) -> None:
        """A rule's prompt for one target was over its cap and judged cut in the middle."""

    def on_cascade(self, rule: str, pack: str, tier: str, reason: str) -> None:
        """A cascade rule's verdict for one target came from ``tier`` (first, judge), for
        ``reason`` (accepted, low_confidence, no_confidence, first_failed, audit)."""

    def on_cascade_cost(self, rule: str, pack: str, tier: str, usd: float) -> None:
        """A judge call of a cascade rule's ``tier`` (first, judge) cost ``usd``."""

    def on_redacted(self, rule: str, pack: str, counts: dict[str, int]) -> None:
        """A judge job of ``rule`` had ``counts`` values of each kind masked (never the values)."""

    def on_rules_loaded(
        self, version: str, digest: str, directions: list[tuple[str, str, str, int]]
    ) -> None:
        """A rule set was loaded: its digest, and (rule, pack, scope, +1/-1) per rule."""

    def on_rules_reload(self, outcome: str, projects: Iterable[str] = ()) -> None:
        """The rule files were looked at again while running: ``reloaded`` (a new set runs,
        whose filters name ``projects``), ``invalid`` or ``needs_restart`` (the set stays)."""

    def on_rule_silent(self, rule: str, pack: str, silent: bool) -> None:
        """A trace rule matched none of the last traces (``silent``), or matched again."""

    def on_comparison_contradiction(self, rule: str, pack: str) -> None:
        """A comparison's preference favoured the response its ratings put strictly lower
        (flagged on the preference score, its value kept)."""

    def on_pair_order(
        self, rule: str, pack: str, model: str, slots: list[str], flipped: bool
    ) -> None:
        """A pair was judged in both orders (``comparison.order: both``, or its audit share):
        each call's preference by slot (``first``, ``second``, ``neither``), and whether the
        preference flipped with the order (the judge's position, not the responses)."""

    def on_pair_preference(
        self, rule: str, pack: str, project: str, variant_a: str, variant_b: str, preferred: str
    ) -> None:
        """A comparison's preference was published ok (the rule's own, not a shadow's):
        ``preferred`` is ``a``, ``b`` or ``tie``. ``ScorerMetrics.on_score_published`` calls
        it for every such score."""

    # -- judge -----------------------------------------------------------------------

    def on_judge_call(
        self,
        model: str,
        outcome: str,
        seconds: float | None,
        usage: TokenUsage | None = None,
        cost_usd: float | None = None,
    ) -> None:
        """One judge attempt ended with ``outcome``, after ``seconds`` (None: not timed);
        usage and cost when it was answered."""

    def on_judge_retry(self, model: str, reason: str) -> None:
        """A judge call is tried again after ``reason``."""

    def on_judge_prompt_cache(
        self, model: str, cached_tokens: int, saved_usd: float | None
    ) -> None:
        """An answered attempt had ``cached_tokens`` of its prompt served from the provider's
        prompt cache, saving ``saved_usd`` (None: the model has no price)."""

    def on_rule_cost(self, rule: str, pack: str, model: str, usd: float) -> None:
        """A judge call for ``rule`` on ``model`` cost ``usd`` (estimated from the prices)."""

    def on_canary_round(self, found: CanaryRound, cost_usd: float | None) -> None:
        """A rule's canary round ended with ``found`` (its judge calls cost ``cost_usd``, None:
        no price): its gauges are set from it."""

    def on_canary_stopped(self) -> None:
        """This worker no longer runs the canary rounds (another leads): no gauge of its own."""

    def on_judge_cache(
        self,
        rule: str,
        pack: str,
        model: str,
        outcome: str,
        saved: TokenUsage | None = None,
        saved_usd: float | None = None,
    ) -> None:
        """A judge call for ``rule`` looked up the verdict cache: a ``hit`` (no call made;
        the tokens and cost its stored verdict had used, saved) or a ``miss``."""

    def watch_judge_cache(self, entries: Callable[[], float], size: Callable[[], float]) -> None:
        """Readers of the verdicts the cache holds, and of their estimated bytes."""

    def on_batch_job(self, rule: str, pack: str, event: str) -> None:
        """A judge job of ``rule`` was ``deferred`` to a batch, or ``finished`` from one."""

    def on_batch(self, status: str) -> None:
        """A batch was ``submitted``, or was seen finished (``completed``, ``failed``,
        ``expired``, ``cancelled``)."""

    def on_batch_pending(self, jobs: int, oldest_s: float) -> None:
        """The judge jobs pending in the partitions this worker owns, and how long the
        oldest has waited (0: none), each batch round."""

    def on_agreement_joined(self, rule: str, reference: str) -> None:
        """A pair was joined for ``rule``: a human label (``human``) or the primary judge's
        score (``primary``) with a judge's score."""

    def on_agreement_looked_back(self, runs: int, records: int, found: int) -> None:
        """A label came after scores: ``records`` of ``runs`` read back, ``found`` its own."""

    def watch_held(
        self, structure: str, entries: Callable[[], float], size: Callable[[], float] | None
    ) -> None:
        """Readers of what a worker's ``structure`` holds: entries and (if known) bytes."""

    def watch_memory(
        self, budget_bytes: int, rocksdb: Callable[[], Mapping[str, int]] | None
    ) -> None:
        """The worker's memory budget, and a reader of RocksDB's shared cache (None: the
        memory store)."""

    def on_agreement_thresholds(
        self, thresholds: list[tuple[str, str, str, str, float, int]]
    ) -> None:
        """The rules' agreement bounds (rule, measure, window, direction, threshold, labels
        needed), at every (re)load of the rule set."""

    def on_alert_bounds(self, min_drops: list[tuple[str, str, str, float]]) -> None:
        """The rules' smallest drops that page (rule, pack, scope, normalised ``alert.min_drop``),
        at every (re)load of the rule set."""

    def on_agreement_measured(self, measures: Mapping[Any, Mapping[str, Any]]) -> None:
        """The agreement measures now (``agreement.windows.AgreementWindows.measures``:
        (series, window) -> measure -> estimate); empty where this worker measures none."""

    def watch_budget(self, rule: str, model: str, window: str, used: Callable[[], float]) -> None:
        """A reader of the share of one spend budget used in its current window."""

    def watch_judge(
        self, available: Callable[[], float], unavailable_seconds: Callable[[], float]
    ) -> None:
        """Readers of the judge's availability (1 or 0) and of its time unavailable so far."""

    def watch_judge_pacing(
        self, model: str, pace: Callable[[], tuple[float, str]], token_limit: Callable[[], float]
    ) -> None:
        """Readers of one model's pace (calls a second, and why) and of the token limit per
        minute its provider announced (NaN when none)."""

    def watch_judge_fleet(self, model: str, read: Callable[[], FleetReading]) -> None:
        """A reader of one model's fleet: the workers sharing the judge's account, this
        worker's share, the fleet's pace and refusals (``judge/fleet.py``)."""

    # -- threads ---------------------------------------------------------------------

    def on_thread_event(self, event_type: str) -> None:
        """An event of ``event_type`` (turn, end, tick, published, failed) was applied."""

    def on_thread_close(self, kind: str, reason: str, turns: int) -> None:
        """A thread of ``kind`` closed for ``reason`` holding ``turns`` turns."""

    def on_pair_trace(self, outcome: str) -> None:
        """A trace of a pair was ``paired`` (one side of its pair) or ``ignored`` (its pair
        had its variant already, or was decided)."""

    def on_thread_close_delay(self, seconds: float) -> None:
        """An idle thread closed ``seconds`` after its inactivity deadline."""

    def watch_threads(
        self, open_threads: Callable[[], float], pending: Callable[[], float]
    ) -> None:
        """Readers of the open threads and of the closes not yet published."""

    def on_otlp_spans(self, outcome: str, count: int) -> None:
        """``count`` OpenTelemetry spans were read: kept, duplicate (already held), late
        (their trace was already assembled) or dropped (past the trace's bounds)."""

    def on_otlp_trace(self, root: str) -> None:
        """A trace was assembled from spans, its root span ``ended`` or ``missing``."""

    def watch_otlp(self, gathering: Callable[[], float], clock_lag: Callable[[], float]) -> None:
        """Readers of the traces being gathered from spans, and of how far the assembly
        clock is behind the wall clock (the least read spans partition)."""
