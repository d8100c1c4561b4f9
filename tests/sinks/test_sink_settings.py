"""The sinks' settings: the platforms' SDK names, defaults, and mistakes in one line each that
name the variable and never show a key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stream.config_errors import config_error
from stream.sinks.build import langfuse_sink, opik_sink
from stream.sinks.settings import (
    LANGFUSE_CLOUD,
    OPIK_CLOUD,
    OPIK_LOCAL,
    LangfuseSinkSettings,
    OpikSinkSettings,
)

KEYS = {"LANGFUSE_PUBLIC_KEY": "pk-lf-1", "LANGFUSE_SECRET_KEY": "sk-lf-SECRET"}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("LANGFUSE_", "OPIK_", "SCORER_SINK_")):
            monkeypatch.delenv(name)


def problems(model: type, monkeypatch: pytest.MonkeyPatch, **environ: str) -> list[str]:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as raised:
        model()
    error = config_error(raised.value, environ)
    assert error is not None
    return error.problems


def test_langfuse_defaults_and_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    sink = LangfuseSinkSettings()  # type: ignore[call-arg]
    assert (sink.host, sink.public_key, sink.batch_size, sink.value) == (
        LANGFUSE_CLOUD, "pk-lf-1", 100, "normalised",
    )  # fmt: skip
    assert "sk-lf-SECRET" not in repr(sink)
    monkeypatch.setenv("LANGFUSE_BASE_URL", "http://localhost:3000/")
    monkeypatch.setenv("SCORER_SINK_LANGFUSE_GROUP", "mine")
    sink = LangfuseSinkSettings()  # type: ignore[call-arg]
    assert sink.host == "http://localhost:3000" and sink.group == "mine"
    built = langfuse_sink(sink, bootstrap="b:9092", topic="scores", app_id="app", security=None)
    assert built.group == "mine" and built.delivery.base_url == "http://localhost:3000"


def test_langfuse_mistakes_in_one_line_each(monkeypatch: pytest.MonkeyPatch) -> None:
    assert problems(LangfuseSinkSettings, monkeypatch) == [
        "LANGFUSE_PUBLIC_KEY: field required",
        "LANGFUSE_SECRET_KEY: field required",
    ]
    found = problems(
        LangfuseSinkSettings, monkeypatch, **KEYS, LANGFUSE_HOST="cloud.langfuse.com",
        SCORER_SINK_LANGFUSE_VALUE="percent",
    )  # fmt: skip
    assert sorted(found) == [
        "LANGFUSE_HOST: must be an http:// or https:// URL",
        "SCORER_SINK_LANGFUSE_VALUE: input should be 'normalised' or 'raw' (got 'percent')",
    ]
    assert not any("SECRET" in p for p in found)


def test_opik_local_or_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OpikSinkSettings().base_url == OPIK_LOCAL
    monkeypatch.setenv("OPIK_API_KEY", "opik-SECRET")
    monkeypatch.setenv("OPIK_WORKSPACE", "team")
    sink = OpikSinkSettings()
    assert sink.base_url == OPIK_CLOUD and "opik-SECRET" not in repr(sink)
    built = opik_sink(sink, bootstrap="b:9092", topic="scores", app_id="app", security=None)
    assert built.group == "app-sink-opik"
    monkeypatch.setenv("OPIK_URL_OVERRIDE", "https://opik.example.com/api/")
    assert OpikSinkSettings().base_url == "https://opik.example.com/api"


def test_opik_cloud_needs_a_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    found = problems(OpikSinkSettings, monkeypatch, OPIK_API_KEY="opik-SECRET")
    assert found == [
        "OPIK_API_KEY is set (Comet's cloud) but OPIK_WORKSPACE is not: set it to the "
        "workspace the traces are in"
    ]
