"""Rule files edited under a running worker: a new rule runs without a restart (the file
watched), a bad file keeps the running set and says which file, field and problem (on SIGHUP),
and the rule-set digest on the metrics follows."""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import time
from pathlib import Path

import orjson

from stream.kafka.broker import EmbeddedBroker

from .harness import Names, Worker, produce, read_scores

SUPPORT = Path(__file__).resolve().parents[2] / "examples" / "rules" / "support"


def support_trace(trace_id: str) -> tuple[bytes, bytes]:
    document = {
        "id": trace_id,
        "project_name": "support-bot",
        "name": "reply",
        "input": {"messages": [{"role": "user", "content": "where is my parcel?"}]},
        "output": {"messages": [{"role": "assistant", "content": "It left the depot today."}]},
    }
    return trace_id.encode(), orjson.dumps(document)


async def wait_for(predicate: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def digest(worker: Worker) -> str | None:
    found = re.search(r'scorer_worker_info\{[^}]*ruleset="(\w+)"', worker.scrape())
    return found[1] if found else None


async def scored(bootstrap: str, topic: str, trace_id: str, rules: set[str]) -> set[str]:
    scores = await read_scores(
        bootstrap,
        topic,
        until=lambda rs: rules <= {s["rule_id"] for s in rs if s["target_id"] == trace_id},
    )
    return {s["rule_id"] for s in scores if s["target_id"] == trace_id}


async def test_rule_files_reload_while_the_worker_runs(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(SUPPORT, rules / "support", ignore=shutil.ignore_patterns("__pycache__"))
    worker = Worker(
        broker.bootstrap,
        names,
        tmp_path,
        SCORER_RULES_DIR=str(rules),
        SCORER_PACKS='["support"]',
        SCORER_RULES_RELOAD_S="0.5",
    ).start()
    workers.append(worker)
    await produce(broker.bootstrap, names.traces, [support_trace("t-live-1")])
    assert await scored(broker.bootstrap, names.scores, "t-live-1", {"reply_length"}) == {
        "reply_length"
    }
    first = digest(worker)
    assert first

    # a new rule file: looked at within the reload interval, run without a restart
    strict = (rules / "support" / "reply_length.yaml").read_text()
    strict = strict.replace("id: reply_length", "id: reply_length_strict")
    (rules / "support" / "reply_length_strict.yaml").write_text(
        strict.replace("max_words: 60", "max_words: 2")
    )
    await wait_for(lambda: "rules reloaded" in worker.log(), "the reload")
    assert "added ['reply_length_strict']" in worker.log()
    await wait_for(lambda: digest(worker) not in (None, first), "the new digest")
    await produce(broker.bootstrap, names.traces, [support_trace("t-live-2")])
    both = {"reply_length", "reply_length_strict"}
    assert await scored(broker.bootstrap, names.scores, "t-live-2", both) == both
    second = digest(worker)

    # a bad file, then SIGHUP (the watch is slower): the running set stays, the file is named
    (rules / "support" / "broken.yaml").write_text(
        strict.replace("id: reply_length_strict", "id: broken").replace("scope: trace", "scope: x")
    )
    assert worker.process is not None
    worker.process.send_signal(signal.SIGHUP)
    await wait_for(lambda: "rules not reloaded" in worker.log(), "the refusal")
    refusal = worker.log()[worker.log().index("rules not reloaded") :]
    assert "broken.yaml" in refusal and "field scope" in refusal
    await produce(broker.bootstrap, names.traces, [support_trace("t-live-3")])
    assert await scored(broker.bootstrap, names.scores, "t-live-3", both) == both
    assert digest(worker) == second
    assert 'scorer_rules_reloads_total{outcome="invalid"}' in worker.scrape()
    assert worker.process.poll() is None  # still running
