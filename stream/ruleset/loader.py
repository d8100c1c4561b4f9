"""Loading rule packs: every ``rules/<pack>/<rule_id>.yaml`` file, validated against the
pack's own checks and aggregators (``packs``), into one ``RuleSet`` or a list of problems.
Adding a pack is adding a folder."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

import yaml
from pydantic import ValidationError

from ..errors import RuleFileError
from .filters import PackFilter
from .packs import collect_pack_code, load_pack_code, pack_code_digest
from .schema import RULE_ADAPTER, AnyRule, ComparisonRule, PackCode, RuleSet


def _format_validation_error(exc: ValidationError) -> list[str]:
    problems = []
    for err in exc.errors():
        # drop the discriminator tag pydantic puts in front of union members
        loc = [str(p) for p in err["loc"] if p not in ("llm_judge", "rubric", "check")]
        where = ".".join(loc) or "(file)"
        msg = err["msg"].removeprefix("Value error, ")
        problems.append(f"field {where}: {msg}")
    return problems


def load_rule_file(path: Path, pack_code: PackCode | None = None) -> AnyRule:
    """Load one rule file; raise ``RuleFileError`` naming the file, the field and the problem.

    ``pack_code``: what the pack's modules register (default: load them from the folder).
    """
    if pack_code is None:
        pack_code = load_pack_code(path.parent)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RuleFileError(str(path), [f"not valid YAML: {exc}"]) from exc
    if not isinstance(data, dict):
        raise RuleFileError(str(path), ["a rule file must be a YAML mapping"])
    try:
        rule = RULE_ADAPTER.validate_python(data, context={"pack_code": pack_code})
    except ValidationError as exc:
        raise RuleFileError(str(path), _format_validation_error(exc)) from exc
    problems = []
    if rule.id != path.stem:
        problems.append(f"field id: {rule.id!r} must equal the file name {path.stem!r}")
    if rule.pack != path.parent.name:
        problems.append(
            f"field pack: {rule.pack!r} must equal the folder name {path.parent.name!r}"
        )
    if problems:
        raise RuleFileError(str(path), problems)
    return rule


def pack_dirs(rules_dir: Path) -> list[Path]:
    """The packs: every folder of ``rules_dir`` but Python's and editors' (``__pycache__``,
    names starting with ``_`` or ``.``)."""
    return sorted(
        p for p in rules_dir.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
    )


def rule_files(rules_dir: Path, packs: Iterable[str] | None = None) -> list[Path]:
    if not rules_dir.is_dir():
        raise RuleFileError(str(rules_dir), ["rules directory does not exist"])
    wanted = set(packs) if packs is not None else None
    files = []
    for pack_dir in pack_dirs(rules_dir):
        if wanted is not None and pack_dir.name not in wanted:
            continue
        files.extend(sorted(pack_dir.glob("*.yaml")) + sorted(pack_dir.glob("*.yml")))
    if wanted is not None:
        missing = wanted - {p.name for p in pack_dirs(rules_dir)}
        if missing:
            raise RuleFileError(str(rules_dir), [f"packs not found: {sorted(missing)}"])
    return files


def _conflicting_thread_spec(rule: AnyRule, loaded: list[AnyRule]) -> str | None:
    """Threads of one kind are folded and closed once for every rule: their specs must agree
    (and pairs are made once for every comparison rule: their pairings must agree)."""
    if isinstance(rule, ComparisonRule):
        first = next((r for r in loaded if isinstance(r, ComparisonRule)), None)
        if first is not None and first.pair != rule.pair:
            return (
                f"field pair: differs from rule {first.id!r}; every comparison rule of a rule "
                "set must pair traces the same way (key, variant, variants, window_s)"
            )
        return None
    if rule.thread is None:
        return None
    for other in loaded:
        if (
            other.thread is not None
            and other.thread.kind == rule.thread.kind
            and other.thread.folding() != rule.thread.folding()
        ):
            return (
                "field thread: user/assistant/end paths or inactivity_gap_s differ from "
                f"rule {other.id!r}; every {rule.thread.kind} rule of a rule set must use "
                "the same ones"
            )
    return None


def check_rules(
    rules_dir: Path, packs: Iterable[str] | None = None
) -> tuple[RuleSet, list[RuleFileError]]:
    """Load every rule file, collecting all errors instead of stopping at the first."""
    errors: list[RuleFileError] = []
    rules: list[AnyRule] = []
    seen: dict[str, Path] = {}
    digest = hashlib.sha256()
    try:
        files = rule_files(rules_dir, packs)
    except RuleFileError as exc:
        return RuleSet(), [exc]
    code: dict[Path, PackCode] = {}
    for pack_dir in sorted({path.parent for path in files}):
        code[pack_dir], problems = collect_pack_code(pack_dir)
        errors.extend(problems)
        digest.update(pack_code_digest(pack_dir))  # the pack's code is part of the rule set
    for path in files:
        try:
            rule = load_rule_file(path, code[path.parent])
        except RuleFileError as exc:
            errors.append(exc)
            continue
        if rule.id in seen:
            errors.append(
                RuleFileError(
                    str(path),
                    [f"field id: duplicate rule id {rule.id!r} (also in {seen[rule.id]})"],
                )
            )
            continue
        if problem := _conflicting_thread_spec(rule, rules):
            errors.append(RuleFileError(str(path), [problem]))
            continue
        seen[rule.id] = path
        rules.append(rule)
        digest.update(path.read_bytes())
    return RuleSet(rules=rules, digest=digest.hexdigest()[:12]), errors


def load_rules(rules_dir: Path, packs: Iterable[str] | None = None) -> RuleSet:
    """Load a rule set or fail with every problem found (start-up must not half-load)."""
    ruleset, errors = check_rules(rules_dir, packs)
    if errors:
        raise RuleFileError(str(rules_dir), [f"{e.path}: {p}" for e in errors for p in e.problems])
    if not ruleset.rules:
        raise RuleFileError(str(rules_dir), ["no rule files found"])
    return ruleset


class RulesConfig(Protocol):
    """Where a deployment's rules come from (``Settings`` is one)."""

    @property
    def rules_dir(self) -> Path: ...
    @property
    def packs(self) -> list[str] | None: ...
    @property
    def pack_filters(self) -> Mapping[str, PackFilter]: ...


def deployment_rules(config: RulesConfig, packs: list[str] | None = None) -> RuleSet:
    """The rule set a deployment runs: the packs' rule files (``packs``, or the configured
    ones), with the deployment's pack filters over their own."""
    loaded = load_rules(config.rules_dir, packs if packs is not None else config.packs)
    return loaded.with_pack_filters(config.pack_filters)
