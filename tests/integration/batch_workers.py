"""What the batch-judging tests share: a worker running one rule file against the scripted
judge (online calls) and the Batch API double (batches), and waiting on either."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
from batch_double import BatchDouble
from scripted_judge import MockJudge

from stream.kafka.broker import EmbeddedBroker

from .harness import Names, Worker, read


def batch_worker(
    broker: EmbeddedBroker,
    names: Names,
    tmp: Path,
    judge: MockJudge,
    api: BatchDouble,
    rule: str,
    **env: str,
) -> Worker:
    """A worker (not started) running the pack ``batchy`` of the one ``rule`` (YAML text),
    polling its batches every 0.3 s."""
    rules = tmp / "rules" / "batchy"
    rules.mkdir(parents=True, exist_ok=True)
    rule_id = rule.split("\n", 1)[0].removeprefix("id: ")  # a rule file is named by its id
    (rules / f"{rule_id}.yaml").write_text(rule)
    return Worker(
        broker.bootstrap,
        names,
        tmp,
        SCORER_RULES_DIR=str(tmp / "rules"),
        SCORER_PACKS='["batchy"]',
        OPENAI_BASE_URL=judge.base_url,
        SCORER_BATCH_BASE_URL=api.base_url,
        SCORER_BATCH_POLL_S="0.3",
        SCORER_JUDGE_MODEL="gpt-4o-mini",
        **env,
    )


async def wait_for(predicate: Any, what: str, timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def decisions_of(bootstrap: str, topic: str, count: int) -> list[dict[str, Any]]:
    """The decision records on ``topic`` from its start, once there are ``count``."""
    records = await read(bootstrap, topic, until=lambda rs: len(rs) >= count, timeout=45)
    return [orjson.loads(r.value) for r in records]
