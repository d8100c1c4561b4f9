"""What leaves for the judge, end to end (issue 47's measure): traces carrying personal data
and secrets of every shipped kind (``pii_corpus``: faker's, seeded) through a worker and the
scripted judge, which keeps what it received: none of the seeded values reaches the judge
of a rule that masks them, the scores are published as before, a rule with
``judge.redact: false`` receives the raw text, and the trace on Kafka is untouched."""

from __future__ import annotations

from pathlib import Path

import orjson
from pii_corpus import labelled_turns
from scripted_judge import MockJudge

from stream.kafka.broker import EmbeddedBroker

from .harness import Names, Worker, produce, read, read_scores

RULE = """\
id: {rule_id}
pack: masked
version: 1
scope: trace
kind: llm_judge
description: "Was the user's request resolved?"
judge: {{redact: {redact}}}
variables:
  question: input.messages[-1].content
  reply: output.messages[-1].content
output:
  type: choice
  choices: {{"yes": 1.0, "no": 0.0}}
prompt: |-
  {marker} Was the request resolved? <question>{{{{question}}}}</question>
  <reply>{{{{reply}}}}</reply>
"""


async def test_no_seeded_value_reaches_the_judge_of_a_rule_that_masks_them(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path, judge: MockJudge
) -> None:
    turns = labelled_turns(60, seed=470)
    seeded = [value for turn in turns for _, value in turn.values]
    documents = [
        {
            "id": f"t-{i}",
            "project_name": "support",
            "name": "reply",
            "input": {"messages": [{"role": "user", "content": turn.text}]},
            "output": {"messages": [{"role": "assistant", "content": "Done, thanks."}]},
        }
        for i, turn in enumerate(turns)
    ]
    pack = tmp_path / "rules" / "masked"
    pack.mkdir(parents=True)
    for rule_id, redact, marker in (("masked", "true", "MASKED"), ("raw", "false", "RAW")):
        text = RULE.format(rule_id=rule_id, redact=redact, marker=marker)
        (pack / f"{rule_id}.yaml").write_text(text)
    judge.script("Was the request resolved", '{"choice": "yes", "reason": "ok"}')
    worker = Worker(
        broker.bootstrap,
        names,
        tmp_path,
        SCORER_RULES_DIR=str(tmp_path / "rules"),
        SCORER_PACKS='["masked"]',
        OPENAI_BASE_URL=judge.base_url,
    ).start()
    workers.append(worker)
    await produce(
        broker.bootstrap, names.traces, [(d["id"].encode(), orjson.dumps(d)) for d in documents]
    )
    scores = await read_scores(
        broker.bootstrap, names.scores, until=lambda s: len(s) >= 2 * len(documents), timeout=120
    )
    assert {(s["rule_id"], s["status"], s["label"]) for s in scores} == {
        ("masked", "ok", "yes"),
        ("raw", "ok", "yes"),
    }
    masked = [s for s in scores if s["rule_id"] == "masked"]
    assert all(s["details"]["redacted"] for s in masked)  # every turn carried a value
    prompts = [str(r["body"]["messages"][-1]["content"]) for r in judge.requests]
    to_masked = [p for p in prompts if p.startswith("MASKED")]
    to_raw = [p for p in prompts if p.startswith("RAW")]
    assert len(to_raw) == len(documents)
    # masked, some turns' prompts are the same: the verdict cache answers the repeats
    assert 0 < len(to_masked) <= len(documents)
    leaked = [v for v in seeded if any(v in p for p in to_masked)]
    assert leaked == [], leaked[:5]
    assert all(any(v in p for p in to_raw) for v in seeded)  # redact: false: the raw text
    # the trace on Kafka is whole
    records = await read(broker.bootstrap, names.traces, until=lambda rs: len(rs) >= len(documents))
    on_kafka = b"".join(r.value for r in records).decode()
    assert all(orjson.dumps(v).decode()[1:-1] in on_kafka for v in seeded)
