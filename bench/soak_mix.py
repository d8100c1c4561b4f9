"""The workloads ``bench/soak.py`` streams (its ``--mix``), and how each scripts the judge.

A mix is a stream of steps: lists of ``(topic, key, value)`` records, each built as it is
produced (times are now). The soak paces records at ``--rate`` a second, so a step of the
``issue43`` mix, 50 records at its steady state, takes one second at the default rate.

- ``issue43`` (the load of issue 43): every step starts a cohort of five hub-coach
  conversations (4 traces each with a ``thread_id``, never finished: they close by
  inactivity), three metric coaching sessions (4 ``turn`` events with ``metrics`` and
  ``feedback``, then an ``end``) and three transcript coaching sessions (4 ``turn`` events
  with a ``user`` and an ``assistant`` message, project ``coaching``, then an ``end``). Turn n
  of a cohort goes out one step after turn n - 1, so a step carries turn 0 of the newest
  cohort, turn 1 of the one before, ... and the ends of the cohort four steps old: 50 records
  a step once the first four steps have ramped up. Packs ``fretcoach`` and ``coaching``; the
  judge answers the coaching rubric's 15 criteria (YES, and NO for CQ8, as
  ``tests/integration/test_packs.py`` scripts them) and every other rule its default.
- ``classic`` (the soak's rounds before the mixes): per round, three hub-coach conversations
  of three traces (three in four finished), one studio trace, three coaching sessions of
  three turns (three in four end) and one conversation of two turns as OpenTelemetry spans
  (protobuf and OTLP/JSON in turn); the FretCoach pack.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import orjson
import yaml
from throughput import SAMPLE

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from otlp_records import as_otlp_json
from scripted_judge import MockJudge, script_frustration

HUB = next(t for t in SAMPLE if t["name"] == "hub-coach-chat")
STUDIO = [t for t in SAMPLE if t["name"] in ("studio-live-coach", "studio-ai-recommendation")]
# the coaching rubric's criteria, as its rule file lists them
COACHING_RULE = Path(__file__).resolve().parent.parent / "rules/coaching/coaching_transcript.yaml"
COACHING_IDS = [c["id"] for c in yaml.safe_load(COACHING_RULE.read_text())["criteria"]]
EXCHANGES = [  # (user, assistant): one transcript session's four turns
    ("Work is crushing me.", "What part weighs most?"),
    ("Emails at midnight.", "What would change if you answered them in the morning?"),
    ("My manager expects fast replies.", "Have you asked what fast means to them?"),
    ("No, I assumed.", "Asking could be a first step. Shall we plan how to ask?"),
]

Record = tuple[str, bytes | None, bytes]  # (topic, key, value)


class MixTopics(Protocol):
    suffix: str
    traces: str
    sessions: str
    otlp: str


def now_iso(offset_s: float = 0.0) -> str:
    return datetime.fromtimestamp(time.time() + offset_s, UTC).isoformat()


def hub_turn(thread: str, n: int, finished: bool, unique: bool = True) -> dict[str, Any]:
    """A hub-coach turn; its texts name its thread (``unique``: every judge prompt new) or
    repeat across threads (the judge's verdicts kept: most judged scores are cache hits)."""
    document = orjson.loads(orjson.dumps(HUB))
    document["id"] = f"{thread}-t{n}"
    document["thread_id"] = thread
    document["start_time"] = document["end_time"] = now_iso()
    where = f" in {thread}" if unique else ""
    document["input"]["messages"][-1]["content"] = f"question {n}: how do I keep time{where}?"
    document["output"]["messages"][-1]["content"] = (
        f"answer {n}: loop the bar at 70 bpm with a click on 2 and 4{f' ({thread})' if unique else ''}."
    )
    if finished:
        document["metadata"]["conversation_finished"] = True
    return document


def studio_trace(n: int, prefix: str) -> dict[str, Any]:
    return dict(STUDIO[n % len(STUDIO)], id=f"{prefix}-studio-{n}", start_time=now_iso())


def session_turn(session: str, seq: int) -> dict[str, Any]:
    return {
        "session_id": session,
        "type": "turn",
        "seq": seq,
        "timestamp": now_iso(0.2 * seq),
        "project_name": "fretcoach",
        "metrics": {
            "pitch_accuracy": 0.9,
            "scale_conformity": 0.82,
            "timing_stability": 0.55 + seq / 50,
        },
        "feedback": "Timing Stability is your weakest metric; play with the metronome at 70 bpm "
        "and land each note on the click.",
    }


def transcript_turn(session: str, seq: int) -> dict[str, Any]:
    """A coaching-transcript turn, as tests/integration/test_packs.py builds one (time now)."""
    user, assistant = EXCHANGES[seq % len(EXCHANGES)]
    return {
        "session_id": session,
        "type": "turn",
        "seq": seq,
        "timestamp": now_iso(),
        "project_name": "coaching",
        "user": user,
        "assistant": assistant,
    }


def session_end(session: str, seq: int, offset_s: float = 0.0) -> dict[str, Any]:
    return {"session_id": session, "type": "end", "seq": seq, "timestamp": now_iso(offset_s)}


class SpanSource:
    """Conversations as an app instrumented with the OpenTelemetry SDK exports them."""

    def __init__(self) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": "fretcoach"}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("fretcoach.hub")
        self.records = itertools.count()

    def turn(self, conversation: str, n: int, finished: bool) -> list[bytes]:
        """One chat turn: the model call's span and the root span, one export record each."""
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        question = [{"role": "user", "parts": [{"type": "text", "content": f"question {n}"}]}]
        answer = [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": f"answer {n}: slow down, loop the bar"}],
                "finish_reason": "stop",
            }
        ]
        with self.tracer.start_as_current_span("hub-coach-chat") as root:
            root.set_attribute("gen_ai.conversation.id", conversation)
            if finished:
                root.set_attribute("conversation_finished", True)
            with self.tracer.start_as_current_span("chat gpt-4o-mini") as llm:
                llm.set_attribute("gen_ai.operation.name", "chat")
                llm.set_attribute("gen_ai.input.messages", orjson.dumps(question).decode())
                llm.set_attribute("gen_ai.output.messages", orjson.dumps(answer).decode())
                llm.set_attribute("gen_ai.usage.input_tokens", 40)
                llm.set_attribute("gen_ai.usage.output_tokens", 12)
        spans = list(self.exporter.get_finished_spans())  # the child first, then the root
        self.exporter.clear()
        out = []
        for span in spans:
            raw = encode_spans([span]).SerializeToString()
            out.append(as_otlp_json(raw) if next(self.records) % 2 else raw)
        return out


def classic(topics: MixTopics) -> Iterator[list[Record]]:
    """The classic rounds, one step at a time; within a round, every thread's turn n goes out
    before any turn n + 1."""
    spans = SpanSource()
    for r in itertools.count():
        prefix = f"{topics.suffix}-r{r}"
        steps: list[list[Record]] = [[], [], [], []]
        for c in range(3):
            thread = f"{prefix}-conv{c}"
            ends = (3 * r + c) % 4 != 0  # one in four closes by inactivity
            for n in range(3):
                doc = hub_turn(thread, n, finished=ends and n == 2)
                steps[n].append((topics.traces, doc["id"].encode(), orjson.dumps(doc)))
        studio = studio_trace(r, prefix)
        steps[0].append((topics.traces, studio["id"].encode(), orjson.dumps(studio)))
        for s in range(3):
            session = f"{prefix}-session{s}"
            for seq in range(3):
                steps[seq].append(
                    (topics.sessions, session.encode(), orjson.dumps(session_turn(session, seq)))
                )
            if (3 * r + s) % 4 != 0:
                end = session_end(session, 3, 0.6)
                steps[3].append((topics.sessions, session.encode(), orjson.dumps(end)))
        conversation = f"{prefix}-otlp"
        for n in range(2):
            for raw in spans.turn(conversation, n, finished=r % 2 == 0 and n == 1):
                steps[n].append((topics.otlp, None, raw))
        yield from steps


def issue43(topics: MixTopics, unique: bool = True) -> Iterator[list[Record]]:
    """Issue 43's steady load, one step (a second at 50 records/s) at a time (``unique``:
    the hub texts name their thread)."""
    turns = 4
    for step in itertools.count():
        records: list[Record] = []
        for age in range(turns + 1):  # the cohort started ``age`` steps ago
            if step < age:
                break
            prefix = f"{topics.suffix}-c{step - age}"
            if age < turns:
                for h in range(5):
                    doc = hub_turn(f"{prefix}-hub{h}", age, finished=False, unique=unique)
                    records.append((topics.traces, doc["id"].encode(), orjson.dumps(doc)))
            for kind, turn in (("metric", session_turn), ("transcript", transcript_turn)):
                for s in range(3):
                    session = f"{prefix}-{kind}{s}"
                    event = turn(session, age) if age < turns else session_end(session, age)
                    records.append((topics.sessions, session.encode(), orjson.dumps(event)))
        yield records


def script_classic(judge: MockJudge) -> None:
    # every rule answers the default {"score": 1.0}; this one names its score
    script_frustration(judge)


def script_issue43(judge: MockJudge) -> None:
    script_classic(judge)
    coaching = {c: {"reason": "fine", "answer": "YES"} for c in COACHING_IDS}
    coaching["CQ8"] = {"reason": "diagnoses the user", "answer": "NO"}
    judge.script("coaching conversation", orjson.dumps(coaching).decode())


@dataclass(frozen=True)
class Mix:
    packs: str  # SCORER_PACKS
    rate: float  # records a second unless --rate
    gap: float  # the threads' inactivity gap unless --gap
    steps: Callable[[MixTopics], Iterator[list[Record]]]
    script: Callable[[MockJudge], None]


MIXES = {
    "issue43": Mix('["fretcoach", "coaching"]', 50.0, 10.0, issue43, script_issue43),
    # the same, its hub texts repeating: the analysis's load (the judge asked about once a
    # second, most judged scores verdict-cache hits)
    "issue43-cached": Mix(
        '["fretcoach", "coaching"]',
        50.0,
        10.0,
        lambda topics: issue43(topics, unique=False),
        script_issue43,
    ),
    "classic": Mix('["fretcoach"]', 25.0, 5.0, classic, script_classic),
}
