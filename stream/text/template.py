"""Prompt templates with ``{{variable}}`` placeholders (names may contain ``-``)."""

from __future__ import annotations

import re
from collections.abc import Mapping

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*\}\}")


def placeholders(template: str) -> set[str]:
    """Names of every placeholder in ``template``."""
    return set(PLACEHOLDER.findall(template))


def render(template: str, values: Mapping[str, str]) -> str:
    """Substitute placeholders in one pass.

    One pass matters: a trace whose text contains ``{{output}}`` must not be expanded
    again, so trace content can never rewrite the prompt around it.
    """
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
