"""The score-drop alert, old rule beside new, on synthetic score series in a real Prometheus
(issue 49). Prints figures beside their targets; asserts nothing.

Data: each series' counters (``scorer_score_value_count`` and ``_sum``, which the old rule
reads, and ``scorer_score_moments_total`` for powers 0 to 3, which the new one reads) and each
rule's ``scorer_rule_direction`` and ``scorer_rule_alert_min_drop`` as a 1-minute scrape would
see them, written as OpenMetrics (one file per 2-hour block) and
turned into TSDB blocks by ``promtool tsdb create-blocks-from openmetrics``; a real
``prometheus`` serves them (its own temp dir and port, retention of 100 years: counted back
from the newest block, so the synthetic past stays; overlapping blocks always accepted).

Rules: read from YAML, never retyped: the new ones from ``grafana/alerts/scorer.rules.yml``, the
old ones from ``OLD_RULES`` below (8b0a36c). Variants are text substitutions on the new ones,
in memory, labelled as such (a recorded series they change is renamed). Every recorded series
the alert reads, directly or not, is backfilled with ``promtool tsdb create-blocks-from
rules``, layer by layer (the server restarted to read each layer before the next one reads
it), but those the alert's own expression reads bare (``scorer:score_drop_alarm``; the old
rule's ``scorer:score_drop:30m_vs_1d``): they are inlined into it, in parentheses, and the
alert's expression so inlined is evaluated by ``query_range`` at every evaluation of the run.

How this maps onto Prometheus's rule manager: the manager evaluates a group every
``evaluation_interval`` (1m) at the minute plus an offset it derives from the group's name
and file, each rule in order at the same timestamp, so an alert reads the recording rules of
the same evaluation. promtool's backfill takes the same offset from the group it is given:
every layer here is one group named ``scorer`` in one file, so all the recorded series share
the evaluation timestamps, and the alert's ``query_range`` runs at those timestamps too (the
offset is read back from the backfilled samples). An inlined expression is the recorded one
evaluated at the same instant. The scrape samples sit on the minute, so at an evaluation a
``[15m]`` window holds 15 samples (14 minutes of scores, which ``increase`` extrapolates to 15,
as a live Prometheus does). Inlining the last layer matters: a backfilled series has no
staleness markers, so a lookback of 5 minutes would carry its last sample over a gap, and
the alarm comes and goes by the minute; the layers below it vanish only when a window holds no
score, which the gates (n >= 30, n > 0) exclude anyway. The alert's ``for`` is then applied to
each series' evaluations as the manager does: pending at the first evaluation that returns
the series, firing at the first evaluation at least ``for`` after it (``for: 2m``: three
evaluations in a row), and dropped at the first evaluation that does not return it (a gap
resets it). A page is one firing episode (inactive to firing). Not modelled: a restart of
Prometheus (it forgets pending alerts), scrapes more often than once a minute.

The run: ``--days`` counted days after a warm-up of 30 hours (the new baseline, the day
before the last 6 hours, is full only then). Pages in the warm-up are reported apart, never
counted. False pages: ``--series`` stationary series (the spreads and volumes of
``score_series.py`` in turn). Detection: per spread, volume and step, one series with a drop
every 42 hours lasting 6 to 8 hours; a drop is found when the alert fires within 6 hours of
its start; a page later than 6 hours after a drop's end (when its scores have left the 6-hour
window) counts as a false page of that series. A drop of d makes a share w = d / |mean -
worst| of the scores the worst level (for pass/fail, p - d). The yardstick: an ideal CUSUM
with the target's false-alarm rate (one page a month over the whole set) needs about 2 ln(ARL)
/ (d / sd)^2 scores, ARL the scores one series sees in ``--series`` months.

    python bench/score_alerts.py [--days 30] [--series 50] [--detect all] [--seed 49]
        [--variants] [--json FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from queue import Queue
from typing import Any

import httpx
import numpy as np
import orjson
import score_series as ss
from score_prom import (
    Plan,
    Prometheus,
    RuleSet,
    backfill_layer,
    dump,
    firing,
    import_openmetrics,
    labels_key,
    plan_for,
)
from score_report import report_tables

ROOT = Path(__file__).resolve().parent.parent
NEW_RULES = ROOT / "grafana" / "alerts" / "scorer.rules.yml"
ALERT = "ScorerRuleScoreDrop"
T0 = 1_767_571_200  # 2026-01-05T00:00:00Z, on a 2-hour block boundary
WARMUP_MIN = 30 * 60
WITHIN_S = 6 * 3600  # a drop is found when the alert fires within this of its start
TAIL_S = 6 * 3600  # after a drop, its scores stay in the 6-hour window this long

# ScorerRuleScoreDrop and the recording rules it read before issue 49, copied from
# grafana/alerts/scorer.rules.yml at 8b0a36c.
OLD_RULES = """
groups:
  - name: scorer
    rules:
      - record: scorer:rule_direction
        expr: max by (rule, pack, scope) (scorer_rule_direction)
      - record: scorer:score_mean:30m
        expr: |
          sum by (rule, pack, criterion, project) (increase(scorer_score_value_sum[30m]))
          / (sum by (rule, pack, criterion, project) (increase(scorer_score_value_count[30m])) > 0)
      - record: scorer:score_mean:1d
        expr: |
          sum by (rule, pack, criterion, project) (increase(scorer_score_value_sum[1d]))
          / (sum by (rule, pack, criterion, project) (increase(scorer_score_value_count[1d])) > 0)
      - record: scorer:scores:30m
        expr: sum by (rule, pack, criterion, project) (increase(scorer_score_value_count[30m]))
      - record: scorer:score_drop:30m_vs_1d
        expr: |
          (scorer:score_mean:1d - scorer:score_mean:30m)
          * on (rule, pack) group_left scorer:rule_direction
      - alert: ScorerRuleScoreDrop
        expr: |
          scorer:score_drop:30m_vs_1d > 0.15
          and on (rule, pack, criterion, project) scorer:scores:30m{criterion!="preference"} >= 20
        for: 10m
"""

# (name, text replaced, replacement, for): variants of the new rule, to show the trade-off
VARIANTS = (
    ("new, z bound 4", "5 + 4 * clamp_min", "4 + 2.5 * clamp_min", None),
    ("new, z bound 4.5", "5 + 4 * clamp_min", "4.5 + 3.2083 * clamp_min", None),
    ("new, for 0m", "", "", 0),
)
# read by every window's test: backfilled once rather than inlined into each
BACKFILL_ALSO = frozenset(
    {"scorer:score_mean:baseline", "scorer:score_var:baseline", "scorer:score_skew:baseline"}
)
# what the windows show when a page fires (the new rule's recorded series, inlined)
WHY = (
    *tuple(
        f"scorer:score_{what}:{w}"
        for w in ("15m", "1h", "6h")
        for what in ("n", "drop", "drop_se", "drop_z", "drop_bound")
    ),
    "scorer:score_n:baseline",
    "scorer:score_mean:baseline",
    "scorer:rule_min_drop",
)


def build_tsdb(series: list[ss.Series], minutes: int, seed: int, prom: Prometheus) -> None:
    """The series' counters, as OpenMetrics 2-hour files, into the server's TSDB via promtool
    (two promtool processes import while the next files are written)."""
    values = [
        ss.counters(s, minutes, np.random.default_rng([seed, i])) for i, s in enumerate(series)
    ]
    files: Queue[Path | None] = Queue(maxsize=8)
    out = prom.folder / "raw_blocks"

    def importer() -> None:
        while (path := files.get()) is not None:
            import_openmetrics([path], out, workers=1)

    threads = [threading.Thread(target=importer) for _ in range(2)]
    for thread in threads:
        thread.start()
    text_dir = prom.folder / "openmetrics"
    text_dir.mkdir(exist_ok=True)
    for block, text in ss.openmetrics_blocks(series, values, T0, minutes):
        path = text_dir / f"block{block:04d}.om"
        path.write_text(text)
        files.put(path)
    for _ in threads:
        files.put(None)
    for thread in threads:
        thread.join()
    prom.add_blocks(out)


def evaluate(
    prom: Prometheus, sets: list[RuleSet], end: int, log: dict[str, float]
) -> tuple[Plan, float, dict[str, dict[str, list[tuple[float, float]]]]]:
    """Backfill the layers, then each rule set's alert at the group's evaluation times: its
    firing episodes (fired, last seen; seconds) per series, and the evaluations' offset."""
    plan, needed = plan_for(sets, BACKFILL_ALSO)
    layers = plan.layers(needed)
    done_file = prom.folder / "backfilled.txt"  # what a kept folder holds already
    done = set(done_file.read_text().split()) if done_file.exists() else set()
    for i, layer in enumerate(layers, 1):
        todo = {name: expr for name, expr in layer.items() if name not in done}
        if todo:
            started = time.monotonic()
            backfill_layer(prom, todo, T0, end)
            log[f"backfill layer {i} ({len(todo)} rules)"] = time.monotonic() - started
            with done_file.open("a") as out:
                out.write("".join(f"{name}\n" for name in todo))
    offset = prom.eval_offset(next(iter(layers[0])), T0 + 86400)
    start = T0 + offset
    episodes: dict[str, dict[str, list[tuple[float, float]]]] = {}
    seen: dict[str, dict[str, list[int]]] = {}
    for rule_set in sets:
        started = time.monotonic()
        expr = plan.inline(rule_set.alert_expr)
        present = seen[expr] = seen.get(expr) or prom.query_range(expr, start, end)
        episodes[rule_set.name] = {
            k: [(start + a, start + b) for a, b in firing(v, rule_set.for_s)]
            for k, v in present.items()
        }
        log[f"alert query: {rule_set.name}"] = time.monotonic() - started
    return plan, offset, episodes


def key_of(series: ss.Series) -> str:
    return labels_key(
        {"rule": series.rule, "pack": ss.PACK, "criterion": ss.CRITERION, "project": series.project}
    )


def why(prom: Prometheus, plan: Plan, series: ss.Series, at: int) -> dict[str, float]:
    """The new rule's windows for one series when a page fired (nan: no value)."""
    selector = f'scorer:score_n:15m{{rule="{series.rule}",project="{series.project}"}}'
    out = {}
    for name in WHY:
        on = "rule" if name == "scorer:rule_min_drop" else "rule, pack, criterion, project"
        expr = f"({plan.inline(name)}) and on ({on}) {selector}"
        reply = httpx.post(
            f"{prom.url}/api/v1/query", data={"query": expr, "time": at}, timeout=120
        )
        result = reply.json()["data"]["result"]
        out[name.removeprefix("scorer:")] = float(result[0]["value"][1]) if result else math.nan
    return out


def false_pages(
    series: list[ss.Series], episodes: dict[str, list[tuple[float, float]]], days: int
) -> dict[str, Any]:
    counted_from = T0 + WARMUP_MIN * 60
    pages, warmup = [], 0
    for s in series:
        for fired, last in episodes.get(key_of(s), []):
            if fired < counted_from:
                warmup += 1
            else:
                pages.append({"rule": s.rule, "project": s.project, "fired": fired, "last": last})
    return {
        "pages": len(pages),
        "per_month": len(pages) * 30 / days,
        "warmup_pages": warmup,
        "episodes": pages,
    }


def detection(
    series: list[ss.Series], episodes: dict[str, list[tuple[float, float]]]
) -> list[dict[str, Any]]:
    rows = []
    for s in series:
        fired = sorted(f for f, _ in episodes.get(key_of(s), []))
        delays, outside = [], 0
        for start, _ in s.drops:
            t_start = T0 + start * 60
            hits = [f - t_start for f in fired if t_start <= f <= t_start + WITHIN_S]
            delays.append(min(hits) if hits else None)
        for f in fired:
            if not any(T0 + a * 60 <= f <= T0 + b * 60 + TAIL_S for a, b in s.drops):
                outside += 1
        found = [d for d in delays if d is not None]
        rows.append(
            {
                "spread": s.spread.name,
                "volume": s.volume,
                "step": s.step,
                "trials": len(delays),
                "found": len(found),
                "median_delay_min": statistics.median(found) / 60 if found else None,
                "pages_outside_drops": outside,
            }
        )
    return rows


def cusum_minutes(step: float, sd: float, volume: float, arl_months: float) -> list[float]:
    """An ideal CUSUM's delay (minutes) to a drop of ``step`` at the same false-alarm rate, ARL
    its scores between false alarms: 2 ln(ARL) / delta^2 scores (delta = step / sd: the leading
    term), and Siegmund's closer 2 ln(ARL delta^2 / 2) / delta^2."""
    arl = volume * 30 * 1440 * arl_months
    delta2 = (step / sd) ** 2
    return [2 * math.log(arl) / delta2 / volume, 2 * math.log(arl * delta2 / 2) / delta2 / volume]


def run(args: argparse.Namespace) -> dict[str, Any]:
    minutes = WARMUP_MIN + args.days * 1440
    end = T0 + minutes * 60
    spreads = (
        ss.DETECT_SPREADS if args.detect == "all" else tuple(filter(None, args.detect.split(",")))
    )
    fp = ss.false_page_set(args.series)
    det = ss.detection_set(WARMUP_MIN, minutes, np.random.default_rng([args.seed, 10**6]), spreads)
    text = NEW_RULES.read_bytes()
    rules_blob = hashlib.sha1(b"blob %d\0" % len(text) + text).hexdigest()  # git hash-object
    new = RuleSet.from_yaml("new", text.decode(), ALERT)
    sets = [RuleSet.from_yaml("old", OLD_RULES, ALERT), new]
    if args.variants:
        sets += [new.substituted(n, a, b, f) for n, a, b, f in VARIANTS]
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="score_alerts_"))
    prom = Prometheus(folder)
    log: dict[str, float] = {}
    started = time.monotonic()
    try:
        built = folder / "built.txt"  # a kept folder with the same run's series in its TSDB
        stamp = f"{args.days} {args.series} {args.detect} {args.seed}\n"
        if not built.exists() or built.read_text() != stamp:
            build_tsdb(fp + det, minutes, args.seed, prom)
            built.write_text(stamp)
            log["series into the TSDB"] = time.monotonic() - started
        prom.start()
        plan, offset, episodes = evaluate(prom, sets, end, log)
        result: dict[str, Any] = {"days": args.days, "series": args.series, "seed": args.seed}
        result["evaluation_offset_s"] = offset
        result["rules"] = {"file": str(NEW_RULES.relative_to(ROOT)), "git_blob": rules_blob}
        result["false_pages"] = {n: false_pages(fp, e, args.days) for n, e in episodes.items()}
        result["detection"] = {n: detection(det, e) for n, e in episodes.items()}
        by_key = {(s.rule, s.project): s for s in fp}
        for page in result["false_pages"]["new"]["episodes"][: args.explain]:
            page["why"] = why(prom, plan, by_key[page["rule"], page["project"]], page["fired"])
    finally:
        prom.stop()
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    log["total"] = time.monotonic() - started
    result["timings_s"] = log
    result["spreads"] = {
        s.name: {"what": s.what, "mean": s.mean, "sd": s.sd, "direction": s.direction}
        for s in ss.SPREADS.values()
    }
    return with_cusum(result)


def with_cusum(result: dict[str, Any]) -> dict[str, Any]:
    """The CUSUM yardstick for every detection row (leading term, Siegmund's), ARL from the
    whole set's target: 1 false page a month over ``series`` series."""
    arl_months = max(result["series"], 1)
    result["cusum_minutes"] = {
        f"{r['spread']}/{r['volume']}/{r['step']:g}": cusum_minutes(
            r["step"], ss.SPREADS[r["spread"]].sd, r["volume"], arl_months
        )
        for r in result["detection"]["new"]
    }
    return result


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=30, help="counted days after the warm-up")
    parser.add_argument("--series", type=int, default=50, help="stationary series")
    parser.add_argument("--detect", default="all", help="spreads with drops: all, none or a,b")
    parser.add_argument("--seed", type=int, default=49)
    parser.add_argument("--variants", action="store_true", help="also variants of the new rule")
    parser.add_argument("--explain", type=int, default=10, help="new false pages explained")
    parser.add_argument("--json", help="write the figures to this file ('-': stdout)")
    parser.add_argument(
        "--keep", help="work in this folder and keep it (a later run with it goes on from there)"
    )
    parser.add_argument("--report", help="print the tables of an earlier run's --json file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.detect == "none":
        args.detect = ""
    result = with_cusum(orjson.loads(Path(args.report).read_bytes())) if args.report else run(args)
    if args.json == "-":
        sys.stdout.buffer.write(dump(result) + b"\n")
    else:
        print(report_tables(result))
        if args.json:
            Path(args.json).write_bytes(dump(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
