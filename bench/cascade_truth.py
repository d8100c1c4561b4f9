"""The scripted truth behind ``bench/cascade.py``: traffic whose true labels are known, and the
two judges of a cascade answering each item as scripted, over HTTP.

Every trace carries its item's tag (``[item s3-00042]``) in its question, so the rendered
prompt carries it too, and each double looks the item up in the request it receives:

- the decision model (``CalibratedDecisions``, the Decisions API double of
  ``tests/decisions_double.py``) answers an item's predicate with its scripted confidence
  ``c``, towards the true label with probability ``c`` (so its stated confidence is right on
  average: calibrated);
- the chat judge (``ScriptedEndpoint``, the chat double of ``tests/scripted_judge.py``, with
  the decision model on the same endpoint as OpenAI serves both) answers the true label with
  probability ``chat_accuracy``.

Both answers are drawn once per item from a seeded generator (``script_items``), so they are
known functions of the item: the same item gets the same answers in every phase, and the bench
can compute any agreement over the whole population without asking a judge.

``unchanged_across_trees`` scores documents with every shipped pack and no cascade against the
command line's varied chat judge, once with the working tree and once with an older commit's
(this module run as a script in a subprocess with that tree first on the path), and compares
the requests the judge received and what was published.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from decisions_double import DecisionsDouble, JudgeAndDecisions
from scripted_judge import MockJudge, Reply

SAMPLES = ("fretcoach_traces.jsonl", "comparison_pair.jsonl")
TAG = re.compile(r"\[item (s\d+-\d{5})\]")
TOPICS = (
    "tune a guitar to drop D without a tuner",
    "keep a steady tempo when practising scales",
    "restring an acoustic guitar",
    "stop fret buzz on the low E string",
    "practise barre chords without hand pain",
    "read tablature for a fingerpicking pattern",
    "set the action on an electric guitar",
    "choose a metronome setting for a new song",
)
RATIONALE = {  # what the chat judge says before its verdict (its completion tokens)
    "yes": "Let's think step by step. The question asks how to do one thing, and the answer "
    "addresses that thing with concrete steps the user can follow, so it is relevant.",
    "no": "Let's think step by step. The question asks how to do one thing, and the answer "
    "talks about something else entirely without touching the question, so it is not relevant.",
}


@dataclass(frozen=True)
class Script:
    """What the doubles are scripted to do (the bench's choices, printed with its figures)."""

    confident_share: float = 0.8  # items the decision model answers with confidence >= 0.9
    confident: tuple[float, float] = (0.9, 1.0)  # their confidence: uniform in this range
    unsure: tuple[float, float] = (0.5, 0.9)  # the others': uniform in this range
    chat_accuracy: float = 0.95  # the chat judge's agreement with the truth
    yes_share: float = 0.5  # items whose true label is yes

    def describe(self) -> str:
        low, high = self.confident
        return (
            f"true labels {self.yes_share:.0%} yes; decision model calibrated, confidence "
            f"uniform in [{low:g}, {high:g}) on {self.confident_share:.0%} of items and in "
            f"[{self.unsure[0]:g}, {self.unsure[1]:g}) on the rest; chat judge agrees with "
            f"the truth on {self.chat_accuracy:.0%} of items"
        )


@dataclass(frozen=True)
class Item:
    """One trace's scripted truth and the two judges' answers to it."""

    tag: str
    truth: str
    confidence: float  # what the decision model states (its probability of its answer)
    first: str  # the decision model's answer: the truth with probability ``confidence``
    judge: str  # the chat judge's answer: the truth with probability ``chat_accuracy``

    @property
    def p_yes(self) -> float:
        return self.confidence if self.first == "yes" else 1.0 - self.confidence


def _other(label: str) -> str:
    return "no" if label == "yes" else "yes"


def script_items(seed: int, count: int, script: Script) -> list[Item]:
    """``count`` items of seed ``seed``, every draw from one seeded generator, in order."""
    draw = random.Random(seed)
    items = []
    for n in range(count):
        truth = "yes" if draw.random() < script.yes_share else "no"
        low, high = script.confident if draw.random() < script.confident_share else script.unsure
        # a confidence of exactly 0.5 names no answer: the decision would read it as yes
        confidence = min(1.0, max(0.5001, draw.uniform(low, high)))
        first = truth if draw.random() < confidence else _other(truth)
        judge = truth if draw.random() < script.chat_accuracy else _other(truth)
        items.append(Item(f"s{seed}-{n:05d}", truth, confidence, first, judge))
    return items


def trace_of(item: Item) -> dict[str, Any]:
    """The trace of ``item``: a guitar student's question and the assistant's answer (the
    seed rule reads the last user message and the output's last message)."""
    topic = TOPICS[int(item.tag[-5:]) % len(TOPICS)]
    question = f"[item {item.tag}] How do I {topic}? I have been stuck on it for a week."
    answer = (
        f"To {topic}, start slowly: set a metronome at 60 bpm, play the pattern four times, "
        "then raise the tempo by 4 bpm. Check your posture and keep the wrist relaxed."
    )
    return {
        "id": f"trace-{item.tag}",
        "project_name": "cascade-bench",
        "name": "coach-chat",
        "input": {"messages": [{"role": "user", "content": question}]},
        "output": {"messages": [{"role": "assistant", "content": answer}]},
    }


def demo_and_items(root: Path, items: list[Item]) -> list[bytes]:
    """The demo's traces (FretCoach's and a comparison pair's) and ``items``' traces."""
    samples = [root / "stream" / "samples" / name for name in SAMPLES]
    lines = [line for path in samples for line in path.read_bytes().splitlines() if line.strip()]
    return lines + [orjson.dumps(trace_of(item)) for item in items]


def tag_in(text: str) -> str | None:
    found = TAG.search(text)
    return found.group(1) if found else None


ASKED: ContextVar[Item | None] = ContextVar("asked", default=None)  # per request handler task


class CalibratedDecisions(DecisionsDouble):
    """The Decisions API double answering each item's predicate with its scripted probability
    of yes; the contract's checks and the answer's shape are the double's own."""

    def __init__(self, items: dict[str, Item]) -> None:
        super().__init__()
        self.items = items

    async def _decisions(self, request: web.Request) -> web.Response:
        body = await request.json()  # aiohttp keeps the body: the double reads it again
        tag = tag_in(str(body.get("input")))
        ASKED.set(self.items.get(tag) if tag else None)
        response: web.Response = await super()._decisions(request)
        return response

    def _answer(self, question: Any, n: int) -> dict[str, Any] | web.Response:
        answer: dict[str, Any] | web.Response = super()._answer(question, n)
        item = ASKED.get()
        if isinstance(answer, dict) and answer.get("type") == "predicate" and item is not None:
            answer["probability"] = item.p_yes
        return answer


class ScriptedEndpoint(JudgeAndDecisions):
    """The chat judge answering each item as scripted, and the calibrated decision model, on
    one endpoint. ``use(items)`` says which items it answers from now on."""

    def __init__(self) -> None:
        super().__init__()
        self.items: dict[str, Item] = {}
        self.decisions = CalibratedDecisions(self.items)

    def use(self, items: list[Item]) -> None:
        self.items.clear()
        self.items.update((item.tag, item) for item in items)
        self.requests.clear()
        self.decisions.requests.clear()

    def _unscripted(self, body: dict[str, Any]) -> Reply:
        tag = tag_in(str(body["messages"][-1]["content"]))
        item = self.items.get(tag) if tag else None
        if item is None:
            return Reply(content="not an item of the script", status=500)
        answer = {"rationale": RATIONALE[item.judge], "result": item.judge}
        return Reply(content=orjson.dumps(answer).decode())


# --- the seed packs with no cascade, for a comparison of two trees ---------------------------


class SteadyJudge(MockJudge):
    """The command line's varied judge, its tool calls' ids drawn from the request they answer
    instead of a counter: a trace's rules are judged concurrently, so a counter would number
    them in whatever order the calls came, and the varied answers (a hash of the conversation,
    ids included) would differ between two runs of one tree."""

    def _unscripted(self, body: dict[str, Any]) -> Reply:
        digest = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
        ANSWERING.set(digest[:12])
        return super()._unscripted(body)

    def _choice(self, reply: Reply, *request: Any) -> dict[str, Any]:
        choice: dict[str, Any] = super()._choice(reply, *request)
        for n, call in enumerate(choice["message"].get("tool_calls") or []):
            call["id"] = f"call-{ANSWERING.get()}-{n}"
        return choice


ANSWERING: ContextVar[str] = ContextVar("answering", default="")
VOLATILE = {"created_at", "decided_at", "latency_ms", "duration_ms", "elapsed_ms", "judged_at"}


def _stripped(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stripped(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stripped(v) for v in value]
    return value


def _canonical(value: Any) -> bytes:
    return orjson.dumps(_stripped(value), option=orjson.OPT_SORT_KEYS)


async def _score_with_every_pack(documents: list[dict[str, Any]]) -> dict[str, list[bytes]]:
    """Every shipped pack's trace rules on ``documents`` against the varied chat judge: the
    request bodies it received, the scores and the decision records, each canonical, sorted."""
    from prometheus_client import CollectorRegistry

    import rules as shipped
    from stream.engine.scorer import Scorer
    from stream.judge.decision_client import judge_client
    from stream.metrics import ScorerMetrics
    from stream.models import Trace
    from stream.ruleset.loader import load_rules
    from stream.settings import Settings

    ruleset = load_rules(Path(shipped.__file__).parent)
    cfg = Settings(openai_base_url="http://127.0.0.1:1/v1", openai_api_key="sk-bench")
    with SteadyJudge(vary_answers=True) as judge:
        cfg = cfg.model_copy(update={"openai_base_url": judge.base_url})
        metrics = ScorerMetrics(CollectorRegistry())
        client = judge_client(cfg.judge_config(), metrics)
        scorer = Scorer(ruleset, client, default_model=cfg.judge_model, observer=metrics)
        try:
            results = [await scorer.score_trace(Trace.model_validate(d), d) for d in documents]
        finally:
            await client.close()
        requests = [r["body"] for r in judge.requests]
    return {
        "requests": sorted(_canonical(body) for body in requests),
        "prompts": sorted(_canonical(body["messages"]) for body in requests),
        "scores": sorted(_canonical(s.model_dump(mode="json")) for r in results for s in r.scores),
        "decisions": sorted(_canonical(asdict(d)) for r in results for d in r.decisions),
    }


def unchanged_run(documents_path: Path, out: Path) -> None:
    """Score the documents of ``documents_path`` (JSON lines) and write what
    ``_score_with_every_pack`` gives as one JSON document to ``out``."""
    documents = [orjson.loads(line) for line in documents_path.read_bytes().splitlines() if line]
    found = asyncio.run(_score_with_every_pack(documents))
    out.write_bytes(orjson.dumps({k: [v.decode() for v in vs] for k, vs in found.items()}))


def tree_run(tree: Path, documents: Path, out: Path) -> dict[str, list[str]]:
    """``unchanged_run`` in a subprocess whose ``stream`` and ``rules`` are ``tree``'s, with no
    deployment setting of this shell."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SCORER_", "OPENAI_", "KAFKA_"))
    }
    env["PYTHONPATH"] = str(tree)
    command = [sys.executable, __file__, str(documents), str(out)]
    subprocess.run(command, env=env, check=True, cwd=tree, timeout=600, capture_output=True)
    found: dict[str, list[str]] = orjson.loads(out.read_bytes())
    return found


COMPARED = ("prompts", "requests", "scores", "decisions")


def unchanged_across_trees(
    root: Path, before: str, documents: list[bytes]
) -> tuple[str, bool | None]:
    """Every shipped pack, no cascade, on ``documents``: what the judge received and what was
    published, by the working tree at ``root`` and by commit ``before`` (``git archive``);
    what was compared, and whether all of it is byte-identical (None: not run)."""
    with tempfile.TemporaryDirectory(prefix="cascade-bench-") as tmp:
        tree = Path(tmp) / "before"
        tree.mkdir()
        try:
            archive = subprocess.run(
                ["git", "-C", str(root), "archive", before, "stream", "rules"],
                check=True,
                capture_output=True,
            ).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            return f"not run: the tree of {before} could not be read ({exc})", None
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
        path = Path(tmp) / "documents.jsonl"
        path.write_bytes(b"\n".join(documents) + b"\n")
        now = tree_run(root, path, Path(tmp) / "now.json")
        then = tree_run(tree, path, Path(tmp) / "then.json")
    said = []
    for key in COMPARED:
        same = sum((Counter(now[key]) & Counter(then[key])).values())
        said.append(f"{key} {same} of {len(now[key])} identical (before: {len(then[key])})")
    rules = len({orjson.loads(score)["rule_id"] for score in now["scores"]})
    identical = all(now[key] == then[key] for key in COMPARED)
    return f"{len(documents)} traces, {rules} rules: " + ", ".join(said), identical


if __name__ == "__main__":  # run by tree_run with a tree's stream and rules first on the path
    unchanged_run(Path(sys.argv[1]), Path(sys.argv[2]))
