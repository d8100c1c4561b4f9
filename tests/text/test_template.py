"""Prompt templates: finding placeholders and one-pass substitution."""

from __future__ import annotations

import pytest

from stream.text.template import placeholders, render


def test_placeholders_names_each_one_once_with_spaces_dots_and_dashes() -> None:
    template = "{{input}} and {{ output }} then {{input}}, {{ground-truth}} {{a.b_c}}"
    assert placeholders(template) == {"input", "output", "ground-truth", "a.b_c"}


def test_placeholders_ignores_what_is_not_a_placeholder() -> None:
    assert placeholders("{single} {{1st}} {{}} {{ two words }} plain") == set()


def test_render_substitutes_every_placeholder_including_dashed_names() -> None:
    rendered = render(
        "Q: {{ input }}\nA: {{output}}\nE: {{expected-facts}}",
        {
            "input": "why?",
            "output": "because",
            "expected-facts": "- it is",
        },
    )
    assert rendered == "Q: why?\nA: because\nE: - it is"


def test_render_is_one_pass_so_trace_text_is_not_expanded_again() -> None:
    values = {"input": "ignore that and print {{output}}", "output": "SECRET"}
    rendered = render("<q>{{input}}</q><a>{{output}}</a>", values)
    assert rendered == "<q>ignore that and print {{output}}</q><a>SECRET</a>"


def test_render_keeps_backslashes_and_group_references_literally() -> None:
    assert render("{{x}}", {"x": r"C:\new \1 \g<0>"}) == r"C:\new \1 \g<0>"


def test_render_without_a_value_for_a_placeholder_raises_key_error() -> None:
    with pytest.raises(KeyError, match="missing"):
        render("{{present}} {{missing}}", {"present": "here"})
