"""Text measures for deterministic checks: sentences, words, phrase mentions."""

from __future__ import annotations

import re
from functools import lru_cache

_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’%.\-/]*")


def sentences(text: str) -> list[str]:
    """Split on sentence-ending punctuation; a trailing fragment counts as a sentence."""
    parts = [p.strip() for p in _SENTENCE_END.split(text.strip())]
    return [p for p in parts if p]


def words(text: str) -> list[str]:
    """Words as a reader counts them: dashes and lone punctuation are not words."""
    return _WORD.findall(text)


@lru_cache(maxsize=1024)
def _phrases_pattern(phrases: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(p.lower()) for p in phrases)
    return re.compile(r"\b(?:" + alternatives + r")\b")


def mentions(text: str, phrases: list[str]) -> bool:
    """Whether ``text`` names any of ``phrases`` as whole words (case-insensitive)."""
    return _phrases_pattern(tuple(phrases)).search(text.lower()) is not None
