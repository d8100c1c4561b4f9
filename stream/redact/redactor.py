"""The redactor: what the detectors find replaced with typed, numbered placeholders,
consistent within one scope (a trace, a thread or a pair), the mapping kept in the process
(issue 47, item 1).

One ``Redaction`` per scope: the same value is ``<EMAIL_1>`` in every text of the scope, the
next new one ``<EMAIL_2>``, so a judge reading a conversation can still follow who said
what. Where findings overlap, the kind ranked first wins (a secret before anything it
contains, a card number before the phone number its digits could be), then the longer. The
values are never kept beyond the scope's life and never leave it: what a score says of a
redaction is ``counts``, per kind how many values were replaced.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from .detectors import SECRET, Detector, Finding

# who wins an overlap: the most specific (checksummed, anchored) kind first; a phone number
# is the loosest of the shipped kinds, the deployment's own and a named-entity model's after
RANK = {
    SECRET: 0,
    "URL_CREDENTIALS": 1,
    "EMAIL": 2,
    "IBAN": 3,
    "CARD": 4,
    "IP_ADDRESS": 5,
    "PHONE": 6,
}


def resolve(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that do not overlap, in text order: of two that do, the higher-ranked
    kind wins, then the longer, then the earlier."""
    ordered = sorted(findings, key=lambda f: (RANK.get(f.kind, 7), -(f.end - f.start), f.start))
    kept: list[Finding] = []
    for finding in ordered:
        if all(finding.end <= k.start or finding.start >= k.end for k in kept):
            kept.append(finding)
    return sorted(kept, key=lambda f: f.start)


class Redaction:
    """The placeholders of one scope: each value's, numbered per kind in order of first
    sight, and how many values of each kind were replaced (``counts``; each call's too)."""

    def __init__(self, detectors: Sequence[Detector] = ()) -> None:
        self.detectors = detectors  # what ``redact`` finds unless told otherwise
        self._placeholders: dict[tuple[str, str], str] = {}
        self._numbered: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()  # kind -> values replaced (every occurrence)
        # a text seen again (a variable every rule of the target renders) is not read again
        self._done: dict[tuple[str, int], tuple[str, Counter[str]]] = {}

    def redact(self, text: str, detectors: Sequence[Detector] | None = None) -> str:
        """``text`` with every value found replaced by its placeholder."""
        return self.redacted(text, detectors)[0]

    def redacted(
        self, text: str, detectors: Sequence[Detector] | None = None
    ) -> tuple[str, Counter[str]]:
        """``text`` with every value ``detectors`` find replaced by its placeholder, and how
        many values of each kind it held."""
        counts: Counter[str] = Counter()
        if not text:
            return text, counts
        using = self.detectors if detectors is None else detectors
        if (done := self._done.get((text, id(using)))) is not None:
            self.counts.update(done[1])
            return done[0], Counter(done[1])
        found = resolve(f for detect in using for f in detect(text))
        if not found:
            self._done[(text, id(using))] = (text, counts)
            return text, Counter()
        out: list[str] = []
        at = 0
        for finding in found:
            out.append(text[at : finding.start])
            out.append(self.placeholder(finding.kind, text[finding.start : finding.end]))
            counts[finding.kind] += 1
            at = finding.end
        out.append(text[at:])
        self.counts.update(counts)
        masked = "".join(out)
        self._done[(text, id(using))] = (masked, counts)
        return masked, Counter(counts)

    def placeholder(self, kind: str, value: str) -> str:
        """``value``'s placeholder in this scope (made at its first sight)."""
        key = (kind, _canonical(kind, value))
        if (known := self._placeholders.get(key)) is None:
            self._numbered[kind] += 1
            known = self._placeholders[key] = f"<{kind}_{self._numbered[kind]}>"
        return known


def _canonical(kind: str, value: str) -> str:
    """One value however it is written: an address or a name without case, a card or IBAN
    without its spacing, a phone number by its last nine digits (``+44 20 7946 0958`` and
    ``020 7946 0958`` are one number), an IP address in its short form."""
    if kind in ("PHONE", "CARD"):
        digits = "".join(c for c in value if c.isdigit())
        return digits[-9:] if kind == "PHONE" else digits
    if kind == "IBAN":
        return "".join(c for c in value if c.isalnum()).upper()
    if kind == "IP_ADDRESS":
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            return value
    if kind in (SECRET, "URL_CREDENTIALS"):
        return value
    return value.casefold()


def redacted_document(
    value: Any, redact: Callable[[str], tuple[str, Counter[str]]]
) -> tuple[Any, Counter[str]]:
    """A copy of a JSON document masked as its JSON text would be (keys, long numbers and
    each value's context, ``"phone": "6502530000"``, read as in a prompt): what a judge
    reading a trace through tools is given, so no tool answer, cut or searched, holds a
    value the prompt would have masked. Where a mask would break the JSON, each string
    (keys too) is masked on its own."""
    prepared = _numbers_as_text(value)
    masked, counts = redact(orjson.dumps(prepared).decode())
    try:
        return orjson.loads(masked), counts
    except orjson.JSONDecodeError:
        counts = Counter()

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            text, found = redact(node)
            counts.update(found)
            return text
        if isinstance(node, dict):
            return {walk(str(key)): walk(item) for key, item in node.items()}
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    return walk(prepared), counts


def _numbers_as_text(node: Any) -> Any:
    """Numbers of seven digits or more as text (a phone or card number stored as a JSON
    number is masked as one written in a string)."""
    if isinstance(node, bool):
        return node
    if isinstance(node, int | float) and len(str(node).replace("-", "").replace(".", "")) >= 7:
        return str(node)
    if isinstance(node, dict):
        return {key: _numbers_as_text(item) for key, item in node.items()}
    if isinstance(node, list):
        return [_numbers_as_text(item) for item in node]
    return node
