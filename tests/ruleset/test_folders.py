"""Several rules folders: SCORER_RULES_DIR's (``:``-separated as PATH, or a JSON list), then
the shipped packs unless ``no-shipped-packs`` leaves them out; a pack name found twice is one
clear error naming both folders (design record 39)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest
from fixtures import ROOT, RULES_DIR
from pydantic import ValidationError
from scorer_runs import error_lines, run_scorer

from stream.config_errors import config_error
from stream.errors import RuleFileError
from stream.live_rules import rules_fingerprint
from stream.ruleset.loader import deployment_rules, load_rules, rule_files
from stream.ruleset.location import NO_SHIPPED, RulesDirs, default_rules_dir, find_packs
from stream.settings import Settings

SUPPORT = ROOT / "examples" / "rules" / "support"
SHIPPED = default_rules_dir()


@pytest.fixture
def mine(tmp_path: Path) -> Path:
    """A user's folder with a pack of their own (``support``)."""
    folder = tmp_path / "mine"
    shutil.copytree(SUPPORT, folder / "support", ignore=shutil.ignore_patterns("__pycache__"))
    return folder


@pytest.fixture(autouse=True)
def no_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SCORER_RULES_DIR", "SCORER_PACKS", "SCORER_DISABLED_RULES"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("value", "folders"),
    [
        ("/a", ["/a", SHIPPED]),
        (f"/a{os.pathsep}/b", ["/a", "/b", SHIPPED]),
        ('["/a", "/b"]', ["/a", "/b", SHIPPED]),
        (f"/a{os.pathsep}{os.pathsep}/b{os.pathsep}", ["/a", "/b", SHIPPED]),  # empty: none
        (f"/a{os.pathsep}{NO_SHIPPED}", ["/a"]),
        (f'["{NO_SHIPPED}", "/a"]', ["/a"]),
        (str(SHIPPED), [SHIPPED]),  # named: searched once, where it is named
        (f"{SHIPPED}{os.pathsep}/a", [SHIPPED, "/a"]),
        ("", [SHIPPED]),
    ],
)
def test_the_folders_are_read_as_path_is_or_as_a_json_list(
    value: str, folders: list[str | Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCORER_RULES_DIR", value)
    rules_dir = Settings().rules_dir
    assert list(rules_dir) == [Path(f) for f in folders]
    assert str(rules_dir) == os.pathsep.join(str(f) for f in folders)
    assert rules_dir.shipped == (SHIPPED if NO_SHIPPED not in value else None)


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        (
            "SCORER_RULES_DIR",
            NO_SHIPPED,
            f"SCORER_RULES_DIR: {NO_SHIPPED} leaves the shipped packs out, and no folder is named",
        ),
        ("SCORER_RULES_DIR", '["/a"', "SCORER_RULES_DIR: not a JSON list of folders"),
        ("SCORER_PACKS", "fretcoach", "SCORER_PACKS: a JSON list of pack names"),
        ("SCORER_PACKS", '["all", "mlflow"]', 'SCORER_PACKS: "all" loads every pack: name it'),
    ],
)
def test_a_wrong_value_is_one_line_naming_the_variable(
    variable: str, value: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    error = config_error(caught.value)
    assert error is not None and len(error.problems) == 1
    assert error.problems[0].startswith(said), error.problems


@pytest.mark.parametrize("value", ["all", '["all"]', " all "])
def test_all_is_read_plain_or_as_a_list(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCORER_PACKS", value)
    assert Settings().packs == ["all"]


def test_your_pack_loads_beside_the_shipped_ones(
    mine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCORER_RULES_DIR", str(mine))
    monkeypatch.setenv("SCORER_PACKS", '["support", "conversation", "mlflow"]')
    ruleset = deployment_rules(Settings())
    assert ruleset.packs == ["conversation", "mlflow", "support"]
    assert {r.id for r in ruleset.rules} == {
        r.id for r in load_rules(RULES_DIR, ["conversation", "mlflow"]).rules
    } | {"reply_length"}
    assert ruleset.disabled == []


def test_a_pack_name_in_two_folders_is_one_error_naming_both(
    mine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(RULES_DIR / "critique", mine / "critique")  # a copy of a shipped pack
    monkeypatch.setenv("SCORER_RULES_DIR", str(mine))
    monkeypatch.setenv("SCORER_PACKS", '["support"]')  # the copy is not even loaded
    with pytest.raises(RuleFileError) as caught:
        deployment_rules(Settings())
    (problem,) = caught.value.problems
    assert problem.startswith(
        f"{SHIPPED / 'critique'}: pack 'critique' is in two folders, here and in "
        f"{mine / 'critique'}: a pack name must be found once; rename one"
    )
    assert problem.endswith(
        f"or add {NO_SHIPPED} to SCORER_RULES_DIR to leave the shipped packs out"
    )
    # the shipped packs left out, the copy is the one
    monkeypatch.setenv("SCORER_RULES_DIR", orjson.dumps([str(mine), NO_SHIPPED]).decode())
    monkeypatch.setenv("SCORER_PACKS", '["critique"]')
    ruleset = deployment_rules(Settings())
    assert ruleset.packs == ["critique"]
    assert all(str(mine) in str(p) for p in rule_files(Settings().rules_dir, ["critique"]))
    # two folders of yours
    other = tmp_path / "other"
    shutil.copytree(mine / "support", other / "support")
    _, errors = find_packs([mine, other])
    assert [e.path for e in errors] == [str(other / "support")]
    assert errors[0].problems[0].endswith("or leave one folder out of SCORER_RULES_DIR")


def test_a_missing_folder_or_pack_is_named(mine: Path, tmp_path: Path) -> None:
    with pytest.raises(RuleFileError, match="rules directory does not exist") as caught:
        load_rules([mine, tmp_path / "gone"])
    assert caught.value.path == f"{mine}{os.pathsep}{tmp_path / 'gone'}"
    with pytest.raises(RuleFileError, match=r"packs not found: \['nope'\]"):
        load_rules([mine, RULES_DIR], ["support", "nope"])


def test_the_clash_stops_a_command_in_one_line_per_pack(mine: Path, tmp_path: Path) -> None:
    shutil.copytree(RULES_DIR / "conversation", mine / "conversation")
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"id": "t1", "name": "n", "input": {}, "output": {}}\n')
    result = run_scorer(["explain", str(trace)], tmp_path, SCORER_RULES_DIR=str(mine))
    (line,) = error_lines(result)
    assert f"pack 'conversation' is in two folders, here and in {mine / 'conversation'}" in line
    assert str(SHIPPED / "conversation") in line


def test_an_edit_in_any_folder_changes_the_fingerprint(mine: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    (other / "extra").mkdir(parents=True)
    first = rules_fingerprint([mine, other])
    assert rules_fingerprint(RulesDirs([mine, other])) == first
    (other / "extra" / "new_rule.yaml").write_text("id: new_rule\n")
    assert rules_fingerprint([mine, other]) != first
    assert rules_fingerprint([tmp_path / "gone", tmp_path / "gone too"]) == "missing"
