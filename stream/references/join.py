"""A trace joined with its reference document (design record 50): the trace names it with
``metadata.reference_id`` (a string, or a number read as text), else its own id is looked up.
Found, the trace's document gains a ``reference`` field holding it, and the trace is validated
again so that its ``view`` (what ``filter.when`` reads) has the field too; not found, the trace
is returned as it came, at no cost. A trace that carries a ``reference`` field of its own (not
null) keeps it: what the trace says of itself wins over the topic."""

from __future__ import annotations

from typing import Any

from ..models import Trace
from .store import ReferenceStore


def reference_id(trace: Trace) -> str | None:
    """The id a trace's reference is looked up by (None: the trace names none that can be)."""
    named = trace.metadata.get("reference_id")
    if named is None:
        return trace.id
    if isinstance(named, str) and named:
        return named
    if isinstance(named, int) and not isinstance(named, bool):
        return str(named)
    return None


def with_reference(
    trace: Trace, document: dict[str, Any], store: ReferenceStore
) -> tuple[Trace, dict[str, Any]]:
    """``trace`` and its document with the reference joined, or both as they came."""
    if document.get("reference") is not None:
        return trace, document
    wanted = reference_id(trace)
    found = store.get(wanted) if wanted is not None else None
    if found is None:
        return trace, document
    joined = {**document, "reference": found}
    return Trace.model_validate(joined), joined
