"""Pure modules stay pure: imported alone, in a fresh interpreter, they pull in no Kafka,
Faust, judge SDK or metrics library (and neither does loading the shipped rule packs)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fixtures import RULES_DIR

IO_LIBRARIES = ("faust", "mode", "aiokafka", "openai", "prometheus_client", "aiohttp")

PURE_MODULES = [
    "stream.models",
    "stream.observer",
    "stream.text.template",
    "stream.text.values",
    "stream.text.measures",
    "stream.ruleset.paths",
    "stream.ruleset.schema",
    "stream.ruleset.loader",
    "stream.engine.prompt",
    "stream.engine.outcomes",
    "stream.engine.planner",
    "stream.judge.answers",
    "stream.threads.state",
    "stream.threads.events",
    "stream.threads.router",
    "stream.threads.processor",
    "stream.threads.sources",
    "stream.otlp.spans",
    "stream.otlp.assembler",
    "stream.otlp.events",
    "stream.engine.trace_tools",
]


def imported_io_libraries(code: str) -> list[str]:
    probe = (
        f"import json, sys\n{code}\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({IO_LIBRARIES!r}))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    found: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize("module", PURE_MODULES)
def test_a_pure_module_imports_no_io_library(module: str) -> None:
    assert imported_io_libraries(f"import {module}") == []


def test_loading_every_shipped_pack_imports_no_io_library() -> None:
    code = (
        "from pathlib import Path\nfrom stream.ruleset.loader import load_rules\n"
        f"assert load_rules(Path({str(RULES_DIR)!r})).rules"
    )
    assert imported_io_libraries(code) == []


def test_the_probe_sees_an_io_library_when_one_is_imported() -> None:
    assert imported_io_libraries("import stream.metrics") == ["prometheus_client"]
