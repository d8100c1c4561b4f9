"""How a judged rule's judge is asked: its model, tools and caps, the verdict cache, online or
batch mode (and when a batch is submitted), its shadow judges, and how far it must agree with
human labels; strict models (unknown keys rejected, frozen)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, model_validator

from .specs import Strict


class BatchSpec(Strict):
    """When a batch of judge requests is submitted to the provider's Batch API: once it holds
    ``max_jobs`` requests or its oldest request has waited ``max_wait_s``. Read by
    ``mode: batch`` and by a budget of mode ``defer``."""

    max_jobs: int = Field(
        default=1000,
        ge=1,
        le=50_000,
        description="Submit a batch once it holds this many judge requests (the Batch API "
        "takes at most 50,000 a batch)",
    )
    max_wait_s: float = Field(
        default=3600.0,
        gt=0,
        le=86_400,
        description="Submit a batch once its oldest request has waited this long (seconds)",
    )


DECISION_MODEL = "gpt-6-luna"  # the Decisions API's one model (the openai SDK's types)
# the shadow name a cascade's first tier publishes under, beside the judge, on the audit share
CASCADE_VARIANT = "cascade"


class CascadeTier(Strict):
    """The cheap first tier of a cascade: a decision model, or a chat model whose verdict's
    confidence is read from its log-probabilities (a small hosted or local model)."""

    @model_validator(mode="before")
    @classmethod
    def _chat_names_its_model(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("api") == "chat" and not data.get("model"):
            raise ValueError(
                "a chat first tier names its model (a small one: its verdict's confidence is "
                "read from its log-probabilities)"
            )
        return data

    api: Literal["decisions", "chat"] = Field(
        default="decisions",
        description="decisions: a decision model asked the rule's question; chat: a chat "
        "model asked the rule's own prompt, its confidence read from its log-probabilities",
    )
    model: str = DECISION_MODEL
    instructions: str | None = Field(
        default=None,
        min_length=1,
        description="With api: decisions, the question asked of the input (default: the "
        "rule's judge.instructions, else its description)",
    )

    @model_validator(mode="after")
    def _instructions_for_decisions(self) -> CascadeTier:
        if self.api == "chat" and self.instructions is not None:
            raise ValueError("a chat first tier reads the rule's own prompt: drop instructions")
        return self


class CascadeAccept(Strict):
    """When the first tier's verdict is published: its confidence at least this."""

    min_confidence: float = Field(ge=0.0, le=1.0)


class CascadeSpec(Strict):
    """A first tier asked before the rule's own judge, which decides only where the first
    tier is unsure; an audit share of targets is judged by both (the first tier's verdict
    published as the shadow ``cascade``, so its agreement with the judge is measured)."""

    first: CascadeTier = Field(default_factory=CascadeTier)
    accept: CascadeAccept
    audit_rate: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="The share of targets (hashed) judged by both tiers whatever the first "
        "says: the rule's judge publishes, the first tier's verdict is its shadow 'cascade'",
    )


class JudgeSpec(Strict):
    """Which judge a rule asks, and how: its model, tools, caps, cache, online or batch."""

    @model_validator(mode="before")
    @classmethod
    def _decision_model_by_default(cls, data: Any) -> Any:
        """A decision rule naming no model asks the Decisions API's (the deployment's default
        model is a chat model)."""
        if isinstance(data, dict) and data.get("api") == "decisions" and not data.get("model"):
            return {**data, "model": DECISION_MODEL}
        return data

    model: str | None = Field(default=None, description="None: the deployment's default model")
    api: Literal["chat", "decisions"] = Field(
        default="chat",
        description="chat: a chat completion reading the rule's prompt; decisions: a decision "
        "model (OpenAI's Decisions API) asked the rule's question of the rendered prompt, "
        "answering probabilities and no text (llm_judge rules with a choice or integer output)",
    )
    instructions: str | None = Field(
        default=None,
        min_length=1,
        description="With api: decisions, the question asked of the input (default: the rule's "
        "description)",
    )
    redact: bool | list[Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]*$")]] = Field(
        default=True,
        description="What is masked in the judge's copy of the prompt's variables: true (every "
        "shipped kind of personal data and secret, and the deployment's own), false (the raw "
        "text: a rule judging whether an answer leaked personal data), or a list of kinds "
        "(EMAIL, PHONE, CARD, IBAN, IP_ADDRESS, URL_CREDENTIALS, SECRET, the deployment's own)",
    )
    logprobs: bool = Field(
        default=False,
        description="Ask a chat judge for its log-probabilities (top_logprobs) and publish each "
        "label's probability and the verdict's confidence in details.decision (llm_judge rules "
        "with a choice or integer output; an endpoint that returns none is said once)",
    )
    cascade: CascadeSpec | None = Field(
        default=None,
        description="A cheap first tier (a decision model, or a chat model read through its "
        "log-probabilities); the rule's own judge (chat) only where its confidence is under "
        "accept.min_confidence, and on an audit share",
    )
    tools: Literal["trace"] | None = Field(
        default=None,
        description="trace: the judge reads the trace through tools (trace info, spans, "
        "search, one span) in a bounded loop instead of being shown it",
    )
    max_tool_calls: int = Field(
        default=20, ge=1, le=200, description="With tools: the most tool calls per evaluation"
    )
    max_tool_tokens: int = Field(
        default=100_000, ge=1000, description="With tools: the most tokens per evaluation"
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, gt=0)
    max_prompt_tokens: int | None = Field(
        default=None,
        gt=0,
        description="Cap on the prompt sent (estimated tokens); None: SCORER_JUDGE_MAX_PROMPT_TOKENS",
    )
    oversize: Literal["truncate", "skip"] = Field(
        default="truncate",
        description="A prompt over the cap: cut the largest variable in the middle, or skip",
    )
    cache: bool = Field(
        default=True,
        description="Reuse a verdict already given to the same prompt, model, answer schema "
        "and rule version (SCORER_JUDGE_CACHE_TTL_S); false: ask the judge every time",
    )
    mode: Literal["online", "batch"] = Field(
        default="online",
        description="batch: the rule's judge calls are gathered and sent through the "
        "provider's Batch API, half the price, scores published when the batch completes, "
        "minutes to hours later",
    )
    batch: BatchSpec = Field(
        default=BatchSpec(),
        description="When a batch is submitted (mode batch, or a budget of mode defer)",
    )

    @model_validator(mode="after")
    def _decisions_online_without_tools(self) -> JudgeSpec:
        if self.cascade is not None and (self.api != "chat" or self.mode == "batch"):
            raise ValueError("judge.cascade puts a decision model before an online chat judge")
        if self.cascade is not None and self.tools is not None:
            raise ValueError(
                f"judge.cascade cannot go with judge.tools: {self.tools} (the first tier is asked "
                "the rule's prompt, which does not show the trace its judge reads through tools)"
            )
        if self.logprobs and (self.api != "chat" or self.tools is not None):
            raise ValueError(
                "judge.logprobs reads a chat judge's answer tokens: it takes api: chat and no "
                "tools (a decision model gives its probabilities itself)"
            )
        if self.api == "decisions" and (self.mode == "batch" or self.tools is not None):
            raise ValueError(
                "api: decisions is asked online and without tools (a decision model answers "
                "the input it is given, in one request)"
            )
        return self

    @model_validator(mode="after")
    def _batch_answers_once(self) -> JudgeSpec:
        if self.mode == "batch" and self.tools is not None:
            raise ValueError(
                f"mode batch cannot use tools: {self.tools} (a tool loop needs several round "
                "trips with the judge; a batch answers each request once): drop one of them"
            )
        return self


SHADOW_NAME_PATTERN = r"^[a-z0-9][a-z0-9_\-]*$"
PRIMARY = "primary"  # what the rule's own judge is called beside its shadows


class ShadowSpec(Strict):
    """A shadow judge of a rule: another model and/or another prompt for the same variables,
    judging a hashed sample (``sampling_rate``) of the targets the rule judges. Its scores
    carry its ``name`` as their ``variant`` and are kept out of the quality metrics and alerts.

    ``prompt_file`` is read at load time, relative to the rule file's folder (not a ``.yaml``
    file: the pack's YAML files are its rules)."""

    name: str = Field(pattern=SHADOW_NAME_PATTERN, max_length=40)
    model: str | None = Field(default=None, description="None: the rule's own judge model")
    prompt: str | None = Field(
        default=None, min_length=1, description="None: the rule's own prompt (or prompt_file)"
    )
    prompt_file: str | None = Field(
        default=None,
        min_length=1,
        description="A file holding the prompt, relative to the rule file's folder",
    )
    system_prompt: str | None = Field(default=None, min_length=1)
    sampling_rate: float = Field(
        default=0.1, gt=0.0, le=1.0, description="The share of the rule's judged targets"
    )

    @model_validator(mode="before")
    @classmethod
    def _read_prompt_file(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or data.get("prompt_file") is None:
            return data
        if data.get("prompt") is not None:
            raise ValueError("prompt and prompt_file are two ways to give one prompt; pick one")
        name = data["prompt_file"]
        context = info.context if isinstance(info.context, dict) else {}
        folder = context.get("rule_dir")
        if not isinstance(name, str) or not isinstance(folder, Path):
            raise ValueError("prompt_file is read from a rule file's folder (load the rule file)")
        path = (folder / name).resolve()
        if Path(name).is_absolute() or not path.is_relative_to(folder.resolve()):
            raise ValueError(f"prompt_file {name!r}: a path inside the rule file's folder")
        if path.suffix in (".yaml", ".yml"):
            raise ValueError(
                f"prompt_file {name!r}: a .yaml file of a pack is a rule, not a prompt"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"prompt_file {name!r}: cannot be read: {exc}") from exc
        return {**data, "prompt": text}

    @model_validator(mode="after")
    def _not_primary(self) -> ShadowSpec:
        if self.name == PRIMARY:
            raise ValueError(f"name {PRIMARY!r} is the rule's own judge; name the shadow apart")
        return self


AGREEMENT_MEASURES = {"kappa": "min", "accuracy": "min", "spearman": "min", "mae": "max"}


class AgreementSpec(Strict):
    """How far the rule's judge must agree with human labels (design record 30): the
    ``measure`` over ``window``, at least ``threshold`` (kappa, accuracy, spearman) or at most
    (mae, on the rule's own scale), once ``min_labels`` labelled targets are in the window;
    the alert ScorerJudgeAgreementLow fires past it."""

    measure: Literal["kappa", "accuracy", "spearman", "mae"]
    threshold: float
    min_labels: int = Field(default=30, ge=1)
    window: Literal["1h", "1d", "7d"] = "1d"

    @property
    def direction(self) -> str:
        """``min``: the measure must stay at or above the threshold; ``max``: at or below."""
        return AGREEMENT_MEASURES[self.measure]

    @model_validator(mode="after")
    def _in_range(self) -> AgreementSpec:
        if self.measure in ("kappa", "spearman") and not -1.0 <= self.threshold <= 1.0:
            raise ValueError(f"a {self.measure} threshold is between -1 and 1")
        if self.measure == "accuracy" and not 0.0 <= self.threshold <= 1.0:
            raise ValueError("an accuracy threshold is a share, between 0 and 1")
        if self.measure == "mae" and self.threshold < 0:
            raise ValueError("a mean absolute error threshold is 0 or more")
        return self
