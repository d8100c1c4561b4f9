"""A newcomer's first scores, from the README's scripted judge: started as the README starts it
(``python tests/scripted_judge.py PORT``) and ``scorer demo`` run against it with every shipped
pack loaded (as a plain ``scorer worker`` loaded them when issue 44 was filed), no score is an
``error`` (MLflow's score-line rules and the trace judge's tool loop included), and the judged
rules' means are not one value repeated."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from stream.kafka.broker import free_port

REPO = Path(__file__).resolve().parents[2]
PACKS = ["fretcoach", "critique", "mlflow", "conversation", "coaching"]
pytestmark = pytest.mark.integration


def test_the_demo_against_the_readmes_scripted_judge_has_no_error_score(tmp_path: Path) -> None:
    judge_port = free_port()
    judge = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "scripted_judge.py"), str(judge_port)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert judge.stdout is not None and "mock judge on" in judge.stdout.readline()
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("KAFKA_", "OPENAI_", "SCORER_"))
        }
        (tmp_path / "run").mkdir()
        env |= {
            "XDG_RUNTIME_DIR": str(tmp_path / "run"),  # no other run's recorded broker
            "OPENAI_BASE_URL": f"http://127.0.0.1:{judge_port}/v1",
            "SCORER_EMBEDDED_PORT": str(free_port()),
            "SCORER_WEB_PORT": str(free_port()),
            "SCORER_PACKS": orjson.dumps(PACKS).decode(),
        }
        demo = subprocess.run(
            [sys.executable, "-m", "stream.cli", "demo", "--timeout", "150"],
            env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip
    finally:
        judge.terminate()
        judge.wait(timeout=10)
    output = demo.stdout + demo.stderr
    assert demo.returncode == 0, output
    assert re.search(r"(\d+)/\1 scores", output), output
    rows = {
        cells[0]: cells[1:]
        for line in output.splitlines()
        if line.startswith("│")
        and len(cells := [c.strip() for c in line.strip("│").split("│")]) == 6
    }
    assert not [rule for rule, cells in rows.items() if "error" in cells[-1]], output
    # MLflow's score lines, its trace judge (tools) and the critique's rubric and pair: judged
    for rule in (
        "answer_relevance",
        "instructions_trace",
        "response_critique",
        "response_comparison",
    ):
        assert re.search(r"\bok \d+", rows[rule][-1]), output
    judged_means = {cells[3] for cells in rows.values() if cells[1] == "judge" and cells[3] != "-"}
    assert len(judged_means) > 5, output
