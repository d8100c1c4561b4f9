"""Where the Prometheus alerts go: grafana/alertmanager/alertmanager.yml, checked with Debian's
amtool (the config is valid; every alert of the rule file is routed by its severity) and run in a
real Alertmanager that delivers a test alert to a webhook served by this test, in Alertmanager's
documented webhook format (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from stream.kafka.broker import free_port

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "grafana" / "alertmanager" / "alertmanager.yml"
RULES = REPO / "grafana" / "alerts" / "scorer.rules.yml"


def require_alertmanager_tool(name: str) -> str:
    """amtool or prometheus-alertmanager (`make tools`); missing, the test fails under CI and
    is skipped elsewhere, saying how to get it."""
    path = shutil.which(name)
    if path is None:
        message = (
            f"{name} is not installed: run `make tools` (apt-get install prometheus-alertmanager)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_alertmanager_tool("amtool"), *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


def receiver_for(labels: dict[str, str]) -> str:
    """The receiver the example route picks for an alert with these labels (amtool's answer)."""
    result = amtool(
        "config",
        "routes",
        "test",
        f"--config.file={CONFIG}",
        *(f"{key}={value}" for key, value in labels.items()),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


def alerts_in_rule_file() -> dict[str, str]:
    """alert name -> severity, for every alert of the Prometheus rule file."""
    document = yaml.safe_load(RULES.read_text())
    return {
        rule["alert"]: rule["labels"]["severity"]
        for group in document["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def test_amtool_accepts_the_config() -> None:
    result = amtool("check-config", str(CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (
            {"alertname": "ScorerRuleScoreDrop", "severity": "warning", "rule": "r", "pack": "p"},
            "scorer-webhook",
        ),
        ({"alertname": "ScorerJudgeUnavailable", "severity": "critical"}, "scorer-critical"),
        ({"alertname": "ScorerRuleSilent", "severity": "info"}, "scorer-webhook"),
        ({"alertname": "SomeoneElsesAlert"}, "scorer-webhook"),  # no severity: the default
    ],
)
def test_a_warning_and_a_critical_go_to_their_receivers(
    labels: dict[str, str], receiver: str
) -> None:
    assert receiver_for(labels) == receiver


def test_every_alert_of_the_rule_file_is_routed_by_its_severity() -> None:
    alerts = alerts_in_rule_file()
    assert "critical" in alerts.values() and "warning" in alerts.values()
    expected = {
        "critical": "scorer-critical",
        "warning": "scorer-webhook",
        "info": "scorer-webhook",
    }
    for name, severity in alerts.items():
        assert severity in expected, f"{name}: severity {severity!r} has no route"
        # one amtool run per severity is enough; the name is passed for the record
        if name == next(n for n, s in alerts.items() if s == severity):
            assert receiver_for({"alertname": name, "severity": severity}) == expected[severity]


def test_the_inhibitions_name_alerts_that_exist() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    alerts = alerts_in_rule_file()
    for inhibit in config["inhibit_rules"]:
        for matcher in inhibit["source_matchers"] + inhibit["target_matchers"]:
            if matcher.startswith("alertname"):
                names = matcher.split("=", 1)[1].strip('~"').split("|")
                for name in names:
                    assert name in alerts, f"inhibit rule {matcher}: no alert {name}"


class Webhook:
    """A webhook receiver: records each notification Alertmanager posts (path, JSON body)."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.received) >= count, self.received


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    yield hook
    hook.server.shutdown()


@pytest.fixture
def alertmanager(tmp_path: Path, webhook: Webhook) -> Iterator[str]:
    """A real Alertmanager with the repository's route, inhibitions and receivers; only the
    webhook URLs point at this test and the waits are shortened."""
    binary = require_alertmanager_tool("prometheus-alertmanager")
    config = yaml.safe_load(CONFIG.read_text())
    for receiver in config["receivers"]:
        for hook in receiver["webhook_configs"]:
            hook["url"] = f"{webhook.url}/{receiver['name']}"
    for route in [config["route"], *config["route"]["routes"]]:
        route["group_wait"] = "1s"  # long enough for an inhibiting alert to be seen first
    config["route"]["group_interval"] = "1s"
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'alertmanager.yml'}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # alone: no gossip port
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(process.stderr.read() if process.stderr else "") from None
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def post_alerts(alertmanager: str, alerts: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(
        f"{alertmanager}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def test_a_real_alertmanager_delivers_alerts_to_the_webhooks(
    alertmanager: str, webhook: Webhook
) -> None:
    drop = {
        "alertname": "ScorerRuleScoreDrop",
        "severity": "warning",
        "rule": "coach_feedback",
        "pack": "fretcoach",
        "criterion": "overall",
        "project": "web",
    }
    quota = {"alertname": "ScorerJudgeQuotaExhausted", "severity": "critical", "model": "m1"}
    errors = {"alertname": "ScorerJudgeErrorRate", "severity": "warning", "model": "m1"}
    post_alerts(
        alertmanager,
        [
            {"labels": drop, "annotations": {"summary": "scores are worse than their baseline"}},
            {"labels": quota, "annotations": {"summary": "quota exhausted"}},
        ],
    )
    post_alerts(alertmanager, [{"labels": errors}])  # the quota's consequence: held back
    webhook.wait_for(2)
    time.sleep(1.5)  # a group_wait more: the error-rate warning would have come by now
    by_receiver = {body["receiver"]: (path, body) for path, body in webhook.received}
    assert set(by_receiver) == {"scorer-webhook", "scorer-critical"}, webhook.received
    assert len(webhook.received) == 2

    path, body = by_receiver["scorer-webhook"]
    assert path == "/scorer-webhook"
    assert body["version"] == "4" and body["status"] == "firing"
    assert body["groupLabels"] == {
        key: drop[key] for key in ("alertname", "rule", "pack", "project")
    }
    (alert,) = body["alerts"]
    assert alert["labels"] == drop
    assert alert["annotations"] == {"summary": "scores are worse than their baseline"}
    assert alert["status"] == "firing"

    path, body = by_receiver["scorer-critical"]
    assert path == "/scorer-critical"
    assert body["groupLabels"] == {"alertname": "ScorerJudgeQuotaExhausted"}
    assert [a["labels"] for a in body["alerts"]] == [quota]
