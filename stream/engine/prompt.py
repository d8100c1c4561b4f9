"""A rule's prompt for one trace or thread: variables looked up, rendered, substituted."""

from __future__ import annotations

from typing import Any

from ..ruleset.paths import lookup, lookup_nonempty, truthy
from ..ruleset.schema import AnyRule, PromptedRule
from ..text.template import render
from ..text.values import format_value


def resolve_variables(rule: AnyRule, document: Any) -> dict[str, Any]:
    """Mapped values of every variable; raises ``MissingVariable`` for the first missing one."""
    return {
        name: (lookup if spec.allow_empty else lookup_nonempty)(document, name, spec.path)
        for name, spec in rule.variable_specs.items()
    }


def _texts(rule: PromptedRule, values: dict[str, Any]) -> dict[str, str]:
    specs = rule.variable_specs
    texts = {
        name: format_value(value, specs[name].format, specs[name].tag)
        for name, value in values.items()
    }
    texts.update(rule.options)
    return texts


def quotable(rule: PromptedRule, values: dict[str, Any]) -> list[str]:
    """The trace's text as the prompt shows it (the mapped variables, not the options)."""
    specs = rule.variable_specs
    return [format_value(v, specs[n].format, specs[n].tag) for n, v in values.items()]


def render_prompt(rule: PromptedRule, values: dict[str, Any], document: Any = None) -> str:
    """The user prompt, with the suffixes whose condition holds on ``document``."""
    texts = _texts(rule, values)
    prompt = render(rule.prompt, texts)
    for suffix in rule.suffixes:
        if truthy(document, suffix.when):
            prompt += render(suffix.text, texts)
    return prompt


def render_system(rule: PromptedRule, values: dict[str, Any]) -> str | None:
    """The system prompt, when the rule has one."""
    if rule.system_prompt is None:
        return None
    return render(rule.system_prompt, _texts(rule, values))
