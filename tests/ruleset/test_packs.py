"""Rule packs are folders: a pack's own checks and aggregators are found when it loads, and
belong to that pack alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures import ROOT, RULES_DIR

from stream.engine.scorer import Scorer
from stream.errors import RuleFileError
from stream.models import Trace
from stream.ruleset.checks import CheckSpec, check
from stream.ruleset.loader import check_rules, load_rules
from stream.ruleset.packs import load_pack_code
from stream.ruleset.registry import Registry, marked
from stream.ruleset.schema import CheckRule

EXAMPLE_PACK = ROOT / "examples" / "rules" / "support"


def support_trace(reply: str) -> dict:
    return {
        "id": "t-1",
        "project_name": "support-bot",
        "input": {"messages": [{"role": "user", "content": "Where is my order?"}]},
        "output": {"messages": [{"role": "assistant", "content": reply}]},
    }


@pytest.fixture
def rules_with_example(tmp_path: Path) -> Path:
    """The shipped packs plus docs/rules.md's example pack: adding a pack is adding a folder."""
    rules = tmp_path / "rules"
    shutil.copytree(RULES_DIR, rules, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(EXAMPLE_PACK, rules / "support")
    return rules


async def test_a_pack_folder_with_its_own_check_loads_and_scores(rules_with_example: Path) -> None:
    ruleset = load_rules(rules_with_example)
    assert set(ruleset.packs) == {*load_rules(RULES_DIR).packs, "support"}
    rule = next(r for r in ruleset.rules if r.id == "reply_length")
    assert isinstance(rule, CheckRule) and rule.check_spec.name == "reply_within_budget"
    scorer = Scorer(ruleset, None, default_model="m")
    long_reply = " ".join(["word"] * 90)
    for reply, value, label in (("It ships tomorrow.", 1.0, "pass"), (long_reply, 0.5, "fail")):
        document = support_trace(reply)
        result = await scorer.score_trace(Trace.model_validate(document), document)
        (score,) = [s for s in result.scores if s.rule_id == "reply_length"]
        assert (score.status, score.value, score.label) == ("ok", value, label)


def test_a_pack_sees_only_its_own_checks(rules_with_example: Path) -> None:
    rule_file = rules_with_example / "support" / "reply_length.yaml"
    rule_file.write_text(rule_file.read_text().replace("reply_within_budget", "question_endings"))
    _, errors = check_rules(rules_with_example)
    problems = [p for e in errors for p in e.problems]
    assert problems == [
        "field (file): unknown check 'question_endings'; registered: ['reply_within_budget']"
    ]


def test_pack_code_that_fails_to_import_names_its_file(tmp_path: Path) -> None:
    pack = tmp_path / "rules" / "broken"
    shutil.copytree(EXAMPLE_PACK, pack)
    (pack / "extra.py").write_text("import no_such_module\n")
    with pytest.raises(RuleFileError) as info:
        load_pack_code(pack)
    assert info.value.path.endswith("extra.py")
    assert "ModuleNotFoundError" in info.value.problems[0]


def test_one_name_registered_twice_in_a_pack_is_an_error(tmp_path: Path) -> None:
    pack = tmp_path / "rules" / "twice"
    shutil.copytree(EXAMPLE_PACK, pack)
    shutil.copy(pack / "checks.py", pack / "more_checks.py")
    with pytest.raises(RuleFileError, match="check 'reply_within_budget' registered twice"):
        load_pack_code(pack)


def test_the_same_pack_loads_again_from_a_copy(tmp_path: Path) -> None:
    first = load_pack_code(RULES_DIR / "coaching")
    shutil.copytree(RULES_DIR / "coaching", tmp_path / "coaching")
    again = load_pack_code(tmp_path / "coaching")
    assert (
        sorted(first.checks.names())
        == sorted(again.checks.names())
        == [
            "length_calibration",
            "question_endings",
            "repeated_openers",
        ]
    )
    assert again.aggregators.names() == ["weighted_categories"]


def test_the_registry_holds_marked_functions_by_name() -> None:
    @check("a", variables=("x",))
    def a(values, params):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def plain() -> None: ...

    registry = Registry("check", marked([a, plain, 3], CheckSpec))
    assert registry.names() == ["a"] and len(registry) == 1
    assert registry.get("a") is not None and registry.get("b") is None
    with pytest.raises(ValueError, match="check 'a' registered twice"):
        registry.add(next(marked([a], CheckSpec)))


def test_pack_modules_import_each_other_and_only_public_modules_are_collected(
    tmp_path: Path,
) -> None:
    pack = tmp_path / "rules" / "support"
    shutil.copytree(EXAMPLE_PACK, pack)
    (pack / "_words.py").write_text("LIMIT = 3\n")
    checks = (pack / "checks.py").read_text()
    (pack / "checks.py").write_text(
        checks.replace(
            "from stream.ruleset.checks",
            "from ._words import LIMIT  # noqa: F401\nfrom stream.ruleset.checks",
        )
    )
    (pack / "test_checks.py").write_text("raise RuntimeError('a test module is not pack code')\n")
    (pack / "._checks.py").write_bytes(b"\x00\x05\x16\x07 resource fork")
    code = load_pack_code(pack)
    assert code.checks.names() == ["reply_within_budget"]


def test_one_module_that_fails_leaves_the_rest_of_the_pack_loaded(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(EXAMPLE_PACK, rules / "support")
    (rules / "support" / "broken.py").write_text("raise SystemExit(3)\n")
    ruleset, errors = check_rules(rules)
    assert [r.id for r in ruleset.rules] == ["reply_length"]  # its check still loaded
    assert [(e.path.rsplit("/", 1)[-1], e.problems) for e in errors] == [
        ("broken.py", ["pack code failed to import: SystemExit: 3"])
    ]
