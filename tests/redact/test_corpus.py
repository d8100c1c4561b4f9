"""The detectors on a labelled corpus (issue 47's measure): personal data made by faker in
seven locales and secrets in every published shape, in chat turns (``pii_corpus``): recall
at least 0.99 on each kind; on clean turns (the bundled samples, orders, dates, versions,
prices, code) at most 1 false detection per 1,000 turns."""

from __future__ import annotations

from collections import Counter

from fixtures import ROOT
from pii_corpus import clean_turns, labelled_turns

from stream.redact.detectors import DEFAULT_KINDS, builtin
from stream.redact.redactor import resolve

DETECTORS = builtin(DEFAULT_KINDS)


def test_recall_on_each_kind_is_at_least_0_99() -> None:
    found, seeded = Counter[str](), Counter[str]()
    missed = []
    for turn in labelled_turns(3000):
        findings = resolve(f for detect in DETECTORS for f in detect(turn.text))
        for kind, value in turn.values:
            seeded[kind] += 1
            start = turn.text.index(value)
            end = start + len(value)
            # found when a finding of its kind covers it (an AWS secret key: its value part)
            if any(f.kind == kind and f.start < end and f.end >= end for f in findings):
                found[kind] += 1
            else:
                missed.append((kind, value))
    assert set(seeded) == {"EMAIL", "PHONE", "CARD", "IBAN", "IP_ADDRESS", "SECRET"}
    recall = {kind: found[kind] / seeded[kind] for kind in seeded}
    assert all(r >= 0.99 for r in recall.values()), (recall, missed[:10])
    assert min(seeded.values()) >= 500


def test_clean_turns_give_at_most_one_false_detection_per_thousand() -> None:
    turns = clean_turns(3000, samples=ROOT / "stream" / "samples")
    false = [
        (turn[f.start : f.end], f.kind)
        for turn in turns
        for f in resolve(f for detect in DETECTORS for f in detect(turn))
    ]
    assert len(turns) >= 3000
    assert len(false) <= len(turns) / 1000, false[:10]
