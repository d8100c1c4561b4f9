"""Reads the rubric seeds (001 response critique, 004 coaching transcripts) for golden tests:
sections by heading, the overall-quality table, and the coaching seed's own compute_score."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from seed_doc import SEEDS

CRITIQUE_SEED = SEEDS / "001_4060f3ebf76f52fc.txt"
COACHING_SEED = SEEDS / "004_03a6faf7f1eaa347.txt"


def section(text: str, start: str, end: str) -> str:
    """The text from the line ``start`` up to (not including) the line ``end``, without the
    trailing ``---`` rule and blank lines."""
    begin = text.index("\n" + start + "\n") + 1
    stop = text.index("\n" + end + "\n", begin) + 1
    return re.sub(r"\n+(---\n+)?$", "", text[begin:stop])


def critique_sections() -> list[str]:
    text = CRITIQUE_SEED.read_text(encoding="utf-8")
    return [
        section(text, "## Rating Scale", "## Overall Quality Assessment"),
        section(text, "## Dimension-Specific Guidelines Summary", "## Common Pitfalls to Avoid"),
        section(text, "### When Rating:", "### When Writing Justifications:"),
    ]


def critique_dimensions() -> list[str]:
    text = CRITIQUE_SEED.read_text(encoding="utf-8")
    return re.findall(r"^### \d\. (.+)$", text, re.MULTILINE)


def overall_table() -> dict[str, str]:
    """Overall rating -> its criteria, as the seed's Rating Framework table gives them."""
    text = CRITIQUE_SEED.read_text(encoding="utf-8")
    table = section(text, "### Rating Framework:", "## Response Comparison Methodology")
    return dict(re.findall(r"^\| \*\*(\w+)\*\* \| (.+?) \|$", table, re.MULTILINE))


def coaching_sections() -> list[str]:
    text = COACHING_SEED.read_text(encoding="utf-8")
    return [
        section(text, "## Categories and Criteria", "## Scoring"),
        section(text, "## Minimum Segmentation Standard", "## Criteria Summary"),
    ]


def coaching_na_invalid_section() -> str:
    text = COACHING_SEED.read_text(encoding="utf-8")
    start = text.index("### NA-Invalid Criteria")
    return text[start : text.index("\n---\n", start)].rstrip()


def coaching_intro() -> str:
    text = COACHING_SEED.read_text(encoding="utf-8")
    start = text.index("> **Answer Types:**")
    return re.sub(r"\n+(---\n+)?$", "", text[start : text.index("## Categories and Criteria")])


def coaching_criteria() -> list[tuple[str, str]]:
    """(id, criterion) from the seed's Criteria Summary table, in its order."""
    text = COACHING_SEED.read_text(encoding="utf-8")
    table = section(text, "## Criteria Summary", "## Version History")
    return re.findall(r"^\| (\w\w\d) \| [^|]+ \| (.+?) \|", table, re.MULTILINE)


def compute_score() -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The seed's ``compute_score``, run from the seed's own code block."""
    text = COACHING_SEED.read_text(encoding="utf-8")
    block = next(
        b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "def compute_score" in b
    )
    namespace: dict[str, Any] = {"CriterionAnswer": str}
    exec(block, namespace)
    func: Callable[[dict[str, Any]], dict[str, Any]] = namespace["compute_score"]
    return func
