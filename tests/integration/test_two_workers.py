"""One host, several workers: each embedded broker's record is its own. A second `scorer worker`
that fails at start (its metrics port taken) neither takes over nor removes the first broker's
record; with two brokers running, `scorer replay` and the example consumer do not guess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from scorer_runs import error_lines, one_error_line, run_scorer

from stream.kafka.broker import EmbeddedBroker, records_dir, running_brokers, several_brokers

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "consume_scores.py"


def test_a_second_worker_leaves_the_first_broker_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    traces = tmp_path / "t.jsonl"
    traces.write_text('{"id": "t-two-workers", "name": "n", "input": {}, "output": {}}\n')
    first = EmbeddedBroker(log_path=tmp_path / "first.log").start().record()
    record = records_dir() / str(first.port)
    try:
        written = record.read_text()
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            web_port = taken.getsockname()[1]
            # as a second `scorer worker` here: the first's port is taken, so its broker takes
            # another; then its metrics port is taken too, and it stops at start
            second = run_scorer(
                ["worker"],
                tmp_path,
                timeout=120,
                XDG_RUNTIME_DIR=str(run),
                SCORER_EMBEDDED_PORT=str(first.port),
                SCORER_WEB_PORT=str(web_port),
            )
        assert error_lines(second) == [
            f"SCORER_WEB_PORT: 127.0.0.1:{web_port} is in use (another worker on this host?): "
            "set SCORER_WEB_PORT to a free port for this worker's metrics"
        ]
        assert "embedded broker (Tansu) on 127.0.0.1:" in second.stdout
        assert f"on {first.bootstrap}" not in second.stdout  # a broker of its own
        assert record.read_text() == written  # not taken over, not removed
        assert running_brokers() == [first.bootstrap]

        replayed = run_scorer(["replay", str(traces)], tmp_path, XDG_RUNTIME_DIR=str(run))
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert f"replaying into the embedded broker on {first.bootstrap}" in replayed.stdout

        other = EmbeddedBroker(log_path=tmp_path / "other.log").start().record()
        try:
            both = sorted([first.bootstrap, other.bootstrap], key=lambda b: int(b.split(":")[1]))
            assert running_brokers() == both
            refused = run_scorer(["replay", str(traces)], tmp_path, XDG_RUNTIME_DIR=str(run))
            assert one_error_line(refused) == several_brokers(both)
            consumer = subprocess.run(
                [sys.executable, str(EXAMPLE), "--db", str(tmp_path / "s.sqlite"), "--idle", "1"],
                env={
                    **{k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")},
                    "XDG_RUNTIME_DIR": str(run),
                },
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert consumer.returncode == 1
            assert consumer.stderr.strip() == f"error: {several_brokers(both)}"
        finally:
            other.stop()
        assert record.read_text() == written
        assert running_brokers() == [first.bootstrap]
    finally:
        first.stop()
    assert not record.exists()
