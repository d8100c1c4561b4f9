"""The demo's own checks (an unreachable judge, a judge reported down), the embedded broker's
recorded address, and the scripted judge's answers by schema (what keeps the demo free of error
scores)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import jsonschema
import orjson
import pytest
from scripted_judge import schema_example

from stream.demo import check_judge_reachable, judge_trouble
from stream.errors import ScorerError
from stream.judge.answers import Quoted
from stream.judge.contract import answer_contract
from stream.kafka import broker
from stream.ruleset.loader import load_rules
from stream.ruleset.location import REPO_RULES_DIR
from stream.ruleset.schema import PromptedRule


def test_an_unreachable_judge_is_said_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(ScorerError, match=rf"127\.0\.0\.1:{port}/v1 cannot be reached"):
            check_judge_reachable(f"http://127.0.0.1:{port}/v1", timeout=1)


def test_a_listening_judge_and_no_judge_pass() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_judge_reachable(f"http://127.0.0.1:{s.getsockname()[1]}/v1")
    check_judge_reachable(None)
    with pytest.raises(ScorerError, match="is not a URL"):
        check_judge_reachable("localhost")


def test_a_judge_the_worker_reports_down_is_named() -> None:
    text = (
        'scorer_judge_available{model="gpt-4o-mini"} 0.0\n'
        'scorer_judge_available{model="other"} 1.0\n'
    )
    assert judge_trouble(text) == (
        'the judge was unavailable (model="gpt-4o-mini"): see the worker\'s log above'
    )
    assert judge_trouble('scorer_judge_available{model="m"} 1.0\n') is None


def test_the_address_is_recorded_while_the_broker_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert broker.running_brokers() == []
    embedded = broker.user_broker(broker.free_port())
    try:
        assert broker.running_brokers() == [embedded.bootstrap]
        assert broker.records_dir().stat().st_mode & 0o077 == 0  # the user's alone
    finally:
        embedded.stop()
    assert broker.running_brokers() == []


def test_an_address_left_by_a_dead_process_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    with socket.socket() as listening:  # a port something listens on, as a broker's
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        broker.records_dir().mkdir(parents=True)
        record = broker.records_dir() / address.rpartition(":")[2]
        record.write_text(f"{address} {gone.stdout.strip()}\n")
        assert broker.running_brokers() == []
        record.write_text(f"{address} {os.getpid()}\n")
        assert broker.running_brokers() == [address]


def test_a_port_in_use_is_refused_when_it_must_be_that_one() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not broker.port_free(port)
        with pytest.raises(ScorerError, match=rf"port {port} is in use.*SCORER_EMBEDDED_PORT"):
            broker.user_broker(port, fixed=True)


@pytest.mark.parametrize(
    "rule",
    [r for r in load_rules(REPO_RULES_DIR).rules if isinstance(r, PromptedRule)],
    ids=lambda r: r.id,
)
def test_the_scripted_judge_answers_every_shipped_rule_in_its_schema(rule: PromptedRule) -> None:
    """The demo's judge answers a prompt no script matches with a document of the rule's answer
    schema: valid against it, and read back by the rule's own parser without an error."""
    schema, parse = answer_contract(rule)
    if schema is None:
        pytest.skip("a text answer")
    example = schema_example(schema, schema)
    jsonschema.validate(example, schema)
    parse(orjson.dumps(example).decode(), Quoted())


def test_the_printed_commands_are_this_installations_own() -> None:
    """What the worker prints runs as printed: its Python and scorer (no activated
    virtualenv needed), and options the replay command and the example consumer take."""
    import shlex

    from test_docs_commands import check_shell

    printed = broker.how_to_use("127.0.0.1:9092", "llm-traces", "scores")
    lines = [line.split(":", 1)[1] for line in printed.splitlines()[1:]]
    for line in lines:
        words = shlex.split(line.split("  (")[0])
        check_shell(words, "printed by the worker")
    assert Path(shlex.split(lines[1])[0]).resolve() == Path(sys.executable).resolve()
