"""Text measures for deterministic checks: sentences, words, phrase mentions."""

from __future__ import annotations

import re
from functools import lru_cache

# "[.!?][.!?]*", not "[.!?]+": the same matches, but an expression that opens on a class
# lets the engine skip to its next candidate character instead of trying every position
_SENTENCE_END = re.compile(r"[.!?][.!?]*(?=\s|$)")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’%.\-/]*")


# a period after these ends no sentence ("e.g. play it slowly"); after these, only when a
# capital follows ("scales, arpeggios, etc. Then rest" is two; "vs. last take" is one)
_NEVER_ENDS = frozenset(["e.g", "i.e"])
_SELDOM_ENDS = frozenset(["etc", "vs", "approx", "cf", "incl", "esp"])


def _last_token(text: str, start: int, end: int) -> str:
    """The run of non-space characters that ends ``text[start:end]``, or ends it before one
    final newline (where a regular expression's ``(\\S+)$`` finds it); "" if none does.
    Read from the end: the expression tried every position of the sentence."""
    if end > start and text[end - 1] == "\n":
        end -= 1
    segment = text[start:end]
    if not segment or segment[-1].isspace():
        return ""
    return segment.rsplit(None, 1)[-1]


def sentences(text: str) -> list[str]:
    """Split on sentence-ending punctuation; a trailing fragment counts as a sentence. A
    period after "e.g." or "i.e." ends no sentence, nor one after "etc.", "vs." and the like
    unless a capital letter follows."""
    text = text.strip()
    parts, start = [], 0
    for end in _SENTENCE_END.finditer(text):
        if end.group(0) == ".":
            word = _last_token(text, start, end.start()).lower().rstrip(".")
            if word in _NEVER_ENDS or (
                word in _SELDOM_ENDS and not text[end.end() :].lstrip()[:1].isupper()
            ):
                continue
        parts.append(text[start : end.start()])
        start = end.end()
    parts.append(text[start:])
    return [stripped for p in parts if (stripped := p.strip())]


def words(text: str) -> list[str]:
    """Words as a reader counts them: dashes and lone punctuation are not words."""
    return _WORD.findall(text)


@lru_cache(maxsize=1024)
def _phrases_pattern(phrases: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(p.lower()) for p in phrases)
    # whole words, also for phrases that start or end with a symbol ("C#", "80%")
    return re.compile(r"(?<![a-z0-9])(?:" + alternatives + r")(?![a-z0-9])")


def mentions(text: str, phrases: list[str]) -> bool:
    """Whether ``text`` names any of ``phrases`` as whole words (case-insensitive)."""
    return _phrases_pattern(tuple(phrases)).search(text.lower()) is not None
