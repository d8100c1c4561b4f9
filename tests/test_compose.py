"""docker-compose.yml and the Dockerfile, checked without a Docker engine: the stack's
pieces are there, every file they mount or copy exists and says what its consumer expects,
Prometheus accepts the compose configuration, and the image installs as the README says."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml
from conftest import require_tool

from stream.demo import SAMPLES, SESSION_SAMPLES
from stream.event_schema import SCHEMA_PATH
from stream.settings import Settings

REPO = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
DOCKERFILE = (REPO / "Dockerfile").read_text()


def mounts(service: str) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts."""
    found = {}
    for volume in SERVICES[service].get("volumes", []):
        host, container = volume.split(":")[:2]
        if host.startswith("."):
            found[container] = REPO / host
    return found


def test_the_stack_has_kafka_in_kraft_mode_workers_prometheus_grafana_and_judges() -> None:
    assert {"kafka", "scorer", "prometheus", "alertmanager", "grafana", "ollama", "vllm"} <= set(
        SERVICES
    )
    kafka = SERVICES["kafka"]["environment"]
    assert "controller" in kafka["KAFKA_PROCESS_ROLES"]  # KRaft: no ZooKeeper
    assert "zookeeper" not in SERVICES
    scorer = SERVICES["scorer"]
    assert scorer["build"] == "."
    assert scorer["deploy"]["replicas"] >= 2
    assert scorer["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert "OPENAI_BASE_URL" in scorer["environment"]


def test_the_collector_writes_spans_where_the_workers_read_them() -> None:
    collector = SERVICES["otel-collector"]
    assert "contrib" in collector["image"]  # the kafka exporter is in the contrib distribution
    config = yaml.safe_load(mounts("otel-collector")["/etc/otelcol/config.yaml"].read_text())
    exporter = config["exporters"]["kafka"]
    assert exporter["brokers"] == [SERVICES["scorer"]["environment"]["KAFKA_BOOTSTRAP_SERVERS"]]
    assert exporter["topic"] == Settings().otlp_topic
    assert exporter["encoding"] in {"otlp_proto", "otlp_json"}
    assert config["service"]["pipelines"]["traces"]["exporters"] == ["kafka"]
    assert "otlp" in config["receivers"]


def test_secrets_come_from_the_environment_only() -> None:
    for name, service in SERVICES.items():
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"KEY|TOKEN|PASSWORD|SECRET", key):
                assert re.fullmatch(r"\$\{\w+:-[^}]*\}", str(value)), f"{name}.{key}"
                assert not re.search(r"sk-\w", str(value))


def test_every_mounted_file_exists() -> None:
    for name in SERVICES:
        for container, host in mounts(name).items():
            assert host.exists(), f"{name} mounts {host} at {container}: missing"


def test_prometheus_loads_the_rules_and_scrapes_every_worker(tmp_path: Path) -> None:
    files = mounts("prometheus")
    config = yaml.safe_load(files["/etc/prometheus/prometheus.yml"].read_text())
    assert config["rule_files"] == ["/etc/prometheus/rules/scorer.rules.yml"]
    assert files[config["rule_files"][0]] == REPO / "grafana" / "alerts" / "scorer.rules.yml"
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "scorer"  # ScorerWorkerDown watches up{job="scorer"}
    (discovery,) = job["dns_sd_configs"]
    assert discovery["names"] == ["scorer"] and discovery["port"] == 6066
    assert "6066" in SERVICES["scorer"]["expose"]
    # promtool accepts it, with the rule file where the container would have it
    config["rule_files"] = [str(files["/etc/prometheus/rules/scorer.rules.yml"])]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [require_tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_sends_its_alerts_to_the_alertmanager_with_the_example_route() -> None:
    alertmanager = SERVICES["alertmanager"]
    assert alertmanager["image"].startswith("prom/alertmanager:")
    route = mounts("alertmanager")["/etc/alertmanager/alertmanager.yml"]  # the image's default
    assert route == REPO / "grafana" / "alertmanager" / "alertmanager.yml"
    assert "receivers" in yaml.safe_load(route.read_text())  # amtool checks the rest
    assert "9093:9093" in alertmanager["ports"]
    config = yaml.safe_load(mounts("prometheus")["/etc/prometheus/prometheus.yml"].read_text())
    (target,) = config["alerting"]["alertmanagers"]
    assert target["static_configs"] == [{"targets": ["alertmanager:9093"]}]
    assert "alertmanager" in SERVICES["prometheus"]["depends_on"]


def test_grafana_gets_its_provisioning_and_the_dashboards() -> None:
    files = mounts("grafana")
    provisioning = files["/etc/grafana/provisioning"]
    assert provisioning == REPO / "grafana" / "provisioning"
    provider = yaml.safe_load((provisioning / "dashboards" / "scorer.yml").read_text())
    assert files[provider["providers"][0]["options"]["path"]] == REPO / "grafana" / "dashboards"
    assert list((REPO / "grafana" / "dashboards").glob("*.json"))
    # Grafana-managed alerts, their contact point and policy (tests/test_grafana_alerting.py)
    assert {p.name for p in (provisioning / "alerting").glob("*.yaml")} == {
        "scorer-rules.yaml",
        "contact-points.yaml",
    }
    source = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    assert source["datasources"][0]["url"] == "http://prometheus:9090"
    assert "9090:9090" in SERVICES["prometheus"]["ports"]


def dockerfile_instructions(name: str) -> list[str]:
    return re.findall(rf"^{name} (.+?)(?<!\\)$", DOCKERFILE, flags=re.M | re.S)


def test_the_image_installs_as_the_readme_says() -> None:
    readme = (REPO / "README.md").read_text()
    (run,) = dockerfile_instructions("RUN")
    command = " ".join(a for a in shlex.split(run) if a != "--no-cache-dir")
    assert command == "pip install ."
    assert f"`{command}`" in readme


def test_the_image_carries_what_the_worker_reads() -> None:
    copied = {shlex.split(c)[-1].removeprefix("./") for c in dockerfile_instructions("COPY")}
    for source in (s for c in dockerfile_instructions("COPY") for s in shlex.split(c)[:-1]):
        assert (REPO / source).exists(), f"COPY {source}: missing"
    # the package carries its samples, schema and rule packs (package data: tests/test_packaging.py
    # installs it and finds them)
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = package_data["package-data"]["stream"]
    for path in (SAMPLES, SESSION_SAMPLES, SCHEMA_PATH):
        relative = path.relative_to(REPO / "stream")
        assert any(relative.match(g) for g in globs), f"{relative} is not package data"
    assert "rules" in copied and "stream" in copied  # both built into the package
    env = dict(re.findall(r"(SCORER_\w+)=(\S+)", DOCKERFILE))
    assert "SCORER_RULES_DIR" not in env  # the installed packs
    assert env["SCORER_WEB_HOST"] == "0.0.0.0"  # reachable by Prometheus
    assert int(env["SCORER_WEB_PORT"]) == Settings().web_port == 6066
    # the command exists
    (cmd,) = dockerfile_instructions("CMD")
    program, *args = yaml.safe_load(cmd)
    assert program == "scorer"
    result = subprocess.run(
        [sys.executable, "-m", "stream.cli", *args, "--help"], capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
