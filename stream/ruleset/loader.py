"""Loading rule packs: every ``<folder>/<pack>/<rule_id>.yaml`` file of the rules folders
(``location``), validated against the pack's own checks and aggregators (``packs``), into one
``RuleSet`` or a list of problems. Adding a pack is adding a folder.

Which packs a deployment runs is ``SCORER_PACKS``'s choice; unset, the default of
docs/design/39-the-packs-a-worker-loads.md (``pack_selection``)."""

from __future__ import annotations

import difflib
import hashlib
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import yaml
from pydantic import ValidationError

from ..errors import ConfigError, RuleFileError
from .base import PackCode
from .filters import PackFilter
from .kinds import RULE_ADAPTER, AnyRule, ComparisonRule
from .location import find_packs, folders_of, pack_dirs, shipped_folder
from .packs import collect_pack_code, load_pack_code, pack_code_digest
from .rule_set import DISABLED_BY_SETTING, DISABLED_IN_FILE, DisabledRule, RuleSet


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
        # rule_dir: where a shadow's prompt_file is read from
        context = {"pack_code": pack_code, "rule_dir": path.parent}
        rule = RULE_ADAPTER.validate_python(data, context=context)
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


ALL_PACKS = "all"  # SCORER_PACKS='["all"]': every pack of every folder
# the shipped packs loaded whole when SCORER_PACKS is unset (of the others only their checks):
# the generic one, which fits any chat's traces
SHIPPED_WHOLE = ("conversation",)
# what keeps a shipped pack's judge rule from running when SCORER_PACKS is unset, as listings
# print it after "switched off by"
NOT_LOADED_BY_DEFAULT = (
    "the default pack selection (SCORER_PACKS='[\"all\"]', or one listing its pack, loads it)"
)
Folders = Path | Sequence[Path]  # one rules folder, or several searched in order


def _where(rules_dir: Folders) -> str:
    """The folders as ``SCORER_RULES_DIR`` lists them."""
    return os.pathsep.join(str(folder) for folder in folders_of(rules_dir))


def _pack_files(
    rules_dir: Folders, packs: Iterable[str] | None
) -> tuple[list[Path], list[RuleFileError]]:
    found, errors = find_packs(rules_dir)
    if errors:
        return [], errors
    wanted = set(found) if packs is None else set(packs)
    if missing := wanted - set(found):
        return [], [RuleFileError(_where(rules_dir), [f"packs not found: {sorted(missing)}"])]
    files = []
    for name, pack_dir in found.items():  # in the folders' order, by name in each
        if name in wanted:
            files.extend(sorted(pack_dir.glob("*.yaml")) + sorted(pack_dir.glob("*.yml")))
    return files, []


def rule_files(rules_dir: Folders, packs: Iterable[str] | None = None) -> list[Path]:
    """The rule files of ``packs`` (None: of every pack) found in these folders; a
    ``RuleFileError`` for a folder that does not exist, a pack name in two folders or a pack
    not found."""
    files, errors = _pack_files(rules_dir, packs)
    if errors:
        raise errors[0]
    return files


def pack_selection(
    rules_dir: Folders, packs: Sequence[str] | None
) -> tuple[list[str] | None, list[str]]:
    """Which packs a deployment loads (None: every one found) and the packs of which only the
    checks run: ``SCORER_PACKS``'s names, whole; ``["all"]``: every pack, whole; unset: every
    pack, but of the shipped packs other than ``conversation`` only the deterministic checks
    (their judge rules are listed as not loaded, ``NOT_LOADED_BY_DEFAULT``)."""
    if packs is not None:
        return (None, []) if list(packs) == [ALL_PACKS] else (list(packs), [])
    shipped = shipped_folder(rules_dir)
    if shipped is None or not shipped.is_dir():
        return None, []
    return None, [p.name for p in pack_dirs(shipped) if p.name not in SHIPPED_WHOLE]


def _conflicting_thread_spec(rule: AnyRule, loaded: list[AnyRule]) -> str | None:
    """Threads of one kind are closed once for every rule, and folded once for every rule
    that folds alike (the fallback conversation rules, or the others): their specs must agree
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
        if other.thread is None or other.thread.kind != rule.thread.kind:
            continue
        if other.thread.fallback != rule.thread.fallback:
            if other.thread.inactivity_gap_s != rule.thread.inactivity_gap_s:
                return (
                    f"field thread: inactivity_gap_s differs from rule {other.id!r}; every "
                    f"{rule.thread.kind} rule of a rule set must use the same gap"
                )
        elif other.thread.folding() != rule.thread.folding():
            group = "fallback " if rule.thread.fallback else ""
            return (
                "field thread: user/assistant/end paths or inactivity_gap_s differ from "
                f"rule {other.id!r}; every {group}{rule.thread.kind} rule of a rule set must "
                "use the same ones"
            )
    return None


def check_rules(
    rules_dir: Folders,
    packs: Iterable[str] | None = None,
    disabled: Collection[str] = (),
    checks_only: Collection[str] = (),
) -> tuple[RuleSet, list[RuleFileError]]:
    """Load every rule file, collecting all errors instead of stopping at the first.

    A rule switched off (``enabled: false`` in its file, or its id in ``disabled``: the
    deployment's SCORER_DISABLED_RULES), or a judged rule of a pack in ``checks_only`` (the
    default selection leaves them out), is validated like the others and kept apart in
    ``RuleSet.disabled``: it does not constrain the rules that run (their thread specs need
    not agree with its) and is not part of the digest, which covers the rules that run.
    """
    rules: list[AnyRule] = []
    switched_off: list[DisabledRule] = []
    seen: dict[str, Path] = {}
    digest = hashlib.sha256()
    files, errors = _pack_files(rules_dir, packs)
    if errors:
        return RuleSet(), errors
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
        if by := _switched_off(rule, disabled, checks_only):
            seen[rule.id] = path
            switched_off.append(DisabledRule(rule, by))
            continue
        if problem := _conflicting_thread_spec(rule, rules):
            errors.append(RuleFileError(str(path), [problem]))
            continue
        seen[rule.id] = path
        rules.append(rule)
        digest.update(path.read_bytes())
        for shadow in getattr(rule, "shadow", ()):
            if shadow.prompt_file is not None:  # its text is part of the rule
                digest.update(f"{shadow.name}\x00{shadow.prompt}".encode())
    return RuleSet(rules, digest.hexdigest()[:12], switched_off), errors


def _switched_off(rule: AnyRule, disabled: Collection[str], checks_only: Collection[str]) -> str:
    """What keeps ``rule`` from running, or "" when it runs."""
    if not rule.enabled:
        return DISABLED_IN_FILE
    if rule.id in disabled:
        return DISABLED_BY_SETTING
    if rule.pack in checks_only and rule.kind != "check":
        return NOT_LOADED_BY_DEFAULT
    return ""


def load_rules(
    rules_dir: Folders,
    packs: Iterable[str] | None = None,
    disabled: Collection[str] = (),
    checks_only: Collection[str] = (),
) -> RuleSet:
    """Load a rule set or fail with every problem found (start-up must not half-load).

    ``disabled``: rule ids switched off (SCORER_DISABLED_RULES); one that names no rule of
    these packs is a mistake, not a silent no-op. ``checks_only``: packs of which only the
    deterministic checks run."""
    ruleset, errors = check_rules(rules_dir, packs, disabled, checks_only)
    if errors:
        raise RuleFileError(
            _where(rules_dir), [f"{e.path}: {p}" for e in errors for p in e.problems]
        )
    if unknown := unknown_rule_ids(ruleset, disabled):
        raise ConfigError([f"{DISABLED_BY_SETTING} {unknown}"])
    if not ruleset.rules:
        why = "no rule files found"
        if ruleset.disabled:
            reasons = sorted({off.by for off in ruleset.disabled})
            why = (
                f"every rule is switched off ({len(ruleset.disabled)} by "
                f"{' or '.join(reasons)}): a worker would score nothing"
            )
        raise RuleFileError(_where(rules_dir), [why])
    return ruleset


def unknown_rule_ids(ruleset: RuleSet, ids: Iterable[str]) -> str | None:
    """What is wrong with rule ids that name no loaded rule (with the nearest loaded id, for
    a typo), or None when every one names a rule."""
    known = ruleset.ids
    unknown = sorted(set(ids) - known)
    if not unknown:
        return None
    hints = []
    for rule_id in unknown:
        if near := difflib.get_close_matches(rule_id, known, n=1):
            hints.append(f"{rule_id!r}: did you mean {near[0]!r}?")
    packs = sorted({r.pack for r in ruleset.rules} | {d.rule.pack for d in ruleset.disabled})
    return (
        f"names rules that are not loaded: {unknown}"
        + (f" ({'; '.join(hints)})" if hints else "")
        + f"; the packs loaded are {packs}"
    )


class RulesConfig(Protocol):
    """Where a deployment's rules come from (``Settings`` is one)."""

    @property
    def rules_dir(self) -> Folders: ...
    @property
    def packs(self) -> list[str] | None: ...
    @property
    def pack_filters(self) -> Mapping[str, PackFilter]: ...
    @property
    def disabled_rules(self) -> list[str]: ...


def deployment_rules(config: RulesConfig, packs: list[str] | None = None) -> RuleSet:
    """The rule set a deployment runs: the packs' rule files (``packs``, or the configured
    ones, or the default selection) but the rules switched off (``enabled: false``,
    SCORER_DISABLED_RULES, left out by the default selection), with the deployment's pack
    filters over their own. Reads the files anew at every call."""
    chosen, checks_only = pack_selection(
        config.rules_dir, packs if packs is not None else config.packs
    )
    loaded = load_rules(config.rules_dir, chosen, config.disabled_rules, checks_only)
    return loaded.with_pack_filters(config.pack_filters)
