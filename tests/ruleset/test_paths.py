"""Variable paths: JMESPath semantics (checked against the jmespath library), missing paths."""

from __future__ import annotations

import jmespath
import pytest

from stream.errors import MissingVariable
from stream.ruleset.paths import compile_path, lookup, path_prefixes

DOCS = [
    {"input": {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}},
    {
        "input": {"messages": [[{"content": "sys"}, {"content": "human"}]]},
        "output": {"generations": [[{"text": "t"}]]},
    },
    {"input": {"messages": "not a list"}, "output": None},
    {"input": {"messages": []}},
    {"more-context": {"x": 1}, "a": [{"b": 1}, {"b": 2}], "c": {"d": [1, 2, 3]}},
    [1, 2, 3],
    None,
]
PATHS = [
    "input.messages[-1].content",
    "input.messages[0].content",
    "input.messages[5].content",
    "input.messages[0][1].content",
    "input.messages[-1][-1].content",
    "output.generations[0][0].text",
    '"more-context".x',
    "a[*].b",
    "a[0].b",
    "a[-3]",
    "c.d[1:]",
    "c.d[-1]",
    "a || c",
    "input",
    "missing.path",
]


@pytest.mark.parametrize("path", PATHS)
def test_same_answers_as_jmespath(path: str) -> None:
    for doc in DOCS:
        assert compile_path(path).search(doc) == jmespath.search(path, doc), (path, doc)


def test_missing_path_names_the_first_absent_segment() -> None:
    doc = {"output": {"messages": [{"content": "x"}]}}
    with pytest.raises(MissingVariable) as info:
        lookup(doc, "context", "output.messages[-2].content")
    assert info.value.missing_at == "output.messages[-2]"
    with pytest.raises(MissingVariable) as info:
        lookup({"output": None}, "output", "output.messages[-1].content")
    assert info.value.missing_at == "output"


def test_prefixes_respect_quotes_and_brackets() -> None:
    assert path_prefixes('a."b.c"[0][1].d') == [
        "a",
        'a."b.c"',
        'a."b.c"[0]',
        'a."b.c"[0][1]',
        'a."b.c"[0][1].d',
    ]
