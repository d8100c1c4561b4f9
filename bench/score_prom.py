"""The Prometheus side of ``bench/score_alerts.py``: rule sets read from YAML, a plan of which
recorded series to backfill (layer by layer) and which to inline, a real ``prometheus`` on a
TSDB built by ``promtool``, range queries, and an alert's ``for`` applied as the rule manager
applies it.
"""

from __future__ import annotations

import itertools
import re
import resource
import shutil
import socket
import subprocess
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

RECORDED = re.compile(r"(?<![\w:])([A-Za-z_]\w*:[\w:]*)")
SELECTOR_SUFFIX = re.compile(r"\s*(\{|\[|offset\b)")
GROUP_MODIFIER = re.compile(r"group_(left|right)\s*$")
MAX_STEPS = 10_000  # a range query's points per series stay under Prometheus's 11,000


@dataclass
class RuleSet:
    """The recording rules an alert reads and the alert: expressions exactly as in the YAML."""

    name: str
    records: dict[str, str]
    alert_expr: str
    for_s: int

    @classmethod
    def from_yaml(cls, name: str, text: str, alert: str) -> RuleSet:
        records: dict[str, str] = {}
        found: dict[str, Any] | None = None
        for group in yaml.safe_load(text)["groups"]:
            for rule in group["rules"]:
                if "record" in rule:
                    records[rule["record"]] = rule["expr"].strip()
                elif rule.get("alert") == alert:
                    found = rule
        if found is None:
            raise ValueError(f"no alert {alert} in the rules of {name}")
        return cls(name, records, found["expr"].strip(), parse_duration(found.get("for", "0s")))

    def substituted(self, name: str, old: str, new: str, for_s: int | None = None) -> RuleSet:
        """A variant: ``old`` replaced by ``new`` in every expression that holds it; a recorded
        series that changes (or reads one that did) takes the suffix ``:variant<hash>``, so it
        does not clash with the rule set it came from."""
        records = {k: v.replace(old, new) for k, v in self.records.items()}
        alert = self.alert_expr.replace(old, new)
        if old and records == self.records and alert == self.alert_expr:
            raise ValueError(f"variant {name}: {old!r} is in no expression")
        suffix = f":variant{zlib.crc32(f'{name}|{old}|{new}'.encode()) % 10**6}"
        renamed: set[str] = set()
        while changed := {k for k, v in records.items() if v != self.records.get(k)} - renamed:
            renamed |= changed

            def rename(match: re.Match[str], changed: set[str] = changed) -> str:
                return match.group(1) + suffix if match.group(1) in changed else match.group(1)

            records = {k: RECORDED.sub(rename, v) for k, v in records.items()}
            alert = RECORDED.sub(rename, alert)
            records = {k + suffix if k in changed else k: v for k, v in records.items()}
            renamed |= {k + suffix for k in changed}
        return RuleSet(name, records, alert, self.for_s if for_s is None else for_s)


def parse_duration(text: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smhd])", str(text)))


def references(expr: str, known: dict[str, str]) -> list[tuple[str, bool]]:
    """The recorded series ``expr`` reads: (name, read as a selector with matchers, a range or
    an offset, so it must exist as a series)."""
    out = []
    for match in RECORDED.finditer(expr):
        if match.group(1) in known:
            suffix = SELECTOR_SUFFIX.match(expr, match.end()) is not None
            out.append((match.group(1), suffix))
    return out


@dataclass
class Plan:
    """Which recorded series are backfilled, in which layer, and every other one inlined."""

    records: dict[str, str]
    materialised: set[str] = field(default_factory=set)

    def inline(self, expr: str) -> str:
        def swap(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self.records or name in self.materialised:
                return name
            # after group_left/group_right a parenthesis would be read as its label list
            lead = "() " if GROUP_MODIFIER.search(match.string, 0, match.start()) else ""
            return f"{lead}({self.inline(self.records[name])})"

        return RECORDED.sub(swap, expr)

    def layers(self, needed: set[str]) -> list[dict[str, str]]:
        """The backfilled rules ``needed`` (and what they read), by layer: a rule reads only the
        raw series and the layers below its own."""
        depth: dict[str, int] = {}

        def layer(name: str) -> int:
            if name not in depth:
                reads = [r for r, _ in references(self.inline(self.records[name]), self.records)]
                depth[name] = 1 + max((layer(r) for r in reads), default=0)
            return depth[name]

        for name in needed:
            layer(name)
        out: list[dict[str, str]] = [{} for _ in range(max(depth.values(), default=0))]
        for name, d in sorted(depth.items()):
            out[d - 1][name] = self.inline(self.records[name])
        return out


def plan_for(sets: list[RuleSet], also: frozenset[str] = frozenset()) -> tuple[Plan, set[str]]:
    """One plan for several rule sets (a name must mean one expression in all of them). A
    recorded series is backfilled, layer by layer, when its expression holds a range or a
    subquery (costly to repeat), when an expression reads it with matchers, a range or an
    offset, or when it is in ``also``; every other one is inlined, in parentheses, where it is
    read. The alert's own expression is never backfilled: a backfilled series has no staleness
    markers, so a lookback of 5 minutes would carry its last sample over a gap, and the alarm
    comes and goes by the minute. The backfilled ones vanish only when a window holds no score,
    which the gates (n >= 30, n > 0) exclude anyway. (promtool writes a block per rule and 2
    hours, and the server opens them all: a month of every rule would pass its file limit.)"""
    records: dict[str, str] = {}
    for rule_set in sets:
        for name, expr in rule_set.records.items():
            if records.setdefault(name, expr) != expr:
                raise ValueError(f"{name} differs between rule sets: rename it in the variant")
    plan = Plan(records)
    plan.materialised = {n for n, e in records.items() if "[" in e} | (also & set(records))
    for expr in [*records.values(), *(s.alert_expr for s in sets)]:
        plan.materialised |= {n for n, selector in references(expr, records) if selector}
    top = {n for s in sets for n, selector in references(s.alert_expr, records) if not selector}
    plan.materialised -= top
    needed: set[str] = set()
    for rule_set in sets:
        needed |= {n for n, _ in references(plan.inline(rule_set.alert_expr), records)}
    return plan, needed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Prometheus:
    """A real ``prometheus`` on its own TSDB: no scrapes, no rules, only queries."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.config = folder / "prometheus.yml"
        self.config.write_text("global:\n  evaluation_interval: 1m\n")
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        log = (self.folder / "prometheus.log").open("ab")
        # retention is counted back from the newest block, not from today, so the synthetic
        # days (in the past) stay; backfilled blocks may overlap (always allowed since 2.39)
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.data}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{port}",
                "--query.timeout=60m",
                "--query.max-samples=500000000",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=log,
            preexec_fn=more_files,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: see {self.folder / 'prometheus.log'}")
            time.sleep(0.2)
        raise RuntimeError("prometheus not ready in 120 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        self.proc = None

    def add_blocks(self, folder: Path) -> None:
        """Move promtool's blocks into the TSDB (picked up at the next start)."""
        for block in folder.iterdir():
            if (block / "meta.json").exists():
                shutil.move(str(block), self.data / block.name)

    def query_range(
        self, expr: str, start: float, end: float, workers: int = 2
    ) -> dict[str, list[int]]:
        """Each series' evaluations with a result, at every minute of [start, end], as seconds
        after ``start`` (the range in pieces of at most ``MAX_STEPS`` minutes, ``workers`` at a
        time)."""

        def piece(lo: float) -> list[dict[str, Any]]:
            hi = min(lo + 60 * (MAX_STEPS - 1), end)
            reply = httpx.post(
                f"{self.url}/api/v1/query_range",
                data={"query": expr, "start": lo, "end": hi, "step": 60},
                timeout=3600,
            )
            body = orjson.loads(reply.content)
            if body.get("status") != "success":
                raise RuntimeError(f"query failed: {body.get('error')}")
            return list(body["data"]["result"])

        out: dict[str, list[int]] = {}
        with ThreadPoolExecutor(workers) as pool:
            pieces = [
                start + 60 * MAX_STEPS * i
                for i in range(int((end - start) // (60 * MAX_STEPS)) + 1)
            ]
            for results in pool.map(piece, pieces):
                for result in results:
                    key = labels_key(result["metric"])
                    times = (60 * round((float(t) - start) / 60) for t, _ in result["values"])
                    out.setdefault(key, []).extend(times)
        return out

    def eval_offset(self, recorded: str, at: int) -> float:
        """Seconds past the minute at which the backfilled group was evaluated."""
        reply = httpx.post(
            f"{self.url}/api/v1/query", data={"query": f"{recorded}[5m]", "time": at}, timeout=60
        )
        return float(reply.json()["data"]["result"][0]["values"][0][0]) % 60


def more_files() -> None:
    """promtool writes a block per rule and 2 hours: a month's layers open tens of thousands of
    files until the server compacts them."""
    limit = 262_144
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    except (ValueError, OSError):
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def labels_key(metric: dict[str, str]) -> str:
    return ",".join(f"{k}={metric[k]}" for k in sorted(metric) if k != "__name__")


def import_openmetrics(paths: list[Path], out: Path, workers: int = 2) -> None:
    """``promtool tsdb create-blocks-from openmetrics`` on each file (a 2-hour block each)."""

    def one(path: Path) -> None:
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(path), str(out)],
            check=True,
            capture_output=True,
        )
        path.unlink()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, paths))


def backfill_layer(
    prom: Prometheus, rules: dict[str, str], start: int, end: int, workers: int = 2
) -> None:
    """``promtool tsdb create-blocks-from rules`` for one layer against the running server, the
    range shared among ``workers`` promtool processes; the blocks moved into its TSDB and the
    server restarted to read them. Every layer is one group of the same name in the same file,
    so promtool evaluates each at the same timestamps, as the rule manager evaluates one group:
    the minute plus the group's offset (from a hash of its name and file)."""
    folder = prom.folder / "layer"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    group = {
        "name": "scorer",
        "interval": "1m",
        "rules": [{"record": name, "expr": expr} for name, expr in rules.items()],
    }
    rule_file = prom.folder / "rules.yml"
    rule_file.write_text(yaml.safe_dump({"groups": [group]}, sort_keys=False))
    block = 7200
    cuts = [start + (end - start) * i // workers // block * block for i in range(workers)]
    ranges = [(lo, hi - 60) for lo, hi in itertools.pairwise(cuts)] + [(cuts[-1], end)]

    def one(part: int) -> None:
        lo, hi = ranges[part]
        subprocess.run(
            [
                "promtool",
                "tsdb",
                "create-blocks-from",
                "rules",
                f"--url={prom.url}",
                f"--start={lo}",
                f"--end={hi}",
                f"--output-dir={folder / f'blocks{part}'}",
                "--quiet",
                str(rule_file),
            ],
            check=True,
            capture_output=True,
        )

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(len(ranges))))
    prom.stop()
    for part in range(len(ranges)):
        prom.add_blocks(folder / f"blocks{part}")
    prom.start()


def firing(present: list[int], for_s: int, step: int = 60) -> list[tuple[int, int]]:
    """The firing episodes (fired at, last seen) of one alert series from the evaluations where
    its expression returned it, as the rule manager does: pending from the first evaluation
    that returns it, firing at the first evaluation ``for`` or more after that, and gone at the
    first evaluation that does not return it (a gap resets the pending time)."""
    episodes = []
    times = sorted(set(present))
    run_start = prev = None
    for t in [*times, None]:
        if t is None or prev is None or t - prev != step:
            if run_start is not None and prev is not None and prev - run_start >= for_s:
                episodes.append((run_start + for_s, prev))
            run_start = t
        prev = t
    return episodes


def dump(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
