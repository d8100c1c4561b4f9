"""Trace messages: what parses as a trace and what does not."""

from __future__ import annotations

import orjson
import pytest

from stream.models import parse_trace


def test_non_object_json_is_rejected() -> None:
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        parse_trace(orjson.dumps([1, 2]))
