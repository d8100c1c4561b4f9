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
from . import rubric as rubric_registry
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
    answer_format: Literal["json", "score_lines"] = Field(
        default="json",
        description="json: a JSON object (asked for as structured output); score_lines: the two "
        "lines 'score: <n>' and 'justification: <text>' (no structured output is asked for)",
    )
    verdict_field: str | None = Field(
        default=None,
        description="The JSON field that holds the verdict, as the prompt names it (e.g. result); "
        "when set, only JSON answers with that field are accepted",
    )
    reason_field: str = Field(default="reason", description="The JSON field that holds the reason")

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
        if self.answer_format == "score_lines" and (self.type != "numeric" or self.answer_key):
            raise ValueError("score_lines answers are numeric and not wrapped in an answer_key")
        if self.verdict_field and self.answer_key:
            raise ValueError("verdict_field and answer_key are two answer shapes; pick one")
        return self

    @cached_property
    def scale(self) -> Scale:
        if self.type == "choice":
            assert self.choices
            return Scale(min=min(self.choices.values()), max=max(self.choices.values()))
        assert self.min is not None and self.max is not None
        return Scale(min=self.min, max=self.max)

    def normalise(self, raw: float) -> float:
        return self.scale.normalise(raw)

    def label_for(self, raw: float) -> str | None:
        if self.labels and float(raw).is_integer():
            return self.labels.get(int(raw))
        return None


class VariableSpec(Strict):
    """A mapped variable: a path into the trace (or thread document) and how its value reads.

    Formats: ``text`` (strings verbatim, anything else as JSON); ``json``; ``bullets``
    (a list becomes a newline then ``- item`` lines, MLflow's expected-facts shape; a string
    stays as it is); ``tagged`` (each item of a list, or one string, as ``<tag>item</tag>``
    lines); ``tagged_fields`` (an object as ``<key>value</key>`` lines); ``transcript``
    (chat messages as ``Role: content`` paragraphs).
    """

    path: str
    format: Literal["text", "json", "bullets", "tagged", "tagged_fields", "transcript"] = "text"
    tag: str | None = Field(default=None, description="The element name for format: tagged")
    allow_empty: bool = Field(
        default=True, description="false: an empty string, list or object counts as missing"
    )

    @model_validator(mode="after")
    def _tag_for_tagged(self) -> VariableSpec:
        if (self.format == "tagged") != (self.tag is not None):
            raise ValueError("tag is required by format: tagged and only used by it")
        return self


class PromptSuffix(Strict):
    """Text appended to the prompt only when ``when`` (a path into the trace) is truthy."""

    when: str
    text: str = Field(min_length=1)


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
    variables: dict[str, str | VariableSpec] = Field(default_factory=dict)
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
        for name, spec in self.variable_specs.items():
            try:
                compile_path(spec.path)
            except JMESPathError as exc:
                raise ValueError(f"variables.{name}: bad path {spec.path!r}: {exc}") from exc
        return self

    @cached_property
    def variable_specs(self) -> dict[str, VariableSpec]:
        """Every variable as a full spec (a bare path is ``format: text``)."""
        return {
            name: spec if isinstance(spec, VariableSpec) else VariableSpec(path=spec)
            for name, spec in self.variables.items()
        }

    def sampled(self, target_id: str) -> bool:
        """Deterministic by target id, so a redelivered trace is sampled the same way."""
        if self.sampling_rate >= 1.0:
            return True
        return stable_fraction(self.id, target_id) < self.sampling_rate


class PromptedRule(RuleBase):
    """What every judged rule has: the judge, the prompt (and optional system prompt), the
    literal ``options`` some placeholders take, and suffixes appended on a condition."""

    judge: JudgeSpec = Field(default_factory=JudgeSpec)
    system_prompt: str | None = Field(default=None, min_length=1)
    prompt: str = Field(min_length=1)
    options: dict[str, str] = Field(
        default_factory=dict, description="Placeholder -> literal text (e.g. instructions)"
    )
    suffixes: list[PromptSuffix] = Field(default_factory=list)

    @model_validator(mode="after")
    def _placeholders_mapped(self) -> PromptedRule:
        templates = [self.prompt, self.system_prompt or ""] + [s.text for s in self.suffixes]
        used = set().union(*(placeholders(t) for t in templates))
        problems = []
        if both := sorted(set(self.variables) & set(self.options)):
            problems.append(f"placeholders both mapped and given as options: {both}")
        mapped = set(self.variables) | set(self.options)
        if unmapped := sorted(used - mapped):
            problems.append(f"placeholders without a variable mapping or option: {unmapped}")
        if unused := sorted(mapped - used):
            problems.append(f"variables or options not used in the prompt: {unused}")
        for i, suffix in enumerate(self.suffixes):
            try:
                compile_path(suffix.when)
            except JMESPathError as exc:
                problems.append(f"suffixes.{i}.when: bad path {suffix.when!r}: {exc}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class LLMJudgeRule(PromptedRule):
    """A rule scored by an LLM judge from a prompt template: one verdict, one score."""

    kind: Literal["llm_judge"]

    @property
    def engine(self) -> str:
        """How the rule is scored, for listings."""
        return "judge"


class Criterion(Strict):
    """One criterion of a rubric: the judge answers every criterion in one call."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_\-]*$")
    name: str
    na_when: str | None = Field(
        default=None,
        description="A path into the trace or thread document; when truthy the criterion does "
        "not apply and its answer is NA whatever the judge said (e.g. too few exchanges)",
    )


class AggregateSpec(Strict):
    name: str
    params: dict[str, Any] = Field(default_factory=dict)


class RubricRule(PromptedRule):
    """Several criteria judged in one call; a registered aggregator turns the answers into
    scores (one per criterion plus its own, such as an overall rating or a pass/fail gate)."""

    kind: Literal["rubric"]
    criteria: list[Criterion] = Field(min_length=1)
    aggregate: AggregateSpec

    @property
    def engine(self) -> str:
        return f"rubric:{self.aggregate.name}"

    @cached_property
    def aggregator(self) -> rubric_registry.AggregateSpec:
        """The registered aggregate (its existence is checked at load time)."""
        spec = rubric_registry.get(self.aggregate.name)
        assert spec is not None
        return spec

    @cached_property
    def validated_aggregate(self) -> rubric_registry.AggregateParams:
        return self.aggregator.validate_params(self.aggregate.params, [c.id for c in self.criteria])

    def primary_scale(self) -> Scale:
        """The scale of the score that stands for the rubric (its decision, its error score)."""
        return self.validated_aggregate.primary_scale() or self.output.scale

    @model_validator(mode="after")
    def _rubric_consistent(self) -> RubricRule:
        ids = [c.id for c in self.criteria]
        if len(set(ids)) != len(ids):
            raise ValueError(f"criteria ids repeat: {sorted(i for i in ids if ids.count(i) > 1)}")
        for criterion in self.criteria:
            if criterion.na_when is None:
                continue
            compile_path(criterion.na_when)
            if not self.output.choices or "NA" not in self.output.choices:
                raise ValueError(f"criterion {criterion.id}: na_when needs an NA choice in output")
        spec = rubric_registry.get(self.aggregate.name)
        if spec is None:
            raise ValueError(
                f"unknown aggregate {self.aggregate.name!r}; registered: "
                f"{sorted(rubric_registry.names())}"
            )
        spec.validate_params(self.aggregate.params, ids)
        if self.output.answer_format != "json" or self.output.answer_key:
            raise ValueError("a rubric is answered as one JSON object keyed by criterion id")
        return self


class CheckRule(RuleBase):
    """A rule scored by a deterministic check function registered by name."""

    kind: Literal["check"]
    check: str
    params: dict[str, Any] = Field(default_factory=dict)

    @property
    def engine(self) -> str:
        return f"check:{self.check}"

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


AnyRule = LLMJudgeRule | RubricRule | CheckRule
Rule = Annotated[AnyRule, Field(discriminator="kind")]
_RULE_ADAPTER: TypeAdapter[AnyRule] = TypeAdapter(Rule)


@dataclass
class RuleSet:
    """The loaded rules, with a hash that identifies this exact set."""

    rules: list[AnyRule] = field(default_factory=list)
    digest: str = ""

    def for_scope(self, scope: str) -> list[AnyRule]:
        return [r for r in self.rules if r.scope == scope]

    def thread_rules(self, kind: str) -> list[AnyRule]:
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
        loc = [str(p) for p in err["loc"] if p not in ("llm_judge", "rubric", "check")]
        where = ".".join(loc) or "(file)"
        msg = err["msg"].removeprefix("Value error, ")
        problems.append(f"field {where}: {msg}")
    return problems


def load_rule_file(path: Path) -> AnyRule:
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


def _conflicting_thread_spec(rule: AnyRule, loaded: list[AnyRule]) -> str | None:
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
    rules: list[AnyRule] = []
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
