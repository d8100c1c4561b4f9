"""A mistake in the settings, from any ``scorer`` command, ends in one line naming the
setting and what is wrong, and exit code 2: no traceback, no secret (the real command, run as
a user runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures import RULES_DIR
from scorer_runs import error_lines, one_error_line, run_scorer

SECRET = "s3cr3t-in-the-environment"


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"id": "t1", "name": "n", "input": {}, "output": {}}\n')
    return path


COMMANDS = {
    "demo": ["demo", "--timeout", "1"],
    "worker": ["worker"],
    "replay": ["replay", "TRACE"],
    "explain": ["explain", "TRACE"],
    "rules check": ["rules", "check"],
}

MISTAKES = [
    (
        {"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": "/x/ca.pem"},
        "KAFKA_SSL_CAFILE: no such file: /x/ca.pem",
    ),
    (
        # the password is set, the user name is not: the password is not shown
        {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_PASSWORD": SECRET},
        "KAFKA_SECURITY_PROTOCOL=SASL_SSL needs KAFKA_SASL_USERNAME (KAFKA_SASL_MECHANISM=PLAIN)",
    ),
    (
        {"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_USERNAME": "scorer"},
        "KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT needs KAFKA_SASL_PASSWORD "
        "(KAFKA_SASL_MECHANISM=PLAIN)",
    ),
    (
        {"KAFKA_SECURITY_PROTOCOL": "TLS"},
        "KAFKA_SECURITY_PROTOCOL: input should be 'PLAINTEXT', 'SSL', 'SASL_PLAINTEXT' or "
        "'SASL_SSL' (got 'TLS')",
    ),
    (
        {"SCORER_JUDGE_TIMEOUT_S": "a minute", "OPENAI_API_KEY": SECRET},
        "SCORER_JUDGE_TIMEOUT_S: input should be a valid number, unable to parse string as a "
        "number (got 'a minute')",
    ),
    (
        {"SCORER_JUDGE_BUDGETS": "{not json", "KAFKA_SASL_PASSWORD": SECRET},
        "SCORER_JUDGE_BUDGETS: not valid JSON (Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1))",
    ),
]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_stops_on_a_settings_mistake_in_one_line(
    command: str, tmp_path: Path, trace_file: Path
) -> None:
    args = [str(trace_file) if a == "TRACE" else a for a in COMMANDS[command]]
    env, said = MISTAKES[1]  # with a secret in the environment
    assert one_error_line(run_scorer(args, tmp_path, **env)) == said


@pytest.mark.parametrize(("env", "said"), MISTAKES)
def test_each_mistake_says_which_setting_and_what(
    env: dict[str, str], said: str, tmp_path: Path
) -> None:
    result = run_scorer(["worker"], tmp_path, **env)
    assert one_error_line(result) == said
    assert SECRET not in result.stdout + result.stderr


def test_two_mistakes_are_two_lines(tmp_path: Path) -> None:
    result = run_scorer(
        ["rules", "check"], tmp_path, SCORER_STORE="disk", SCORER_TOPIC_PARTITIONS="four"
    )
    assert result.returncode == 2
    assert sorted(result.stderr.splitlines()) == [
        "error: SCORER_STORE: input should be 'memory' or 'rocksdb' (got 'disk')",
        "error: SCORER_TOPIC_PARTITIONS: input should be a valid integer, unable to parse "
        "string as an integer (got 'four')",
    ]


def test_a_bad_rule_file_is_one_line_per_problem(tmp_path: Path, trace_file: Path) -> None:
    rules = tmp_path / "rules" / "mine"
    rules.mkdir(parents=True)
    (rules / "broken.yaml").write_text("id: broken\nscope: trace\n")
    result = run_scorer(
        ["explain", str(trace_file)], tmp_path, SCORER_RULES_DIR=str(tmp_path / "rules")
    )
    assert result.stdout == ""
    assert all("broken.yaml" in line for line in error_lines(result)), result.stderr


def test_the_shipped_rules_still_load(tmp_path: Path, trace_file: Path) -> None:
    # the control: with nothing wrong, the same command runs
    result = run_scorer(["explain", str(trace_file)], tmp_path, SCORER_RULES_DIR=str(RULES_DIR))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_bad_stale_state_choice_is_one_line(tmp_path: Path) -> None:
    # read before the worker starts a broker or opens its data directory
    result = run_scorer(["worker"], tmp_path, SCORER_STALE_STATE="keep")
    assert one_error_line(result) == (
        "SCORER_STALE_STATE: input should be 'fail' or 'rebuild' (got 'keep')"
    )
