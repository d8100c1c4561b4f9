"""Plain aiokafka helpers for the CLI: create topics, produce traces, read scores."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    AuthenticationFailedError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAlreadyExistsError,
    UnsupportedSaslMechanismError,
)

from ..errors import ScorerError
from .security import KafkaSecurity


def options(security: KafkaSecurity | None) -> dict[str, Any]:
    """A client's security options (None: the embedded broker, plaintext)."""
    return security.client_options() if security is not None else {}


async def ensure_topics(
    bootstrap: str, names: Iterable[str], partitions: int, security: KafkaSecurity | None = None
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **options(security))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        new = [NewTopic(n, partitions, 1) for n in names if n not in existing]
        if new:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(new)
    finally:
        await admin.close()


async def ensure_one_partition_topic(
    bootstrap: str, topic: str, configs: dict[str, str], security: KafkaSecurity | None = None
) -> bool:
    """``topic`` made with one partition and ``configs`` unless it is there (True: made now);
    ``KafkaError`` when it is not there after all: aiokafka answers a refused creation (an
    ACL, a policy) with error codes, not an exception."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **options(security))
    await admin.start()
    try:
        if topic in set(await admin.list_topics()):
            return False
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics([NewTopic(topic, 1, 1, topic_configs=configs)])
        if topic not in set(await admin.list_topics()):
            raise KafkaError(f"{topic} could not be created")
        return True
    finally:
        await admin.close()


def read_traces(path: Path) -> list[Any]:
    """Traces from JSONL (one event per line) or an Opik export (a JSON array, or a page
    object with ``content``/``traces``). Lines that are not JSON are kept as raw bytes, so
    replaying a file reproduces it faithfully, bad lines included (they go to the DLQ)."""
    text = path.read_bytes()
    stripped = text.lstrip()
    if stripped.startswith(b"[") or (stripped.startswith(b"{") and b"\n{" not in stripped.strip()):
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            data = None
        if isinstance(data, list):
            return data
        if isinstance(data, dict):
            for key in ("content", "traces", "data"):
                if isinstance(data.get(key), list):
                    return list(data[key])
            return [data]
    items: list[Any] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            items.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            items.append(line)
    return items


def message_value(item: Any) -> bytes:
    """An item read by ``read_traces`` as the message it was: raw bytes stay as they were."""
    return item if isinstance(item, bytes) else orjson.dumps(item)


def message_key(item: Any) -> bytes | None:
    """Key = thread id when the trace has one (a thread stays in one partition), a session
    event's session id, else the trace id."""
    if isinstance(item, dict):
        key = item.get("thread_id") or item.get("session_id") or item.get("id")
        return str(key).encode() if key is not None else None
    return None


async def produce(
    bootstrap: str,
    topic: str,
    items: list[Any],
    progress: Callable[[], object] | None = None,
    security: KafkaSecurity | None = None,
) -> int:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, **options(security)
    )
    await producer.start()
    try:
        futures = []
        for item in items:
            value = message_value(item)
            futures.append(await producer.send(topic, value=value, key=message_key(item)))
            if progress:
                progress()
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return len(items)


def groupless_consumer(
    bootstrap: str, security: KafkaSecurity | None = None, **extra: Any
) -> AIOKafkaConsumer:
    """A consumer of no group that commits nothing (the caller assigns and seeks its
    partitions; ``extra``: more of aiokafka's consumer options)."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        **options(security),
        **extra,
    )


@contextlib.asynccontextmanager
async def reader(
    bootstrap: str, topic: str, security: KafkaSecurity | None = None
) -> AsyncIterator[AIOKafkaConsumer]:
    """A group-less consumer reading ``topic`` from the beginning."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        group_id=None,
        **options(security),
    )
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()


async def read_all(
    bootstrap: str, topic: str, security: KafkaSecurity | None, idle_s: float
) -> list[bytes]:
    """Every record of ``topic`` from its start, until none has come for ``idle_s`` (not
    the end offsets: the embedded broker reports them a batch short)."""
    found: list[bytes] = []
    async with reader(bootstrap, topic, security) as consumer:
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while loop.time() - quiet_since < idle_s:
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                found.extend(r.value for r in records if r.value is not None)
                if records:
                    quiet_since = loop.time()
    return found


async def collect_scores(
    bootstrap: str,
    topic: str,
    expected: int,
    timeout: float,
    security: KafkaSecurity | None = None,
    counts: Callable[[dict[str, Any]], bool] = lambda _: True,
) -> dict[str, dict[str, Any]]:
    """Read score events until ``expected`` distinct score ids that ``counts`` arrived or
    ``timeout`` passed; returns every score read."""
    scores: dict[str, dict[str, Any]] = {}
    counted: set[str] = set()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with reader(bootstrap, topic, security) as consumer:
        while len(counted) < expected and loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    try:
                        event = orjson.loads(record.value)
                    except orjson.JSONDecodeError as exc:
                        raise ScorerError(
                            f"unreadable score event at offset {record.offset}"
                        ) from exc
                    scores[event["score_id"]] = event
                    if counts(event):
                        counted.add(event["score_id"])
    return scores


async def check_cluster(
    bootstrap: str,
    security: KafkaSecurity | None,
    timeout: float = 10.0,
    broker_timeout: float = 5.0,
) -> None:
    """Connect to the first bootstrap server as the worker will, once, then to every broker
    it advertises: a wrong password, an untrusted certificate, an unreachable broker or one
    that advertises an address this host cannot reach fails at once with a message that says
    which (Faust itself would retry for ever). Raises ``ScorerError``."""
    from aiokafka.conn import create_conn
    from aiokafka.protocol.metadata import MetadataRequest

    host, _, port_text = bootstrap.split(",")[0].strip().rpartition(":")
    host, port = host.strip("[]") or "localhost", int(port_text or 9092)
    settings = security or KafkaSecurity()
    where = f"Kafka at {host}:{port} ({settings.describe()})"
    context = settings.ssl_context()
    try:
        if context is not None:  # the TLS handshake alone first: its error is precise
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=context, server_hostname=host), timeout
            )
            writer.close()
        conn = await asyncio.wait_for(
            create_conn(host, port, request_timeout_ms=int(timeout * 1000), **options(security)),
            timeout,
        )
        try:  # the brokers as the cluster advertises them: clients go on to those
            metadata = await asyncio.wait_for(conn.send(MetadataRequest([])), timeout)
        finally:
            conn.close()
    except ssl.SSLCertVerificationError as exc:
        if "hostname" in str(exc.verify_message).lower():
            raise ScorerError(
                f"{where}: the broker's TLS certificate does not name this host "
                f"({exc.verify_message}); connect by a name the certificate has, or set "
                "KAFKA_SSL_CHECK_HOSTNAME=false"
            ) from None
        raise ScorerError(
            f"{where}: the broker's TLS certificate is not trusted ({exc.verify_message}); "
            "set KAFKA_SSL_CAFILE to the CA that signed it"
        ) from None
    except ssl.SSLError as exc:
        raise ScorerError(f"{where}: the TLS handshake failed ({exc.reason or exc})") from None
    except (SaslAuthenticationFailed, AuthenticationFailedError) as exc:
        raise ScorerError(
            f"{where}: SASL authentication failed ({type(exc).__name__}); "
            "check KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD and KAFKA_SASL_MECHANISM"
        ) from None
    except UnsupportedSaslMechanismError:
        raise ScorerError(
            f"{where}: the broker does not offer {settings.sasl_mechanism}; "
            "set KAFKA_SASL_MECHANISM to one it does"
        ) from None
    except KeyError as exc:  # aiokafka's SCRAM reads the server's proof ("v"), not its error
        if not settings.sasl:
            raise
        raise ScorerError(
            f"{where}: SASL authentication failed (the broker refused the {settings.sasl_mechanism}"
            f" exchange without a proof, {exc}: an unknown user or a wrong password); check "
            "KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD and KAFKA_SASL_MECHANISM"
        ) from None
    except (OSError, TimeoutError, KafkaError) as exc:
        raise ScorerError(f"{where}: cannot connect ({type(exc).__name__}: {exc})") from None
    await check_advertised(f"{host}:{port}", metadata, security, broker_timeout)


async def check_advertised(
    bootstrap: str, metadata: Any, security: KafkaSecurity | None, timeout: float
) -> None:
    """Connect to each broker a metadata response advertises, as a client would after its
    bootstrap. A broker that advertises an address this host cannot reach (a container's own
    hostname, a port mapped elsewhere) raises ``ScorerError`` naming it and why."""
    from aiokafka.cluster import ClusterMetadata
    from aiokafka.conn import create_conn
    from aiokafka.structs import BrokerMetadata

    cluster = ClusterMetadata()
    cluster.update_metadata(metadata)
    brokers = sorted(
        (b for b in cluster.brokers() if not cluster.is_bootstrap(b.nodeId)),
        key=lambda b: str(b.nodeId),
    )

    async def unreachable(broker: BrokerMetadata) -> str | None:
        try:
            conn = await asyncio.wait_for(
                create_conn(
                    broker.host,
                    broker.port,
                    request_timeout_ms=int(timeout * 1000),
                    **options(security),
                ),
                timeout,
            )
        except TimeoutError:
            return f"no answer within {timeout:g}s"
        except (OSError, KafkaError) as exc:
            return f"{type(exc).__name__}: {exc}"
        conn.close()
        return None

    reasons = await asyncio.gather(*(unreachable(b) for b in brokers))
    if failed := [
        f"broker {b.nodeId} at {b.host}:{b.port} ({reason})"
        for b, reason in zip(brokers, reasons, strict=True)
        if reason is not None
    ]:
        raise ScorerError(
            f"Kafka at {bootstrap} advertises {' and '.join(failed)}, which cannot be reached "
            "from here: clients connect to the "
            "addresses a broker advertises, not to the bootstrap address; set the broker's "
            "advertised.listeners to an address clients can reach"
        )
