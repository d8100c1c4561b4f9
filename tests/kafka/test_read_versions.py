"""The libraries whose internals ``stream/kafka/`` overrides are the versions the overrides
were read against (``stream/kafka/mends/consumer.py``'s index of mends, ``rocksdb_store.py``): a
newer release can change ``_drain_messages``, ``_commit_offsets``, ``_send_req`` or
``_db_for_partition`` under a mend, and the failure would be a lost record, not an error. A
version bump fails here until the mends are read again and ``READ_AGAINST`` says so; a worker
on another version stops at start (``library_versions.check_libraries``)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from stream.errors import ConfigError
from stream.kafka.mends import library_versions
from stream.kafka.mends.library_versions import READ_AGAINST, check_libraries, minor_range

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("package", sorted(READ_AGAINST))
def test_the_installed_version_is_the_one_the_mends_were_read_against(package: str) -> None:
    assert version(package) == READ_AGAINST[package], (
        f"{package} {version(package)} is installed; stream/kafka/ was read against "
        f"{READ_AGAINST[package]}: read the mends against it, then update READ_AGAINST"
    )


def test_the_pins_are_the_minors_read_against() -> None:
    """pyproject.toml resolves exactly the tested minors: a fresh install gets them."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = {
        re.split(r"[<>=!~ ]", spec, maxsplit=1)[0]: spec.split(re.split(r"[<>=!~ ]", spec)[0])[1]
        for spec in project["dependencies"]
    }
    for package, read in READ_AGAINST.items():
        assert pins[package] == minor_range(read), (package, pins[package])


def test_another_version_stops_a_start_in_one_line_unless_allowed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    installed = {**READ_AGAINST, "aiokafka": "0.15.1"}
    monkeypatch.setattr(library_versions, "version", lambda name: installed[name])
    with pytest.raises(ConfigError) as stopped:
        check_libraries(allow_untested=False)
    (line,) = stopped.value.problems
    assert "aiokafka 0.15.1 (read against 0.14.0, tested >=0.14.0,<0.15)" in line
    assert "SCORER_ALLOW_UNTESTED_LIBRARIES=true" in line
    with caplog.at_level(logging.WARNING):
        check_libraries(allow_untested=True)
    assert "started anyway" in caplog.text
    installed["aiokafka"] = "0.14.2"  # a later patch of the minor read: accepted
    check_libraries(allow_untested=False)
    installed["aiokafka"] = "0.13.9"  # before it: not
    with pytest.raises(ConfigError):
        check_libraries(allow_untested=False)


def test_a_worker_on_another_version_stops_before_anything_starts(tmp_path: Path) -> None:
    """End to end: ``scorer worker`` in an environment where aiokafka reports another version
    (a ``sitecustomize`` that says so) exits 2 with one line, before a broker starts."""
    (tmp_path / "sitecustomize.py").write_text(
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '0.16.0' if name == 'aiokafka' else real(name)\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "stream.cli", "worker"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{REPO}", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "aiokafka 0.16.0" in errors[0], result.stderr
    assert "embedded broker" not in result.stdout
