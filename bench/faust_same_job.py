"""Benchmark baseline (a'''): the Faust worker a competent user writes to do the scorer's job
in phase (b) by hand: the same two FretCoach checks on each trace, a score and a decision
record published for it.

It is the competent worker (``faust_competent.py``: ``Stream.take_events`` batches, unawaited
``Topic.send_soon``, a producer linger, the scorer's transport and its mends) doing what (b)'s
worker does with the rules of ``bench/throughput.py``'s phase (b), written out for these two
rules and nothing else. Per trace:

- the JSON parsed, and a trace without a text id left out (the scorer dead-letters it);
- for each rule, its trace-name filter, its variables read by hand (``input.messages[0][1]
  .content``, ...: each rule file's paths), its check called as the engine calls it (the
  pack's own function and validated parameters), or the decision that it did not apply;
- a score as the scorer's (its fields, a UUIDv5 score id, the value normalised, a time) and
  one decision record with both rules' decisions, each serialised with orjson and handed to
  the producer, the score to ``BENCH_OUT`` and the decision record to ``BENCH_OUT``-decisions.

What it leaves out that the scorer does: validating the trace beyond its id, metrics, the
silence watch, the ordered acks (offsets are committed by ``take_events``, before the broker
has the sends: mend 5 of the transport holds the commit back), dead letters, and everything
a rule file may say that these two do not (sampling, ``when``, redaction, judges).
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from faust_apps import BATCH_MAX, BATCH_WITHIN_S, collector_as_asked, competent_app

from stream.kafka.mends.faust_worker import MendedWorker
from stream.ruleset.checks import NotApplicable
from stream.ruleset.loader import load_rules

NAMESPACE = uuid.UUID("6f1c8f5e-3b7a-4c1e-9a57-5d1b2f0c9e11")  # the scorer's score ids'
RULES = Path(__file__).resolve().parent.parent / "rules"


def live_coach(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "input": doc["input"]["messages"][0][1]["content"],
        "output": doc["output"]["generations"][0][0]["text"],
    }


def recommendation(doc: dict[str, Any]) -> dict[str, Any]:
    return {"output": doc["output"]["output"]}


_loaded = {rule.id: rule for rule in load_rules([RULES], ["fretcoach"]).rules}
# (rule id, version, the trace name it scores, its variables read by hand, check, params)
CHECKS = [
    (rule.id, rule.version, rule.filter.trace_names[0], read, rule.check_spec.func, params)
    for rule, read in (
        (_loaded["studio_live_coach_feedback_format"], live_coach),
        (_loaded["studio_immediate_actionability_check"], recommendation),
    )
    for params in [rule.validated_params]
]

app = competent_app("/tmp/bench-faust-same-job")
source = app.topic(os.environ["BENCH_IN"], key_serializer="raw", value_serializer="raw")
scores = app.topic(os.environ["BENCH_OUT"], key_serializer="raw", value_serializer="raw")
decisions = app.topic(
    f"{os.environ['BENCH_OUT']}-decisions", key_serializer="raw", value_serializer="raw"
)


def score_trace(doc: dict[str, Any]) -> None:
    """One trace's checks, its score and its decision record handed to the producer."""
    trace_id, project = doc["id"], doc.get("project_name") or "default"
    now = datetime.now(UTC).isoformat()
    key = trace_id.encode()
    decided = []
    for rule_id, version, trace_name, read, func, params in CHECKS:
        decision = {"target_id": trace_id, "rule_id": rule_id, "pack": "fretcoach"}
        if doc.get("name") != trace_name:
            decided.append({**decision, "outcome": "filtered", "created_at": now})
            continue
        try:
            result = func(read(doc), params)
        except (KeyError, IndexError, TypeError, NotApplicable) as exc:
            decided.append({**decision, "outcome": "skipped", "detail": str(exc)})
            continue
        sid = str(uuid.uuid5(NAMESPACE, f"{rule_id}\x1f{version}\x1ftrace\x1f{trace_id}"))
        score = {
            "score_id": sid,
            "rule_id": rule_id,
            "pack": "fretcoach",
            "rule_version": version,
            "scope": "trace",
            "target_id": trace_id,
            "project_name": project,
            "value": result.raw_value,  # the scale is 0..1
            "raw_value": result.raw_value,
            "scale": {"min": 0.0, "max": 1.0},
            "label": result.label,
            "reason": result.reason,
            "higher_is_better": True,
            "status": "ok",
            "created_at": now,
        }
        scores.send_soon(key=key, value=orjson.dumps(score))
        decided.append({**decision, "outcome": "scored", "score_id": sid, "created_at": now})
    record = {"trace_id": trace_id, "project_name": project, "decisions": decided}
    decisions.send_soon(key=key, value=orjson.dumps(record))


@app.agent(source)
async def score(stream):  # type: ignore[no-untyped-def]
    async for events in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):
        for event in events:
            doc = orjson.loads(event.value)
            if isinstance(doc, dict) and isinstance(doc.get("id"), str) and doc["id"].strip():
                score_trace(doc)


if __name__ == "__main__":
    collector_as_asked()
    MendedWorker(app, loglevel="warn", quiet=True).execute_from_commandline()
