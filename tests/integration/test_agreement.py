"""Human labels joined with the judge's scores end to end (design record 26): a scripted judge
of known accuracy against scripted labels, some labels before their scores and some after, a
duplicate, and two labels the worker must refuse; the joins on the agreement topic, the
agreement measured on /metrics, and `scorer agreement` reporting the same figures."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from scripted_judge import MockJudge, Reply

from stream.kafka.broker import EmbeddedBroker

from .harness import Names, Worker, produce, read

RULE = """\
id: resolved
pack: labelled
version: 1
scope: trace
kind: llm_judge
description: "Was the user's request resolved?"
variables:
  question: input.messages[-1].content
  reply: output.messages[-1].content
output:
  type: choice
  choices: {"yes": 1.0, "no": 0.0}
  verdict_field: answer
  reason_field: reason
prompt: |-
  Was the user's request resolved by the reply? Answer yes or no.
  <question>{{question}}</question>
  <reply>{{reply}}</reply>
  Answer with a JSON object: {"answer": "yes" or "no", "reason": "<one sentence>"}.
"""

N = 20
JUDGE_YES = set(range(12))  # the judge says yes on 0..11
HUMAN_YES = set(range(10)) | {12, 13}  # the annotator on 0..9, 12, 13
# both yes on 0..9 (10), both no on 14..19 (6), judge yes / human no on 10, 11, judge no /
# human yes on 12, 13: accuracy 16/20 = 0.8; chance agreement (12/20)^2 + (8/20)^2 = 0.52,
# kappa (0.8 - 0.52) / (1 - 0.52) = 0.58333 (Cohen 1960)
ACCURACY, KAPPA = 0.8, 0.28 / 0.48


def trace(i: int) -> tuple[bytes, bytes]:
    document = {
        "id": f"t-{i}",
        "project_name": "support",
        "name": "reply",
        "input": {"messages": [{"role": "user", "content": f"case {i:02d}: my parcel?"}]},
        "output": {"messages": [{"role": "assistant", "content": "It ships today."}]},
    }
    return document["id"].encode(), orjson.dumps(document)


def label(i: int, **changed: Any) -> tuple[bytes | None, bytes]:
    document = {
        "trace_id": f"t-{i}",
        "rule_id": "resolved",
        "value": "yes" if i in HUMAN_YES else "no",
        "annotator": "ann-1",
        "labelled_at": "2026-11-27T20:00:00Z",
        **changed,
    }
    return None, orjson.dumps(document)  # no key: the worker keys them by target


def env(names: Names) -> dict[str, str]:
    return {
        "SCORER_LABELS_TOPIC": f"labels-{names.suffix}",
        "SCORER_AGREEMENT_TOPIC": f"agreement-{names.suffix}",
    }


def labelled_worker(
    broker: EmbeddedBroker, names: Names, tmp: Path, judge: MockJudge, rule: str
) -> Worker:
    """A started worker running the one rule file ``rule`` (pack labelled) on this test's
    labels and agreement topics."""
    rules = tmp / "rules" / "labelled"
    rules.mkdir(parents=True)
    (rules / "resolved.yaml").write_text(rule)
    return labelled_rules_worker(broker, names, tmp, judge)


def labelled_rules_worker(
    broker: EmbeddedBroker, names: Names, tmp: Path, judge: MockJudge
) -> Worker:
    """A started worker running the rules ``labelled_worker`` wrote under ``tmp``."""
    return Worker(
        broker.bootstrap,
        names,
        tmp,
        SCORER_RULES_DIR=str(tmp / "rules"),
        SCORER_PACKS='["labelled"]',
        OPENAI_BASE_URL=judge.base_url,
        **env(names),
    ).start()


async def scorer_agreement(broker: EmbeddedBroker, names: Names) -> Any:
    """`scorer agreement --json` on this test's topics, run as a user would."""
    command = [sys.executable, "-m", "stream.cli", "agreement", "--json", "--idle", "1"]
    run_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SCORER_", "KAFKA_"))},
        "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap,
        "SCORER_SCORES_TOPIC": names.scores,
        **env(names),
    }
    result = await asyncio.to_thread(
        subprocess.run, command, env=run_env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result


async def wait_for(predicate: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        await asyncio.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def measured(worker: Worker, measure: str) -> float | None:
    found = re.search(
        rf'scorer_judge_agreement\{{[^}}]*measure="{measure}"[^}}]*reference="human"'
        rf'[^}}]*rule="resolved"[^}}]*window="1h"\}} (\S+)',
        worker.scrape(),
    )
    return float(found[1]) if found else None


async def test_labels_join_their_scores_and_the_agreement_is_measured(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path, judge: MockJudge
) -> None:
    for i in range(N):
        answer = "yes" if i in JUDGE_YES else "no"
        judge.script(f"case {i:02d}:", f'{{"answer": "{answer}", "reason": "scripted"}}')
    topics = env(names)
    worker = labelled_worker(broker, names, tmp_path, judge, RULE)
    workers.append(worker)
    labels_topic, agreement_topic = topics["SCORER_LABELS_TOPIC"], topics["SCORER_AGREEMENT_TOPIC"]

    # half the labels come before their traces are scored, half after; one is sent twice;
    # one names no rule, one has a value off the rule's scale
    await produce(broker.bootstrap, labels_topic, [label(i) for i in range(N // 2)])
    await produce(broker.bootstrap, names.traces, [trace(i) for i in range(N)])
    await produce(
        broker.bootstrap,
        labels_topic,
        [label(i) for i in range(N // 2, N)]
        + [label(3)]
        + [label(4, rule_id="resolvd"), label(5, value="maybe")],
    )

    records = await read(
        broker.bootstrap,
        agreement_topic,
        until=lambda rs: len({orjson.loads(r.value)["agreement_id"] for r in rs}) >= N,
        timeout=90,
    )
    pairs = {p["agreement_id"]: p for p in (orjson.loads(r.value) for r in records)}
    assert len(pairs) == N  # the duplicate made no new pair
    by_target = {p["target_id"]: p for p in pairs.values()}
    assert set(by_target) == {f"t-{i}" for i in range(N)}
    for i in range(N):
        pair = by_target[f"t-{i}"]
        assert pair["reference"] == "human" and pair["variant"] is None
        assert pair["kind"] == "choice" and pair["annotator"] == "ann-1"
        assert pair["reference_value"] == ("yes" if i in HUMAN_YES else "no")
        assert pair["judged_value"] == ("yes" if i in JUDGE_YES else "no")

    # the refused labels are dead letters with their reasons
    dead = await read(broker.bootstrap, names.dlq, until=lambda rs: len(rs) >= 2, timeout=30)
    reasons = " | ".join(dict(r.headers).get("scorer.error", b"").decode() for r in dead)
    assert "resolvd" in reasons and "resolved" in reasons  # the closest known rule named
    assert "maybe" in reasons

    # measured on /metrics by the worker owning the measuring partition
    accuracy = await wait_for(lambda: measured(worker, "accuracy"), "the accuracy gauge")
    assert abs(accuracy - ACCURACY) < 1e-9
    assert abs((measured(worker, "kappa") or 0.0) - KAPPA) < 1e-9
    assert measured(worker, "count") == N

    # scorer agreement: the same figures, with their intervals
    result = await scorer_agreement(broker, names)
    (compared,) = orjson.loads(result.stdout)["rules"]["resolved"]
    assert (compared["reference"], compared["variant"], compared["kind"]) == (
        "human",
        None,
        "choice",
    )
    measures = compared["measures"]
    assert measures["count"]["count"] == N
    assert abs(measures["accuracy"]["value"] - ACCURACY) < 1e-9
    low, high = measures["accuracy"]["low"], measures["accuracy"]["high"]
    assert low < ACCURACY < high  # Wilson: [0.584, 0.919] for 16 of 20
    assert abs(measures["kappa"]["value"] - KAPPA) < 1e-9


SHADOWED = """\
id: resolved
pack: labelled
version: 1
scope: trace
kind: llm_judge
description: "Was the user's request resolved? (with a stricter shadow judge)"
variables:
  question: input.messages[-1].content
  reply: output.messages[-1].content
output:
  type: choice
  choices: {"yes": 1.0, "no": 0.0}
  verdict_field: answer
  reason_field: reason
prompt: |-
  PRIMARY <question>{{question}}</question>
  <reply>{{reply}}</reply>
  Was the request resolved? Answer with {"answer": "yes" or "no", "reason": "..."}.
shadow:
  - name: strict
    model: gpt-4.1-nano
    sampling_rate: 1.0
    prompt: |-
      STRICT <question>{{question}}</question>
      <reply>{{reply}}</reply>
      Was the request fully resolved? Answer with {"answer": "yes" or "no", "reason": "..."}.
"""


async def test_a_shadow_judge_is_compared_with_the_labels_and_with_the_primary(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path, judge: MockJudge
) -> None:
    n, primary_yes, shadow_yes, human_yes = 10, set(range(7)), set(range(5)), set(range(6))
    for i in range(n):
        for side, says in (("PRIMARY", i in primary_yes), ("STRICT", i in shadow_yes)):
            answer = "yes" if says else "no"
            judge.script(
                f"{side} <question>case {i:02d}:", f'{{"answer": "{answer}", "reason": "x"}}'
            )
    topics = env(names)
    worker = labelled_worker(broker, names, tmp_path, judge, SHADOWED)
    workers.append(worker)
    await produce(broker.bootstrap, names.traces, [trace(i) for i in range(n)])
    labels = [label(i, value="yes" if i in human_yes else "no") for i in range(n)]
    await produce(broker.bootstrap, topics["SCORER_LABELS_TOPIC"], labels)
    # each trace: label x primary, label x shadow, primary x shadow
    records = await read(
        broker.bootstrap,
        topics["SCORER_AGREEMENT_TOPIC"],
        until=lambda rs: len({orjson.loads(r.value)["agreement_id"] for r in rs}) >= 3 * n,
        timeout=90,
    )
    pairs = {p["agreement_id"]: p for p in (orjson.loads(r.value) for r in records)}
    kinds = sorted((p["reference"], p["variant"] or "") for p in pairs.values())
    assert kinds == sorted(
        [("human", "")] * n + [("human", "strict")] * n + [("primary", "strict")] * n
    )
    shadowed = [p for p in pairs.values() if p["variant"] == "strict"]
    assert {p["model"] for p in shadowed} == {"gpt-4.1-nano"}

    result = await scorer_agreement(broker, names)
    compared = {
        (c["reference"], c["variant"]): c["measures"]
        for c in orjson.loads(result.stdout)["rules"]["resolved"]
    }
    # labels vs primary: 9 of 10 (6 crossed); labels vs shadow: 9 of 10 (5 crossed);
    # primary vs shadow: 8 of 10 (5 and 6 crossed)
    assert compared[("human", None)]["accuracy"]["value"] == pytest.approx(0.9)
    assert compared[("human", "strict")]["accuracy"]["value"] == pytest.approx(0.9)
    assert compared[("primary", "strict")]["accuracy"]["value"] == pytest.approx(0.8)
    assert {m["count"]["count"] for m in compared.values()} == {n}
    # the shadow is kept out of the quality metrics, counted apart
    page = worker.scrape()
    assert (
        'scorer_shadow_scores_total{pack="labelled",rule="resolved",status="ok",variant="strict"} 10.0'
        in page
    )


CASCADED = RULE.replace(
    'description: "Was the user\'s request resolved?"\n',
    'description: "Was the user\'s request resolved?"\n'
    "judge:\n"
    "  cascade: {first: {api: chat, model: gpt-4.1-nano}, accept: {min_confidence: 0.9}, "
    "audit_rate: 1.0}\n",
)


async def test_a_cascades_curve_and_spend_come_from_what_a_worker_published(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path, judge: MockJudge
) -> None:
    """Every target audited: the judge and the first tier (a small chat model read through
    its log-probabilities) both judge; the pairs carry the first tier's confidence through
    the internal topic's slim records, and `scorer agreement` draws the curve from them."""
    n = 8
    confidence = {i: 0.6 + 0.05 * i for i in range(n)}  # 0.6 .. 0.95
    for i in range(n):
        judge.script(f"case {i:02d}:", f'{{"answer": "{"yes" if i < 4 else "no"}", "reason": "x"}}')
    for i in range(n):
        small = Reply(
            '{"answer": "yes", "reason": "x"}',
            alternatives={"yes": {"yes": confidence[i], "no": 1 - confidence[i]}},
        )
        judge.script(f"case {i:02d}:", small, model="gpt-4.1-nano")
    worker = labelled_worker(broker, names, tmp_path, judge, CASCADED)
    workers.append(worker)
    await produce(broker.bootstrap, names.traces, [trace(i) for i in range(n)])
    records = await read(
        broker.bootstrap,
        env(names)["SCORER_AGREEMENT_TOPIC"],
        until=lambda rs: len({orjson.loads(r.value)["agreement_id"] for r in rs}) >= n,
        timeout=90,
    )
    pairs = [orjson.loads(r.value) for r in records]
    assert {(p["variant"], p["reference"]) for p in pairs} == {("cascade", "primary")}
    assert sorted(p["judged_confidence"] for p in pairs) == pytest.approx(
        sorted(confidence.values())
    )

    report = orjson.loads((await scorer_agreement(broker, names)).stdout)
    (curve,) = report["cascades"]
    assert (curve["rule"], curve["audited"]) == ("resolved", n)
    at = {point["cut"]: point for point in curve["cuts"]}
    # under 0.9: cases 0..5 (0.6 .. 0.85); published at 0.9: the first tier's yes on 6 and 7
    # (the judge says no there), the judge's verdict on the rest: 6 of 8 agree
    assert at[0.9]["escalated"]["value"] == pytest.approx(6 / 8)
    assert at[0.9]["accepted"]["count"] == 2
    (spend,) = report["spend"]
    assert (spend["rule"], spend["targets"], spend["escalated_by_reason"]) == (
        "resolved",
        n,
        {"audit": n},
    )
