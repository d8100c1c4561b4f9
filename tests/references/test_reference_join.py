"""A trace joined with its reference (``with_reference``): looked up by
``metadata.reference_id``, else by the trace's id; the document and the trace's view (what
``filter.when`` reads) gain ``reference``; a trace with no reference found, or one carrying its
own, comes back as it was, the same objects."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fixtures import as_trace

from stream.references import ReferenceStore, reference_id, with_reference


@pytest.fixture
def store() -> ReferenceStore:
    held = ReferenceStore(1 << 20)
    held.apply(b"ref-1", orjson.dumps({"answer": "Paris"}))
    held.apply(b"t-1", orjson.dumps({"answer": "by the trace's id"}))
    held.apply(b"42", orjson.dumps({"answer": "by a number"}))
    return held


@pytest.mark.parametrize(
    ("metadata", "looked_up"),
    [
        ({}, "t-1"),
        ({"reference_id": "ref-1"}, "ref-1"),
        ({"reference_id": 42}, "42"),
        ({"reference_id": ""}, None),
        ({"reference_id": True}, None),
        ({"reference_id": {"id": "ref-1"}}, None),
    ],
)
def test_a_trace_names_its_reference_or_is_its_own(
    metadata: dict[str, Any], looked_up: str | None
) -> None:
    assert reference_id(as_trace({"id": "t-1", "metadata": metadata})) == looked_up


def test_the_reference_joins_the_document_and_the_view(store: ReferenceStore) -> None:
    document = {"id": "t-9", "metadata": {"reference_id": "ref-1"}, "output": "Lyon"}
    trace = as_trace(document)
    joined_trace, joined = with_reference(trace, document, store)
    assert joined == {**document, "reference": {"answer": "Paris"}}
    assert joined_trace.view["reference"] == {"answer": "Paris"}
    assert "reference" not in document and "reference" not in trace.view  # not changed


def test_a_trace_without_a_reference_comes_back_as_it_was(store: ReferenceStore) -> None:
    document = {"id": "t-9", "metadata": {"reference_id": "ref-missing"}}
    trace = as_trace(document)
    joined_trace, joined = with_reference(trace, document, store)
    assert joined_trace is trace and joined is document  # nothing validated again
    assert store.missing == 1


def test_a_trace_carrying_its_own_reference_keeps_it(store: ReferenceStore) -> None:
    own = {"id": "t-1", "reference": {"answer": "its own"}}
    trace = as_trace(own)
    assert with_reference(trace, own, store) == (trace, own)
    empty = {"id": "t-1", "reference": None}  # null is no reference: the topic's joins
    assert with_reference(as_trace(empty), empty, store)[1]["reference"] == {
        "answer": "by the trace's id"
    }
