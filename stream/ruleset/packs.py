"""A rule pack's own code: the Python modules in ``rules/<pack>/`` whose ``@check`` and
``@aggregate`` functions the pack's rules can name. Found when the pack loads; nothing to
register by hand.

The folder is imported as a package of its own, named after its path and content (so its
modules can import each other with relative imports, and a changed pack or a copy elsewhere is
a new package, never a stale one). Decorators only mark functions; the marks of each module
go into that pack's registries, so packs cannot see or clash with each other's names.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from pathlib import Path
from types import ModuleType

from ..errors import RuleFileError
from .aggregators import AggregatorSpec
from .base import PackCode
from .checks import CheckSpec
from .registry import marked

PACKAGES = "scorer_packs"  # the parent of every loaded pack's package


def pack_modules(pack_dir: Path) -> list[Path]:
    """The modules a pack's registries are collected from, in name order. Files whose names
    start with ``_`` (helpers the others import), ``.`` (editor and OS droppings) or
    ``test_``, and ``conftest.py``, are not collected."""
    return sorted(
        path
        for path in pack_dir.glob("*.py")
        if path.is_file()
        and not path.name.startswith(("_", ".", "test_"))
        and path.name != "conftest.py"
    )


def pack_code_digest(pack_dir: Path) -> bytes:
    """What identifies the pack's code: every Python file's name and content."""
    digest = hashlib.sha256()
    for path in sorted(pack_dir.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.digest()


def _package(pack_dir: Path) -> str:
    """The importable package for ``pack_dir`` (made once per path and content)."""
    identity = hashlib.sha256(str(pack_dir.resolve()).encode() + pack_code_digest(pack_dir))
    name = f"{PACKAGES}.{pack_dir.name}_{identity.hexdigest()[:16]}"
    if PACKAGES not in sys.modules:
        root = ModuleType(PACKAGES, "Rule packs' own code, one package per pack folder")
        root.__path__ = []
        sys.modules[PACKAGES] = root
    if name not in sys.modules:
        package = ModuleType(name, f"The code of the rule pack in {pack_dir}")
        package.__path__ = [str(pack_dir)]
        package.__package__ = name
        sys.modules[name] = package
    return name


def collect_pack_code(pack_dir: Path) -> tuple[PackCode, list[RuleFileError]]:
    """The pack's checks and aggregators, and a problem per module that failed to import or
    defined a name twice (the modules that did load still count)."""
    code = PackCode()
    errors: list[RuleFileError] = []
    package = _package(pack_dir) if pack_modules(pack_dir) else ""
    for path in pack_modules(pack_dir):
        try:
            module = importlib.import_module(f"{package}.{path.stem}")
        except (Exception, SystemExit) as exc:
            problem = f"pack code failed to import: {type(exc).__name__}: {exc}"
            errors.append(RuleFileError(str(path), [problem]))
            continue
        try:
            _register(code, module)
        except ValueError as exc:
            errors.append(RuleFileError(str(path), [str(exc)]))
    return code, errors


def load_pack_code(pack_dir: Path) -> PackCode:
    """The pack's checks and aggregators; ``RuleFileError`` on the first problem."""
    code, errors = collect_pack_code(pack_dir)
    if errors:
        raise errors[0]
    return code


def _register(code: PackCode, module: ModuleType) -> None:
    """Add the functions ``module`` itself defines and marks (not ones it imports)."""
    own = [v for v in vars(module).values() if getattr(v, "__module__", None) == module.__name__]
    for check in marked(own, CheckSpec):
        code.checks.add(check)
    for aggregator in marked(own, AggregatorSpec):
        code.aggregators.add(aggregator)
