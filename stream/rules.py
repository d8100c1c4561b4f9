"""Rules are data: YAML files loaded into strict pydantic models, checked at load time."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from jmespath.exceptions import JMESPathError
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from . import checks as checks_registry
from .errors import RuleFileError
from .models import Scale, Scope, Trace, stable_fraction
from .paths import compile_path
from .templates import placeholders

RULE_ID_PATTERN = r"^[a-z0-9][a-z0-9_\-]*$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RuleFilter(Strict):
    """Which traces a rule applies to. Every given condition must hold; lists are any-of."""

    topics: list[str] | None = None
    projects: list[str] | None = None
    trace_names: list[str] | None = None
    tags_any: list[str] | None = None
    tags_all: list[str] | None = None
    metadata: dict[str, Any] | None = Field(
        default=None, description="JMESPath (into trace metadata) -> required value"
    )

    @model_validator(mode="after")
    def _paths_compile(self) -> RuleFilter:
        for path in self.metadata or {}:
            compile_path(path)
        return self

    def matches(self, trace: Trace, topic: str | None = None) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        if self.projects is not None and trace.project_name not in self.projects:
            return False
        if self.trace_names is not None and trace.name not in self.trace_names:
            return False
        tags = set(trace.tags)
        if self.tags_any is not None and not tags.intersection(self.tags_any):
            return False
        if self.tags_all is not None and not tags.issuperset(self.tags_all):
            return False
        for path, expected in (self.metadata or {}).items():
            if compile_path(path).search(trace.metadata) != expected:
                return False
        return True


class OutputSpec(Strict):
    """How a raw answer becomes a score: its scale, labels and direction."""

    type: Literal["numeric", "choice"] = "numeric"
    min: float | None = None
    max: float | None = None
    integer: bool = False
    labels: dict[int, str] | None = Field(
        default=None, description="Label for each integer raw value (e.g. 4: Excellent)"
    )
    choices: dict[str, float] | None = Field(
        default=None, description="Allowed labels and the raw value each one scores"
    )
    higher_is_better: bool = True
    answer_key: str | None = Field(
        default=None,
        description='The judge answers {"<answer_key>": {"score", "reason"}} (a seed\'s own shape); '
        "only that shape is accepted",
    )

    @model_validator(mode="after")
    def _consistent(self) -> OutputSpec:
        if self.type == "numeric":
            if self.min is None or self.max is None:
                raise ValueError("numeric output needs min and max")
            if self.min >= self.max:
                raise ValueError(f"min ({self.min}) must be below max ({self.max})")
            if self.choices is not None:
                raise ValueError("choices are only for type: choice")
        else:
            if not self.choices or len(self.choices) < 2:
                raise ValueError("choice output needs at least two choices")
            if self.min is not None or self.max is not None or self.labels is not None:
                raise ValueError("choice output takes its scale from choices; drop min/max/labels")
        return self

    @cached_property
    def scale(self) -> Scale:
        if self.type == "choice":
            assert self.choices
            return Scale(min=min(self.choices.values()), max=max(self.choices.values()))
        assert self.min is not None and self.max is not None
        return Scale(min=self.min, max=self.max)

    def normalise(self, raw: float) -> float:
        scale = self.scale
        if scale.max == scale.min:
            return 1.0
        return (raw - scale.min) / (scale.max - scale.min)

    def label_for(self, raw: float) -> str | None:
        if self.labels and float(raw).is_integer():
            return self.labels.get(int(raw))
        return None


class JudgeSpec(Strict):
    model: str | None = Field(default=None, description="None: the deployment's default model")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, gt=0)


class ThreadSpec(Strict):
    """Which threads a thread-scope rule judges, how a trace becomes a conversation turn, and
    when a thread closes.

    ``conversation``: traces that carry a ``thread_id``; each contributes a user message and an
    assistant message (paths into the trace), and ``end`` (a path into the trace) marks the
    conversation finished when its value is true. ``session``: coaching-session events, which
    end with an ``end`` event. Either closes after ``inactivity_gap_s`` without activity
    (None: the deployment's ``SCORER_THREAD_INACTIVITY_GAP_S``, 15 minutes like Opik).
    """

    kind: Literal["conversation", "session"]
    user: str | None = None
    assistant: str | None = None
    end: str | None = None
    inactivity_gap_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _turn_paths(self) -> ThreadSpec:
        paths = (self.user, self.assistant)
        if self.kind == "conversation":
            if None in paths:
                raise ValueError("a conversation thread needs user and assistant paths")
            for path in (*paths, self.end):
                if path is not None:
                    compile_path(path)
        elif paths != (None, None) or self.end is not None:
            raise ValueError("user, assistant and end paths are for conversation threads only")
        return self

    def folding(self) -> tuple[Any, ...]:
        """What every rule of one thread kind must agree on: threads are folded once."""
        return (self.user, self.assistant, self.end, self.inactivity_gap_s)


class RuleBase(Strict):
    id: str = Field(pattern=RULE_ID_PATTERN)
    pack: str = Field(pattern=RULE_ID_PATTERN)
    version: int = Field(ge=1)
    scope: Scope
    description: str | None = None
    filter: RuleFilter = Field(default_factory=RuleFilter)
    sampling_rate: float = Field(default=1.0, ge=0.0, le=1.0)
    variables: dict[str, str] = Field(default_factory=dict)
    output: OutputSpec
    thread: ThreadSpec | None = Field(
        default=None, description="Thread-scope rules only; variables map into the thread document"
    )

    @model_validator(mode="after")
    def _thread_matches_scope(self) -> RuleBase:
        if self.scope == "thread" and self.thread is None:
            raise ValueError(
                "a thread-scope rule needs a thread section (kind: conversation | session)"
            )
        if self.scope == "trace" and self.thread is not None:
            raise ValueError("a thread section is for thread-scope rules only")
        return self

    @model_validator(mode="after")
    def _paths_compile(self) -> RuleBase:
        for name, path in self.variables.items():
            try:
                compile_path(path)
            except JMESPathError as exc:
                raise ValueError(f"variables.{name}: bad path {path!r}: {exc}") from exc
        return self

    def sampled(self, target_id: str) -> bool:
        """Deterministic by target id, so a redelivered trace is sampled the same way."""
        if self.sampling_rate >= 1.0:
            return True
        return stable_fraction(self.id, target_id) < self.sampling_rate


class LLMJudgeRule(RuleBase):
    """A rule scored by an LLM judge from a prompt template."""

    kind: Literal["llm_judge"]
    judge: JudgeSpec = Field(default_factory=JudgeSpec)
    prompt: str = Field(min_length=1)

    @model_validator(mode="after")
    def _placeholders_mapped(self) -> LLMJudgeRule:
        used = placeholders(self.prompt)
        mapped = set(self.variables)
        problems = []
        if unmapped := sorted(used - mapped):
            problems.append(f"placeholders without a variable mapping: {unmapped}")
        if unused := sorted(mapped - used):
            problems.append(f"variables mapped but not used in the prompt: {unused}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class CheckRule(RuleBase):
    """A rule scored by a deterministic check function registered by name."""

    kind: Literal["check"]
    check: str
    params: dict[str, Any] = Field(default_factory=dict)

    @cached_property
    def validated_params(self) -> checks_registry.CheckParams:
        """The params parsed into the check's own model once, not on every trace."""
        spec = checks_registry.get(self.check)
        assert spec is not None
        return spec.validate_params(self.params)

    @model_validator(mode="after")
    def _check_known(self) -> CheckRule:
        spec = checks_registry.get(self.check)
        if spec is None:
            raise ValueError(
                f"unknown check {self.check!r}; registered: {sorted(checks_registry.names())}"
            )
        if set(self.variables) != set(spec.variables):
            raise ValueError(
                f"check {self.check!r} takes variables {sorted(spec.variables)}, "
                f"mapped: {sorted(self.variables)}"
            )
        spec.validate_params(self.params)
        return self


Rule = Annotated[LLMJudgeRule | CheckRule, Field(discriminator="kind")]
_RULE_ADAPTER: TypeAdapter[LLMJudgeRule | CheckRule] = TypeAdapter(Rule)


@dataclass
class RuleSet:
    """The loaded rules, with a hash that identifies this exact set."""

    rules: list[LLMJudgeRule | CheckRule] = field(default_factory=list)
    digest: str = ""

    def for_scope(self, scope: str) -> list[LLMJudgeRule | CheckRule]:
        return [r for r in self.rules if r.scope == scope]

    def thread_rules(self, kind: str) -> list[LLMJudgeRule | CheckRule]:
        return [r for r in self.rules if r.thread is not None and r.thread.kind == kind]

    def thread_spec(self, kind: str) -> ThreadSpec | None:
        """The (agreed) thread spec of ``kind``, or None when no rule judges such threads."""
        rules = self.thread_rules(kind)
        return rules[0].thread if rules else None

    @property
    def packs(self) -> list[str]:
        return sorted({r.pack for r in self.rules})


def _format_validation_error(exc: ValidationError) -> list[str]:
    problems = []
    for err in exc.errors():
        # drop the discriminator tag pydantic puts in front of union members
        loc = [str(p) for p in err["loc"] if p not in ("llm_judge", "check")]
        where = ".".join(loc) or "(file)"
        msg = err["msg"].removeprefix("Value error, ")
        problems.append(f"field {where}: {msg}")
    return problems


def load_rule_file(path: Path) -> LLMJudgeRule | CheckRule:
    """Load one rule file; raise ``RuleFileError`` naming the file, the field and the problem."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RuleFileError(str(path), [f"not valid YAML: {exc}"]) from exc
    if not isinstance(data, dict):
        raise RuleFileError(str(path), ["a rule file must be a YAML mapping"])
    try:
        rule = _RULE_ADAPTER.validate_python(data)
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


def rule_files(rules_dir: Path, packs: Iterable[str] | None = None) -> list[Path]:
    if not rules_dir.is_dir():
        raise RuleFileError(str(rules_dir), ["rules directory does not exist"])
    wanted = set(packs) if packs is not None else None
    files = []
    for pack_dir in sorted(p for p in rules_dir.iterdir() if p.is_dir()):
        if wanted is not None and pack_dir.name not in wanted:
            continue
        files.extend(sorted(pack_dir.glob("*.yaml")) + sorted(pack_dir.glob("*.yml")))
    if wanted is not None:
        missing = wanted - {p.name for p in rules_dir.iterdir() if p.is_dir()}
        if missing:
            raise RuleFileError(str(rules_dir), [f"packs not found: {sorted(missing)}"])
    return files


def _conflicting_thread_spec(
    rule: LLMJudgeRule | CheckRule, loaded: list[LLMJudgeRule | CheckRule]
) -> str | None:
    """Threads of one kind are folded and closed once for every rule: their specs must agree."""
    if rule.thread is None:
        return None
    for other in loaded:
        if other.thread is not None and other.thread.kind == rule.thread.kind:
            if other.thread.folding() != rule.thread.folding():
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
    rules: list[LLMJudgeRule | CheckRule] = []
    seen: dict[str, Path] = {}
    digest = hashlib.sha256()
    try:
        files = rule_files(rules_dir, packs)
    except RuleFileError as exc:
        return RuleSet(), [exc]
    for path in files:
        try:
            rule = load_rule_file(path)
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
