"""Pure modules stay pure: imported alone, in a fresh interpreter, they pull in no Kafka,
Faust, judge SDK or metrics library (and neither does loading the shipped rule packs)."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys

from fixtures import RULES_DIR

IO_LIBRARIES = ("faust", "mode", "aiokafka", "openai", "prometheus_client", "aiohttp")
# what a pure module must not load besides: the deployment's settings are read at the top
FORBIDDEN = (*IO_LIBRARIES, "stream.settings")

# the rooms that do I/O (Kafka, the judge's HTTP, metrics, processes) and the top floor that
# wires them; every other package and module under stream/ is pure, found by walking it
IO_ROOMS = (
    "stream.agents",
    "stream.app",
    "stream.cli",
    "stream.delivery",
    "stream.demo",
    "stream.judge",
    "stream.judging",
    "stream.kafka",
    "stream.metrics",
    "stream.settings",
    "stream.sinks",
    "stream.worker",
)


def pure_modules() -> list[str]:
    """Every module under stream/ outside the I/O rooms (``__main__`` scripts aside)."""
    import stream

    found = []
    for info in pkgutil.walk_packages(stream.__path__, "stream."):
        if any(info.name == room or info.name.startswith(room + ".") for room in IO_ROOMS):
            continue
        if not info.name.endswith("__main__"):
            found.append(info.name)
    return sorted(found)


def loaded_after_each(modules: list[str]) -> dict[str, list[str]]:
    """In one fresh interpreter, import ``modules`` in turn; for each, what it loaded that a
    pure module must not (empty once an earlier one was to blame: it is reported there)."""
    probe = (
        "import importlib, json, sys\n"
        f"forbidden = {FORBIDDEN!r}\n"
        "out = {}\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "    seen = {m for m in sys.modules if m in forbidden or m.split('.')[0] in forbidden}\n"
        "    out[name] = sorted(seen - set().union(*out.values()))\n"
        "print(json.dumps(out))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    loaded: dict[str, list[str]] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded


def test_the_pure_rooms_are_found_by_walking_the_package() -> None:
    found = pure_modules()
    # the rooms a reader expects to be pure are among them, and no I/O room is
    for module in ("stream.engine.scorer", "stream.threads.processor", "stream.pack"):
        assert module in found
    assert not [m for m in found if m.startswith(("stream.kafka", "stream.agents"))]
    assert len(found) > 40


def test_every_pure_module_loads_no_io_library_and_no_settings() -> None:
    blamed = {m: libs for m, libs in loaded_after_each(pure_modules()).items() if libs}
    assert blamed == {}


def test_pack_code_imports_stream_only_through_its_one_face() -> None:
    """Shipped packs and the worked example import ``stream.pack`` and nothing else of ours."""
    faces = set()
    for path in [
        *RULES_DIR.glob("*/*.py"),
        *(RULES_DIR.parent / "examples" / "rules").glob("*/*.py"),
    ]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            faces.update((path.parent.name, n) for n in names if n.split(".")[0] == "stream")
    assert faces and {name for _, name in faces} == {"stream.pack"}


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


def test_loading_every_shipped_pack_imports_no_io_library() -> None:
    code = (
        "from pathlib import Path\nfrom stream.ruleset.loader import load_rules\n"
        f"assert load_rules(Path({str(RULES_DIR)!r})).rules"
    )
    assert imported_io_libraries(code) == []


def test_the_probe_sees_an_io_library_when_one_is_imported() -> None:
    assert imported_io_libraries("import stream.metrics") == ["prometheus_client"]
