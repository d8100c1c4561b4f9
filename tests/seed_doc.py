"""Reads the FretCoach seed document, independently of the rule files, for golden tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SEEDS = Path(__file__).parent / "seeds"
FRETCOACH_SEED = SEEDS / "000_fe1a42cada8d7b71.txt"

_HEADING = re.compile(r"^#### (\d+)\. (\w+)\n\n", re.MULTILINE)
_MAPPING = re.compile(r"^- `([\w-]+)`: `([^`]+)`$", re.MULTILINE)


@dataclass
class SeedRule:
    number: int
    rule_id: str
    prompt: str
    mappings: dict[str, str]


def fretcoach_rules() -> dict[str, SeedRule]:
    text = FRETCOACH_SEED.read_text(encoding="utf-8")
    heads = list(_HEADING.finditer(text))
    rules = {}
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = text[head.end() : end]
        # the section ends at the variable mappings, or at the next '---' / '###' heading
        cut = re.search(r"\n\n\*\*Variable mappings:\*\*\n|\n\n---\n|\n\n### ", body)
        prompt = body[: cut.start()] if cut else body.rstrip("\n")
        mapping_block = body[cut.end() :] if cut and "Variable mappings" in cut.group(0) else ""
        mapping_block = mapping_block.split("\n---")[0]
        rules[head.group(2)] = SeedRule(
            number=int(head.group(1)),
            rule_id=head.group(2),
            prompt=prompt,
            mappings=dict(_MAPPING.findall(mapping_block)),
        )
    return rules
