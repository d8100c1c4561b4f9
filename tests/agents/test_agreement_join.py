"""The join agent as the worker runs it, over a table (a dict here) and a log it reads back
(a list standing in for a partition of the internal topic, with the reader's behaviour:
``IncompleteReadError`` when a run is not read through, ``stream/kafka/lookback.py``): what a
label reads, a shadow paired with the primary just read, a read that fails and is tried
again, a partition revoked while reading, the pairs published before the state, a run read
by a killed predecessor read back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from fixtures import score_event

from stream.agents.agreement_join import JoinAgent
from stream.agreement.events import LABEL, SCORE, TICK, slim
from stream.agreement.join import Joined
from stream.agreement.score_index import BUCKET_SPAN_S
from stream.kafka.lookback import IncompleteReadError
from stream.models import ScoreEvent
from stream.observer import Observer
from stream.ruleset.loader import load_rule_file
from stream.ruleset.schema import RuleSet
from stream.settings import Settings

RULE = """\
id: resolved
pack: labelled
version: 1
scope: trace
kind: llm_judge
description: "Resolved?"
variables:
  reply: output
output:
  type: choice
  choices: {"yes": 1.0, "no": 0.0}
  verdict_field: answer
prompt: "Resolved? {{reply}}"
shadow:
  - name: mini
    model: gpt-4.1-nano
"""


T0 = time.time() - 3600.0  # the events' times are seconds after this


class Table(dict[bytes, bytes]):
    @property
    def data(self) -> Table:
        return self


class Log:
    """A partition of the internal topic and the reader's view of it."""

    def __init__(self) -> None:
        self.records: list[SimpleNamespace] = []
        self.reads: list[list[tuple[int, int]]] = []
        self.failures = 0  # the next reads that fail

    def append(self, key: bytes, value: bytes, at: float) -> SimpleNamespace:
        record = SimpleNamespace(
            partition=0, offset=len(self.records), key=key, value=value, timestamp=at
        )
        self.records.append(record)
        return record

    async def read(self, partition: int, runs: list[tuple[int, int]]) -> list[Any]:
        self.reads.append(list(runs))
        if self.failures:
            self.failures -= 1
            raise IncompleteReadError("the broker is away")
        return [
            SimpleNamespace(**{**vars(r), "timestamp": r.timestamp * 1000})
            for r in self.records
            if any(first <= r.offset <= last for first, last in runs)
        ]

    async def close_if_idle(self) -> None:
        pass

    def cached_records(self) -> int:
        return 0  # keeps nothing: every read is asked of the log


class Joins:
    def __init__(self, table: Table) -> None:
        self.table = table
        self.owned_now = {0}

    def owned(self) -> set[int]:
        return self.owned_now

    def on_recover(self, rebuild: Any) -> None:
        self.rebuild = rebuild


@pytest.fixture
def ruleset(tmp_path: Path) -> RuleSet:
    folder = tmp_path / "labelled"
    folder.mkdir()
    (folder / "resolved.yaml").write_text(RULE)
    return RuleSet(rules=[load_rule_file(folder / "resolved.yaml")])


class Worker:
    """One join agent; ``send`` puts an event on the log and applies it as Faust would."""

    def __init__(self, ruleset: RuleSet, table: Table, log: Log) -> None:
        self.log = log
        self.joins = Joins(table)
        self.published: list[Joined] = []
        self.agent = JoinAgent(
            self.joins,  # type: ignore[arg-type]
            SimpleNamespace(ruleset=ruleset),  # type: ignore[arg-type]
            Settings(),
            Observer(),
            log,  # type: ignore[arg-type]
            lambda pair: [(None, None, pair.model_dump_json().encode(), None)],  # type: ignore[list-item]
            clock=lambda: self.now,
        )
        self.now = T0
        self.joins.rebuild({0})

    async def send(self, key: bytes, value: bytes, at: float, commit: bool = True) -> list[Joined]:
        at += T0
        self.now = at  # the agent's clock
        record = self.log.append(key, value, at)
        message = SimpleNamespace(partition=0, offset=record.offset, key=key, timestamp=at)
        sends = await self.agent.apply(message, value)  # type: ignore[arg-type]
        pairs = [Joined.model_validate_json(s[2]) for s in sends]
        if commit:
            self.published += pairs
            self.agent.commit()
        return pairs

    async def score(self, score: ScoreEvent, at: float) -> list[Joined]:
        return await self.send(score.target_id.encode(), SCORE + slim(score), at)

    async def label(self, target: str, value: str, at: float) -> list[Joined]:
        label = {
            "trace_id": target,
            "rule_id": "resolved",
            "value": value,
            "annotator": "ana",
            "labelled_at": "2026-11-01T11:00:00Z",
        }
        return await self.send(target.encode(), LABEL + orjson.dumps(label), at)


def judged(target: str, label: str = "yes", variant: str | None = None) -> ScoreEvent:
    return score_event(
        target_id=target,
        rule_id="resolved",
        label=label,
        raw_value={"yes": 1.0, "no": 0.0}[label],
        variant=variant,
        score_id=f"{target}/{variant}",
    )


async def test_a_label_reads_back_only_the_runs_that_may_hold_its_scores(
    ruleset: RuleSet,
) -> None:
    log, table = Log(), Table()
    worker = Worker(ruleset, table, log)
    for n in range(20):
        assert await worker.score(judged(f"t-{n}"), 100.0 + n) == []
    assert [k for k in table if not k.startswith(b"\x00")] == []  # no score is kept
    [pair] = await worker.label("t-7", "no", 200.0)
    assert (pair.score_id, pair.reference_value, pair.judged_value) == ("t-7/None", "no", "yes")
    assert log.reads == [[(0, 19)]]  # the open bucket, up to the label
    assert await worker.label("nobody", "no", 201.0) == []
    assert len(log.reads) == 1  # no run may hold it: nothing read
    # the label is held: a score that comes later pairs with it, no read
    [later] = await worker.score(judged("nobody"), 202.0)
    assert later.label_id is not None and len(log.reads) == 1


async def test_a_shadow_pairs_with_the_primary_just_read_or_reads_it_back(
    ruleset: RuleSet,
) -> None:
    log, table = Log(), Table()
    worker = Worker(ruleset, table, log)
    await worker.score(judged("t-1"), 100.0)
    [pair] = await worker.score(judged("t-1", "no", variant="mini"), 100.0)
    assert (pair.reference, pair.reference_score_id, pair.variant) == (
        "primary",
        "t-1/None",
        "mini",
    )
    assert log.reads == []  # its primary was just read
    fresh = Worker(ruleset, table, log)  # another worker: no primary read recently
    [again] = await fresh.score(judged("t-1", "no", variant="mini"), 101.0)
    assert again.agreement_id == pair.agreement_id and len(log.reads) == 1


async def test_a_read_that_fails_is_tried_again_and_a_revoked_partition_left(
    ruleset: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", no_wait)
    log, table = Log(), Table()
    worker = Worker(ruleset, table, log)
    await worker.score(judged("t-1"), 100.0)
    log.failures = 3
    [pair] = await worker.label("t-1", "yes", 200.0)  # the broker came back: read through
    assert pair.score_id == "t-1/None" and waits == [0.5, 1.0, 2.0]
    log.failures = 1
    worker.joins.owned_now = set()  # revoked while reading: the next owner reads it again
    assert await worker.label("t-1", "no", 201.0) == []
    held = [orjson.loads(v) for k, v in table.items() if not k.startswith(b"\x00")]
    assert [next(iter(h["labels"].values()))["value"] for h in held] == ["yes"]  # not written


async def test_pairs_are_published_before_the_state_that_forgets_their_sides(
    ruleset: RuleSet,
) -> None:
    log, table = Log(), Table()
    worker = Worker(ruleset, table, log)
    await worker.score(judged("t-1", variant="mini"), 100.0)  # its primary failed, or waits
    before = dict(table)
    primary = judged("t-1")
    [pair] = await worker.send(b"t-1", SCORE + slim(primary), 101.0, commit=False)  # then died
    assert table == before  # the shadow still held: a redelivery pairs it again
    [again] = await worker.send(log.records[-1].key, log.records[-1].value, 102.0)
    assert again.agreement_id == pair.agreement_id
    assert [k for k in table if not k.startswith(b"\x00")] == []  # paired: forgotten


async def test_a_run_read_by_a_killed_predecessor_is_read_back(ruleset: RuleSet) -> None:
    log, table = Log(), Table()
    first = Worker(ruleset, table, log)
    await first.send(b"", TICK, 0.0)  # the partition's mark
    await first.send(b"", TICK, 1.0 + BUCKET_SPAN_S)  # a bucket of no score closes
    for n in range(5):
        await first.score(judged(f"t-{n}"), 400.0 + n)  # read, never closed: killed
    second = Worker(ruleset, table, log)  # the table as the changelog restores it
    [pair] = await second.label("t-3", "no", 500.0)
    assert pair.score_id == "t-3/None"
    assert log.reads == [[(2, 6)]]  # the whole run the first read after its last close
    assert await second.label("t-9", "no", 501.0) == []
    assert len(log.reads) == 1  # filled: the run is known now
