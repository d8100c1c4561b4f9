"""Every command and code block in the README and the docs works as written.

Blocks and inline commands are read from the Markdown itself:
- YAML: every block parses; a complete rule (``id`` and ``pack``), with the pack code a Python
  block names (``# rules/<pack>/<file>.py``), passes ``scorer rules check``; a ``thread:`` or
  ``pair:`` fragment validates as that part of a rule.
- Python: every block compiles.
- Shell lines: environment names are settings the scorer reads; ``make`` targets exist;
  ``scorer`` command lines parse (subcommand, options, arguments) and the offline ones
  (``rules check``, ``explain``) run; scripts exist and accept the options given; ``docker
  compose`` names profiles and services of docker-compose.yml. Commands that need the network
  or run for good (pip, make demo, the worker) are checked, not run.
- Inline ``scorer ...`` spans in prose parse as commands, and every ``SCORER_*`` name is a
  setting.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
import yaml

from stream.cli import app
from stream.kafka.security import KafkaSecurity
from stream.ruleset.judge_specs import JudgeSpec
from stream.ruleset.loader import check_rules
from stream.ruleset.specs import PairSpec, ThreadSpec
from stream.settings import Settings
from stream.sinks.settings import LangfuseSinkSettings, OpikSinkSettings

REPO = Path(__file__).resolve().parent.parent
# the user's documents; CHANGELOG.md is history, docs/limitations.md names what does not exist
DOCUMENTS = sorted(
    [REPO / "README.md", REPO / "grafana" / "README.md", *REPO.glob("docs/**/*.md")],
)
SKIP_INLINE = {REPO / "docs" / "limitations.md"}
SAMPLE = REPO / "stream" / "samples" / "fretcoach_traces.jsonl"
# placeholders a usage line writes in capitals, and what stands for them when it is parsed
PLACEHOLDERS = {
    "FILE": str(SAMPLE),
    "DIR": str(REPO / "rules"),
    "ID": orjson.loads(SAMPLE.read_bytes().splitlines()[0])["id"],
    "T": "llm-traces",
    "S": "1",
    "P": "fretcoach",
    "N": "1",
}


def placeholder(word: str) -> str:
    """What stands for a word of a documented command: a capital placeholder, or a user's own
    file (``my_traces.jsonl``: the docs' name for the reader's traces), is given a real one."""
    if re.fullmatch(r"my_\w+\.jsonl", word):
        return str(SAMPLE)
    return PLACEHOLDERS.get(word, word)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    text: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def code_blocks(path: Path) -> list[Block]:
    found = []
    lines = path.read_text().splitlines()
    start: tuple[int, str] | None = None
    body: list[str] = []
    for number, line in enumerate(lines, 1):
        fence = re.match(r"^\s*```(\S*)", line)
        if fence and start is None:
            start, body = (number, fence[1]), []
        elif fence:
            assert start is not None
            found.append(Block(path, start[0], start[1], "\n".join(body)))
            start = None
        elif start is not None:
            body.append(line)
    return found


BLOCKS = [block for path in DOCUMENTS for block in code_blocks(path)]


def blocks(lang: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang == lang]


def known_environment() -> set[str]:
    """The environment variables the scorer reads."""
    names = set()
    for model in (Settings, KafkaSecurity, LangfuseSinkSettings, OpikSinkSettings):
        prefix = model.model_config.get("env_prefix", "")
        for field, info in model.model_fields.items():
            alias = info.validation_alias
            names.add(alias.upper() if isinstance(alias, str) else f"{prefix}{field}".upper())
    return names


ENVIRONMENT = known_environment()
# the test hooks (stream/kafka/mends/testhooks.py), documented as such
TEST_HOOKS = set(
    re.findall(r'"(SCORER_TEST_\w+)"', (REPO / "stream/kafka/mends/testhooks.py").read_text())
)


# --- YAML --------------------------------------------------------------------------------


def loaded(block: Block) -> Any:
    """The block's YAML, or None where it does not parse (the test above says so)."""
    try:
        return yaml.safe_load(block.text)
    except yaml.YAMLError:
        return None


@pytest.mark.parametrize("block", blocks("yaml"), ids=str)
def test_every_yaml_block_parses(block: Block) -> None:
    yaml.safe_load(block.text)


@pytest.mark.parametrize(
    ("block", "part", "model"),
    [
        (b, part, model)
        for b in blocks("yaml")
        for part, model in (("thread", ThreadSpec), ("pair", PairSpec), ("judge", JudgeSpec))
        if isinstance(data := loaded(b), dict) and part in data and "id" not in data
    ],
    ids=lambda v: str(v) if isinstance(v, Block) else "",
)
def test_rule_fragments_validate_as_their_part(block: Block, part: str, model: Any) -> None:
    model.model_validate(yaml.safe_load(block.text)[part])


def test_every_documented_rule_passes_rules_check(tmp_path: Path) -> None:
    """The complete rules the docs show, with the pack code they name, load as a rule set."""
    rules: dict[str, Block] = {}
    for block in blocks("yaml"):
        data = loaded(block)
        if isinstance(data, dict) and {"id", "pack"} <= data.keys():
            folder = tmp_path / data["pack"]
            folder.mkdir(exist_ok=True)
            (folder / f"{data['id']}.yaml").write_text(block.text)
            rules[data["id"]] = block
    for block in blocks("python"):
        named = re.match(r"#\s*rules/(\w+)/(\w+\.py)", block.text)
        if named:
            (tmp_path / named[1]).mkdir(exist_ok=True)
            (tmp_path / named[1] / named[2]).write_text(block.text)
    assert rules, "the docs show no complete rule"
    ruleset, errors = check_rules(tmp_path)
    assert [f"{e.path}: {p}" for e in errors for p in e.problems] == []
    assert {r.id for r in ruleset.rules} == set(rules)


# --- Python ------------------------------------------------------------------------------


@pytest.mark.parametrize("block", blocks("python"), ids=str)
def test_every_python_block_compiles(block: Block) -> None:
    compile(block.text, str(block), "exec")


# --- shell -------------------------------------------------------------------------------


def shell_commands(block: Block) -> list[list[str]]:
    """The commands of a shell block: continuation lines joined, comments dropped, split at
    ``&&``, ``;`` and ``&``."""
    commands = []
    for line in block.text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for word in words:
            if word in ("&&", ";", "&", "||"):
                commands.append(current)
                current = []
            elif word.endswith((";", "&")):  # "install;": the command ends with the word
                current.append(word.rstrip("&;"))
                commands.append(current)
                current = []
            else:
                current.append(word)
        commands.append(current)
    return [c for c in commands if c]


SHELL = [
    (block, command)
    for block in BLOCKS
    if block.lang in ("bash", "sh", "shell", "console")
    for command in shell_commands(block)
]


def split_environment(command: list[str]) -> tuple[dict[str, str], list[str]]:
    assignments = {}
    while command and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", command[0]):
        name, _, value = command[0].partition("=")
        assignments[name] = value
        command = command[1:]
    return assignments, command


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([\w-]+):", text, flags=re.M))


def parse_scorer(args: list[str]) -> None:
    """Parse ``scorer ARGS`` as the command line would, without running it: an unknown
    subcommand or option, or a missing argument, raises typer's usage error."""
    args = [placeholder(a) for a in args if a not in ("[", "]", "...")]
    command: Any = typer.main.get_command(app)  # typer's own click, vendored
    while hasattr(command, "list_commands"):  # a group: the next word names a command of it
        assert args, f"scorer {command.name}: which command? {command.list_commands(None)}"
        name, *args = args
        found = command.commands.get(name)
        assert found is not None, f"scorer has no command {name!r}"
        command = found
    with command.make_context(command.name or "", list(args)):
        pass


def check_shell(command: list[str], where: str) -> None:
    environment, command = split_environment(command)
    for name in environment:
        if name.startswith(("SCORER_", "KAFKA_", "OPENAI_")):
            assert name in ENVIRONMENT, f"{where}: {name} is not a setting the scorer reads"
    if not command:
        return
    program, *args = command
    if program == "make":
        for target in (a for a in args if not a.startswith("-") and "=" not in a):
            assert target in makefile_targets(), f"{where}: make has no target {target!r}"
    elif program in ("scorer", ".venv/bin/scorer"):
        parse_scorer(args)
    elif program.endswith(("python", "python3")) and args and args[0].endswith(".py"):
        script = REPO / args[0]
        assert script.is_file(), f"{where}: {args[0]} does not exist"
        options = [a.split("=")[0] for a in args[1:] if a.startswith("--")]
        if options:  # the script takes them (its --help lists them)
            shown = subprocess.run(
                [sys.executable, str(script), "--help"],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=REPO,
            )
            assert shown.returncode == 0, f"{where}: {shown.stderr}"
            for option in options:
                assert option in shown.stdout, f"{where}: {args[0]} has no option {option}"
    elif command[:2] == ["docker", "compose"]:
        compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
        services = compose["services"]
        profiles = {p for s in services.values() for p in s.get("profiles", [])}
        for flag, value in itertools.pairwise(args):
            if flag == "--profile":
                assert value in profiles, f"{where}: no profile {value!r}"
            if flag == "--scale":
                assert value.split("=")[0] in services, f"{where}: no service {value!r}"
        if "run" in args:
            assert args[-1] in services, f"{where}: no service {args[-1]!r}"


@pytest.mark.parametrize(
    ("block", "command"), SHELL, ids=lambda v: str(v) if isinstance(v, Block) else " ".join(v)[:40]
)
def test_every_shell_line_is_a_command_that_exists(block: Block, command: list[str]) -> None:
    check_shell(command, str(block))


def test_a_readme_command_runs_with_the_projects_own_python() -> None:
    """The README's blocks run after ``make`` (nothing activated): a repository script run with
    the system ``python`` misses the project's dependencies."""
    for block, command in SHELL:
        _, command = split_environment(command)
        if block.path.name == "README.md" and command[:1] in (["python"], ["python3"]):
            assert not (len(command) > 1 and (REPO / command[1]).is_file()), (
                f"{block}: {' '.join(command)} needs .venv/bin/python"
            )


def offline(words: list[str]) -> bool:
    """``scorer rules check`` and ``scorer explain``: they need no broker, judge or network."""
    return words[:3] == ["scorer", "rules", "check"] or (
        words[:2] == ["scorer", "explain"] and len(words) > 2  # alone, prose names the command
    )


def offline_commands() -> dict[str, list[str]]:
    """Where each offline command is documented -> its words, in blocks and in prose."""
    found: dict[tuple[str, ...], str] = {}
    for block, command in SHELL:
        environment, words = split_environment(command)
        if offline(words) and not environment:
            found.setdefault(tuple(words), str(block))
    for where, span in inline_spans(r"^scorer (rules check|explain)"):
        words = [w for w in span.replace("[", " ").replace("]", " ").split() if w != "..."]
        if offline(words):
            found.setdefault(tuple(words), where)
    return {f"{where}: {' '.join(words)}": list(words) for words, where in found.items()}


# --- prose -------------------------------------------------------------------------------


def inline_spans(pattern: str) -> list[tuple[str, str]]:
    found = []
    for path in DOCUMENTS:
        if path in SKIP_INLINE:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for span in re.findall(r"`([^`]+)`", line):
                if re.match(pattern, span):
                    found.append((f"{path.relative_to(REPO)}:{number}", span))
    return found


OFFLINE = offline_commands()


@pytest.mark.parametrize("documented", sorted(OFFLINE))
def test_offline_commands_run_as_written(documented: str) -> None:
    """Run from the clone, as the docs are read, with none of the suite's settings."""
    words = OFFLINE[documented]
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SCORER_", "KAFKA_", "OPENAI_"))
    }
    result = subprocess.run(
        [sys.executable, "-m", "stream.cli", *[placeholder(w) for w in words[1:]]],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )
    assert result.returncode == 0, f"{documented}: {result.stdout}{result.stderr}"


@pytest.mark.parametrize(("where", "span"), inline_spans(r"^(\.venv/bin/)?scorer( |$)"))
def test_every_inline_scorer_command_parses(where: str, span: str) -> None:
    """A span with arguments is a command line and parses; ``scorer replay`` alone names the
    command in prose: it exists."""
    words = span.replace("[", " [ ").replace("]", " ] ").split()[1:]
    command: Any = typer.main.get_command(app)
    for index, word in enumerate(words):
        if not hasattr(command, "list_commands"):
            parse_scorer(words)  # arguments follow
            return
        command = command.commands.get(word)
        assert command is not None, (
            f"{where}: scorer has no command {' '.join(words[: index + 1])!r}"
        )


def test_every_documented_setting_exists() -> None:
    """Every ``SCORER_*`` name the docs give is read by the scorer (or is one of its test
    hooks), but where a line says the name is not read."""
    unknown = []
    for path in DOCUMENTS:
        if path in SKIP_INLINE:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "not** read" in line or "not read" in line:
                continue
            for name in re.findall(r"\bSCORER_[A-Z0-9_]*[A-Z0-9]\b", line):
                if name not in ENVIRONMENT | TEST_HOOKS:
                    unknown.append(f"{path.relative_to(REPO)}:{number}: {name}")
    assert unknown == []
