"""The published JSON Schema of score events (stream/schemas/score-event.schema.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from .models import ScoreEvent

SCHEMA_PATH = Path(__file__).parent / "schemas" / "score-event.schema.json"


def score_event_schema() -> dict[str, Any]:
    schema = ScoreEvent.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "score-event.schema.json"
    return schema


def write_schema(path: Path = SCHEMA_PATH) -> None:
    path.write_bytes(
        orjson.dumps(score_event_schema(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
        + b"\n"
    )


if __name__ == "__main__":
    write_schema()
