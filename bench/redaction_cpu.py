"""The redaction step's CPU per trace (issue 47): the FretCoach sample traces planned by the
worker's engine with every judged rule of the shipped packs (``scorer explain``'s planning,
no judge called), once with the shipped detectors and once with none; the difference per
trace is what masking the judge's copy costs. One core, in process; the traces carry no
personal data (the usual case), and a second set carries some in every turn.

    python bench/redaction_cpu.py [--traces 400]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from stream.explain.file import _trace_rules, parse_trace
from stream.explain.records import planning_scorer
from stream.redact.policy import RedactionPolicy
from stream.ruleset.loader import load_rules

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = [
    orjson.loads(x)
    for x in (ROOT / "stream/samples/fretcoach_traces.jsonl").read_bytes().splitlines()
]
PERSONAL = " Reach me at ana.lopez@example.org or +44 20 7946 0958; card 4111 1111 1111 1111."


def _with_personal(node: Any) -> Any:
    if isinstance(node, str):
        return node + PERSONAL if len(node) > 20 else node
    if isinstance(node, dict):
        return {key: _with_personal(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_with_personal(value) for value in node]
    return node


def _documents(n: int, personal: bool) -> list[bytes]:
    out = []
    for i in range(n):
        doc: dict[str, Any] = orjson.loads(orjson.dumps(SAMPLE[i % len(SAMPLE)]))
        doc["id"] = f"bench-{uuid.uuid4().hex}"
        if personal:  # every text of the trace's input carries some
            doc["input"] = _with_personal(doc.get("input"))
        out.append(orjson.dumps(doc))
    return out


def _cpu_per_trace(policy: RedactionPolicy, raws: list[bytes]) -> float:
    ruleset = load_rules(ROOT / "rules")  # every pack, whole
    scorer = planning_scorer(ruleset, "gpt-4o-mini", None, policy)
    parsed = [parse_trace(raw) for raw in raws]
    start = time.process_time()
    for trace, document in parsed:
        _trace_rules(scorer, trace, document, None)
    return (time.process_time() - start) / len(parsed) * 1e6


def redaction_cpu(n: int) -> dict[str, float]:
    """CPU microseconds per trace: planning without masking, and what masking adds, for
    traces without and with personal data."""
    none = RedactionPolicy()
    none.by_kind = {}  # no detector: judge.redact true masks nothing
    figures = {}
    for personal in (False, True):
        raws = _documents(n, personal)
        _cpu_per_trace(RedactionPolicy(), raws[: max(1, n // 10)])  # warm up
        plain = _cpu_per_trace(none, raws)
        masked = _cpu_per_trace(RedactionPolicy(), raws)
        key = "personal" if personal else "clean"
        figures[f"{key} plan"] = plain
        figures[f"{key} redaction"] = masked - plain
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=400)
    args = parser.parse_args(argv)
    f = redaction_cpu(args.traces)
    for key in ("clean", "personal"):
        print(
            f"     redaction ({key} traces): {f[f'{key} redaction']:.0f} us CPU per trace over "
            f"planning's {f[f'{key} plan']:.0f} us (every judged rule of the shipped packs)"
        )


if __name__ == "__main__":
    sys.exit(main())
