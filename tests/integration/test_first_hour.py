"""A new user's first commands, run as the README gives them: the demo kept running with the
scripted judge, its broker found by the example consumer and by ``scorer replay`` without being
told where it is, its metrics scraped, and everything gone after Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest
from fixtures import live_trace
from scripted_judge import MockJudge

from stream.kafka.broker import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def user_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A user's environment: none of the suite's Kafka, judge or scorer settings."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "OPENAI_", "SCORER_"))
    }
    # the recorded broker address goes where this test looks (and no other test's run does)
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
    (tmp_path / "run").mkdir(exist_ok=True)
    return env | extra


def wait_for_line(process: subprocess.Popen[str], pattern: str, timeout: float) -> list[str]:
    """Lines of ``process``'s output up to the first that matches ``pattern``."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if re.search(pattern, line):
            return lines
    raise AssertionError(f"no line matching {pattern!r} in:\n" + "\n".join(lines))


def test_the_kept_demo_is_found_scraped_and_stopped(tmp_path: Path) -> None:
    broker_port, web_port = free_port(), free_port()  # the documented 9092 / 6066 in real use
    with MockJudge(answer_by_schema=True) as judge:
        env = user_env(
            tmp_path,
            OPENAI_BASE_URL=judge.base_url,
            SCORER_EMBEDDED_PORT=str(broker_port),
            SCORER_WEB_PORT=str(web_port),
        )
        demo = subprocess.Popen(
            [sys.executable, "-m", "stream.cli", "demo", "--keep-running", "--timeout", "90"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=tmp_path,
            # started as from a terminal, where Ctrl-C reaches it: a test worker process of
            # the whole suite can have SIGINT ignored by then, which a child inherits (the
            # demo then never hears the Ctrl-C below)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            lines = wait_for_line(demo, r"Ctrl-C stops", 150)
            output = "\n".join(lines)
            assert f"embedded broker (Tansu) on 127.0.0.1:{broker_port}" in output
            assert "126/126 scores" in output, output
            # the scripted judge answers every rule's own shape: no rule shows an error
            assert not re.search(r"│ [^│]*error \d", output), output
            with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/metrics") as response:
                assert "scorer_scores_total" in response.read().decode()

            # the consumer and the replay find the broker from the recorded address
            db = tmp_path / "scores.sqlite"
            consumed = subprocess.run(
                [sys.executable, str(REPO / "examples" / "consume_scores.py"),
                 "--db", str(db), "--idle", "3"],
                env=env, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert consumed.returncode == 0, consumed.stderr
            stored = sqlite3.connect(db).execute("select count(*) from scores").fetchone()[0]
            assert stored >= 126
            trace = live_trace()
            trace["id"] = "t-first-hour"
            (tmp_path / "mine.jsonl").write_bytes(orjson.dumps(trace) + b"\n")
            replayed = subprocess.run(
                [sys.executable, "-m", "stream.cli", "replay", str(tmp_path / "mine.jsonl")],
                env=env, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert replayed.returncode == 0, replayed.stdout + replayed.stderr
            assert f"embedded broker on 127.0.0.1:{broker_port}" in replayed.stdout
            assert "produced 1 traces" in replayed.stdout
        finally:
            demo.send_signal(signal.SIGINT)  # Ctrl-C
            try:
                rest, _ = demo.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                demo.kill()
                raise
        assert "stopping the worker and the broker" in rest
        assert demo.returncode == 0
        run = tmp_path / "run" / f"llm-trace-scorer-{os.getuid()}"
        recorded = run / "embedded-brokers" / str(broker_port)  # the broker's own record
        assert not recorded.exists()  # the address is forgotten with its broker
