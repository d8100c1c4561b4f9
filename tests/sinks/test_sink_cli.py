"""`scorer sink langfuse` / `opik` as a user runs them: a settings mistake or no broker is one
line on stderr and exit 2, and a key is never printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run(tmp_path: Path, *args: str, **environ: str) -> subprocess.CompletedProcess[str]:
    keep = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("SCORER_", "KAFKA_", "LANGFUSE_", "OPIK_"))
    }  # fmt: skip
    # a runtime directory of its own: no embedded broker recorded there
    env = {**keep, "XDG_RUNTIME_DIR": str(tmp_path), "TMPDIR": str(tmp_path), **environ}
    return subprocess.run(
        [sys.executable, "-m", "stream.cli", "sink", *args],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_missing_keys_one_line_each(tmp_path: Path) -> None:
    result = run(tmp_path, "langfuse", LANGFUSE_SECRET_KEY="sk-lf-SECRET", LANGFUSE_HOST="x")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: LANGFUSE_HOST: must be an http:// or https:// URL",
        "error: LANGFUSE_PUBLIC_KEY: field required",
    ]
    assert "SECRET" not in result.stdout + result.stderr


def test_no_broker_is_one_line(tmp_path: Path) -> None:
    result = run(tmp_path, "opik", OPIK_API_KEY="opik-SECRET", OPIK_WORKSPACE="team")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: set KAFKA_BOOTSTRAP_SERVERS to the broker the scores are on (or start "
        "`scorer worker`: its embedded broker is found by itself)"
    ]
    assert "SECRET" not in result.stdout + result.stderr
