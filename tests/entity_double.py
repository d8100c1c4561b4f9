"""A named-entity detector for tests, speaking the interface ``SCORER_REDACT_ENTITIES``
loads (``stream.redact.policy.EntityDetector``: its ``kinds``, and for a text each entity as
(kind, start, end)), as an adapter over Presidio's ``AnalyzerEngine.analyze`` or GLiNER's
``predict_entities`` would. No model: two capitalised words are a PERSON, a house number,
a capitalised word and a street word an ADDRESS."""

from __future__ import annotations

import re
from collections.abc import Iterable

_PERSON = re.compile(r"\b(?!Dear\b|Hi\b)[A-Z][a-z]+ [A-Z][a-z]+\b")  # no salutation
_ADDRESS = re.compile(r"\b\d{1,5} [A-Z][a-z]+ (?:Street|Road|Avenue|Lane)\b")


class Names:
    kinds = ("PERSON", "ADDRESS")

    def __call__(self, text: str) -> Iterable[tuple[str, int, int]]:
        for found in _ADDRESS.finditer(text):
            yield "ADDRESS", found.start(), found.end()
        for found in _PERSON.finditer(text):
            yield "PERSON", found.start(), found.end()


def make() -> Names:
    return Names()
