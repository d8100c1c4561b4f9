"""The judge's configuration: built from the deployment settings, and importable without the
judge's SDK (the settings build one)."""

from __future__ import annotations

from fixtures import settings
from test_layers import imported_io_libraries

from stream.engine.spend import ModelPrice
from stream.models import TokenUsage


def test_the_settings_give_the_judge_its_endpoint_bounds_and_prices() -> None:
    config = settings(
        openai_base_url="http://judge:8000/v1",
        openai_api_key="sk-test-secret",
        judge_model="m",
        judge_max_concurrency=3,
        judge_structured_output=False,
        judge_prices={"m": ModelPrice(input=1.0, output=2.0)},
    ).judge_config()
    assert (config.base_url, config.model, config.max_concurrency) == (
        "http://judge:8000/v1",
        "m",
        3,
    )
    assert (config.timeout_s, config.max_attempts, config.outage_max_s) == (5.0, 4, 1.0)
    assert (config.backoff_base_s, config.backoff_max_s) == (0.01, 0.2)
    assert config.structured_output is False
    assert config.api_key is not None and config.api_key.get_secret_value() == "sk-test-secret"
    assert "sk-test-secret" not in repr(config)
    usage = TokenUsage(prompt_tokens=1_000_000, completion_tokens=1_000_000, total_tokens=2_000_000)
    assert config.cost("m", usage) == 3.0
    assert config.cost("unpriced", usage) is None


def test_the_settings_and_the_judge_config_import_no_io_library() -> None:
    assert imported_io_libraries("import stream.settings") == []
    assert imported_io_libraries("import stream.judge.config") == []
