"""The installed package carries what it needs: every module of ``stream/`` and the rule packs,
so ``pip install .`` followed by ``scorer rules check`` works from any directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from stream.ruleset.location import PACKAGE, REPO_RULES_DIR, default_rules_dir

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_of_stream_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "stream").rglob("__init__.py")
    }
    assert found - listed == set(), "add these to [tool.setuptools] packages"
    assert PACKAGE in listed


def test_the_development_install_reads_the_repository_packs() -> None:
    assert default_rules_dir() == REPO_RULES_DIR


def test_an_installed_scorer_finds_its_packs_from_any_directory(tmp_path: Path) -> None:
    """``pip install .`` (here into a folder of its own, without dependencies: the test's
    environment has them), then ``scorer rules check`` from a directory with no ``rules/``."""
    source = tmp_path / "source"  # what the Docker image copies; the build leaves no trace here
    source.mkdir()
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    for part in ("stream", "rules"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "site"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",  # offline: the environment's setuptools builds it
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert build.returncode == 0, build.stderr
    packs = target / PACKAGE
    shipped = sorted(p.relative_to(REPO_RULES_DIR) for p in REPO_RULES_DIR.glob("*/*.*"))
    installed = sorted(p.relative_to(packs) for p in packs.glob("*/*.*") if p.suffix != ".pyc")
    assert installed == [p for p in shipped if p.suffix != ".pyc"]

    elsewhere = tmp_path / "somewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCORER_")}
    env["PYTHONPATH"] = str(target)  # ahead of the development install's finder
    check = subprocess.run(
        [sys.executable, "-m", "stream.cli", "rules", "check"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "0 files with errors" in check.stdout
    located = subprocess.run(
        [sys.executable, "-c", "from stream.settings import Settings; print(Settings().rules_dir)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert Path(located.stdout.strip()) == packs


@pytest.mark.parametrize("name", ["__pycache__", ".ipynb_checkpoints", "_drafts"])
def test_python_and_editor_folders_are_not_packs(tmp_path: Path, name: str) -> None:
    from stream.ruleset.loader import pack_dirs

    (tmp_path / "mine").mkdir()
    (tmp_path / name).mkdir()
    assert [p.name for p in pack_dirs(tmp_path)] == ["mine"]
