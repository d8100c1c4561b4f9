"""Hypothesis strategies for property tests of the decoders: what any producer (or a broken
one) may write on a topic, built to reach every field a decoder reads with values of the
right and of the wrong type."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")

texts = st.text(max_size=12)
# text with lone surrogates too, written escaped (``"\ud800"``) or raw (bytes not UTF-8):
# only in arbitrary values, since one makes a whole document unreadable
any_texts = st.text(st.characters(exclude_categories=()), max_size=12)
# integers past the bounds a decoder keeps (64 bits; orjson reads a larger one as a float)
integers = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**64),
    st.integers(),
    st.sampled_from([2**64, -(2**63) - 1, 10**30]),
)
numbers = st.one_of(integers, st.floats(allow_nan=False, allow_infinity=False))
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)
# anything, also what is not JSON: lone surrogates, NaN, Infinity, numbers past a double
any_json: st.SearchStrategy[Any] = st.recursive(
    st.one_of(scalars, any_texts, st.floats(), st.sampled_from([10**400, -(10**4000)])),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(any_texts, children, max_size=4)
    ),
    max_leaves=12,
)


def documents(
    fields: dict[str, st.SearchStrategy[Any]],
    required: tuple[str, ...] = (),
    extra: st.SearchStrategy[str] = texts,
) -> st.SearchStrategy[dict[str, Any]]:
    """JSON objects holding the ``required`` fields, any of the others, and keys the decoder
    does not know."""
    return st.builds(
        lambda known, others: {**others, **known},
        st.fixed_dictionaries(
            {name: fields[name] for name in required},
            optional={name: value for name, value in fields.items() if name not in required},
        ),
        st.dictionaries(extra, json_values, max_size=1),
    )


def _places(value: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key or index) in a JSON value, at any depth."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, inner in list(items):
        yield value, key
        if isinstance(inner, dict | list):
            yield from _places(inner)


@st.composite
def corrupted(draw: st.DrawFn, documents: st.SearchStrategy[Any]) -> Any:
    """A well-shaped document with one to three of its values, at any depth, replaced by any
    JSON value: the wrong type, null, an object where a list belongs."""
    document = copy.deepcopy(draw(documents))
    for _ in range(draw(st.integers(1, 3))):
        places = list(_places(document)) if isinstance(document, dict | list) else []
        if not places:
            break
        container, key = draw(st.sampled_from(places))
        container[key] = draw(json_values)
    return document


def nested(
    depth: st.SearchStrategy[int], open_: str, leaf: str, close: str, around: str = "@"
) -> st.SearchStrategy[bytes]:
    """JSON text nested ``depth`` levels deep (``open_ * n + leaf + close * n``, in place of
    the ``@`` in ``around``): deeper than any recursion limit a drawn value reaches."""
    return depth.map(lambda n: around.replace("@", open_ * n + leaf + close * n, 1).encode())


@st.composite
def json_bytes(draw: st.DrawFn, values: st.SearchStrategy[Any]) -> bytes:
    """``values`` as JSON text: NaN and Infinity (not JSON) as Python writes them, and
    lone surrogates either escaped or as bytes that are not UTF-8."""
    value = draw(values)
    if draw(st.booleans()):
        return json.dumps(value).encode()
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def mutated(draw: st.DrawFn, seeds: st.SearchStrategy[bytes]) -> bytes:
    """A real record with a few bytes flipped, inserted, deleted, cut off or duplicated."""
    raw = bytearray(draw(seeds))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(raw)))
        change = draw(st.sampled_from(["flip", "insert", "delete", "cut", "repeat"]))
        if change == "flip" and at < len(raw):
            raw[at] ^= 1 << draw(st.integers(0, 7))
        elif change == "insert":
            raw[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif change == "delete":
            del raw[at : at + draw(st.integers(1, 8))]
        elif change == "cut":
            del raw[at:]
        else:
            raw[at:at] = raw[at : at + draw(st.integers(1, 16))]
    return bytes(raw)


def decoded_or_refused(decode: Callable[[bytes], T], raw: bytes) -> T | ValueError:
    """What ``decode`` makes of ``raw``: a record, or the ``ValueError`` that dead-letters
    it. Any other exception propagates (and fails the property)."""
    try:
        return decode(raw)
    except ValueError as exc:
        return exc
