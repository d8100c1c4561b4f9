"""Synthetic score series for ``bench/score_alerts.py``: the spreads, the series of a run, and
their counters at 1-minute resolution written as OpenMetrics, one file per 2-hour block.

Every score is a level on a grid of hundredths of the 0..1 scale, so each minute's counts per
level are independent Poisson draws (a Poisson total split by the levels' probabilities) and
the counters (the count and the sums of x, x^2 and x^3) are exact sums of those levels.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

GRID = 100  # a level is an integer number of hundredths of the scale
BLOCK_MIN = 120  # promtool writes 2-hour blocks: one OpenMetrics file each
PACK = "bench"
CRITERION = "score"


@dataclass(frozen=True)
class Spread:
    """One kind of score: its levels (hundredths) and their probabilities, and which way is good."""

    name: str
    what: str
    levels: tuple[int, ...]
    probs: tuple[float, ...]
    direction: int = 1

    @property
    def mean(self) -> float:
        return float(np.dot(self.levels, self.probs)) / GRID

    @property
    def sd(self) -> float:
        x = np.array(self.levels) / GRID
        return math.sqrt(max(float(np.dot(x * x, self.probs)) - self.mean**2, 0.0))

    @property
    def worst(self) -> int:
        return 0 if self.direction == 1 else GRID

    def dropped(self, step: float) -> np.ndarray:
        """The probabilities after a drop of ``step`` (scale units, for the worse): a share w of
        the scores becomes the worst level, w = step / |mean - worst| (for pass/fail: p - step)."""
        w = step / abs(self.mean - self.worst / GRID)
        probs = (1 - w) * np.array(self.probs)
        probs[self.levels.index(self.worst)] += w
        return probs


def _beta(mean: float, sd: float) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """A beta distribution's mass on the hundredths (each level the mass within half a step)."""
    nu = mean * (1 - mean) / sd**2 - 1
    a, b = mean * nu, (1 - mean) * nu
    fine = (np.arange(GRID * 20) + 0.5) / (GRID * 20)
    density = fine ** (a - 1) * (1 - fine) ** (b - 1)
    level = np.clip(np.rint(fine * GRID), 0, GRID).astype(int)
    mass = np.bincount(level, weights=density, minlength=GRID + 1)
    mass = mass / mass.sum()
    return tuple(range(GRID + 1)), tuple(float(m) for m in mass)


def _pass(p: float) -> tuple[tuple[int, ...], tuple[float, ...]]:
    return (0, GRID), (1 - p, p)


QUARTERS = (0, 25, 50, 75, 100)
SPREADS = {
    s.name: s
    for s in (
        Spread(
            "judge5",
            "judge, 0..1 in quarters",
            QUARTERS,
            (0.05, 0.10, 0.20, 0.35, 0.30),
        ),
        Spread("judge_beta", "judge, beta(2.98, 1.28) at 0.01", *_beta(0.70, 0.20)),
        Spread("pass95", "pass/fail, p = 0.95", *_pass(0.95)),
        Spread("pass80", "pass/fail, p = 0.8", *_pass(0.80)),
        Spread("pass60", "pass/fail, p = 0.6", *_pass(0.60)),
        Spread("scale5", "1-5 scale", QUARTERS, (0.03, 0.07, 0.25, 0.40, 0.25)),
        Spread(
            "frustration5",
            "1-5 scale, lower is better",
            QUARTERS,
            (0.40, 0.30, 0.15, 0.10, 0.05),
            direction=-1,
        ),
    )
}
FALSE_PAGE_VOLUMES = (1, 2, 5, 10, 30, 60, 200, 1000)
DETECT_SPREADS = ("judge5", "judge_beta", "pass95", "pass80", "scale5", "frustration5")
DETECT_VOLUMES = (1, 5, 60, 1000)
DETECT_STEPS = (0.03, 0.05, 0.1, 0.2)
DROP_EVERY_MIN = 42 * 60
DROP_MIN, DROP_MAX = 6 * 60, 8 * 60


@dataclass
class Series:
    """One (rule, project) series: its spread, scores a minute and drops (start, end minute)."""

    rule: str
    project: str
    spread: Spread
    volume: float
    step: float = 0.0
    drops: list[tuple[int, int]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return self.rule, self.project

    def labels(self) -> str:
        return f'rule="{self.rule}",pack="{PACK}",criterion="{CRITERION}",project="{self.project}"'


def false_page_set(count: int) -> list[Series]:
    """``count`` stationary series: the spreads and volumes taken in turn (7 and 8 are coprime,
    so the first 56 are all different pairs)."""
    names = list(SPREADS)
    out = []
    for i in range(count):
        spread = SPREADS[names[i % len(names)]]
        volume = FALSE_PAGE_VOLUMES[i % len(FALSE_PAGE_VOLUMES)]
        out.append(Series(f"fp_{spread.name}", f"p{i:02d}_v{volume}", spread, volume))
    return out


def detection_set(
    warmup_min: int, total_min: int, rng: np.random.Generator, spreads: tuple[str, ...]
) -> list[Series]:
    """One series per (spread, volume, step): a drop every 42 hours from 6 h after the warm-up,
    lasting 6 to 8 hours, so the baseline (the day before the last 6 hours) is clean again."""
    out = []
    for name in spreads:
        for volume in DETECT_VOLUMES:
            for step in DETECT_STEPS:
                series = Series(f"det_{name}", f"v{volume}_d{step:g}", SPREADS[name], volume, step)
                start = warmup_min + 6 * 60 + int(rng.integers(0, 60))
                while start + DROP_MAX <= total_min:
                    series.drops.append((start, start + int(rng.integers(DROP_MIN, DROP_MAX + 1))))
                    start += DROP_EVERY_MIN
                out.append(series)
    return out


def counters(series: Series, minutes: int, rng: np.random.Generator) -> np.ndarray:
    """The four counters (n, sum x, x^2, x^3: integers in 1/100^k) at minutes 0..``minutes``:
    sample k holds the scores of minutes 0..k-1."""
    levels = np.array(series.spread.levels, dtype=np.int64)
    rates = np.tile(np.array(series.spread.probs) * series.volume, (minutes, 1))
    for start, end in series.drops:
        rates[start:end] = series.spread.dropped(series.step) * series.volume
    counts = rng.poisson(rates).astype(np.int64)
    per_minute = np.stack([counts.sum(1)] + [counts @ levels**k for k in (1, 2, 3)])
    out = np.zeros((4, minutes + 1), dtype=np.int64)
    np.cumsum(per_minute, axis=1, out=out[:, 1:])
    return out


# (name, extra labels, counter index): the histogram's _count and _sum (the old rule reads
# them) and scorer_score_moments_total, powers 0 to 3 (the new one)
COUNTERS = (
    ("scorer_score_value_count", "", 0),
    ("scorer_score_value_sum", "", 1),
    *(("scorer_score_moments_total", f',power="{k}"', k) for k in range(4)),
)


def openmetrics_blocks(
    all_series: list[Series], values: list[np.ndarray], t0: int, minutes: int
) -> Iterator[tuple[int, str]]:
    """(block index, OpenMetrics text) for each 2-hour block: the counters of every series and
    each rule's direction and min_drop gauges, one sample a minute (a 1-minute scrape)."""
    rules = {s.rule: s.spread.direction for s in all_series}
    for block in range(math.ceil((minutes + 1) / BLOCK_MIN)):
        k0, k1 = block * BLOCK_MIN, min((block + 1) * BLOCK_MIN, minutes + 1)
        stamps = [t0 + 60 * k for k in range(k0, k1)]
        lines: list[str] = []
        for name, extra, m in COUNTERS:
            scale = GRID**m
            for series, counts in zip(all_series, values, strict=True):
                head = f"{name}{{{series.labels()}{extra}}} "
                vals = (counts[m, k0:k1] / scale).tolist()
                lines.extend(f"{head}{v!r} {t}" for v, t in zip(vals, stamps, strict=True))
        for gauge in ("scorer_rule_direction", "scorer_rule_alert_min_drop"):
            for rule, direction in rules.items():
                value = direction if gauge == "scorer_rule_direction" else 0.05
                head = f'{gauge}{{rule="{rule}",pack="{PACK}",scope="trace"}} {value} '
                lines.extend(f"{head}{t}" for t in stamps)
        lines.append("# EOF\n")
        yield block, "\n".join(lines)


def write_blocks(text_blocks: Iterator[tuple[int, str]], folder: Path) -> list[Path]:
    """Write each block's OpenMetrics file; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for block, text in text_blocks:
        path = folder / f"block{block:04d}.om"
        path.write_text(text)
        paths.append(path)
    return paths
