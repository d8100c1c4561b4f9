"""Where ``sentences`` ends a sentence: a run of ".", "!" and "?" followed by a space, a line
break or the end of the text, taken whole."""

from __future__ import annotations

import pytest

from stream.text.measures import sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Really?! Yes!!! No...", ["Really", "Yes", "No"]),
        ("x?.! y", ["x", "y"]),
        ("Stop!!\nGo", ["Stop", "Go"]),
        ("End.\n", ["End"]),
        ("a.b.c", ["a.b.c"]),  # no space after a period: no end
        ("Hmm.?x then", ["Hmm.?x then"]),
        ("Version 1.5 ok!? Fine", ["Version 1.5 ok", "Fine"]),
        ("!!! ?", []),
        (
            "Slow down, e.g. to 60 bpm... Then speed up.",
            ["Slow down, e.g. to 60 bpm", "Then speed up"],
        ),
    ],
)
def test_sentence_ends(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected
