"""Where the rule packs are: the folders ``SCORER_RULES_DIR`` names, then the shipped packs.

The repository keeps the shipped packs in ``rules/`` (the layout users know); the package
installs that folder as ``llm_trace_scorer_rules``, so an installed scorer finds its packs from
any directory (``pip install .``, the Docker image), and an editable install finds the
repository's own ``rules/``. The location is looked up, never imported: the packs' Python is
loaded by path (``packs.py``).

A user's folders are searched as ``PATH`` is (``:``-separated, or a JSON list), and the
shipped folder after them unless the entry ``no-shipped-packs`` leaves it out; a pack name in
two folders is an error (docs/design/39-the-packs-a-worker-loads.md)."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from ..errors import RuleFileError

PACKAGE = "llm_trace_scorer_rules"
# a source tree run without installing (python -m stream.cli from the repository)
REPO_RULES_DIR = Path(__file__).resolve().parents[2] / "rules"
# the entry of SCORER_RULES_DIR that leaves the shipped packs' folder out of the search
NO_SHIPPED = "no-shipped-packs"


def default_rules_dir() -> Path:
    """The installed packs' folder, or the repository's ``rules/`` when nothing is installed."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return REPO_RULES_DIR


def _same(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


class RulesDirs(tuple[Path, ...]):
    """The folders rule packs are looked for in, in order; printed as ``PATH`` is."""

    def __str__(self) -> str:
        return os.pathsep.join(str(folder) for folder in self)

    @property
    def shipped(self) -> Path | None:
        """The shipped packs' folder, when it is searched."""
        return shipped_folder(self)

    @classmethod
    def parse(cls, value: object) -> RulesDirs:
        """``SCORER_RULES_DIR``'s folders (``:``-separated as ``PATH``, or a JSON list), then
        the shipped folder unless an entry is ``no-shipped-packs``; each folder once."""
        if isinstance(value, RulesDirs):
            return value
        if isinstance(value, str | Path):
            text = str(value).strip()
            if text.startswith("["):
                try:
                    value = json.loads(text)
                except ValueError as exc:
                    raise ValueError(f"not a JSON list of folders ({exc})") from None
            else:
                value = text.split(os.pathsep)
        if not isinstance(value, list | tuple) or not all(
            isinstance(entry, str | Path) for entry in value
        ):
            raise ValueError("folders separated by ':' (as PATH), or a JSON list of folders")
        entries = [str(entry).strip() for entry in value if str(entry).strip()]
        folders = [Path(entry) for entry in entries if entry != NO_SHIPPED]
        if NO_SHIPPED not in entries:
            folders.append(default_rules_dir())
        if not folders:
            raise ValueError(f"{NO_SHIPPED} leaves the shipped packs out, and no folder is named")
        unique: list[Path] = []
        for folder in folders:
            if not any(_same(folder, seen) for seen in unique):
                unique.append(folder)
        return cls(unique)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls.parse, serialization=core_schema.plain_serializer_function_ser_schema(str)
        )


def folders_of(rules_dir: Path | Iterable[Path]) -> list[Path]:
    """One folder or several, as a list."""
    return [rules_dir] if isinstance(rules_dir, Path) else list(rules_dir)


def shipped_folder(rules_dir: Path | Iterable[Path]) -> Path | None:
    """Which of these folders is the shipped packs' one, if any is."""
    shipped = default_rules_dir()
    return next((f for f in folders_of(rules_dir) if _same(f, shipped)), None)


def pack_dirs(rules_dir: Path) -> list[Path]:
    """The packs: every folder of ``rules_dir`` but Python's and editors' (``__pycache__``,
    names starting with ``_`` or ``.``)."""
    return sorted(
        p for p in rules_dir.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
    )


def find_packs(rules_dir: Path | Iterable[Path]) -> tuple[dict[str, Path], list[RuleFileError]]:
    """Every pack of these folders by name, and a problem per folder that does not exist and
    per pack name found in two folders (the first one found is kept)."""
    found: dict[str, Path] = {}
    errors: list[RuleFileError] = []
    for folder in folders_of(rules_dir):
        if not folder.is_dir():
            errors.append(RuleFileError(str(folder), ["rules directory does not exist"]))
            continue
        for pack_dir in pack_dirs(folder):
            first = found.setdefault(pack_dir.name, pack_dir)
            if first != pack_dir:
                errors.append(RuleFileError(str(pack_dir), [_twice(pack_dir, first)]))
    return found, errors


def _twice(pack_dir: Path, first: Path) -> str:
    leave_out = (
        f", or add {NO_SHIPPED} to SCORER_RULES_DIR to leave the shipped packs out"
        if shipped_folder([pack_dir.parent, first.parent]) is not None
        else ", or leave one folder out of SCORER_RULES_DIR"
    )
    return (
        f"pack {pack_dir.name!r} is in two folders, here and in {first}: a pack name must be "
        f"found once; rename one (its folder and its rules' pack:){leave_out}"
    )
