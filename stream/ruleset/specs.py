"""The parts of a rule file: how an answer becomes a score (``OutputSpec``), the variables a
prompt maps and the suffixes it adds, a fan-out over a list, the thread and pair sections,
rubric criteria and the aggregator reference; strict models (unknown keys rejected, frozen).
How the judge is asked (model, batch, shadows, agreement): ``judge_specs``."""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..models import Scale
from .paths import compile_path


class Strict(BaseModel):
    """A rule file's model: unknown keys rejected, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class OutputSpec(Strict):
    """How a raw answer becomes a score: its scale, labels and direction."""

    type: Literal["numeric", "choice"] = "numeric"
    min: float | None = None
    max: float | None = None
    integer: bool = False
    labels: dict[int, str] | None = Field(
        default=None, description="Label for each integer raw value (e.g. 4: Excellent)"
    )
    levels: list[float] | None = Field(
        default=None,
        min_length=2,
        max_length=255,
        description="The values a continuous scale is read on by a decision model (e.g. "
        "[0, 0.25, 0.5, 0.75, 1]): one level each, rising, within min and max",
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
    errors_count_as: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="A target the judge could not score (an error score, whose status stays "
        "error) counts in the score metrics as this normalised value for every score the rule "
        "publishes (seed 004: 'ERROR counts as 0.0'); unset: error scores are left out",
    )

    @field_validator("choices", mode="before")
    @classmethod
    def _labels_not_booleans(cls, choices: Any) -> Any:
        """A bare yes, no, true, false, on or off is a boolean to YAML 1.1 (the loader's):
        say so instead of pydantic's "should be a valid string"."""
        if isinstance(choices, dict) and any(isinstance(label, bool) for label in choices):
            raise ValueError(
                "a choice label was read as a boolean (YAML reads a bare yes, no, true, "
                'false, on or off as one): quote the labels, e.g. {"yes": 1.0, "no": 0.0}'
            )
        return choices

    @model_validator(mode="after")
    def _consistent(self) -> OutputSpec:
        if self.type == "numeric":
            if self.min is None or self.max is None:
                raise ValueError("numeric output needs min and max")
            if self.min >= self.max:
                raise ValueError(f"min ({self.min}) must be below max ({self.max})")
            if self.choices is not None:
                raise ValueError("choices are only for type: choice")
            self._levels_on_the_scale()
        else:
            if not self.choices or len(self.choices) < 2:
                raise ValueError("choice output needs at least two choices")
            if self.min is not None or self.max is not None or self.labels or self.levels:
                raise ValueError(
                    "choice output takes its scale from choices; drop min/max/labels/levels"
                )
        if self.answer_format == "score_lines" and (self.type != "numeric" or self.answer_key):
            raise ValueError("score_lines answers are numeric and not wrapped in an answer_key")
        if self.verdict_field and self.answer_key:
            raise ValueError("verdict_field and answer_key are two answer shapes; pick one")
        return self

    def _levels_on_the_scale(self) -> None:
        if self.levels is None:
            return
        if self.integer:
            raise ValueError("an integer scale's levels are its values: drop levels")
        assert self.min is not None and self.max is not None
        if any(b <= a for a, b in zip(self.levels, self.levels[1:], strict=False)):
            raise ValueError(f"levels rise, each once: {self.levels}")
        if self.levels[0] < self.min or self.levels[-1] > self.max:
            raise ValueError(f"levels lie within min and max ({self.min}..{self.max})")

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
    empty_reason: str | None = Field(
        default=None,
        min_length=1,
        description="With allow_empty: false, what the skipped score of an empty value says "
        "before the path (e.g. 'the trace retrieved no documents')",
    )
    missing: Literal["skip", "empty"] = Field(
        default="skip",
        description="A missing (or null) value: skip the rule with a skipped score naming the "
        "path, or render it empty and judge anyway (Opik's behaviour; for a variable whose "
        "absence the prompt itself rules on, e.g. 'if no context is provided')",
    )

    @model_validator(mode="after")
    def _tag_for_tagged(self) -> VariableSpec:
        if (self.format == "tagged") != (self.tag is not None):
            raise ValueError("tag is required by format: tagged and only used by it")
        if self.empty_reason is not None and self.allow_empty:
            raise ValueError(
                "empty_reason says why an empty value is skipped: set allow_empty: false"
            )
        return self


class FanOut(Strict):
    """One judge call per item of a list variable (MLflow's per-document retrieval relevance),
    and one score: the mean of the items' raw values (for a yes/no choice, the share judged
    yes), with each item's verdict in the score's ``details``."""

    variable: str = Field(description="The list variable; each call sees one item as it")
    max_items: int = Field(
        default=20,
        ge=1,
        le=100,
        description="The most items judged per trace (the first ones); the score says how "
        "many there were and how many were judged",
    )
    noun: str = Field(
        default="items",
        min_length=1,
        description="What the score's reason calls the items, plural (e.g. documents)",
    )


class PromptSuffix(Strict):
    """Text appended to the prompt only when ``when`` (a path into the trace) is truthy."""

    when: str
    text: str = Field(min_length=1)


class ThreadSpec(Strict):
    """Which threads a thread-scope rule judges, how a trace becomes a conversation turn, and
    when a thread closes.

    ``conversation``: traces that carry a ``thread_id``; each contributes a user message and an
    assistant message (paths into the trace), and ``end`` (a path into the trace) marks the
    conversation finished when its value is true. ``session``: coaching-session events, which
    end with an ``end`` event. Either closes after ``inactivity_gap_s`` without activity
    (None: the deployment's ``SCORER_THREAD_INACTIVITY_GAP_S``, 15 minutes like Opik).

    ``fallback`` (conversations only): the rule judges only the conversations that no other
    conversation rule claims, so a generic pack scores any thread and stands back where a
    pack written for the application (its trace names) judges it; its turn paths may differ
    from the other rules' (design record 12).
    """

    kind: Literal["conversation", "session"]
    user: str | None = None
    assistant: str | None = None
    end: str | None = None
    inactivity_gap_s: float | None = Field(default=None, gt=0)
    fallback: bool = Field(
        default=False,
        description="Judge only conversations no other (non-fallback) conversation rule "
        "matches a trace of",
    )

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
        elif self.fallback:
            raise ValueError("fallback is for conversation threads only")
        return self

    def folding(self) -> tuple[Any, ...]:
        """What the rules of one thread kind that fold alike (the fallback ones, or the others)
        must agree on: their threads' turns are read once."""
        return (self.user, self.assistant, self.end, self.inactivity_gap_s)


class PairSpec(Strict):
    """How a comparison rule pairs traces: two traces with the same comparison key and the
    two variants answer the same request (a canary or shadow model, a prompt variant).

    The first of a pair waits (in the thread table, as a ``pair``) for ``window_s`` after it
    arrived; its partner then makes the pair, judged once. No partner in the window: a
    ``skipped`` score says so. A pair is judged at most once: a trace whose variant the pair
    already has, or that arrives after the pair was decided, is ignored (counted, and listed
    in the pair's decision records while the pair waits).
    """

    key: str = Field(default="metadata.comparison_id", description="Path to the comparison key")
    variant: str = Field(default="metadata.variant", description="Path to the variant label")
    variants: tuple[str, str] = Field(
        default=("A", "B"), description="The two labels: the first is response A, the second B"
    )
    window_s: float = Field(
        default=600.0, gt=0, description="How long the first of a pair waits for its partner"
    )

    @model_validator(mode="after")
    def _paths_and_labels(self) -> PairSpec:
        compile_path(self.key)
        compile_path(self.variant)
        if self.variants[0] == self.variants[1]:
            raise ValueError(f"the two variants must differ, got {list(self.variants)}")
        return self


class ComparisonSpec(Strict):
    """Which response of a pair the judge reads first (issue 51, design record 52). Judges
    prefer one position more often than the responses deserve; the published preference is
    always stated for the variants (positive: the first variant, A), whichever slot it
    filled."""

    order: Literal["alternate", "both", "fixed"] = Field(
        default="alternate",
        description="alternate: a hash of the comparison key puts either variant first, half "
        "of the pairs each way; both: each pair judged in both orders, a preference that "
        "flips with the order published as a tie (details.position_inconsistent); fixed: "
        "the first variant always first (Response A)",
    )
    audit: float = Field(
        default=0.1,
        ge=0.0,
        le=1.0,
        description="Share of pairs also judged in the other order, whatever the order, to "
        "measure the judge's position preference (one more judge call each; the published "
        "preference is the order's own); with order: both every pair is",
    )


class Criterion(Strict):
    """One criterion of a rubric: the judge answers every criterion in one call."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_\-]*$")
    name: str
    na_when: str | None = Field(
        default=None,
        description="A path into the trace or thread document; when truthy the criterion does "
        "not apply and its answer is NA whatever the judge said (e.g. too few exchanges)",
    )
    na_valid: bool = Field(
        default=True,
        description="False: the criterion can always be assessed, so the judge is only offered "
        "the other choices (its schema has no NA); a seed's NA-invalid criteria",
    )


class AggregateRef(Strict):
    """Which registered aggregator turns a rubric's answers into scores, with its params."""

    name: str
    params: dict[str, Any] = Field(default_factory=dict)


# The smallest drop of a rule's mean score that pages when no rule file says otherwise: 0.05
# of the normalised 0..1 scale (0.2 points of a 1..5 scale). Design record 48.
DEFAULT_MIN_DROP = 0.05


class AlertSpec(Strict):
    """How the score-drop alert treats the rule (``alert:``): the smallest drop that matters."""

    min_drop: float | None = Field(
        default=None,
        gt=0,
        description="The smallest drop of the rule's mean score that pages, in the units of its "
        "output scale (0.2 on a 1..5 scale); unset: 0.05 of the scale. A drop surely smaller "
        "(by two standard errors) never pages, however many scores show it",
    )

    def normalised(self, output: OutputSpec) -> float:
        """The smallest drop that pages, on the normalised 0..1 scale."""
        if self.min_drop is None:
            return DEFAULT_MIN_DROP
        scale = output.scale
        return 1.0 if scale.max == scale.min else self.min_drop / (scale.max - scale.min)
