"""A sink wired from its settings: the platform, its HTTP client with the credentials, and
the consumer group."""

from __future__ import annotations

from ..kafka.security import KafkaSecurity
from .delivery import Delivery
from .langfuse import LangfusePlatform
from .langfuse import auth_headers as langfuse_auth
from .opik import OpikPlatform, auth_headers
from .runner import ScoreSink
from .settings import LangfuseSinkSettings, OpikSinkSettings, SinkSettings


def default_group(app_id: str, platform: str) -> str:
    return f"{app_id}-sink-{platform}"


def langfuse_sink(
    sink: LangfuseSinkSettings,
    *,
    bootstrap: str,
    topic: str,
    app_id: str,
    security: KafkaSecurity | None,
) -> ScoreSink:
    platform = LangfusePlatform(sink.value, sink.labels)
    headers = langfuse_auth(sink.public_key, sink.secret_key.get_secret_value())
    delivery = _delivery(platform, sink.host, sink, headers)
    return _sink(platform, delivery, sink, bootstrap, topic, app_id, security)


def opik_sink(
    sink: OpikSinkSettings,
    *,
    bootstrap: str,
    topic: str,
    app_id: str,
    security: KafkaSecurity | None,
) -> ScoreSink:
    platform = OpikPlatform(sink.value, sink.project_name, max_items=sink.batch_size)
    key = sink.api_key.get_secret_value() if sink.api_key is not None else None
    headers = auth_headers(key, sink.workspace)
    delivery = _delivery(platform, sink.base_url, sink, headers)
    return _sink(platform, delivery, sink, bootstrap, topic, app_id, security)


def _delivery(
    platform: LangfusePlatform | OpikPlatform,
    base_url: str,
    sink: SinkSettings,
    headers: dict[str, str],
) -> Delivery:
    return Delivery(
        platform,
        base_url,
        headers=headers,
        timeout_s=sink.timeout_s,
        backoff_base_s=sink.backoff_base_s,
        backoff_max_s=sink.backoff_max_s,
        concurrency=sink.concurrency,
    )


def _sink(
    platform: LangfusePlatform | OpikPlatform,
    delivery: Delivery,
    sink: SinkSettings,
    bootstrap: str,
    topic: str,
    app_id: str,
    security: KafkaSecurity | None,
) -> ScoreSink:
    return ScoreSink(
        platform,
        delivery,
        bootstrap=bootstrap,
        topic=topic,
        group=sink.group or default_group(app_id, platform.name),
        security=security,
        batch_size=sink.batch_size,
        batch_wait_s=sink.batch_wait_s,
    )
