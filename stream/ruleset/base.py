"""What every rule kind shares (``RuleBase``: identity, scope, filter and sampling, variables,
output, thread section) and what every judged kind adds (``PromptedRule``: the judge, the
prompt and its placeholders, suffixes, shadow judges, an agreement bound, a canary); the kinds
themselves are in ``kinds``. ``PackCode``: the registries of a rule's own pack, which the
loader passes as the validation context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Self

from jmespath.exceptions import JMESPathError
from pydantic import BaseModel, Field, PrivateAttr, ValidationInfo, model_validator

from ..models import Scope
from ..text.template import placeholders
from .aggregators import AggregatorSpec
from .canary import CanarySpec
from .checks import CheckSpec
from .filters import RuleFilter, sampled
from .judge_specs import AgreementSpec, JudgeSpec, ShadowSpec
from .paths import compile_path
from .registry import Registry
from .specs import AlertSpec, OutputSpec, PromptSuffix, Strict, ThreadSpec, VariableSpec

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


def pack_code(info: ValidationInfo) -> PackCode:
    """The pack's registries a rule is validated against (the loader's validation context;
    none given: empty ones)."""
    context = info.context if isinstance(info.context, dict) else {}
    code = context.get("pack_code")
    return code if isinstance(code, PackCode) else PackCode()


class RuleBase(Strict):
    """What every rule has, whatever its kind."""

    # whether the kind judges pairs (``scope: pair``): comparisons only
    judges_pairs: ClassVar[bool] = False

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
    alert: AlertSpec = Field(
        default_factory=AlertSpec, description="How the score-drop alert treats the rule"
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
        scale = self.output.scale
        if self.alert.min_drop is not None and self.alert.min_drop > scale.max - scale.min > 0:
            raise ValueError(
                f"alert.min_drop {self.alert.min_drop} is more than the whole output scale "
                f"({scale.min}..{scale.max})"
            )
        if self.scope == "pair" and not self.judges_pairs:
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

    one_verdict: ClassVar[bool] = False  # the judge answers one verdict (an llm_judge rule)
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
    canary: CanarySpec | None = Field(
        default=None,
        description="Reference items re-judged on a schedule, the cache bypassed, to tell a "
        "judge that changed from an application that did (design record 47)",
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
    def _probabilities_of_one_verdict(self) -> PromptedRule:
        """A decision model, a judge's log-probabilities and a cascade read one verdict: an
        ``llm_judge`` rule's (a rubric or a comparison answers many in one text)."""
        judge = self.judge
        if not self.one_verdict and (judge.api != "chat" or judge.logprobs or judge.cascade):
            raise ValueError(
                "judge.api: decisions, judge.logprobs and judge.cascade read one verdict: they "
                f"are for llm_judge rules, not a {getattr(self, 'kind', '')} rule (its judge "
                "answers several verdicts in one text)"
            )
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
