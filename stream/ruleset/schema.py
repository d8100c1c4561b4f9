"""The rule file schema: one strict pydantic model per rule kind (unknown keys rejected),
built from the parts in ``specs``.

A rule that names a check or an aggregator is validated against the registries of its own
pack (``PackCode``, passed as the validation context by the loader), so a typo fails at
start-up with the file, the field and the names the pack does register.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any, Literal, Self

import orjson
from jmespath.exceptions import JMESPathError
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationInfo,
    model_validator,
)

from ..errors import ScorerError
from ..models import Scale, Scope
from ..text.template import placeholders
from .aggregators import AggregateParams, AggregatorSpec
from .checks import CheckParams, CheckSpec
from .filters import PackFilter, RuleFilter, sampled
from .paths import compile_path
from .registry import Registry
from .specs import (
    AggregateRef,
    AgreementSpec,
    Criterion,
    FanOut,
    JudgeSpec,
    OutputSpec,
    PairSpec,
    PromptSuffix,
    ShadowSpec,
    Strict,
    ThreadSpec,
    VariableSpec,
)

RULE_ID_PATTERN = r"^[a-z0-9][a-z0-9_\-]*$"


def private(model: BaseModel, name: str) -> Any:
    """A private attribute of ``model``, read from pydantic's own store of them: read as
    ``model._name`` it goes through ``BaseModel.__getattr__`` (a few µs; the engine reads
    a rule's on every trace)."""
    return (model.__pydantic_private__ or {}).get(name)


@dataclass
class PackCode:
    """What a rule pack's own Python modules register: its checks and rubric aggregators."""

    checks: Registry[CheckSpec] = field(default_factory=lambda: Registry("check"))
    aggregators: Registry[AggregatorSpec] = field(default_factory=lambda: Registry("aggregate"))


def _pack_code(info: ValidationInfo) -> PackCode:
    context = info.context if isinstance(info.context, dict) else {}
    code = context.get("pack_code")
    return code if isinstance(code, PackCode) else PackCode()


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
    enabled: bool = Field(
        default=True,
        description="false: validated like any rule, but not run (SCORER_DISABLED_RULES "
        "switches rules off without editing their files)",
    )

    @model_validator(mode="after")
    def _thread_matches_scope(self) -> RuleBase:
        if self.scope == "thread" and self.thread is None:
            raise ValueError(
                "a thread-scope rule needs a thread section (kind: conversation | session)"
            )
        if self.scope != "thread" and self.thread is not None:
            raise ValueError("a thread section is for thread-scope rules only")
        if self.thread is not None and self.thread.kind == "session" and self.filter.when:
            raise ValueError(
                "filter.when is for rules over traces: a session rule filters on the "
                "session's project and topic only"
            )
        if self.scope == "pair" and not isinstance(self, ComparisonRule):
            raise ValueError("scope: pair is for comparison rules (kind: comparison) only")
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
        return self.sampling_rate >= 1.0 or sampled(self.id, self.sampling_rate, target_id)

    # the shadow variant this rule object judges as (``PromptedRule.as_shadow``); None: the
    # rule itself
    _variant: str | None = PrivateAttr(default=None)

    @property
    def variant(self) -> str | None:
        """The shadow variant this rule judges as (its scores carry it), or None."""
        variant: str | None = private(self, "_variant")
        return variant


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
    shadow: list[ShadowSpec] = Field(
        default_factory=list,
        description="Shadow judges: other models or prompts scored on a hashed sample of the "
        "targets the rule judges, their scores carrying the variant, out of the quality metrics",
    )
    agreement: AgreementSpec | None = Field(
        default=None,
        description="How far the judge must agree with human labels before an alert fires",
    )

    def _mapping_problems(self, prompt: str, system_prompt: str | None) -> list[str]:
        """What is wrong with the placeholders of a prompt (and system prompt) of this rule:
        each must be mapped (a variable or an option), each mapping used."""
        templates = [prompt, system_prompt or ""] + [s.text for s in self.suffixes]
        used = set().union(*(placeholders(t) for t in templates))
        problems = []
        mapped = set(self.variables) | set(self.options)
        if unmapped := sorted(used - mapped):
            problems.append(f"placeholders without a variable mapping or option: {unmapped}")
        if unused := sorted(mapped - used):
            problems.append(f"variables or options not used in the prompt: {unused}")
        return problems

    @model_validator(mode="after")
    def _placeholders_mapped(self) -> PromptedRule:
        problems = []
        if both := sorted(set(self.variables) & set(self.options)):
            problems.append(f"placeholders both mapped and given as options: {both}")
        problems.extend(self._mapping_problems(self.prompt, self.system_prompt))
        for i, suffix in enumerate(self.suffixes):
            try:
                compile_path(suffix.when)
            except JMESPathError as exc:
                problems.append(f"suffixes.{i}.when: bad path {suffix.when!r}: {exc}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _shadows_judge_apart(self) -> PromptedRule:
        if not self.shadow:
            return self
        if self.judge.tools is not None:
            raise ValueError(
                f"shadow judges are not run for a rule with judge.tools: {self.judge.tools} "
                "(its judge reads the trace in a tool loop): drop one of them"
            )
        names = [s.name for s in self.shadow]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"shadow names repeat: {twice}")
        problems = []
        for spec in self.shadow:
            model = spec.model is not None and spec.model != self.judge.model
            prompt = spec.prompt is not None and spec.prompt != self.prompt
            system = spec.system_prompt is not None and spec.system_prompt != self.system_prompt
            if not (model or prompt or system):
                problems.append(
                    f"shadow {spec.name}: the rule's own model and prompt (a shadow names "
                    "another model, prompt, prompt_file or system_prompt)"
                )
            system_prompt = spec.system_prompt or self.system_prompt
            for problem in self._mapping_problems(spec.prompt or self.prompt, system_prompt):
                problems.append(f"shadow {spec.name}: {problem}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def as_shadow(self, name: str) -> Self:
        """This rule judged as its shadow ``name`` (its model, prompt and system prompt; the
        same variables, output and id): its scores carry ``variant=name``. ``KeyError`` when
        the rule names no such shadow."""
        spec = next((s for s in self.shadow if s.name == name), None)
        if spec is None:
            raise KeyError(f"rule {self.id} v{self.version} has no shadow {name!r}")
        update: dict[str, Any] = {"shadow": []}
        if spec.model is not None:
            update["judge"] = self.judge.model_copy(update={"model": spec.model})
        if spec.prompt is not None:
            update["prompt"] = spec.prompt
        if spec.system_prompt is not None:
            update["system_prompt"] = spec.system_prompt
        judged = self.model_copy(update=update)
        judged._variant = name
        return judged


class LLMJudgeRule(PromptedRule):
    """A rule scored by an LLM judge from a prompt template: one verdict, one score (or, with
    ``fan_out``, one verdict per item of a list variable, aggregated into one score)."""

    kind: Literal["llm_judge"]
    fan_out: FanOut | None = None

    @model_validator(mode="after")
    def _fan_out_variable_mapped(self) -> LLMJudgeRule:
        if self.fan_out is not None and self.fan_out.variable not in self.variables:
            raise ValueError(
                f"fan_out.variable {self.fan_out.variable!r} is not one of the rule's "
                f"variables ({sorted(self.variables)})"
            )
        return self

    @model_validator(mode="after")
    def _agreement_fits_the_output(self) -> LLMJudgeRule:
        """A choice rule's labels agree by kappa or accuracy, a numeric one's (and a fan-out
        rule's, labelled with its mean) by mae or spearman."""
        if self.agreement is None:
            return self
        choice = self.output.choices is not None and self.fan_out is None
        fits = ("kappa", "accuracy") if choice else ("mae", "spearman")
        if self.agreement.measure not in fits:
            kind = "a choice rule" if choice else "a numeric rule"
            raise ValueError(
                f"agreement.measure {self.agreement.measure!r} does not measure {kind}: "
                f"use {' or '.join(fits)}"
            )
        return self

    @property
    def engine(self) -> str:
        """How the rule is scored, for listings."""
        return "judge"


class CriteriaRule(PromptedRule):
    """What rubrics and comparisons share: criteria judged in one call, and a registered
    aggregator that turns one response's answers into scores (one per criterion plus its
    own, such as an overall rating or a pass/fail gate)."""

    @model_validator(mode="after")
    def _no_agreement_bound(self) -> Self:
        if self.agreement is not None:
            raise ValueError(
                "agreement: is for llm_judge rules: a rubric's or comparison's scores are "
                "measured per criterion (scorer agreement, scorer_judge_agreement), not bound"
            )
        return self

    criteria: list[Criterion] = Field(min_length=1)
    aggregate: AggregateRef
    notes: list[str] = Field(
        default_factory=list,
        description="Lists of remarks asked of the judge beside the criteria (e.g. "
        "key_strengths, key_weaknesses: seed 001's report), carried in the primary score's "
        "details",
    )
    summaries: list[str] = Field(
        default_factory=list,
        description="Texts asked of the judge before its ratings (e.g. prompt_summary: seed "
        "001's Prompt Summary), carried as strings where the notes are",
    )
    stated_aggregate: str | None = Field(
        default=None,
        description="The answer field in which the judge also states the aggregate's label "
        "for a response (e.g. overall_quality: seed 001's Overall Quality), from the labels the "
        "aggregator can give. The published aggregate stays the one computed from the ratings; "
        "the judge's own is carried in its details as judge_<field>",
    )

    @model_validator(mode="after")
    def _notes_apart_from_criteria(self) -> CriteriaRule:
        ids = {c.id for c in self.criteria}
        if clash := sorted(set(self.notes) & ids):
            raise ValueError(f"notes {clash} have the names of criteria")
        if clash := sorted(set(self.summaries) & ids):
            raise ValueError(f"summaries {clash} have the names of criteria")
        if self.stated_aggregate in ids:
            raise ValueError(
                f"stated_aggregate {self.stated_aggregate!r} is the name of a criterion"
            )
        fields = [*self.notes, *self.summaries, *filter(None, [self.stated_aggregate])]
        if len(set(fields)) != len(fields):
            twice = sorted({f for f in fields if fields.count(f) > 1})
            raise ValueError(f"notes, summaries and stated_aggregate name {twice} twice")
        return self

    _aggregator: AggregatorSpec | None = PrivateAttr(default=None)

    @property
    def engine(self) -> str:
        return f"rubric:{self.aggregate.name}"

    @property
    def aggregator(self) -> AggregatorSpec:
        """The pack's registered aggregator (its existence is checked at load time)."""
        assert self._aggregator is not None
        return self._aggregator

    @cached_property
    def validated_aggregate(self) -> AggregateParams:
        return self.aggregator.validate_params(self.aggregate.params, [c.id for c in self.criteria])

    def primary_scale(self) -> Scale:
        """The scale of the score that stands for the rubric (its decision, its error score)."""
        return self.validated_aggregate.primary_scale() or self.output.scale

    @model_validator(mode="after")
    def _rubric_consistent(self, info: ValidationInfo) -> CriteriaRule:
        ids = [c.id for c in self.criteria]
        if len(set(ids)) != len(ids):
            raise ValueError(f"criteria ids repeat: {sorted(i for i in ids if ids.count(i) > 1)}")
        for criterion in self.criteria:
            if not criterion.na_valid:
                if not self.output.choices or "NA" not in self.output.choices:
                    raise ValueError(f"criterion {criterion.id}: na_valid needs an NA choice")
                if criterion.na_when is not None:
                    raise ValueError(
                        f"criterion {criterion.id}: na_when on an NA-invalid criterion"
                    )
            if criterion.na_when is None:
                continue
            compile_path(criterion.na_when)
            if not self.output.choices or "NA" not in self.output.choices:
                raise ValueError(f"criterion {criterion.id}: na_when needs an NA choice in output")
        spec = _pack_code(info).aggregators.require(self.aggregate.name)
        spec.validate_params(self.aggregate.params, ids)
        self._aggregator = spec
        if self.output.answer_format != "json" or self.output.answer_key:
            raise ValueError("a rubric is answered as one JSON object keyed by criterion id")
        return self


class RubricRule(CriteriaRule):
    """Several criteria of one response judged in one call."""

    kind: Literal["rubric"]


# a comparison answer's objects holding each response's ratings, by pair slot
RESPONSE_FIELDS = {"a": "response_a", "b": "response_b"}


class ComparisonRule(CriteriaRule):
    """Two responses to the same request judged side by side in one call (seed 001's
    Response Comparison Methodology): each rated on the criteria (and aggregated as a rubric
    would be), and a preference between them on the symmetric ``preference`` scale (+max:
    A much better, 0: equivalent, -max: B much better), with a justification. The rule's
    variables map into the pair document (``a`` and ``b``: the two traces)."""

    kind: Literal["comparison"]
    pair: PairSpec = Field(default_factory=PairSpec)
    preference: OutputSpec = Field(
        description="The preference's scale and labels (verdict_field: the answer's field)"
    )

    @model_validator(mode="after")
    def _pair_scope(self) -> ComparisonRule:
        if self.scope != "pair":
            raise ValueError("a comparison rule has scope: pair")
        spec = self.preference
        if spec.type != "numeric" or spec.min is None or spec.max is None:
            raise ValueError("preference: a numeric scale")
        if spec.min != -spec.max:
            raise ValueError(
                f"preference: a scale symmetric about 0 (equivalent), got {spec.min:g}..{spec.max:g}"
            )
        if spec.verdict_field is None:
            raise ValueError("preference: verdict_field names the answer's field (preference)")
        if forced := [c.id for c in self.criteria if c.na_when is not None]:
            raise ValueError(f"criteria {forced}: na_when is for rubrics, not comparisons")
        taken = {*RESPONSE_FIELDS.values(), spec.verdict_field, spec.reason_field}
        if clash := sorted(set(self.notes + self.summaries) & taken):
            raise ValueError(f"notes or summaries named {clash}: the answer's own fields")
        return self

    @property
    def engine(self) -> str:
        return f"comparison:{self.aggregate.name}"


class CheckRule(RuleBase):
    """A rule scored by a deterministic check function registered by name."""

    kind: Literal["check"]
    check: str
    params: dict[str, Any] = Field(default_factory=dict)
    _check: CheckSpec | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _no_shadow(cls, data: Any) -> Any:
        if isinstance(data, dict) and "shadow" in data:
            raise ValueError(
                "shadow judges are for judged rules (llm_judge, rubric, comparison): a check "
                "has no judge to shadow"
            )
        return data

    @property
    def engine(self) -> str:
        return f"check:{self.check}"

    @property
    def check_spec(self) -> CheckSpec:
        """The pack's registered check (its existence is checked at load time)."""
        check: CheckSpec | None = private(self, "_check")
        assert check is not None
        return check

    @cached_property
    def validated_params(self) -> CheckParams:
        """The params parsed into the check's own model once, not on every trace."""
        return self.check_spec.validate_params(self.params)

    @model_validator(mode="after")
    def _check_known(self, info: ValidationInfo) -> CheckRule:
        spec = _pack_code(info).checks.require(self.check)
        if set(self.variables) != set(spec.variables):
            raise ValueError(
                f"check {self.check!r} takes variables {sorted(spec.variables)}, "
                f"mapped: {sorted(self.variables)}"
            )
        spec.validate_params(self.params)
        self._check = spec
        return self


AnyRule = LLMJudgeRule | RubricRule | ComparisonRule | CheckRule
Rule = Annotated[AnyRule, Field(discriminator="kind")]
RULE_ADAPTER: TypeAdapter[AnyRule] = TypeAdapter(Rule)


DISABLED_IN_FILE = "enabled: false"
DISABLED_BY_SETTING = "SCORER_DISABLED_RULES"


@dataclass(frozen=True)
class DisabledRule:
    """A rule loaded and validated but not run, and what switched it off (``by``: its file's
    ``enabled: false``, or ``SCORER_DISABLED_RULES``)."""

    rule: AnyRule
    by: str


@dataclass
class RuleSet:
    """The rules a worker runs, with a hash that identifies this exact set (the rules switched
    off are not in it, and are kept apart in ``disabled`` for listings)."""

    rules: list[AnyRule] = field(default_factory=list)
    digest: str = ""
    disabled: list[DisabledRule] = field(default_factory=list)

    @property
    def ids(self) -> set[str]:
        """Every loaded rule's id, switched off or not."""
        return {r.id for r in self.rules} | {d.rule.id for d in self.disabled}

    def for_scope(self, scope: str) -> list[AnyRule]:
        return [r for r in self.rules if r.scope == scope]

    def thread_rules(self, kind: str) -> list[AnyRule]:
        return [r for r in self.rules if r.thread is not None and r.thread.kind == kind]

    def pair_rules(self) -> list[ComparisonRule]:
        return [r for r in self.rules if isinstance(r, ComparisonRule)]

    def pair_spec(self) -> PairSpec | None:
        """The (agreed) pairing of the comparison rules, or None when there are none."""
        rules = self.pair_rules()
        return rules[0].pair if rules else None

    def thread_spec(self, kind: str) -> ThreadSpec | None:
        """The (agreed) thread spec of ``kind``, or None when no rule judges such threads."""
        rules = self.thread_rules(kind)
        return rules[0].thread if rules else None

    @property
    def packs(self) -> list[str]:
        return sorted({r.pack for r in self.rules})

    @property
    def projects(self) -> list[str]:
        """The projects the rules' filters name (after the deployment's pack filters)."""
        return sorted({p for r in self.rules for p in r.filter.projects or ()})

    def with_pack_filters(self, overrides: Mapping[str, PackFilter]) -> RuleSet:
        """This rule set with a deployment's filters over its packs' own (the digest says so);
        naming a pack that is not loaded is an error, not a silent no-op."""
        if not overrides:
            return self
        if unknown := sorted(set(overrides) - set(self.packs)):
            raise ScorerError(
                f"SCORER_PACK_FILTERS names packs that are not loaded: {unknown} "
                f"(loaded: {self.packs})"
            )
        rules = [
            rule.model_copy(update={"filter": overrides[rule.pack].apply(rule.filter)})
            if rule.pack in overrides
            else rule
            for rule in self.rules
        ]
        applied = orjson.dumps({pack: f.model_dump() for pack, f in sorted(overrides.items())})
        digest = hashlib.sha256(self.digest.encode() + applied).hexdigest()[:12]
        return RuleSet(rules, digest, self.disabled)
