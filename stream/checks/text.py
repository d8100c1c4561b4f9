"""Small text helpers shared by checks."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’%.\-/]*")


def sentences(text: str) -> list[str]:
    """Split on sentence-ending punctuation; a trailing fragment counts as a sentence."""
    parts = [p.strip() for p in _SENTENCE_END.split(text.strip())]
    return [p for p in parts if p]


def words(text: str) -> list[str]:
    """Words as a reader counts them: dashes and lone punctuation are not words."""
    return _WORD.findall(text)


def mentions(text: str, phrases: list[str]) -> bool:
    low = text.lower()
    return any(re.search(r"\b" + re.escape(p.lower()) + r"\b", low) for p in phrases)
