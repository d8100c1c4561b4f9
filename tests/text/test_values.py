"""Mapped values as prompt text."""

from __future__ import annotations

import pytest

from stream.text.values import render_value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", "plain"),
        (
            [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {}}],
            "hi\n[image_url]",
        ),
        (0.5, "0.5"),
        ({"a": 1}, '{\n  "a": 1\n}'),
        (
            [{"role": "user", "content": "x"}],
            '[\n  {\n    "role": "user",\n    "content": "x"\n  }\n]',
        ),
    ],
)
def test_render_value(value: object, text: str) -> None:
    assert render_value(value) == text
