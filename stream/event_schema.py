"""The published JSON Schemas: score events (stream/schemas/score-event.schema.json) and
human labels (stream/schemas/human-label.schema.json); ``python -m stream.event_schema``
writes both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from .agreement.labels import HumanLabel
from .models import ScoreEvent

SCHEMAS = Path(__file__).parent / "schemas"
SCHEMA_PATH = SCHEMAS / "score-event.schema.json"
LABEL_SCHEMA_PATH = SCHEMAS / "human-label.schema.json"


def _published(model: type[BaseModel], name: str) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = name
    return schema


def score_event_schema() -> dict[str, Any]:
    return _published(ScoreEvent, "score-event.schema.json")


def human_label_schema() -> dict[str, Any]:
    """What a producer of the labels topic writes (``trace_id`` or ``thread_id`` may stand
    for ``target_id``)."""
    return _published(HumanLabel, "human-label.schema.json")


def _dump(schema: dict[str, Any]) -> bytes:
    return orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def write_schema(path: Path = SCHEMA_PATH, label_path: Path = LABEL_SCHEMA_PATH) -> None:
    path.write_bytes(_dump(score_event_schema()))
    label_path.write_bytes(_dump(human_label_schema()))


if __name__ == "__main__":
    write_schema()
