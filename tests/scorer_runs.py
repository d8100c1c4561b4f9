"""The ``scorer`` command run as a user runs it (the installed script, a clean environment),
and what a failed run must look like."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCORER = Path(sys.executable).parent / "scorer"


def run_scorer(
    args: list[str], tmp_path: Path, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """``scorer ARGS`` with only ``env`` set of the deployment's variables."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith(("SCORER_", "KAFKA_", "OPENAI_"))
    }
    return subprocess.run(
        [str(SCORER), *args],
        env={**clean, "SCORER_DATA_DIR": str(tmp_path / "data"), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The run failed with exit 2 and no traceback; its ``error:`` lines (on stderr), which
    are its last lines (a worker logs its start before)."""
    said = result.stdout + result.stderr
    assert result.returncode == 2, said
    assert "Traceback" not in said and "ValidationError" not in said, said
    lines = result.stderr.splitlines()
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    assert errors and lines[-len(errors) :] == [f"error: {e}" for e in errors], said
    return errors


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The run failed with exit 2 and said so in exactly one line, and nothing else."""
    said = result.stdout + result.stderr
    assert result.stdout == "", said
    assert len(result.stderr.splitlines()) == 1, said
    (error,) = error_lines(result)
    return error
