"""Reading trace files for replay: JSONL (bad lines kept as raw bytes) and Opik exports."""

from __future__ import annotations

from pathlib import Path

import orjson

from stream.kafka.io import message_key, read_traces


def test_jsonl_keeps_bad_lines_as_bytes(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b'{"id": "a"}\n\n{not json\n{"id": "b", "thread_id": "th"}\n')
    items = read_traces(path)
    assert items == [{"id": "a"}, b"{not json", {"id": "b", "thread_id": "th"}]
    assert [message_key(i) for i in items] == [b"a", None, b"th"]


def test_opik_export_array_and_page(tmp_path: Path) -> None:
    traces = [{"id": "t1", "name": "x"}, {"id": "t2", "name": "y"}]
    array = tmp_path / "export.json"
    array.write_bytes(orjson.dumps(traces, option=orjson.OPT_INDENT_2))
    page = tmp_path / "page.json"
    page.write_bytes(orjson.dumps({"page": 1, "size": 2, "total": 2, "content": traces}))
    assert read_traces(array) == traces
    assert read_traces(page) == traces


def test_single_line_object_file_is_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_bytes(b'{"id": "only"}\n')
    assert read_traces(path) == [{"id": "only"}]
