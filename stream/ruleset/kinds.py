"""The rule file schema: one strict pydantic model per rule kind (unknown keys rejected), on
the shared parts of ``base``, and the union a rule file is validated as (``RULE_ADAPTER``,
discriminated by ``kind``).

A rule that names a check or an aggregator is validated against the registries of its own
pack (``PackCode``, passed as the validation context by the loader), so a typo fails at
start-up with the file, the field and the names the pack does register.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, PrivateAttr, TypeAdapter, ValidationInfo, model_validator

from ..models import Scale
from .aggregators import AggregateParams, AggregatorSpec
from .base import PromptedRule, RuleBase, pack_code, private
from .checks import CheckParams, CheckSpec
from .paths import compile_path
from .specs import AggregateRef, ComparisonSpec, Criterion, FanOut, OutputSpec, PairSpec


class LLMJudgeRule(PromptedRule):
    """A rule scored by an LLM judge from a prompt template: one verdict, one score (or, with
    ``fan_out``, one verdict per item of a list variable, aggregated into one score)."""

    kind: Literal["llm_judge"]
    one_verdict: ClassVar[bool] = True
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
    def _askable_of_a_decision_model(self) -> LLMJudgeRule:
        """A decision model answers a predicate, a choice or a score over levels, and a chat
        judge's log-probabilities are read on the same: a rule judged so has a choice or an
        integer output (at most 255 values), one verdict."""
        cascade = self.judge.cascade
        if self.judge.api != "decisions" and cascade is None and not self.judge.logprobs:
            return self
        if self.fan_out is not None:
            raise ValueError(
                "a decision model or a judge's log-probabilities read one verdict: drop fan_out"
            )
        output = self.output
        levels = (output.max or 0) - (output.min or 0) + 1
        first = cascade.first.api if cascade is not None else self.judge.api
        declared = output.levels is not None and first == "decisions" and not self.judge.logprobs
        if output.type != "choice" and not (output.integer and levels <= 255) and not declared:
            raise ValueError(
                "a decision model or log-probabilities (judge.api: decisions, judge.cascade, "
                "judge.logprobs) need a choice output or an integer one of at most 255 values "
                "(a continuous scale has no levels to ask about: a decision model reads it on "
                "the levels it declares, output.levels)"
            )
        if cascade is None and self.judge.api != "decisions":
            return self  # a chat judge's log-probabilities ask no question
        if cascade is not None and cascade.first.api == "chat":
            return self
        asked = cascade.first.instructions if cascade is not None else None
        if asked is None and self.judge.instructions is None and self.description is None:
            raise ValueError(
                "a decision model asks a question: set judge.instructions (or description)"
            )
        return self

    def cascade_first(self, variant: str | None = None) -> LLMJudgeRule:
        """This rule as its cascade's first tier judges it (a decision model, or a chat model
        read through its log-probabilities; the same id, variables and output), its scores
        carrying ``variant`` (None: the rule's own)."""
        cascade = self.judge.cascade
        assert cascade is not None, f"rule {self.id} has no cascade"
        first = cascade.first
        update: dict[str, Any] = {"api": first.api, "model": first.model, "cascade": None}
        if first.api == "chat":
            update |= {"logprobs": True, "tools": None}
        else:
            update["instructions"] = first.instructions or self.judge.instructions
        judge = self.judge.model_copy(update=update)
        tier = self.model_copy(update={"judge": judge, "shadow": []})
        tier._variant = variant
        tier._first_tier = True
        return tier

    # this rule object is a cascade's first tier (``cascade_first``)
    _first_tier: bool = PrivateAttr(default=False)

    @property
    def cascade_tier(self) -> str | None:
        """Which tier of a cascade this rule object judges as: ``first``, ``judge`` (the
        rule's own judge, not a shadow of it), or None (no cascade)."""
        if private(self, "_first_tier"):
            return "first"
        return "judge" if self.judge.cascade is not None and self.variant is None else None

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
        spec = pack_code(info).aggregators.require(self.aggregate.name)
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

    judges_pairs: ClassVar[bool] = True

    kind: Literal["comparison"]
    pair: PairSpec = Field(default_factory=PairSpec)
    comparison: ComparisonSpec = Field(
        default_factory=ComparisonSpec, description="Which response the judge reads first"
    )
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
        spec = pack_code(info).checks.require(self.check)
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
