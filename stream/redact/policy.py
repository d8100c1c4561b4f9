"""The deployment's redaction: which detectors a rule's ``judge.redact`` names, made once
from the settings (the phone regions, the deployment's own patterns and word lists).

A rule's ``judge.redact`` is ``true`` (the default: every shipped kind and the deployment's
own), ``false`` (the raw text: a rule judging whether an answer leaked personal data), or a
list of kinds (``[EMAIL, SECRET]``).
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, cast

from .detectors import (
    DEFAULT_KINDS,
    DEFAULT_REGIONS,
    Detector,
    Finding,
    builtin,
    patterns,
    words,
)


class EntityDetector(Protocol):
    """A named-entity detector the deployment installs (Presidio, GLiNER, with its model):
    the kinds it finds (``PERSON``, ``ADDRESS``, ...) and, for a text, each entity found as
    (kind, start, end). Named by ``SCORER_REDACT_ENTITIES`` as ``module:factory``, the
    factory called once with no argument; off by default (no model is loaded here)."""

    kinds: Sequence[str]

    def __call__(self, text: str) -> Iterable[tuple[str, int, int]]: ...


@functools.cache  # one model per process, however often the settings are read
def load_entities(path: str) -> EntityDetector:
    """The detector ``module:factory`` makes (``ValueError`` saying what is wrong)."""
    module_name, _, factory_name = path.partition(":")
    if not module_name or not factory_name:
        raise ValueError(f"SCORER_REDACT_ENTITIES is module:factory, not {path!r}")
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"SCORER_REDACT_ENTITIES {path!r} cannot be loaded: {exc}") from None
    detector = factory()
    if not callable(detector) or not getattr(detector, "kinds", None):
        raise ValueError(f"{path!r} made no detector: it must be callable and name its kinds")
    return cast(EntityDetector, detector)


def _entities(detector: EntityDetector, kind: str) -> Detector:
    """The entities of ``kind`` the detector finds, as findings."""

    def find(text: str) -> Iterable[Finding]:
        for found, start, end in detector(text):
            if found == kind and 0 <= start < end <= len(text):
                yield Finding(kind, start, end)

    return find


class UnknownKind(ValueError):  # noqa: N818 - a kind of mistake in a rule, as said
    """A rule names a kind no detector finds."""


class RedactionPolicy:
    """Every detector the deployment has, by kind, and the set a rule's setting names."""

    def __init__(
        self,
        regions: Sequence[str] = DEFAULT_REGIONS,
        own_patterns: Mapping[str, Sequence[str]] | None = None,
        own_words: Mapping[str, Sequence[str]] | None = None,
        entities: EntityDetector | None = None,
    ) -> None:
        self.by_kind: dict[str, list[Detector]] = {
            kind: [detector]
            for kind, detector in zip(DEFAULT_KINDS, builtin(DEFAULT_KINDS, regions), strict=True)
        }
        for kind, expressions in (own_patterns or {}).items():
            self.by_kind.setdefault(kind, []).append(patterns(kind, expressions))
        for kind, listed in (own_words or {}).items():
            self.by_kind.setdefault(kind, []).append(words(kind, listed))
        for kind in entities.kinds if entities is not None else ():
            assert entities is not None
            self.by_kind.setdefault(kind, []).append(_entities(entities, kind))
        self._chosen: dict[tuple[str, ...], list[Detector]] = {}
        self._said: set[str] = set()

    def detectors(self, setting: bool | Sequence[str]) -> list[Detector]:
        """The detectors a rule's ``judge.redact`` names (none for ``false``)."""
        if setting is False:
            return []
        kinds = tuple(self.by_kind) if setting is True else tuple(setting)
        if (known := self._chosen.get(kinds)) is not None:
            return known
        unknown = [kind for kind in kinds if kind not in self.by_kind]
        if unknown:
            raise UnknownKind(
                f"judge.redact names {unknown}, which no detector finds (the shipped kinds: "
                f"{list(DEFAULT_KINDS)}; the deployment's own: SCORER_REDACT_PATTERNS, "
                "SCORER_REDACT_WORDS)"
            )
        chosen = self._chosen[kinds] = [d for kind in kinds for d in self.by_kind[kind]]
        return chosen

    def masking(self, setting: bool | Sequence[str]) -> list[Detector]:
        """``detectors``, where a kind is unknown (a rule reloaded naming one) every detector
        the deployment has, said once: the judge's copy masked more, never less."""
        try:
            return self.detectors(setting)
        except UnknownKind as exc:
            if str(exc) not in self._said:
                self._said.add(str(exc))
                log.warning("%s; masking every kind for it", exc)
            return self.detectors(True)

    def problems(self, settings: Iterable[tuple[str, bool | Sequence[str]]]) -> list[str]:
        """What is wrong with the rules' ``judge.redact`` settings: (rule id, setting)."""
        problems = []
        for rule_id, setting in settings:
            try:
                self.detectors(setting)
            except UnknownKind as exc:
                problems.append(f"rule {rule_id}: {exc}")
        return problems


def unmasked_problems(
    settings: Iterable[tuple[str, bool | Sequence[str]]],
    hosts: Iterable[str],
    allowed: Iterable[str],
) -> list[str]:
    """Where redaction is required: the rules that would send a judge at ``hosts`` text with
    a shipped kind unmasked (``judge.redact: false``, or a list leaving one out), unless every
    host is ``allowed`` to read raw text (a self-hosted judge inside the network)."""
    outside = sorted(set(hosts) - set(allowed))
    if not outside:
        return []
    problems = []
    for rule_id, setting in settings:
        kept = set(DEFAULT_KINDS) if setting is True else set(setting or ())
        if left := [kind for kind in DEFAULT_KINDS if kind not in kept]:
            problems.append(
                f"rule {rule_id}: judge.redact leaves {left} unmasked for a judge at "
                f"{', '.join(outside)}, which SCORER_REDACT_RAW_HOSTS does not list "
                "(SCORER_REDACT_REQUIRED)"
            )
    return problems


log = logging.getLogger(__name__)

SHIPPED = RedactionPolicy()  # the shipped detectors, with the default phone regions
