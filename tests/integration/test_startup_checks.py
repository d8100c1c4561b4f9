"""What stops a worker at start-up stops it at once, in one line and exit 2: a broker that
advertises an address this host cannot reach (clients bootstrap, then go to the advertised
one), and what fails inside Faust's own start (the metrics port taken), or a bad rule file."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from scorer_runs import error_lines, one_error_line, run_scorer

from stream.errors import ScorerError
from stream.kafka.broker import EmbeddedBroker, free_port
from stream.kafka.io import check_cluster

ADVICE = "set the broker's advertised.listeners to an address clients can reach"


@pytest.fixture
def misadvertised(tmp_path: Path) -> Iterator[tuple[EmbeddedBroker, int]]:
    """A broker that listens on one port and advertises another where nothing listens (as a
    port mapped one way and advertised another)."""
    advertised = free_port()
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log", advertised=advertised).start()
    yield broker, advertised
    broker.stop()


async def test_a_broker_advertising_a_port_nobody_listens_on_is_refused(
    misadvertised: tuple[EmbeddedBroker, int],
) -> None:
    broker, advertised = misadvertised
    started = time.monotonic()
    with pytest.raises(ScorerError) as caught:
        await check_cluster(broker.bootstrap, None)
    assert time.monotonic() - started < 10
    said = str(caught.value)
    assert said.startswith(f"Kafka at {broker.bootstrap} advertises broker ")
    assert f"at 127.0.0.1:{advertised} (ConnectionRefusedError" in said
    assert "which cannot be reached from here" in said and said.endswith(ADVICE)


async def test_a_broker_advertising_a_hostname_this_host_cannot_resolve_is_refused(
    tmp_path: Path,
) -> None:
    # as a broker in a container advertising its own hostname (.invalid never resolves)
    broker = EmbeddedBroker(
        log_path=tmp_path / "tansu.log", advertised=29092, advertised_host="kafka.invalid"
    ).start()
    try:
        with pytest.raises(ScorerError, match=r"at kafka\.invalid:29092 \(gaierror") as caught:
            await check_cluster(broker.bootstrap, None)
        assert str(caught.value).endswith(ADVICE)
    finally:
        broker.stop()


async def test_a_broker_advertising_where_it_listens_passes(broker: EmbeddedBroker) -> None:
    await asyncio.wait_for(check_cluster(broker.bootstrap, None), 15)


def test_the_worker_replay_and_demo_stop_in_one_line_at_a_misadvertised_broker(
    misadvertised: tuple[EmbeddedBroker, int], tmp_path: Path
) -> None:
    broker, advertised = misadvertised
    traces = tmp_path / "t.jsonl"
    traces.write_text('{"id": "t1"}\n')
    for args in (["worker"], ["replay", str(traces)], ["demo", "--timeout", "5"]):
        started = time.monotonic()
        result = run_scorer(args, tmp_path, KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap)
        said = one_error_line(result)
        assert time.monotonic() - started < 20, args  # not aiokafka's 40 s, then a traceback
        assert "advertises broker " in said and f"127.0.0.1:{advertised}" in said, said
        assert said.endswith(ADVICE)


def test_the_metrics_port_in_use_stops_the_worker_in_one_line(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_scorer(
            ["worker"],
            tmp_path,
            KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap,
            SCORER_BROKER_KIND="tansu",
            SCORER_WEB_PORT=str(port),
            SCORER_PACKS='["fretcoach"]',
            SCORER_APP_ID=f"startup-{port}",
        )
    # Faust started (and logged it), met the taken port, stopped: the reason is the last line
    assert error_lines(result) == [
        f"SCORER_WEB_PORT: 127.0.0.1:{port} is in use (another worker on this host?): set "
        "SCORER_WEB_PORT to a free port for this worker's metrics"
    ]


def test_a_bad_rule_file_stops_the_worker_in_one_line_per_problem(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    rules = tmp_path / "rules" / "mine"
    rules.mkdir(parents=True)
    (rules / "broken.yaml").write_text("id: broken\nkind: llm_judge\nscope: trace\n")
    result = run_scorer(
        ["worker"],
        tmp_path,
        KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap,
        SCORER_RULES_DIR=str(tmp_path / "rules"),
    )
    problems = error_lines(result)
    assert problems and all("mine/broken.yaml: field " in p for p in problems), problems
